"""Prometheus metrics read from producer snapshots at scrape time."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from failover_partitioner._topics import TopicState
from failover_partitioner.choose import ChoiceOptions
from failover_partitioner.core.statistics import ProducerStatistics, metrics_snapshot
from failover_partitioner.health import PartitionMetadata, TopicMetadata
from failover_partitioner.metrics import MetricsSnapshot, ProducerMetrics, TopicMetrics
from failover_partitioner.quarantine import QuarantinePolicy

OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def snapshot(delivered: int = 7) -> MetricsSnapshot:
    return MetricsSnapshot(
        produced=10,
        delivered=delivered,
        rerouted=2,
        retries=3,
        final_failures=1,
        possible_duplicates=1,
        in_flight=2,
        failed_buffer_depth=1,
        topics={
            "orders": TopicMetrics(
                partitions_by_state={"healthy": 10, "at_risk": 1, "unavailable": 1},
                quarantines=4,
                metadata_age_s=1.5,
            )
        },
    )


def test_every_documented_metric_is_exposed() -> None:
    registry = CollectorRegistry()
    m = ProducerMetrics("p1", snapshot, registry=registry)
    text = generate_latest(registry).decode()
    for line in (
        'failover_produced_total{producer="p1"} 10.0',
        'failover_delivered_total{producer="p1"} 7.0',
        'failover_rerouted_total{producer="p1"} 2.0',
        'failover_retries_total{producer="p1"} 3.0',
        'failover_final_failures_total{producer="p1"} 1.0',
        'failover_possible_duplicates_total{producer="p1"} 1.0',
        'failover_quarantines_total{producer="p1",topic="orders"} 4.0',
        'failover_partitions{producer="p1",state="unavailable",topic="orders"} 1.0',
        'failover_in_flight{producer="p1"} 2.0',
        'failover_failed_buffer_depth{producer="p1"} 1.0',
        'failover_metadata_age_seconds{producer="p1",topic="orders"} 1.5',
    ):
        assert line in text
    m.close()
    assert 'producer="p1"' not in generate_latest(registry).decode()


def test_producers_share_a_registry_by_name() -> None:
    registry = CollectorRegistry()
    a = ProducerMetrics("a", snapshot, registry=registry)
    b = ProducerMetrics("b", lambda: snapshot(delivered=9), registry=registry)
    text = generate_latest(registry).decode()
    assert 'failover_delivered_total{producer="a"} 7.0' in text
    assert 'failover_delivered_total{producer="b"} 9.0' in text
    with pytest.raises(ValueError, match="a producer named 'a' already reports"):
        ProducerMetrics("a", snapshot, registry=registry)
    a.close()
    b.close()


def test_a_failing_source_does_not_break_the_scrape() -> None:
    def broken() -> MetricsSnapshot:
        raise RuntimeError("closed")

    registry = CollectorRegistry()
    ok = ProducerMetrics("ok", snapshot, registry=registry)
    bad = ProducerMetrics("bad", broken, registry=registry)
    text = generate_latest(registry).decode()
    assert 'producer="ok"' in text
    assert 'producer="bad"' not in text
    ok.close()
    bad.close()


def test_default_registry_is_private() -> None:
    a = ProducerMetrics("x", snapshot)
    b = ProducerMetrics("x", snapshot)  # same name, separate registries: no clash
    assert a.registry is not b.registry
    a.close()
    b.close()


def test_partition_states_are_the_lower_case_values_the_documented_alerts_match() -> None:
    """A producer's snapshot labels its partitions healthy / at_risk / unavailable, the values
    docs/operations.md documents and its alert rules query."""
    metadata = TopicMetadata(
        topic="orders",
        partitions=tuple(
            PartitionMetadata(partition=p, leader=1, replicas=(1, 2, 3), isr=(1, 2, 3)[: 3 - p])
            for p in range(3)
        ),
        min_insync_replicas=2,
    )
    state = TopicState(metadata, QuarantinePolicy(initial_s=1.0), ChoiceOptions())
    stats = ProducerStatistics(**{f.name: 0 for f in dataclasses.fields(ProducerStatistics)})
    snap = metrics_snapshot(stats, {"orders": state}, lambda topic: 1.0)
    exported = dict(snap.topics["orders"].partitions_by_state)
    assert exported == {"healthy": 1, "at_risk": 1, "unavailable": 1}
    queried = set(re.findall(r'failover_partitions\{state="(\w+)"\}', OPERATIONS.read_text()))
    assert queried == set(exported)
