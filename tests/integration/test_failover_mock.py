"""FailoverProducer against librdkafka's own mock cluster, with faults injected through ctypes.

The mock has no ISR and never refuses a write for min ISR: here the faults are injected by hand
(every Produce to one broker answered with an error while its metadata still shows a full ISR),
so these tests prove what quarantine alone achieves (issue 6, must-show 3) and how each class
of delivery error is handled.
"""

from __future__ import annotations

import contextlib
import functools
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError
from prometheus_client import CollectorRegistry

from failover_partitioner import (
    DeliveryReport,
    FailoverProducer,
    ProduceTimeout,
    UndeliveredMessage,
)
from failover_partitioner._murmur2 import partition_for_key
from failover_partitioner.choose import KeyedMemo
from failover_partitioner.confluent import _state as confluent_state
from failover_partitioner.testing import METADATA_API_KEY, MockCluster
from tests.integration.mock_support import (
    consume_topic,
    interrupted_as_it_returns,
    mock_producer,
    mock_with_topic,
)
from tests.integration.reliability_support import wait_for

TOPIC = "orders"
PARTITIONS = 6
NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
MSG_SIZE_TOO_LARGE = 10


@pytest.fixture
def mock() -> Iterator[MockCluster]:
    with mock_with_topic(TOPIC, PARTITIONS) as cluster:
        yield cluster


producer = mock_producer


def leaders(p: FailoverProducer) -> dict[int, int]:
    return {v.partition: v.leader for v in p.health(TOPIC).partitions}


def consume_all(mock: MockCluster, expected: int, timeout_s: float = 30.0) -> list[Any]:
    """Every record of TOPIC, read from the beginning until ``expected`` were seen."""
    return consume_topic(mock, TOPIC, PARTITIONS, expected, timeout_s, "check")


class Reports:
    def __init__(self) -> None:
        self.by_value: dict[bytes, list[tuple[Any, int, int]]] = {}

    def __call__(self, err: Any, report: DeliveryReport) -> None:
        value = report.value()
        assert isinstance(value, bytes)
        self.by_value.setdefault(value, []).append((err, report.partition(), report.attempts()))


@pytest.mark.parametrize("strategy", ["round_robin", "sticky"])
def test_every_message_delivered_via_quarantine_alone(mock: MockCluster, strategy: str) -> None:
    """Must-show 3: one broker refuses every Produce (NOT_ENOUGH_REPLICAS), its metadata still
    shows a full ISR; every message is delivered exactly once, on other brokers' partitions.

    Sticky leaves keyless messages to librdkafka's partitioner while the topic is whole (here
    moving every millisecond, so it soon lands on the refusing broker); the failures take
    that back."""
    p = producer(mock, strategy=strategy, conf={"sticky.partitioning.linger.ms": 1})
    lead = leaders(p)
    bad = lead[0]
    bad_partitions = {part for part, b in lead.items() if b == bad}
    assert len(bad_partitions) < PARTITIONS
    reports = Reports()
    n = 6000
    with mock.failing_produce(bad, NOT_ENOUGH_REPLICAS):
        for i in range(n):
            p.produce(TOPIC, b"m%d" % i, on_delivery=reports if i % 2 else None)
            if i % 200 == 0:
                p.poll(0.002)
        assert p.flush(30) == 0
        view = p.health(TOPIC)
        # Its metadata never showed a problem: only the failures took the partitions out.
        assert all(v.isr == v.replicas for v in view.partitions)
    stats = p.statistics()
    assert p.close() == []
    assert stats.delivered == n
    assert stats.final_failures == 0
    if strategy == "sticky":
        assert stats.quarantines >= 1
    else:
        assert stats.quarantines >= len(bad_partitions)
    assert stats.possible_duplicates == 0  # 19 means "not appended": nothing can be doubled
    # Every callback fired exactly once, with success, on a healthy partition.
    assert len(reports.by_value) == n // 2
    assert all(len(r) == 1 for r in reports.by_value.values())
    assert all(err is None for [(err, _, _)] in reports.by_value.values())
    assert not {part for [(_, part, _)] in reports.by_value.values()} & bad_partitions
    # Consumed back: each message exactly once, none on the refusing broker's partitions.
    records = consume_all(mock, n)
    values = Counter(m.value() for m in records)
    assert set(values) == {b"m%d" % i for i in range(n)}
    assert max(values.values()) == 1
    assert not {m.partition() for m in records} & bad_partitions


def test_the_healthy_path_reports_each_message_once_and_hands_failures_over(
    mock: MockCluster,
) -> None:
    """While the topic is whole, messages go straight to the client; a callback gets the
    message as given (str key and value too) and one outcome. When a broker starts refusing,
    the failed ones are rebuilt from the client's reports and delivered elsewhere, and the
    producer leaves the healthy path until nothing waits; keys stay on murmur2 meanwhile."""
    p = producer(mock, ready=TOPIC)
    seen: dict[str, list[tuple[Any, Any, Any, int, int]]] = {}

    def on_delivery(err: Any, report: DeliveryReport) -> None:
        value = report.value()
        assert isinstance(value, str)
        seen.setdefault(value, []).append(
            (err, report.key(), report.topic(), report.partition(), report.attempts())
        )

    for i in range(200):
        p.produce(TOPIC, f"h{i}", key=f"clé-{i}", on_delivery=on_delivery)
    assert p.flush(30) == 0
    assert p._whole, "a whole topic with nothing waiting takes the healthy path"
    assert all(
        r == [(None, f"clé-{i}", TOPIC, partition_for_key(f"clé-{i}".encode(), PARTITIONS), 1)]
        for i, r in ((int(v[1:]), r) for v, r in seen.items())
    )
    bad = leaders(p)[0]
    bad_partitions = {part for part, b in leaders(p).items() if b == bad}
    n = 600
    with mock.failing_produce(bad, NOT_ENOUGH_REPLICAS):
        for i in range(n):
            # Keyed, so that some go to the refusing broker while the topic is still whole.
            p.produce(TOPIC, f"f{i}", key=f"k{i}", on_delivery=on_delivery)
            p.produce(TOPIC, b"plain%d" % i)
            if i % 50 == 0:
                p.poll(0.002)
        assert p.flush(30) == 0
        assert not p._whole, "quarantined partitions: not whole"
    stats = p.statistics()
    p.close()
    failed_over = [r for v, r in seen.items() if v.startswith("f")]
    assert len(failed_over) == n
    assert all(len(r) == 1 and r[0][0] is None for r in failed_over)
    assert not {r[0][3] for r in failed_over} & bad_partitions
    assert any(r[0][4] > 1 for r in failed_over), "some went to the refusing broker first"
    assert (stats.delivered, stats.final_failures, stats.in_flight) == (200 + 2 * n, 0, 0)
    values = Counter(m.value() for m in consume_all(mock, 200 + 2 * n))
    assert max(values.values()) == 1
    assert len(values) == 200 + 2 * n


def count_failover_path(p: FailoverProducer) -> list[int]:
    """A one-item list counting the messages ``p`` sends through its failover path from now
    on (those its healthy path does not take)."""
    count = [0]
    through = p._produce_failover

    def counted(*args: Any) -> None:
        count[0] += 1
        through(*args)

    p._produce_failover = counted  # type: ignore[method-assign,assignment]
    return count


def test_a_client_error_another_client_saw_quarantines_what_its_broker_leads(
    mock: MockCluster,
) -> None:
    """``report_client_error`` (the mirror's fast lane calls it from its own client's
    error_cb): a broker that client could not connect to has the partitions it leads taken out
    of use, as if the producer's own client had failed; other errors change nothing."""
    p = producer(mock, ready=TOPIC)
    lead = leaders(p)
    broker = lead[0]
    disconnected = KafkaError(KafkaError._TRANSPORT, f"127.0.0.1:1/{broker}: Disconnected")
    assert p.report_client_error(disconnected) is False
    assert all(p.usable(TOPIC, q) for q in range(PARTITIONS))
    refused = KafkaError(
        KafkaError._TRANSPORT,
        f"127.0.0.1:1/{broker}: Connect to ipv4#127.0.0.1:1 failed: Connection refused",
    )
    assert p.report_client_error(refused) is True
    assert {q for q in range(PARTITIONS) if not p.usable(TOPIC, q)} == {
        q for q, b in lead.items() if b == broker
    }
    assert p.close() == []


def test_a_quarantine_leaves_the_healthy_path_open_and_ends_with_a_fetch_of_then(
    mock: MockCluster,
) -> None:
    """A partition's quarantine does not hold the producer off the healthy path while nothing
    waits: messages go straight to the client over the other partitions (the keys of the
    quarantined one elsewhere), not through the failover path for the whole back-off (up to
    ``quarantine_max_s``, while the cluster stays as it is). When the back-off ends, a metadata
    fetch comes then, not at the next periodic one, and releases the partition without a
    ``produce()`` to look."""
    p = producer(
        mock,
        ready=TOPIC,
        quarantine_backoff_s=3.0,  # room for a slow machine's 300 messages
        metadata_refresh_s=60.0,
        metadata_fast_refresh_s=60.0,
    )
    struck_at = time.monotonic()
    p.report_failure(TOPIC, 0, KafkaError(NOT_ENOUGH_REPLICAS))
    assert not p.usable(TOPIC, 0)
    failover_path = count_failover_path(p)
    reports = Reports()
    for i in range(300):
        p.produce(TOPIC, b"v%d" % i, key=b"k%d" % i if i % 2 else None, on_delivery=reports)
    assert p.flush(30) == 0
    assert time.monotonic() - struck_at < 3.0, "measured within the back-off"
    # The first message after the strike looks (it ends the quarantine's attention); the rest
    # take the healthy path.
    assert failover_path[0] <= 1, f"{failover_path[0]} of 300 messages took the failover path"
    outcomes = [o for each in reports.by_value.values() for o in each]
    assert len(outcomes) == 300
    assert all(err is None and part != 0 for err, part, _ in outcomes)
    wait_for(lambda: p.usable(TOPIC, 0), timeout_s=5.0, what="partition 0 released")
    assert time.monotonic() - struck_at >= 3.0
    p.close()


def test_a_metadata_fetch_that_finds_the_topic_as_it_was_leaves_the_healthy_path_open(
    mock: MockCluster,
) -> None:
    """A metadata fetch that brings the same facts changes no view, so the producer stays on
    the healthy path: it does not send the next message through the failover path to look
    again after every fetch (every 0.5 s while a topic is watched closely)."""
    p = producer(mock, ready=TOPIC, metadata_refresh_s=0.05)
    failover_path = count_failover_path(p)
    mock.track_requests()
    reports = Reports()
    i = 0
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        # Bursts, as an application's loop: a poll() between messages would look again
        # itself (it serves the producer's own work too).
        for _ in range(1000):
            p.produce(TOPIC, b"v%d" % i, key=b"k%d" % i if i % 2 else None, on_delivery=reports)
            i += 1
        p.poll(0)
    assert p.flush(30) == 0
    fetches = sum(1 for _, api_key in mock.requests() if api_key == METADATA_API_KEY)
    assert fetches >= 5, f"only {fetches} metadata fetches in a second"
    # The first message may look (it opens the path); before, one more after each fetch.
    assert failover_path[0] <= 1, f"{failover_path[0]} of {i} messages took the failover path"
    outcomes = [o for each in reports.by_value.values() for o in each]
    assert len(outcomes) == i
    assert all(err is None for err, _, _ in outcomes)
    p.close()


def test_a_callback_of_bytes_messages_gets_reports_read_from_the_clients(
    mock: MockCluster,
) -> None:
    """bytes messages with a callback are sent without a record: each report is made from the
    client's when it comes, its own object (one kept by the callback does not change with the
    next), with the message's fields; failed ones are rebuilt from the client's report and
    delivered elsewhere, each with one outcome."""
    p = producer(mock, ready=TOPIC)
    kept: list[tuple[Any, DeliveryReport]] = []

    def on_delivery(err: Any, report: DeliveryReport) -> None:
        kept.append((err, report))

    for i in range(100):
        p.produce(TOPIC, b"h%d" % i, key=b"k%d" % i, on_delivery=on_delivery)
    assert p.flush(30) == 0
    assert len(kept) == 100
    assert all(err is None for err, _ in kept)
    # Reports come partition by partition: in the order sent for the comparison.
    kept.sort(key=lambda k: int(str(k[1].value())[3:-1]))
    assert [(r.value(), r.key(), r.topic(), r.attempts(), r.error()) for _, r in kept] == [
        (b"h%d" % i, b"k%d" % i, TOPIC, 1, None) for i in range(100)
    ]
    assert all(
        r.partition() == partition_for_key(b"k%d" % i, PARTITIONS) and r.offset() is not None
        for i, (_, r) in enumerate(kept)
    )
    assert repr(kept[0][1]).startswith(f"DeliveryReport(topic={TOPIC!r}, partition=")
    kept.clear()
    bad = leaders(p)[0]
    bad_partitions = {part for part, b in leaders(p).items() if b == bad}
    with mock.failing_produce(bad, NOT_ENOUGH_REPLICAS):
        for i in range(300):
            # Keyed and keyless: off the healthy path after the first failure, both are sent
            # without a record there too.
            p.produce(TOPIC, b"f%d" % i, key=b"k%d" % i, on_delivery=on_delivery)
            p.produce(TOPIC, b"g%d" % i, on_delivery=on_delivery)
        assert p.flush(30) == 0
    p.close()
    outcomes = Counter(r.value() for _, r in kept)
    assert len(kept) == 600
    assert set(outcomes.values()) == {1}
    assert all(err is None and r.partition() not in bad_partitions for err, r in kept)
    assert any(r.attempts() > 1 for _, r in kept), "some went to the refusing broker first"


def test_poll_zero_after_each_produce_serves_every_callback_without_a_flush(
    mock: MockCluster,
) -> None:
    """``poll(0)`` called in a tight loop serves the clients at most every POLL_GAP_S: every
    report still comes through poll(0) alone."""
    p = mock_producer(mock, ready=TOPIC)
    got: list[Any] = []
    try:
        for i in range(2_000):
            p.produce(TOPIC, b"%d" % i, on_delivery=lambda err, r: got.append(err))
            p.poll(0)
        deadline = time.monotonic() + 15
        while len(got) < 2_000 and time.monotonic() < deadline:
            p.poll(0)
        assert got == [None] * 2_000
        assert len(p) == 0
    finally:
        p.close(10)


def test_after_append_failures_are_counted_as_possible_duplicates(mock: MockCluster) -> None:
    """Error 20 means the data may be in the log: re-producing it may duplicate, and is counted;
    the message id header is the same on every attempt so consumers can drop the copy."""
    # round robin: the first few messages meet the broker that answers error 20
    p = producer(mock, message_id_header="msg-id", strategy="round_robin")
    bad = leaders(p)[0]
    mock.push_broker_errors(bad, NOT_ENOUGH_REPLICAS_AFTER_APPEND, 3)
    n = 600
    for i in range(n):
        p.produce(TOPIC, b"m%d" % i)
    assert p.flush(30) == 0
    stats = p.statistics()
    p.close()
    assert stats.delivered == n
    assert stats.possible_duplicates >= 1
    records = consume_all(mock, n)
    ids = [dict(m.headers())["msg-id"] for m in records]
    by_value = {m.value(): dict(m.headers())["msg-id"] for m in records}
    assert len(by_value) == n
    assert len(set(ids)) == n  # one id per message, however many attempts it took


def test_a_batch_refused_whole_is_delivered_record_by_record(mock: MockCluster) -> None:
    """MSG_SIZE_TOO_LARGE for a whole batch (one Produce request): its records are not too
    large alone, so each is sent again alone and delivered, callback once each."""
    p = producer(mock)
    bad = leaders(p)[0]
    reports = Reports()
    mock.push_broker_errors(bad, MSG_SIZE_TOO_LARGE, 1)
    n = 300
    for i in range(n):
        # Keyed, so that some go to the refusing broker (librdkafka's sticky partitioner might
        # give keyless ones all to another while the topic is whole).
        p.produce(TOPIC, b"m%d" % i, key=b"k%d" % i, on_delivery=reports if i % 2 else None)
    assert p.flush(30) == 0
    stats = p.statistics()
    assert p.close() == []
    assert mock.broker_errors_left(bad) == 0, "the injected error hit no batch"
    assert (stats.delivered, stats.final_failures) == (n, 0)
    assert len(reports.by_value) == n // 2
    assert all(len(r) == 1 and r[0][0] is None for r in reports.by_value.values())
    assert stats.retries >= 1  # the refused batch's records went again
    assert {r[0][2] for r in reports.by_value.values()} <= {1, 2}
    values = Counter(m.value() for m in consume_all(mock, n))
    assert values == Counter(b"m%d" % i for i in range(n))


def test_a_record_refused_alone_ends_with_the_error(mock: MockCluster) -> None:
    """Every broker answers MSG_SIZE_TOO_LARGE: each record is tried once more, alone, and
    then ends with the error (callback and dead-letter hook once each), never a loop."""
    dead: list[tuple[UndeliveredMessage, Any]] = []
    p = producer(mock, dead_letter=lambda m, e: dead.append((m, e)))
    p.health(TOPIC)
    reports = Reports()
    n = 40
    with contextlib.ExitStack() as stack:
        for b in range(1, 4):
            stack.enter_context(mock.failing_produce(b, MSG_SIZE_TOO_LARGE))
        for i in range(n):
            p.produce(TOPIC, b"m%d" % i, on_delivery=reports)
        assert p.flush(30) == 0
    stats = p.statistics()
    p.close()
    assert all(len(r) == 1 for r in reports.by_value.values())
    assert len(reports.by_value) == n
    assert {r[0][0].code() for r in reports.by_value.values()} == {KafkaError.MSG_SIZE_TOO_LARGE}
    assert {r[0][2] for r in reports.by_value.values()} == {2}  # in a batch, then alone
    assert stats.final_failures == n == len(dead)
    assert stats.delivered == 0


def test_keys_stay_on_their_murmur2_partition_and_only_degraded_ones_move(
    mock: MockCluster,
) -> None:
    """Must-show 2 on the mock: while healthy every key lands where murmur2 says; while one
    broker refuses writes, only keys of its partitions move; afterwards they return."""
    # mock_with_topic places the leaders one per broker in turn: the mock alone sometimes gives
    # one broker five of the six, and then the moved keys have a single partition left.
    p = producer(mock, quarantine_backoff_s=0.1, quarantine_max_s=0.2)
    lead = leaders(p)
    bad = lead[0]
    bad_partitions = {part for part, b in lead.items() if b == bad}
    keys = [b"user-%d" % i for i in range(300)]
    home = {k: partition_for_key(k, PARTITIONS) for k in keys}
    placed: dict[str, dict[bytes, set[int]]] = {"before": {}, "during": {}, "after": {}}

    def send(phase: str) -> None:
        def cb(err: Any, report: DeliveryReport) -> None:
            assert err is None
            key = report.key()
            assert isinstance(key, bytes)
            placed[phase].setdefault(key, set()).add(report.partition())

        for k in keys:
            p.produce(TOPIC, b"v", key=k, on_delivery=cb)
        assert p.flush(30) == 0

    send("before")
    assert {k: s for k, s in placed["before"].items()} == {k: {home[k]} for k in keys}
    with mock.failing_produce(bad, NOT_ENOUGH_REPLICAS, keep=20):
        send("during")
        send("during")  # after the first round every bad partition is quarantined
    moved = [k for k in keys if home[k] in bad_partitions]
    assert moved
    for k in keys:
        if home[k] in bad_partitions:
            # Rendezvous hashing: one stable new place per key, never a refusing partition.
            assert len(placed["during"][k]) == 1
            assert not placed["during"][k] & bad_partitions
        else:
            assert placed["during"][k] == {home[k]}
    assert len({p for k in moved for p in placed["during"][k]}) > 1  # spread, not piled up
    # The broker's leftover errors (one per request) drain as the quarantine lapses and the
    # partitions are tried again; then every key goes home.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        placed["after"] = {}
        send("after")
        if placed["after"] == {k: {home[k]} for k in keys}:
            break
        time.sleep(0.1)
    assert placed["after"] == {k: {home[k]} for k in keys}
    p.close()


def test_a_degraded_topics_keys_go_through_a_memo_while_they_are_few(
    mock: MockCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the healthy path a degraded topic's keyed messages take the chooser's keyed choice
    through a memo of its answers (KeyedMemo); once the topic shows more keys than the memo
    keeps (50 here, 10,000 by default), through the choice itself. Either way each key lands
    where the choice says."""
    monkeypatch.setattr(confluent_state, "_MEMO_KEYS", 50)
    p = producer(mock, quarantine_backoff_s=30, quarantine_max_s=30)
    bad = leaders(p)[0]
    placed: dict[bytes, set[int]] = {}

    def cb(err: Any, report: DeliveryReport) -> None:
        assert err is None
        key = report.key()
        assert isinstance(key, bytes)
        placed.setdefault(key, set()).add(report.partition())

    with mock.failing_produce(bad, NOT_ENOUGH_REPLICAS, keep=20):
        for i in range(300):
            p.produce(TOPIC, b"v", key=b"warm-%d" % i, on_delivery=cb)
        assert p.flush(30) == 0
    choice = p._core.choosers[TOPIC].keyed
    assert not p._core.choosers[TOPIC].view.whole  # the bad broker's partitions are out

    def reopened() -> bool:
        p.produce(TOPIC, b"v", key=b"warm", on_delivery=cb)  # (a call serves what waits)
        return TOPIC in p._keyed

    wait_for(reopened, 10, "the healthy path open again for the degraded topic")
    few = [b"few-%d" % i for i in range(40)]
    for k in few * 3:
        p.produce(TOPIC, b"v", key=k, on_delivery=cb)
    assert isinstance(getattr(p._keyed[TOPIC], "__self__", None), KeyedMemo)
    many = [b"many-%d" % i for i in range(100)]
    for k in many:
        p.produce(TOPIC, b"v", key=k, on_delivery=cb)
    assert p._keyed[TOPIC] is choice  # past 50 keys: the choice itself
    assert p.flush(30) == 0
    assert p._core.choosers[TOPIC].keyed is choice  # (the view did not change meanwhile)
    assert {k: placed[k] for k in few + many} == {k: {choice(k)} for k in few + many}
    p.close()


@pytest.mark.parametrize("key", [b"k", None], ids=["keyed", "keyless"])
def test_produce_waits_at_the_inflow_limit_then_raises_with_the_message(
    mock: MockCluster, key: bytes | None
) -> None:
    # The topic's metadata stays whole, so these take the healthy path, which has no check of
    # its own: the client's queue, bounded at max_in_flight, refuses the sixth.
    p = producer(mock, max_in_flight=5, produce_timeout_s=0.3)
    p.health(TOPIC)
    for b in range(1, 4):
        mock.broker_down(b)
    for i in range(5):
        p.produce(TOPIC, b"m%d" % i)
    start = time.monotonic()
    with pytest.raises(ProduceTimeout, match="max_in_flight=5") as info:
        p.produce(TOPIC, b"the sixth", key=key)
    assert time.monotonic() - start >= 0.3
    assert info.value.message.value == b"the sixth"
    assert info.value.message.key == key
    assert p.statistics().produced == 5
    # len() counts what librdkafka's queue holds, its error events too until they are served
    # (the failed connections to the brokers that are down).
    p.poll(0.01)
    assert len(p) == 5
    left = p.close(timeout=0.2)
    # Nothing is dropped silently: close hands back the five accepted messages.
    assert sorted(m.value for m in left if isinstance(m.value, bytes)) == [
        b"m%d" % i for i in range(5)
    ]
    assert p.statistics().returned_on_close == 5


def test_local_queue_full_is_waited_out_not_dropped(mock: MockCluster) -> None:
    p = producer(mock, conf={"queue.buffering.max.messages": 50}, max_in_flight=10_000)
    n = 3000
    for i in range(n):
        p.produce(TOPIC, b"m%d" % i)
    assert p.flush(30) == 0
    assert p.statistics().delivered == n
    p.close()


def test_default_callback_from_conf_and_bad_input(mock: MockCluster) -> None:
    seen: list[tuple[Any, bytes]] = []

    def default(err: Any, report: DeliveryReport) -> None:
        value = report.value()
        assert isinstance(value, bytes)
        seen.append((err, value))

    p = producer(mock, conf={"on_delivery": default})
    p.produce(TOPIC, b"a")
    p.produce(TOPIC, b"b", headers={"h": b"1"})
    with pytest.raises(TypeError):
        p.produce(TOPIC, 12345)  # type: ignore[arg-type]  # a bad value type, on purpose
    with pytest.raises(TypeError, match="key must be bytes, str or None"):
        p.produce(TOPIC, b"c", key=3.5)  # type: ignore[arg-type]  # on purpose
    with pytest.raises(TypeError, match="headers for topic 'orders' must be"):
        p.produce(TOPIC, b"d", headers=5)  # type: ignore[arg-type]  # on purpose
    assert p.flush(10) == 0
    assert sorted(seen) == [(None, b"a"), (None, b"b")]
    assert p.statistics().produced - p.statistics().delivered == 0
    p.close()


def test_a_known_topic_refuses_bad_input_on_every_path(mock: MockCluster) -> None:
    """The keyless paths of a topic already known check as much as the first message's."""
    p = producer(mock)
    p.health(TOPIC)
    with pytest.raises(TypeError, match="on_delivery must be callable"):
        p.produce(TOPIC, b"x", on_delivery="cb")  # type: ignore[arg-type]  # on purpose
    with pytest.raises(TypeError):
        p.produce(TOPIC, 12345)  # type: ignore[arg-type]  # on purpose
    with pytest.raises(TypeError):
        p.produce(TOPIC, 12345, on_delivery=lambda err, msg: None)  # type: ignore[arg-type]
    stats = p.statistics()
    assert (stats.produced, stats.in_flight) == (0, 0)
    seen: list[Any] = []
    p.produce(TOPIC, b"ok", on_delivery=lambda err, msg: seen.append((err, msg.value())))
    assert p.flush(10) == 0
    assert seen == [(None, b"ok")]
    p.close()


def test_close_hands_back_what_could_not_be_delivered(mock: MockCluster) -> None:
    p = producer(mock)
    p.health(TOPIC)
    for b in range(1, 4):
        mock.broker_down(b)
    for i in range(20):
        p.produce(TOPIC, b"m%d" % i, key=b"k%d" % i, headers=[("h", b"x")])
    left = p.close(timeout=0.3)
    assert sorted(m.value for m in left if isinstance(m.value, bytes)) == sorted(
        b"m%d" % i for i in range(20)
    )
    assert all(m.headers == (("h", b"x"),) for m in left)
    assert p.close() == left  # idempotent
    with pytest.raises(Exception, match="after close"):
        p.produce(TOPIC, b"late")


@pytest.mark.parametrize("hook", [True, False], ids=["dead-letter-hook", "no-hook"])
def test_leaving_a_with_block_fails_each_undelivered_message_finally(
    mock: MockCluster, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, hook: bool
) -> None:
    """Nobody can take close()'s list when a with block ends: each message left is reported
    as a final failure instead (close(hand_back=False)). Its callback gets _PURGE_QUEUE, the
    dead-letter hook the message; those with neither are counted in one ERROR line, not one
    each; all count as ended at close."""
    # close()'s 30 s flush, shortened: the brokers stay down.
    monkeypatch.setattr(
        FailoverProducer, "close", functools.partialmethod(FailoverProducer.close, 0.3)
    )
    outcomes: dict[bytes, list[int | None]] = {}
    dead: list[bytes] = []

    def cb(err: Any, report: Any) -> None:
        outcomes.setdefault(report.value(), []).append(None if err is None else err.code())

    options: dict[str, Any] = {"dead_letter": lambda m, e: dead.append(m.value)} if hook else {}
    with producer(mock, ready=TOPIC, **options) as p:
        for b in range(1, 4):
            mock.broker_down(b)
        for i in range(20):
            p.produce(
                TOPIC,
                b"m%d" % i,
                headers=[("h", b"x")] if i < 4 else None,
                on_delivery=cb if i % 2 == 0 else None,
            )
    assert outcomes == {b"m%d" % i: [KafkaError._PURGE_QUEUE] for i in range(0, 20, 2)}
    assert sorted(dead) == (sorted(b"m%d" % i for i in range(20)) if hook else [])
    assert p.close() == []  # already closed: nothing handed back
    stats = p.statistics()
    assert (stats.final_failures, stats.returned_on_close, stats.in_flight) == (0, 20, 0)
    unheard = [r for r in caplog.records if "neither a callback" in r.getMessage()]
    assert len(unheard) == (0 if hook else 1)
    if not hook:  # the ten without a callback
        assert "10 undelivered" in unheard[0].getMessage()


def test_metrics_are_served_over_http(mock: MockCluster) -> None:
    import urllib.request

    p = producer(
        mock, conf={"client.id": "metrics-check"}, metrics_port=0, metrics_addr="127.0.0.1"
    )
    try:
        for i in range(100):
            p.produce(TOPIC, b"m%d" % i)
        assert p.flush(10) == 0
        port = p.metrics_port
        assert port
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
        assert 'failover_delivered_total{producer="metrics-check"} 100.0' in text
        assert (
            f'failover_partitions{{producer="metrics-check",state="healthy",topic="{TOPIC}"}}'
            in text
        )
        assert 'failover_metadata_age_seconds{producer="metrics-check",topic="orders"}' in text
    finally:
        p.close()


def test_a_busy_metrics_port_is_named_and_the_producer_can_be_made_again(
    mock: MockCluster,
) -> None:
    """The error names the address; the failed producer leaves nothing registered, so a second
    one of the same client.id in the same registry starts on a free port."""
    registry = CollectorRegistry()
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        busy = blocker.getsockname()[1]
        with pytest.raises(
            OSError, match=f"cannot serve metrics on 127.0.0.1:{busy}: .*metrics_port"
        ):
            producer(
                mock,
                conf={"client.id": "svc"},
                metrics_registry=registry,
                metrics_port=busy,
                metrics_addr="127.0.0.1",
            )
    p = producer(
        mock,
        conf={"client.id": "svc"},
        metrics_registry=registry,
        metrics_port=0,
        metrics_addr="127.0.0.1",
    )
    try:
        assert p.metrics_port
    finally:
        p.close()


def test_a_closed_mock_cluster_refuses_every_call() -> None:
    """After close() the mock's handle is freed: a call would read freed memory (a crash or a
    hang), so each one raises instead; a second close() does nothing."""
    cluster = MockCluster(brokers=3)
    cluster.create_topic("t", 3)
    cluster.close()
    cluster.close()
    calls: dict[str, Callable[[], object]] = {
        "create_topic": lambda: cluster.create_topic("t2", 3),
        "broker_down": lambda: cluster.broker_down(1),
        "broker_up": lambda: cluster.broker_up(1),
        "delay_broker": lambda: cluster.delay_broker(1, 10),
        "push_broker_errors": lambda: cluster.push_broker_errors(1, NOT_ENOUGH_REPLICAS, 5),
        "broker_errors_left": lambda: cluster.broker_errors_left(1),
        "set_leader": lambda: cluster.set_leader("t", 0, 2),
        "clear_errors": lambda: cluster.clear_errors(),
        "track_requests": lambda: cluster.track_requests(),
        "requests": lambda: cluster.requests(),
        "failing_produce": lambda: cluster.failing_produce(1, NOT_ENOUGH_REPLICAS).__enter__(),
    }
    for name, call in calls.items():
        with pytest.raises(RuntimeError, match=rf"MockCluster\.{name}\(\) called after close\(\)"):
            call()


def test_closing_a_mock_cluster_inside_failing_produce_stops_its_thread_first() -> None:
    """The thread that keeps the errors queued must not call into the destroyed mock."""
    cluster = MockCluster(brokers=3)
    with cluster.failing_produce(1, NOT_ENOUGH_REPLICAS, check_s=0.001):
        cluster.close()
        assert not [t for t in threading.enumerate() if t.name == "mock-fail-1"]
    with pytest.raises(RuntimeError, match="after close"):
        cluster.broker_errors_left(1)


@pytest.mark.parametrize("path", ["first-message", "healthy", "record"])
@pytest.mark.parametrize("reported", [False, True], ids=["no-callback", "callback"])
def test_ctrl_c_as_the_client_takes_a_message_leaves_it_accepted(
    mock: MockCluster, reported: bool, path: str
) -> None:
    """Python raises a signal's KeyboardInterrupt as a C call returns, so Ctrl-C in produce()
    lands right after the client took the message, as a rule (``python
    bench/ctrl_c_in_produce.py``: 17 of 20 rounds). produce() raises it, and the message is
    accepted: counted in, delivered, its callback called once. A topic's first message takes
    the failover path (the healthy path opens once the producer has looked at the topic),
    later ones the healthy path, a message with headers a record (the core's dispatch)."""
    seen: list[Any] = []
    conf = {"on_delivery": lambda err, msg: seen.append((err, msg.value()))} if reported else {}
    p = producer(mock, conf=conf, ready=TOPIC)
    try:
        warm = path != "first-message"
        if warm:
            p.produce(TOPIC, b"warm")
            assert p.flush(10) == 0
        headers = [("h", b"1")] if path == "record" else None
        with (
            interrupted_as_it_returns(p, "_produce_reported" if reported else "_produce_raw"),
            pytest.raises(KeyboardInterrupt),
        ):
            p.produce(TOPIC, b"taken", headers=headers)
        assert p.flush(10) == 0
        stats = p.statistics()
        sent = 2 if warm else 1
        assert (stats.produced, stats.delivered, stats.in_flight) == (sent, sent, 0)
        if reported:
            assert seen[-1] == (None, b"taken")
            assert len(seen) == sent
    finally:
        assert p.close() == []


def a_retry_waits(mock: MockCluster, p: FailoverProducer, cb: Any) -> None:
    """Partition 0's leader refuses "retried" once: it waits in the failed buffer."""
    mock.push_broker_errors(leaders(p)[0], NOT_ENOUGH_REPLICAS, 1)
    p.produce(TOPIC, b"retried", partition=0, on_delivery=cb)
    wait_for(
        lambda: p.poll(0.01) >= 0 and p.statistics().failed_buffer_depth == 1,
        10,
        "the refusal",
    )


def test_ctrl_c_as_the_client_takes_a_retry_leaves_its_attempt_standing(
    mock: MockCluster,
) -> None:
    """The same rule for a retry, which produce() sends before the message it was given: the
    retry's attempt stands (the client has it), delivered once, its callback called once; the
    message produce() was given was not accepted (the signal came before its own call)."""
    outcomes: dict[bytes, list[Any]] = {}

    def cb(err: Any, msg: Any) -> None:
        outcomes.setdefault(msg.value(), []).append(err)

    p = producer(mock, ready=TOPIC, retry_backoff_s=0.5)
    try:
        a_retry_waits(mock, p, cb)
        time.sleep(0.6)  # the retry is due
        with interrupted_as_it_returns(p, "_produce_reported"), pytest.raises(KeyboardInterrupt):
            p.produce(TOPIC, b"given", on_delivery=cb)
        assert p.flush(10) == 0
        assert outcomes == {b"retried": [None]}
        stats = p.statistics()
        assert (stats.produced, stats.delivered, stats.retries) == (1, 1, 1)
    finally:
        assert p.close() == []


@contextlib.contextmanager
def interrupted_while_the_queue_is_full(p: FailoverProducer) -> Iterator[list[int]]:
    """Inside the block, the producer's polls while it waits for room in the client's full
    queue (``_retry_queue_full``) get KeyboardInterrupt as they return: where a Ctrl-C that
    comes during the wait is raised. Yields the count of those polls."""
    import _thread
    import sys

    poll = p._poll_client
    polls: list[int] = []

    def poll_then_interrupted(timeout: float) -> int:
        n = poll(timeout)
        if sys._getframe(1).f_code.co_name == "_retry_queue_full":
            polls.append(n)
            _thread.interrupt_main()
        return n

    p._poll_client = poll_then_interrupted  # type: ignore[method-assign]  # the test's
    try:
        yield polls
    finally:
        p._poll_client = poll  # type: ignore[method-assign]


def test_ctrl_c_while_a_first_attempt_waits_for_a_full_queue_leaves_it_not_accepted(
    mock: MockCluster,
) -> None:
    """A message the client's full queue refused (one with headers: the core's dispatch)
    waits for room; a Ctrl-C meanwhile leaves it not accepted (the client never took it):
    not counted, never delivered, not handed back by close(); the message before it is."""
    outcomes: dict[bytes, list[Any]] = {}

    def cb(err: Any, msg: Any) -> None:
        outcomes.setdefault(msg.value(), []).append(err)

    p = producer(mock, ready=TOPIC, conf={"queue.buffering.max.messages": 1})
    try:
        p.produce(TOPIC, b"queued", on_delivery=cb)
        with interrupted_while_the_queue_is_full(p) as polls, pytest.raises(KeyboardInterrupt):
            p.produce(TOPIC, b"refused", headers=[("h", b"1")], on_delivery=cb)
        assert len(polls) == 1
        assert p.flush(10) == 0
        assert outcomes == {b"queued": [None]}
        stats = p.statistics()
        assert (stats.produced, stats.delivered, stats.in_flight) == (1, 1, 0)
    finally:
        assert p.close() == []


def a_retry_due_behind_a_full_queue(mock: MockCluster, cb: Any) -> FailoverProducer:
    """A producer whose client queue holds one message: "retried" (to partition 0, whose
    leader refuses it once) waits in the failed buffer, due; "filler" takes the queue's one
    place."""
    p = producer(mock, ready=TOPIC, retry_backoff_s=0.3, conf={"queue.buffering.max.messages": 1})
    try:
        a_retry_waits(mock, p, cb)
        p.produce(TOPIC, b"filler", on_delivery=cb)
        time.sleep(0.4)  # the retry is due
    except BaseException:
        p.close(0)
        raise
    return p


def test_ctrl_c_while_a_retry_waits_for_a_full_queue_keeps_it_waiting(
    mock: MockCluster,
) -> None:
    """A retry the client's full queue refused waits for room; a Ctrl-C meanwhile puts it
    back in the failed buffer (it was accepted long before), from where it is delivered
    once; the message produce() was given was not accepted (the signal came first)."""
    outcomes: dict[bytes, list[Any]] = {}

    def cb(err: Any, msg: Any) -> None:
        outcomes.setdefault(msg.value(), []).append(err)

    p = a_retry_due_behind_a_full_queue(mock, cb)
    try:
        with interrupted_while_the_queue_is_full(p) as polls, pytest.raises(KeyboardInterrupt):
            p.produce(TOPIC, b"given", on_delivery=cb)
        assert len(polls) == 1
        assert p.statistics().failed_buffer_depth == 1  # the retry, waiting again
        assert p.flush(10) == 0
        assert outcomes == {b"retried": [None], b"filler": [None]}
        stats = p.statistics()
        assert (stats.produced, stats.delivered, stats.in_flight) == (2, 2, 0)
    finally:
        assert p.close() == []


def test_a_retry_that_waits_for_a_full_queue_is_counted_once_rerouted(
    mock: MockCluster,
) -> None:
    """A retry the client's full queue refused waits for room, then goes: delivered once,
    and its move off the partition that refused it counted as a reroute, as any retry's."""
    outcomes: dict[bytes, list[Any]] = {}

    def cb(err: Any, msg: Any) -> None:
        outcomes.setdefault(msg.value(), []).append((err, msg.partition()))

    p = a_retry_due_behind_a_full_queue(mock, cb)
    try:
        p.produce(TOPIC, b"given", on_delivery=cb)
        assert p.flush(10) == 0
        assert sorted(outcomes) == [b"filler", b"given", b"retried"]
        [(err, partition)] = outcomes[b"retried"]
        assert err is None
        assert partition != 0
        stats = p.statistics()
        assert (stats.produced, stats.delivered, stats.retries, stats.rerouted) == (3, 3, 1, 1)
    finally:
        assert p.close() == []


def test_ctrl_c_during_flush_loses_nothing(mock: MockCluster) -> None:
    import _thread
    import threading

    p = producer(mock)
    p.health(TOPIC)
    for b in range(1, 4):
        mock.broker_down(b)
    for i in range(10):
        p.produce(TOPIC, b"m%d" % i)
    timer = threading.Timer(0.3, _thread.interrupt_main)
    timer.start()
    try:
        # A KeyboardInterrupt, never the SystemError a raw client's flush() raises now and
        # then (tests/integration/test_callback_exceptions.py).
        with pytest.raises(KeyboardInterrupt):
            p.flush(10)
    finally:
        timer.cancel()
        left = p.close(timeout=0.2)
    assert sorted(m.value for m in left if isinstance(m.value, bytes)) == sorted(
        b"m%d" % i for i in range(10)
    )


def test_ctrl_c_while_a_with_block_closes_still_reports_what_is_left(
    mock: MockCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C while the with block's close() flushes: close() still takes back what the
    client holds and reports each message to its callback, then KeyboardInterrupt goes on."""
    import _thread
    import threading

    monkeypatch.setattr(
        FailoverProducer, "close", functools.partialmethod(FailoverProducer.close, 10.0)
    )
    outcomes: dict[bytes, list[int | None]] = {}

    def cb(err: Any, report: Any) -> None:
        outcomes.setdefault(report.value(), []).append(None if err is None else err.code())

    timer = threading.Timer(0.5, _thread.interrupt_main)
    p = producer(mock, ready=TOPIC)

    def block() -> None:
        with p:
            for b in range(1, 4):
                mock.broker_down(b)
            for i in range(10):
                p.produce(TOPIC, b"m%d" % i, on_delivery=cb)
            timer.start()  # lands in the flush of close(), 10 s long

    try:
        with pytest.raises(KeyboardInterrupt):
            block()
    finally:
        timer.cancel()
    assert outcomes == {b"m%d" % i: [KafkaError._PURGE_QUEUE] for i in range(10)}
    assert p.close() == []


def test_strict_keys_wait_for_their_own_partition(mock: MockCluster) -> None:
    """key_policy="strict": a key whose partition keeps refusing writes is never moved; its
    messages are retried there until the refusals stop, then delivered in place."""
    p = producer(mock, key_policy="strict", quarantine_backoff_s=0.05, quarantine_max_s=0.1)
    lead = leaders(p)
    bad = lead[0]
    keys = [b"k%d" % i for i in range(60)]
    home = {k: partition_for_key(k, PARTITIONS) for k in keys}
    assert any(lead[home[k]] == bad for k in keys)
    reports = Reports()
    mock.push_broker_errors(bad, NOT_ENOUGH_REPLICAS, 5)
    for k in keys:
        p.produce(TOPIC, k, key=k, on_delivery=reports)
    assert p.flush(30) == 0
    p.close()
    for k in keys:
        [(err, partition, _)] = reports.by_value[k]
        assert err is None
        assert partition == home[k]
    assert max(a for [(_, _, a)] in reports.by_value.values()) > 1  # the refusals were felt


@pytest.mark.parametrize("strategy", ["sticky", "round_robin"])
def test_list_headers_survive_re_producing_and_callbacks_fire_once(
    mock: MockCluster, strategy: str
) -> None:
    """Headers in confluent-kafka's list form (the mirror's) with a callback per message (sent
    without a record, the report's partial keeping them): the messages the brokers refused at
    first are produced again with their own headers and timestamps, and each callback fires
    exactly once, with success and the headers it was given."""
    p = producer(mock, ready=TOPIC, strategy=strategy)
    n = 600
    seen: dict[bytes, list[Any]] = {}
    stamp = 1_700_000_000_000

    def on_delivery(err: Any, report: DeliveryReport) -> None:
        value = report.value()
        assert isinstance(value, bytes)
        seen.setdefault(value, []).append((err, report.headers(), report.attempts()))

    for broker in (1, 2, 3):  # wherever the client or the chooser places the first ones
        mock.push_broker_errors(broker, NOT_ENOUGH_REPLICAS, 5)
    shared = [("src", b"orders")]
    for i in range(n):
        headers = [*shared, ("offset", b"%d" % i)]
        timestamp = stamp if i % 2 else None
        p.produce(TOPIC, b"m%d" % i, headers=headers, on_delivery=on_delivery, timestamp=timestamp)
        headers.append(("after", b"produce"))  # the caller's list is its own again
    assert p.flush(30) == 0
    stats = p.statistics()
    p.close()
    assert stats.delivered == n
    assert stats.retries >= 1  # some went through the re-produce path
    assert len(seen) == n
    for i in range(n):
        [(err, headers, _)] = seen[b"m%d" % i]
        assert err is None
        assert headers == [("src", b"orders"), ("offset", b"%d" % i)]
    assert any(attempts > 1 for [(_, _, attempts)] in seen.values())
    records = consume_all(mock, n)
    assert len(records) == n
    assert all(m.headers() == [("src", b"orders"), ("offset", m.value()[1:])] for m in records)
    odd = [m for m in records if int(m.value()[1:]) % 2]
    assert len(odd) == n // 2
    assert {m.timestamp()[1] for m in odd} == {stamp}


@pytest.mark.parametrize("strategy", ["sticky", "round_robin"])
def test_headers_without_a_callback_survive_re_producing(mock: MockCluster, strategy: str) -> None:
    """Headers with nobody to call back go to the client without a record (the default
    strategy's healthy path, or after the core routed them), the copy the report's partial
    keeps standing in for a failure report's missing headers: the messages every broker
    refused at first are produced again with their own headers, each delivered once."""
    p = producer(mock, ready=TOPIC, strategy=strategy)
    for broker in (1, 2, 3):
        mock.push_broker_errors(broker, NOT_ENOUGH_REPLICAS, 5)
    n = 300
    for i in range(n):
        headers = [("offset", b"%d" % i)]
        p.produce(TOPIC, b"m%d" % i, headers=headers)
        headers.append(("after", b"produce"))  # the caller's list is its own again
    assert p.flush(30) == 0
    stats = p.statistics()
    assert p.close() == []
    assert (stats.produced, stats.delivered) == (n, n)
    assert stats.retries >= 1
    records = consume_all(mock, n)
    assert sorted(m.value() for m in records) == sorted(b"m%d" % i for i in range(n))
    assert all(m.headers() == [("offset", m.value()[1:])] for m in records)


def test_headers_without_a_callback_come_back_with_close(mock: MockCluster) -> None:
    """Messages with headers the client holds, sent without a record, are handed back by
    close() with their headers: the report's partial kept the copy a purge report lacks."""
    p = producer(mock, ready=TOPIC, strategy="sticky")
    for broker in (1, 2, 3):
        mock.broker_down(broker)
    for i in range(10):
        p.produce(TOPIC, b"m%d" % i, headers=[("offset", b"%d" % i)])
    left = p.close(timeout=0.2)
    assert sorted((m.value, m.headers) for m in left) == sorted(
        (b"m%d" % i, (("offset", b"%d" % i),)) for i in range(10)
    )


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (("k", 5), "must have str, bytes or None values; got the item \\('k', 5\\)"),
        (["k", b"v"], "list of \\(str, value\\) pairs; got the item \\['k', b'v'\\]"),
        (("k", b"v", b"w"), "list of \\(str, value\\) pairs; got the item"),
        # confluent-kafka would write these names as "b'k'" and "1"
        ((b"k", b"v"), "list of \\(str, value\\) pairs; got the item \\(b'k', b'v'\\)"),
        ((1, b"v"), "list of \\(str, value\\) pairs; got the item \\(1, b'v'\\)"),
        ((), "list of \\(str, value\\) pairs; got the item \\(\\)"),
    ],
)
def test_a_bad_header_pair_is_refused_before_the_message_is_accepted(
    mock: MockCluster, bad: Any, match: str
) -> None:
    p = producer(mock)
    calls: list[Any] = []
    p.produce(TOPIC, b"ok", headers=[("h", b"1")], on_delivery=lambda e, r: calls.append(e))
    with pytest.raises(TypeError, match=match):
        p.produce(
            TOPIC, b"bad", headers=[("h", b"1"), bad], on_delivery=lambda e, r: calls.append(e)
        )
    assert p.flush(10) == 0
    stats = p.statistics()
    assert p.close() == []
    assert calls == [None]  # the refused message has no callback: the caller got the error
    assert stats.produced == 1
    assert stats.in_flight == 0
    assert [m.value() for m in consume_all(mock, 1)] == [b"ok"]


def test_whole_until_another_client_reports_a_failure_then_not_until_it_is_released(
    mock: MockCluster,
) -> None:
    p = producer(mock, ready=TOPIC, quarantine_backoff_s=0.5)
    try:
        assert p.whole(TOPIC)
        assert not p.whole("never-produced-to")
        p.report_failure(
            TOPIC, 2, KafkaError(KafkaError.NOT_ENOUGH_REPLICAS, "Broker: Not enough replicas")
        )
        assert not p.whole(TOPIC)
        assert p.health(TOPIC).partitions[2].quarantined
        # The message is the caller's: the producer counts nothing for it.
        assert len(p) == 0
        assert p.statistics().final_failures == 0
        # A per-record error says nothing of the partition: no quarantine.
        p.report_failure(TOPIC, 3, KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
        assert not p.health(TOPIC).partitions[3].quarantined
        deadline = time.monotonic() + 10
        while not p.whole(TOPIC) and time.monotonic() < deadline:
            p.poll(0.1)
        assert p.whole(TOPIC), "released after its back-off once the metadata shows it usable"
    finally:
        p.close()


def test_a_leader_move_is_seen_while_the_broker_asked_for_metadata_hangs(
    mock: MockCluster,
) -> None:
    # librdkafka sends a metadata request to the broker it sent to last ("least idle"): one
    # that a hung broker holds keeps it the last, so every later fetch went there too until
    # the request expired after socket.timeout.ms (librdkafka's default: 60 s) and the view
    # stayed as old. Seen on real Kafka as degraded partitions never marked (SIGSTOP).
    mock.track_requests()
    p = producer(mock, ready=TOPIC, metadata_refresh_s=0.2, metadata_fast_refresh_s=0.2)
    try:
        time.sleep(1.0)  # a few fetches: the refresher settles on one broker
        asked = [b for b, api in mock.requests() if api == METADATA_API_KEY][-1]
        mock.delay_broker(asked, 120_000)  # hangs, connections open
        # A partition it led moves away (as Kafka moves leaders off a fenced broker).
        moved = next(n for n in range(PARTITIONS) if leaders(p)[n] == asked)
        new_leader = asked % mock.brokers + 1
        mock.set_leader(TOPIC, moved, new_leader)
        wait_for(
            lambda: leaders(p)[moved] == new_leader,
            30,
            f"the producer to see partition {moved} led by broker {new_leader} (broker {asked}, "
            "which it asked for metadata, hangs)",
            lambda: (p.metadata_age_s(TOPIC), leaders(p)),
        )
    finally:
        mock.delay_broker(asked, 0)
        p.close()


@pytest.mark.parametrize("keyed", [False, True], ids=["keyless", "keyed"])
def test_without_callbacks_failures_are_rebuilt_from_failure_reports_alone(
    mock: MockCluster, keyed: bool
) -> None:
    """A producer without callbacks sends on its quiet client (failures reported, deliveries
    not): while a broker refuses every Produce, its messages are rebuilt from the failure
    reports and delivered elsewhere, each exactly once, and the statistics count every
    delivery though no report said so. (librdkafka's sticky partitioner is off, so that keyless
    messages reach every partition, the refusing broker's too.)"""
    p = producer(mock, ready=TOPIC, conf={"sticky.partitioning.linger.ms": 0})
    assert p._quiet is not None, "no callback anywhere: the producer starts quiet"
    bad = leaders(p)[0]
    bad_partitions = {part for part, b in leaders(p).items() if b == bad}
    n = 3000
    with mock.failing_produce(bad, NOT_ENOUGH_REPLICAS):
        for i in range(n):
            p.produce(TOPIC, b"q%d" % i, key=b"k%d" % i if keyed else None)
            if i % 200 == 0:
                p.poll(0.002)
        assert p.flush(30) == 0
    stats = p.statistics()
    assert p._quiet is not None, "still quiet: retries go to the main client, first tries not"
    assert p.close() == []
    assert (stats.produced, stats.delivered, stats.final_failures, stats.in_flight) == (n, n, 0, 0)
    assert stats.quarantines >= 1, "some went to the refusing broker first"
    records = consume_all(mock, n)
    values = Counter(m.value() for m in records)
    assert set(values) == {b"q%d" % i for i in range(n)}
    assert max(values.values()) == 1
    assert not {m.partition() for m in records} & bad_partitions


def test_the_first_callback_lets_earlier_messages_land_first(mock: MockCluster) -> None:
    """Messages without a callback go on the quiet client; the first one with a callback
    ends that mode. It is sent only once the quiet client's messages have ended, so within a
    partition it lands after every message produced before it (one key: one partition);
    from then on every message takes the main client, and the counts stay exact."""
    p = producer(mock, ready=TOPIC, conf={"linger.ms": 200})
    n = 2000
    for i in range(n):
        p.produce(TOPIC, b"early%d" % i, key=b"same")
    reports = Reports()
    p.produce(TOPIC, b"with-callback", key=b"same", on_delivery=reports)
    assert p._quiet is None, "a callback ends the quiet mode"
    for i in range(10):
        p.produce(TOPIC, b"late%d" % i, key=b"same")
    assert p.flush(30) == 0
    stats = p.statistics()
    p.close()
    assert (stats.produced, stats.delivered, stats.in_flight) == (n + 11, n + 11, 0)
    assert [err for [(err, _, _)] in reports.by_value.values()] == [None]
    records = consume_all(mock, n + 11)
    partition = partition_for_key(b"same", PARTITIONS)
    order = [m.value() for m in sorted(records, key=lambda m: m.offset())]
    assert {m.partition() for m in records} == {partition}
    assert order == [b"early%d" % i for i in range(n)] + [b"with-callback"] + [
        b"late%d" % i for i in range(10)
    ]


def test_a_default_callback_means_no_quiet_client(mock: MockCluster) -> None:
    """With conf['on_delivery'] every message needs its report: one client, no quiet mode."""
    got: list[Any] = []
    p = producer(mock, ready=TOPIC, conf={"on_delivery": lambda err, r: got.append(err)})
    assert p._quiet_client is None
    assert p._quiet is None
    for i in range(100):
        p.produce(TOPIC, b"d%d" % i)
    assert p.flush(30) == 0
    assert p.statistics().delivered == 100
    p.close()
    assert got == [None] * 100


def test_a_callback_waits_for_the_quiet_client_at_most_produce_timeout_s(
    mock: MockCluster,
) -> None:
    """The first message with a callback waits for the quiet client's messages to land, no
    longer than produce_timeout_s: then it is refused (ProduceTimeout carrying it, not
    accepted) and the producer stays quiet; once they land it goes through."""
    p = producer(mock, ready=TOPIC, produce_timeout_s=0.3)
    for broker in (1, 2, 3):
        mock.delay_broker(broker, 2000)
    for i in range(100):
        p.produce(TOPIC, b"slow%d" % i)
    started = time.monotonic()
    with pytest.raises(ProduceTimeout) as refused:
        p.produce(TOPIC, b"called", on_delivery=lambda err, r: None)
    assert time.monotonic() - started < 1.5
    assert refused.value.message.value == b"called"
    assert p._quiet is not None, "still quiet: the callback's message was not accepted"
    for broker in (1, 2, 3):
        mock.delay_broker(broker, 0)
    reports = Reports()
    p.produce(TOPIC, b"called", on_delivery=reports, key=b"k")
    assert p._quiet is None
    assert p.flush(30) == 0
    stats = p.statistics()
    p.close()
    assert (stats.produced, stats.delivered) == (101, 101)
    assert [err for [(err, _, _)] in reports.by_value.values()] == [None]
