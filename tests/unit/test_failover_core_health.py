"""Partition health and topic views built from metadata and the quarantine set."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from failover_partitioner.health import (
    PartitionHealth,
    PartitionMetadata,
    TopicMetadata,
    TopicView,
    effective_min_isr,
    partition_health,
)


def pm(partition: int, *, leader: int = 1, replicas: int = 3, isr: int = 3) -> PartitionMetadata:
    return PartitionMetadata(
        partition=partition,
        leader=leader,
        replicas=tuple(range(1, replicas + 1)),
        isr=tuple(range(1, isr + 1)),
    )


@pytest.mark.parametrize(
    ("isr", "min_isr", "expected"),
    [
        (3, 2, PartitionHealth.HEALTHY),
        (2, 2, PartitionHealth.AT_RISK),
        (1, 2, PartitionHealth.UNAVAILABLE),
        (0, 1, PartitionHealth.UNAVAILABLE),
        (1, 1, PartitionHealth.AT_RISK),
    ],
)
def test_isr_against_min_isr(isr: int, min_isr: int, expected: PartitionHealth) -> None:
    assert partition_health(pm(0, isr=isr), min_isr) is expected


def test_no_leader_is_unavailable_even_with_full_isr() -> None:
    assert partition_health(pm(0, leader=-1), 2) is PartitionHealth.UNAVAILABLE


def test_quarantine_overrides_healthy_metadata() -> None:
    assert partition_health(pm(0), 2, quarantined=True) is PartitionHealth.UNAVAILABLE


def test_min_isr_above_replication_factor_is_capped_like_the_broker() -> None:
    # min.insync.replicas=3 on an RF=2 topic: the broker requires only 2 (effectiveMinIsr).
    assert effective_min_isr(3, 2) == 2
    assert partition_health(pm(0, replicas=2, isr=2), 3) is PartitionHealth.AT_RISK
    assert partition_health(pm(0, replicas=2, isr=1), 3) is PartitionHealth.UNAVAILABLE


@given(
    isr=st.integers(0, 5),
    replicas=st.integers(1, 5),
    min_isr=st.integers(1, 6),
    leader=st.sampled_from([-1, 1]),
    quarantined=st.booleans(),
)
def test_health_is_usable_exactly_when_a_write_would_be_accepted(
    isr: int, replicas: int, min_isr: int, leader: int, quarantined: bool
) -> None:
    isr = min(isr, replicas)
    state = partition_health(
        pm(0, leader=leader, replicas=replicas, isr=isr), min_isr, quarantined=quarantined
    )
    accepted = leader >= 0 and not quarantined and isr >= min(min_isr, replicas)
    assert (state is not PartitionHealth.UNAVAILABLE) == accepted


def test_view_lists_partitions_by_state() -> None:
    md = TopicMetadata(
        topic="orders",
        partitions=(pm(0), pm(1, isr=2), pm(2, isr=1), pm(3), pm(4, leader=-1)),
        min_insync_replicas=2,
        min_isr_source="topic",
    )
    view = TopicView.build(md, frozenset({3}))
    assert view.healthy == (0,)
    assert view.at_risk == (1,)
    assert view.unavailable == (2, 3, 4)
    assert view.usable == (0, 1)
    assert view.quarantined == frozenset({3})
    assert view.partitions[3].quarantined
    assert view.partitions[1].effective_min_isr == 2
    assert view.counts() == {
        PartitionHealth.HEALTHY: 1,
        PartitionHealth.AT_RISK: 1,
        PartitionHealth.UNAVAILABLE: 3,
    }
    assert view.min_isr_source == "topic"


def test_view_is_immutable() -> None:
    view = TopicView.build(TopicMetadata(topic="t", partitions=(pm(0),)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.topic = "other"  # type: ignore[misc]  # the point: assignment must fail


def test_quarantine_of_unknown_partition_is_ignored() -> None:
    view = TopicView.build(TopicMetadata(topic="t", partitions=(pm(0),)), frozenset({7}))
    assert view.quarantined == frozenset()
    assert view.usable == (0,)


def test_metadata_must_be_indexed_by_partition_id() -> None:
    with pytest.raises(ValueError, match="indexed by id"):
        TopicMetadata(topic="t", partitions=(pm(1),))


def test_min_isr_must_be_positive() -> None:
    with pytest.raises(ValueError, match="min_insync_replicas must be >= 1, got 0"):
        TopicMetadata(topic="t", partitions=(), min_insync_replicas=0)


def test_metadata_age_uses_the_given_clock() -> None:
    view = TopicView.build(TopicMetadata(topic="t", partitions=(pm(0),), fetched_at=100.0))
    assert view.metadata_age_s(103.5) == pytest.approx(3.5)
    assert view.metadata_age_s(99.0) == 0.0
