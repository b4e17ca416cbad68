"""FailoverProducer with a DeliveryGroup as on_delivery, against librdkafka's mock cluster:
first-attempt deliveries reach ``group.delivered()`` without a report, every other outcome
reaches ``group(err, report)``, each message exactly once, headers kept across a retry."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from failover_partitioner import DeliveryGroup, DeliveryReport, FailoverProducer
from failover_partitioner.testing import MockCluster
from tests.integration.mock_support import consume_topic, mock_producer, mock_with_topic

TOPIC = "groups"
PARTITIONS = 6
NOT_ENOUGH_REPLICAS = 19


class Tally(DeliveryGroup):
    __slots__ = ("at_once", "reports")

    def __init__(self) -> None:
        super().__init__()
        self.at_once = 0
        self.reports: list[tuple[Any, DeliveryReport]] = []

    def delivered(self) -> None:
        self.at_once += 1

    def __call__(self, err: Any, report: DeliveryReport) -> None:
        self.reports.append((err, report))


@pytest.fixture
def mock() -> Iterator[MockCluster]:
    with mock_with_topic(TOPIC, PARTITIONS) as cluster:
        yield cluster


def producer(mock: MockCluster, **kwargs: Any) -> FailoverProducer:
    return mock_producer(mock, ready=TOPIC, **kwargs)


def headers(i: int) -> list[tuple[str, bytes]]:
    return [("src", b"t"), ("offset", b"%d" % i)]


def test_first_attempt_deliveries_are_counted_without_reports(mock: MockCluster) -> None:
    p = producer(mock)
    group = Tally()
    n = 3000
    for i in range(n):
        key = b"k%d" % (i % 50) if i % 2 else None
        p.produce(TOPIC, b"m%d" % i, key, headers(i), group, 1_700_000_000_000 + i)
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(30) == 0
    assert (group.at_once, group.reports) == (n, [])
    stats = p.statistics()
    assert (stats.produced, stats.delivered, stats.final_failures) == (n, n, 0)
    records = consume_topic(mock, TOPIC, PARTITIONS, n, 30.0, "group-check")
    assert Counter(m.value() for m in records) == Counter(b"m%d" % i for i in range(n))
    for m in records:
        i = int(m.value()[1:])
        assert m.headers() == headers(i)
        assert m.timestamp()[1] == 1_700_000_000_000 + i
    p.close()


@pytest.mark.parametrize("strategy", ["round_robin", "sticky"])
def test_a_batch_counts_first_attempt_deliveries_without_reports(
    mock: MockCluster, strategy: str
) -> None:
    """produce_batch hands value-only messages to the client with the group's own report, as
    produce() does: delivered() once each, no report (it used to report each as a callback's)."""
    p = producer(mock, strategy=strategy)
    group = Tally()
    n = 1000
    p.produce_batch(TOPIC, [{"value": b"m%d" % i} for i in range(n)], on_delivery=group)
    assert p.flush(30) == 0
    assert (group.at_once, group.reports) == (n, [])
    stats = p.statistics()
    assert (stats.produced, stats.delivered, stats.final_failures) == (n, n, 0)
    records = consume_topic(mock, TOPIC, PARTITIONS, n, 30.0, "group-batch-check")
    assert Counter(m.value() for m in records) == Counter(b"m%d" % i for i in range(n))
    assert p.close() == []


def test_failures_are_rebuilt_with_their_headers_and_rerouted(mock: MockCluster) -> None:
    p = producer(mock)
    lead = {v.partition: v.leader for v in p.health(TOPIC).partitions}
    bad = lead[0]
    bad_partitions = {part for part, b in lead.items() if b == bad}
    group = Tally()
    n = 2000
    with mock.failing_produce(bad, NOT_ENOUGH_REPLICAS):
        for i in range(n):
            p.produce(TOPIC, b"m%d" % i, None, headers(i), group, 1_700_000_000_000)
            if i % 200 == 0:
                p.poll(0)
        assert p.flush(30) == 0
    # Each message once: at once, or by a report after a retry.
    assert group.at_once + len(group.reports) == n
    assert group.reports, "nothing went to the refusing broker"
    for err, report in group.reports:
        assert err is None
        assert report.attempts() > 1
        assert report.partition() not in bad_partitions
        value = report.value()
        assert isinstance(value, bytes)
        assert report.headers() == headers(int(value[1:]))
    records = consume_topic(mock, TOPIC, PARTITIONS, n, 30.0, "group-retry-check")
    assert set(Counter(m.value() for m in records)) == {b"m%d" % i for i in range(n)}
    # Rebuilt from the client's report, a retried message keeps its headers and timestamp.
    for m in records:
        assert m.headers() == headers(int(m.value()[1:]))
        assert m.timestamp()[1] == 1_700_000_000_000
    p.close()


def test_a_group_message_refused_at_once_is_not_counted(mock: MockCluster) -> None:
    p = producer(mock)
    group = Tally()
    with pytest.raises(TypeError):
        p.produce(TOPIC, 5, None, headers(0), group, 1)  # type: ignore[arg-type]
    assert p.statistics().in_flight == 0
    p.produce(TOPIC, b"ok", None, headers(1), group, 1)
    assert p.flush(10) == 0
    assert (group.at_once, group.reports) == (1, [])
    assert p.close() == []


def test_in_flight_at_close_are_handed_back_not_reported(mock: MockCluster) -> None:
    p = producer(mock)
    group = Tally()
    for i in range(5):
        mock.broker_down(i % 3 + 1)
    for i in range(100):
        p.produce(TOPIC, b"m%d" % i, None, headers(i), group, 1)
    back = p.close(0)
    assert len(back) + group.at_once + len(group.reports) == 100
    assert all(m.headers == tuple(headers(int(m.value[1:]))) for m in back)  # type: ignore[index]


def test_a_retried_message_without_callback_keeps_its_timestamp(mock: MockCluster) -> None:
    # No callback, no headers: sent without a record; its failure report has no timestamp.
    p = producer(mock)
    bad = {v.partition: v.leader for v in p.health(TOPIC).partitions}[0]
    n = 600
    with mock.failing_produce(bad, NOT_ENOUGH_REPLICAS):
        for i in range(n):
            p.produce(TOPIC, b"m%d" % i, b"k%d" % i, timestamp=1_700_000_000_000)
        assert p.flush(30) == 0
    assert p.statistics().retries > 0
    records = consume_topic(mock, TOPIC, PARTITIONS, n, 30.0, "timestamp-check")
    assert {m.timestamp()[1] for m in records} == {1_700_000_000_000}
    p.close()
