"""A topic the metadata does not list: waited for within ``topic_propagation_max_s`` of the
core's first view of it (watched closely, its messages held), a final failure after it."""

from __future__ import annotations

import logging

import pytest

from failover_partitioner.choose import ChoiceOptions
from failover_partitioner.core import NO_RIGHTS, NO_TOPIC, NO_TOPIC_YET, FailoverCore
from failover_partitioner.health import PartitionMetadata, TopicMetadata
from failover_partitioner.quarantine import QuarantinePolicy
from retry_buffer import Entry, RetryBuffer
from tests.unit.test_retry_buffer_model import FakeClock


def view(topic: str, exists: bool) -> TopicMetadata:
    parts = tuple(
        PartitionMetadata(partition=p, leader=1, replicas=(1, 2, 3), isr=(1, 2, 3))
        for p in range(3)
    )
    return TopicMetadata(
        topic=topic, partitions=parts if exists else (), min_insync_replicas=2, exists=exists
    )


def core(window: float) -> tuple[FailoverCore[Entry[str]], FakeClock]:
    clock = FakeClock()
    buffer: RetryBuffer[str] = RetryBuffer(max_in_flight=10, clock=clock)
    c: FailoverCore[Entry[str]] = FailoverCore(
        buffer,
        options=ChoiceOptions(),
        quarantine=QuarantinePolicy(),
        clock=clock,
        propagation_s=window,
    )
    return c, clock


def test_a_missing_topic_is_waited_for_then_taken_when_it_appears(
    caplog: pytest.LogCaptureFixture,
) -> None:
    c, clock = core(10.0)
    with caplog.at_level(logging.INFO, logger="failover_partitioner.core.engine"):
        change = c.metadata(view("late", exists=False))
        assert change.fast  # watched closely while it may appear
        assert c.route("late", None) == NO_TOPIC_YET
        assert c.route("late", b"key") == NO_TOPIC_YET
        clock.now += 9.9
        assert c.route("late", None) == NO_TOPIC_YET
        change = c.metadata(view("late", exists=True))
        assert change.changed
        assert not change.fast
        assert 0 <= c.route("late", None) < 3
    assert [r.getMessage() for r in caplog.records] == [
        "topic late is not in the cluster's metadata; its messages wait up to 10 s "
        "(topic_propagation_max_s) for it to appear",
        "topic late is now in the cluster's metadata",
    ]


def test_past_the_window_a_missing_topic_ends_its_messages_and_is_no_longer_watched() -> None:
    c, clock = core(10.0)
    c.metadata(view("nope", exists=False))
    clock.now += 10.0
    assert c.route("nope", None) == NO_TOPIC
    assert not c.metadata(view("nope", exists=False)).fast
    assert c.missing("nope") == (
        "topic 'nope' does not exist (per cluster metadata, more than 10 s after the producer "
        "first looked it up: topic_propagation_max_s); create it, or check its name"
    )


def test_a_topic_deleted_after_the_window_ends_its_messages_at_once() -> None:
    c, clock = core(10.0)
    c.metadata(view("gone", exists=True))
    clock.now += 60.0
    c.metadata(view("gone", exists=False))
    assert c.route("gone", None) == NO_TOPIC


def test_with_no_window_a_missing_topic_ends_its_messages_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    c, _ = core(0.0)
    with caplog.at_level(logging.INFO, logger="failover_partitioner.core.engine"):
        assert not c.metadata(view("nope", exists=False)).fast
    assert c.route("nope", None) == NO_TOPIC
    assert caplog.records == []
    assert "not waited for" in c.missing("nope")


def test_a_topic_the_cluster_refuses_to_describe_ends_its_messages_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No waiting window (the topic may exist: the principal may not see it), no fast watch,
    one warning naming the rights; a grant later brings the topic back."""
    c, _ = core(10.0)
    refused = TopicMetadata(topic="secret", partitions=(), exists=False, refused=True)
    with caplog.at_level(logging.WARNING, logger="failover_partitioner.core.engine"):
        assert not c.metadata(refused).fast
        assert c.route("secret", None) == NO_RIGHTS
        assert c.route("secret", b"key") == NO_RIGHTS
        assert not c.metadata(refused).changed
    assert [r.getMessage() for r in caplog.records] == [c.refused("secret")]
    assert "needs DESCRIBE and WRITE" in c.refused("secret")
    assert c.metadata(view("secret", exists=True)).changed
    assert 0 <= c.route("secret", None) < 3
