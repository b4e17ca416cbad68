"""FailoverProducer.produce_batch against librdkafka's mock cluster: the same guarantees as
produce (every accepted message delivered once or reported, refusals named), one call."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from failover_partitioner import DeliveryReport, FailoverProducer, ProducerClosed, ProduceTimeout
from failover_partitioner._murmur2 import partition_for_key
from failover_partitioner.errors import BatchRefused, not_accepted
from failover_partitioner.testing import MockCluster
from tests.integration.mock_support import (
    consume_topic,
    interrupted_as_it_returns,
    mock_producer,
    mock_with_topic,
)

TOPIC = "batches"
PARTITIONS = 6
NOT_ENOUGH_REPLICAS = 19


@pytest.fixture
def mock() -> Iterator[MockCluster]:
    with mock_with_topic(TOPIC, PARTITIONS) as cluster:
        yield cluster


def producer(mock: MockCluster, **kwargs: Any) -> FailoverProducer:
    return mock_producer(mock, ready=TOPIC, **kwargs)


def consume_all(mock: MockCluster, expected: int, timeout_s: float = 30.0) -> list[Any]:
    """Every record of TOPIC, read from the beginning until ``expected`` were seen."""
    return consume_topic(mock, TOPIC, PARTITIONS, expected, timeout_s, "batch-check")


@pytest.mark.parametrize("strategy", ["round_robin", "sticky"])
def test_a_batch_is_delivered_once_each_and_the_dicts_come_back_unchanged(
    mock: MockCluster, strategy: str
) -> None:
    # A small local queue, so that the client refuses part of some batches (QUEUE_FULL).
    p = producer(mock, strategy=strategy, conf={"queue.buffering.max.messages": 700})
    n = 6000
    batches = [[{"value": b"m%d" % (i + j)} for j in range(1000)] for i in range(0, n, 1000)]
    for batch in batches:
        p.produce_batch(TOPIC, batch)
    assert p.flush(30) == 0
    stats = p.statistics()
    assert (stats.produced, stats.delivered, stats.final_failures) == (n, n, 0)
    assert all(m.keys() == {"value"} for batch in batches for m in batch)
    records = consume_all(mock, n)
    values = Counter(m.value() for m in records)
    assert set(values) == {b"m%d" % i for i in range(n)}
    assert max(values.values()) == 1
    p.close()


def test_round_robin_deals_a_batch_out_as_one_by_one_would(mock: MockCluster) -> None:
    p = producer(mock, strategy="round_robin")
    n = 6000
    for i in range(0, n, 1000):
        p.produce_batch(TOPIC, [{"value": b"m%d" % (i + j)} for j in range(1000)])
    assert p.flush(30) == 0
    per_partition = Counter(m.partition() for m in consume_all(mock, n))
    assert per_partition == dict.fromkeys(range(PARTITIONS), n // PARTITIONS)
    p.close()


def refusing_broker(p: FailoverProducer) -> tuple[int, set[int]]:
    """A broker to make refuse every Produce (partition 0's leader), and the partitions it
    leads."""
    lead = {v.partition: v.leader for v in p.health(TOPIC).partitions}
    return lead[0], {part for part, b in lead.items() if b == lead[0]}


def test_a_batch_routes_around_a_refusing_broker(mock: MockCluster) -> None:
    p = producer(mock)
    bad, bad_partitions = refusing_broker(p)
    n = 3000
    with mock.failing_produce(bad, NOT_ENOUGH_REPLICAS):
        for i in range(0, n, 500):
            p.produce_batch(TOPIC, [{"value": b"m%d" % (i + j)} for j in range(500)])
            p.poll(0)
        assert p.flush(30) == 0
    stats = p.statistics()
    assert stats.delivered == n
    assert stats.quarantines >= 1
    records = consume_all(mock, n)
    assert Counter(m.value() for m in records) == Counter(b"m%d" % i for i in range(n))
    assert not {m.partition() for m in records} & bad_partitions
    p.close()


class _Reports:
    """A delivery callback that keeps every report it gets, by value."""

    def __init__(self) -> None:
        self.by_value: dict[bytes, list[tuple[Any, DeliveryReport]]] = {}

    def __call__(self, err: Any, report: DeliveryReport) -> None:
        value = report.value()
        assert isinstance(value, bytes)
        self.by_value.setdefault(value, []).append((err, report))

    def check_once_each(self, values: set[bytes], records: list[Any]) -> list[DeliveryReport]:
        """Each value reported exactly once, delivered, where the topic holds it."""
        assert set(self.by_value) == values
        assert all(len(v) == 1 for v in self.by_value.values())
        where = {m.value(): (m.partition(), m.offset()) for m in records}
        reports = [report for [(err, report)] in self.by_value.values() if err is None]
        assert len(reports) == len(values)
        for report in reports:
            assert report.error() is None
            assert report.topic() == TOPIC
            assert (report.partition(), report.offset()) == where[report.value()]
        return reports


@pytest.mark.parametrize("default", [False, True], ids=["argument", "conf-on_delivery"])
def test_a_batch_with_a_callback_reports_each_message_once(
    mock: MockCluster, default: bool
) -> None:
    reports = _Reports()
    # A small local queue: some of each batch is refused by the client and takes the single
    # path, with the same callback.
    conf: dict[str, Any] = {"queue.buffering.max.messages": 700}
    if default:
        conf["on_delivery"] = reports
    p = producer(mock, conf=conf)
    n = 4000
    batches = [[{"value": b"m%d" % (i + j)} for j in range(1000)] for i in range(0, n, 1000)]
    for batch in batches:
        p.produce_batch(TOPIC, batch, on_delivery=None if default else reports)
    assert p.flush(30) == 0
    assert all(m.keys() == {"value"} for batch in batches for m in batch)
    values = {b"m%d" % i for i in range(n)}
    done = reports.check_once_each(values, consume_all(mock, n))
    assert {r.attempts() for r in done} == {1}
    assert p.statistics().delivered == n
    p.close()


def test_a_batch_with_a_callback_routes_around_a_refusing_broker(mock: MockCluster) -> None:
    reports = _Reports()
    p = producer(mock, strategy="round_robin")  # every batch meets the refusing broker
    bad, bad_partitions = refusing_broker(p)
    n = 3000
    with mock.failing_produce(bad, NOT_ENOUGH_REPLICAS):
        for i in range(0, n, 500):
            p.produce_batch(TOPIC, [{"value": b"m%d" % (i + j)} for j in range(500)], reports)
            p.poll(0)
        assert p.flush(30) == 0
    records = consume_all(mock, n)
    done = reports.check_once_each({b"m%d" % i for i in range(n)}, records)
    # Those first sent to the refusing broker's partitions were sent again, elsewhere.
    assert any(r.attempts() > 1 for r in done)
    assert not {r.partition() for r in done} & bad_partitions
    p.close()


def test_callbacks_keys_headers_and_timestamps_take_the_single_path(mock: MockCluster) -> None:
    seen: dict[bytes, list[tuple[Any, int, Any]]] = {}

    def cb(err: Any, report: DeliveryReport) -> None:
        value = report.value()
        assert isinstance(value, bytes)
        seen.setdefault(value, []).append((err, report.partition(), report.headers()))

    p = producer(mock)
    keys = [b"k%d" % i for i in range(50)]
    p.produce_batch(TOPIC, [{"value": k, "key": k} for k in keys], on_delivery=cb)
    p.produce_batch(
        TOPIC,
        [{"value": b"h", "headers": [("a", b"1")], "timestamp": 1_700_000_000_000}],
        on_delivery=cb,
    )
    assert p.flush(10) == 0
    assert all(len(v) == 1 for v in seen.values())
    for k in keys:
        [(err, partition, _)] = seen[k]
        assert err is None
        assert partition == partition_for_key(k, PARTITIONS)  # murmur2, like produce()
    assert seen[b"h"] == [(None, seen[b"h"][0][1], [("a", b"1")])]
    p.close()


def test_refused_messages_are_named_and_the_others_accepted(mock: MockCluster) -> None:
    p = producer(mock)
    bad: list[Any] = [
        {"value": b"a"},
        {"value": 5},
        {"value": b"c", "key": b"k"},
        7,
        {"value": b"e", "partition": 1},
        {"value": b"f"},
    ]
    with pytest.raises(BatchRefused) as info:
        p.produce_batch(TOPIC, bad)
    assert [i for i, _ in info.value.refused] == [1, 3, 4]
    assert all(isinstance(exc, TypeError) for _, exc in info.value.refused)
    assert p.flush(10) == 0
    stats = p.statistics()
    assert (stats.produced, stats.delivered) == (3, 3)
    with pytest.raises(TypeError, match="list of dicts"):
        p.produce_batch(TOPIC, ({"value": b"x"},))  # type: ignore[arg-type]  # on purpose
    with pytest.raises(TypeError, match="on_delivery must be callable"):
        p.produce_batch(TOPIC, [{"value": b"x"}], on_delivery=3)  # type: ignore[arg-type]
    p.close()


@pytest.mark.parametrize("reported", [False, True], ids=["no-callback", "callback"])
@pytest.mark.parametrize("where", ["group", "alone"])
def test_ctrl_c_as_the_client_takes_part_of_a_batch_counts_in_what_it_took(
    mock: MockCluster, where: str, reported: bool
) -> None:
    """Ctrl-C lands as a client call returns (see test_failover_mock's Ctrl-C tests): the
    messages the client took by then are accepted (counted in ``produced``, delivered, each
    callback once), the others not, ``errors.not_accepted`` of the KeyboardInterrupt names
    exactly those the topic lacks, and the dicts come back unchanged. ``group``: the signal
    comes as the client takes the first partition's share (10 of 60); ``alone``: a queue of 5
    refused the rest of the shares, and it comes as the client takes the first of those,
    sent alone (5 + 1)."""
    seen: list[Any] = []
    cb = (lambda err, msg: seen.append((err, msg.value()))) if reported else None
    conf = {"queue.buffering.max.messages": 5} if where == "alone" else {}
    p = producer(mock, conf=conf)
    batch = [{"value": b"m%d" % i} for i in range(60)]
    if where == "group":
        call = "_produce_batch_reported" if reported else "_produce_batch_raw"
    else:
        call = "_produce_reported" if reported else "_produce_raw"
    try:
        with interrupted_as_it_returns(p, call), pytest.raises(KeyboardInterrupt) as info:
            p.produce_batch(TOPIC, batch, on_delivery=cb)
        assert p.flush(10) == 0
        taken = 10 if where == "group" else 6
        stats = p.statistics()
        assert (stats.produced, stats.delivered, stats.in_flight) == (taken, taken, 0)
        assert all(m.keys() == {"value"} for m in batch)
        left = not_accepted(info.value)
        assert left is not None
        assert len(left) == 60 - taken
        assert left == sorted(left)
        accepted = {batch[i]["value"] for i in set(range(60)) - set(left)}
        assert {m.value() for m in consume_all(mock, taken)} == accepted
        if reported:
            assert len(seen) == taken
            assert all(err is None for err, _ in seen)
            assert {value for _, value in seen} == accepted
    finally:
        assert p.close() == []


def test_ctrl_c_in_a_batch_sent_one_by_one_names_what_was_not_accepted(
    mock: MockCluster,
) -> None:
    """Keyed messages take produce()'s path one by one. Ctrl-C as the client takes the fourth
    call (message 3; message 1, a bad value, was refused before it): ``not_accepted`` names
    the refused one and every one after the interrupted one, which was accepted."""
    p = producer(mock)
    batch: list[dict[str, Any]] = [{"value": b"m%d" % i, "key": b"k%d" % i} for i in range(6)]
    batch[1] = {"value": 3, "key": b"k1"}  # not bytes: the client refuses it
    try:
        with (
            interrupted_as_it_returns(p, "_produce_raw", calls_before=3),
            pytest.raises(KeyboardInterrupt) as info,
        ):
            p.produce_batch(TOPIC, batch)
        assert not_accepted(info.value) == [1, 4, 5]
        assert p.flush(10) == 0
        assert sorted(m.value() for m in consume_all(mock, 3)) == [b"m0", b"m2", b"m3"]
    finally:
        assert p.close() == []


def test_ctrl_c_while_a_batch_waits_for_room_names_the_rest(mock: MockCluster) -> None:
    """Ctrl-C while a chunk waits under max_in_flight (no broker answers): the chunk before it
    was accepted (close() hands it back), the rest is named not accepted."""
    import _thread
    import threading

    p = producer(mock, max_in_flight=10, produce_timeout_s=20)
    for b in range(1, 4):
        mock.broker_down(b)
    batch = [{"value": b"m%d" % i} for i in range(30)]
    timer = threading.Timer(0.5, _thread.interrupt_main)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt) as info:
            p.produce_batch(TOPIC, batch)
        assert not_accepted(info.value) == list(range(10, 30))
    finally:
        timer.cancel()
        left = p.close(timeout=0.2)
    assert sorted(m.value for m in left if isinstance(m.value, bytes)) == sorted(
        b"m%d" % i for i in range(10)
    )
    assert not_accepted(KeyboardInterrupt()) is None


def test_a_batch_over_the_inflow_limit_waits_then_refuses_the_rest(mock: MockCluster) -> None:
    p = producer(mock, max_in_flight=100, produce_timeout_s=0.3)
    for b in range(1, 4):
        mock.broker_down(b)
    with pytest.raises(BatchRefused) as info:
        p.produce_batch(TOPIC, [{"value": b"m%d" % i} for i in range(250)])
    refused = info.value.refused
    assert [i for i, _ in refused] == list(range(100, 250))
    assert all(isinstance(exc, ProduceTimeout) for _, exc in refused)
    assert p.statistics().produced == 100
    assert len(p) == 100
    left = p.close(timeout=0.2)
    assert sorted(m.value for m in left if isinstance(m.value, bytes)) == sorted(
        b"m%d" % i for i in range(100)
    )


def test_a_batch_with_a_callback_still_in_flight_at_close_is_handed_back(
    mock: MockCluster,
) -> None:
    reports = _Reports()
    p = producer(mock)
    for b in range(1, 4):
        mock.broker_down(b)
    p.produce_batch(TOPIC, [{"value": b"m%d" % i} for i in range(50)], on_delivery=reports)
    left = p.close(timeout=0.2)
    # close() is their outcome: all 50 come back, and no callback fired for them.
    assert sorted(m.value for m in left if isinstance(m.value, bytes)) == sorted(
        b"m%d" % i for i in range(50)
    )
    assert reports.by_value == {}


@pytest.mark.parametrize("strategy", ["round_robin", "sticky"])
def test_a_str_value_the_client_cannot_encode_is_refused_alone(
    mock: MockCluster, strategy: str
) -> None:
    """A lone surrogate is no UTF-8 text: confluent-kafka's produce_batch (2.16) queued the
    whole group, that message with a null value, then raised UnicodeEncodeError, and none was
    counted. A str value takes produce()'s path: it alone is refused, saying so, before
    anything is written; the others are accepted once each."""
    reports = _Reports()
    p = producer(mock, strategy=strategy)
    batch: list[dict[str, Any]] = [{"value": b"m%d" % i} for i in range(10)]
    batch[5] = {"value": "bad\udc80"}
    with pytest.raises(BatchRefused) as info:
        p.produce_batch(TOPIC, batch, on_delivery=reports)
    [(index, exc)] = info.value.refused
    assert index == 5
    assert isinstance(exc, UnicodeEncodeError)
    assert "the message's value is a str that is not UTF-8 text" in str(exc)
    assert p.flush(10) == 0
    good = {b"m%d" % i for i in range(10) if i != 5}
    reports.check_once_each(good, consume_all(mock, 9))
    stats = p.statistics()
    assert (stats.produced, stats.delivered) == (9, 9)
    assert p.close() == []


def test_a_client_batch_call_that_raises_refuses_nothing_it_took(mock: MockCluster) -> None:
    """The client's produce_batch raises for a group before it queues anything (here: the
    second of six calls): the groups it took are counted in, that group's messages take the
    single path; nothing is lost, written twice, or accepted without a count."""
    p = producer(mock)
    calls = 0
    real = p._produce_batch_raw

    def raising_once(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise RuntimeError("the client could not take this group")
        return real(*args, **kwargs)

    p._produce_batch_raw = raising_once
    try:
        n = 60
        p.produce_batch(TOPIC, [{"value": b"m%d" % i} for i in range(n)])
        assert p.flush(10) == 0
        stats = p.statistics()
        assert (stats.produced, stats.delivered, stats.final_failures) == (n, n, 0)
        records = consume_all(mock, n)
        assert Counter(m.value() for m in records) == Counter(b"m%d" % i for i in range(n))
    finally:
        p._produce_batch_raw = real
        assert p.close() == []


def test_close_in_another_thread_while_a_batch_waits_refuses_the_rest(mock: MockCluster) -> None:
    """close() while a chunk waits for room under max_in_flight: the chunk before it was
    accepted (close() hands it back), and BatchRefused names exactly the rest, each refused
    with ProducerClosed (it used to raise a bare ProducerClosed, as if none was accepted)."""
    import threading

    p = producer(mock, max_in_flight=10, produce_timeout_s=20)
    for b in range(1, 4):
        mock.broker_down(b)
    batch = [{"value": b"m%d" % i} for i in range(30)]
    handed_back: list[Any] = []
    closer = threading.Timer(0.5, lambda: handed_back.extend(p.close(timeout=0.2)))
    closer.start()
    try:
        with pytest.raises(BatchRefused) as info:
            p.produce_batch(TOPIC, batch)
    finally:
        closer.join()
    assert [i for i, _ in info.value.refused] == list(range(10, 30))
    assert all(isinstance(exc, ProducerClosed) for _, exc in info.value.refused)
    assert sorted(m.value for m in handed_back) == sorted(b"m%d" % i for i in range(10))
    assert p.statistics().produced == 10


@pytest.mark.parametrize("strategy", ["round_robin", "sticky"])
def test_one_dict_held_at_many_places_is_written_as_often_as_it_was_accepted(
    mock: MockCluster, strategy: str
) -> None:
    """The client marks a message it refused ('_error') on its dict: a dict held at several
    places of a batch carries the mark of any one of them. A queue of 10 takes part of 25
    places of one dict; each place is written and reported once (35 and 26 were written)."""
    seen: list[Any] = []
    p = producer(mock, strategy=strategy, conf={"queue.buffering.max.messages": 10})
    m = {"value": b"same"}
    p.produce_batch(TOPIC, [m] * 25, on_delivery=lambda err, report: seen.append(err))
    assert p.flush(20) == 0
    assert m == {"value": b"same"}
    assert seen == [None] * 25
    stats = p.statistics()
    assert (stats.produced, stats.delivered) == (25, 25)
    assert len(consume_all(mock, 25)) == 25
    assert p.close() == []


@pytest.mark.parametrize("bad", ["type", "too-large"])
def test_refused_messages_are_named_in_index_order(mock: MockCluster, bad: str) -> None:
    """Round robin deals a chunk out over six calls to the client, one per partition; the
    messages refused are named by index, in order, whichever call refused them."""
    p = producer(mock, strategy="round_robin")
    batch: list[dict[str, Any]] = [{"value": b"m%d" % i} for i in range(12)]
    for i in (1, 6, 9):
        batch[i] = {"value": i if bad == "type" else b"x" * 2_000_000}  # over message.max.bytes
    with pytest.raises(BatchRefused) as info:
        p.produce_batch(TOPIC, batch)
    assert [i for i, _ in info.value.refused] == [1, 6, 9]
    assert p.flush(10) == 0
    assert p.statistics().produced == 9
    assert p.close() == []


def test_a_str_value_comes_back_in_its_report_as_given(mock: MockCluster) -> None:
    """As produce() gives it back (a str value carries a record); it came back as bytes."""
    values: list[Any] = []
    p = producer(mock)
    p.produce_batch(
        TOPIC,
        [{"value": "välue"}, {"value": b"bytes"}],
        on_delivery=lambda err, report: values.append((err, report.value())),
    )
    assert p.flush(10) == 0
    assert len(values) == 2
    assert set(values) == {(None, b"bytes"), (None, "välue")}
    assert p.close() == []


def test_a_timestamp_of_zero_is_refused(mock: MockCluster) -> None:
    """librdkafka writes a timestamp of 0 as the time of sending: refused, not rewritten."""
    p = producer(mock)
    batch = [{"value": b"zero", "timestamp": 0}, {"value": b"one", "timestamp": 1}]
    with pytest.raises(BatchRefused) as info:
        p.produce_batch(TOPIC, batch)
    [(index, exc)] = info.value.refused
    assert index == 0
    assert isinstance(exc, ValueError)
    assert "from 1 to 2**63 - 1" in str(exc)
    assert p.flush(10) == 0
    assert [(m.value(), m.timestamp()[1]) for m in consume_all(mock, 1)] == [(b"one", 1)]
    assert p.close() == []
