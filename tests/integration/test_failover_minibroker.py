"""FailoverProducer on minibroker: real ISR, real min.insync.replicas, real faults (issue 6).

Must-show 1: 5 brokers, 12 partitions, RF=3, min ISR 2, 200,000 keyless messages at a steady
rate; mid-run brokers 4 and 5 stop (first run) or a leader is cut off from replication (second
run). Every message is consumed back, duplicates come only from ambiguous failures and are
counted, and no produce() call waits more than a second. A plain confluent-kafka Producer on
the same degraded cluster stalls on the degraded partitions, which shows the fault bites.

Must-show 2: keyed messages under key_policy="failover" keep their murmur2 partition while it
is usable, only keys of degraded partitions move during the fault, and they return afterwards.
"""

from __future__ import annotations

import functools
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # the stubs lag the package
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
)

from failover_partitioner import DeliveryReport, FailoverProducer
from failover_partitioner._murmur2 import partition_for_key
from minibroker import Cluster

PARTITIONS = 12
# ISR and controller react within a fraction of a second, as in minibroker's own fault tests.
FAST = {
    "min.insync.replicas": "2",
    "replica.lag.time.max.ms": "300",
    "broker.session.timeout.ms": "300",
}
MESSAGES = 200_000
RATE_PER_S = 12_000  # steady: about 17 s of producing
# Writes appended just before a partition fell under min ISR wait for a high watermark that no
# longer advances, and are answered at request.timeout.ms (5 s here); a broker answers one
# request per connection at a time, so every ack from that leader waits as long. At RATE_PER_S
# about 60,000 messages are then in flight: under the default bound of 50,000, produce() would
# wait for room (backpressure, measured ~0.9 s here, over 1 s on a loaded machine). These tests
# measure the routing, so the bound is above the peak; test_reliability_outage holds the bound.
IN_FLIGHT = 100_000


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with Cluster(brokers=5, config=FAST) as c:
        c.create_topic("orders", partitions=PARTITIONS, replication_factor=3)
        c.create_topic("plain", partitions=PARTITIONS, replication_factor=3)
        yield c


def wait_for(
    predicate: Callable[[], bool],
    timeout_s: float,
    what: str,
    state: Callable[[], object] = lambda: "",
) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what} {state()}")
        time.sleep(0.02)


def degraded(cluster: Cluster, topic: str) -> set[int]:
    """Partitions whose ISR is below min.insync.replicas (2)."""
    return {s.partition for s in cluster.describe(topic) if len(s.isr) < 2}


def consume_all(bootstrap: str, topic: str, expected: int, timeout_s: float = 60.0) -> list[Any]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "check",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
        }
    )
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        out: list[Any] = []
        deadline = time.monotonic() + timeout_s
        while len(out) < expected and time.monotonic() < deadline:
            out.extend(m for m in c.consume(5000, 0.2) if m.error() is None)
        end = time.monotonic() + 0.5  # anything beyond `expected` is a duplicate: look for it
        while time.monotonic() < end:
            out.extend(m for m in c.consume(5000, 0.1) if m.error() is None)
        return out
    finally:
        c.close()


def produce_steadily(
    p: FailoverProducer, n: int, fault_at: int, fault: Callable[[], None]
) -> float:
    """Produce n keyless messages at RATE_PER_S, run ``fault`` after ``fault_at`` of them;
    return the longest a single produce() call took."""
    longest = 0.0
    start = time.monotonic()
    for i in range(n):
        if i == fault_at:
            fault()
        if i % 100 == 0:
            ahead = start + i / RATE_PER_S - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
            p.poll(0)
        t = time.monotonic()
        p.produce("orders", b"m%d" % i)
        took = time.monotonic() - t
        if took > longest:
            longest = took
    return longest


def plain_producer_stalls(cluster: Cluster, bad: set[int]) -> None:
    """The same traffic from a plain confluent-kafka Producer stalls on the degraded ones."""
    assert bad, "the fault degraded no partition of 'plain'"
    failed: Counter[int] = Counter()

    def on_delivery(err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            failed[msg.partition()] += 1

    plain = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "on_delivery": on_delivery}
    )
    # The same steady rate for 1.5 s: its sticky partitioner (a new random partition every
    # 10 ms) then tries every partition many times over.
    start = time.monotonic()
    for i in range(RATE_PER_S * 3 // 2):
        if i % 100 == 0:
            ahead = start + i / RATE_PER_S - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
            plain.poll(0)
        plain.produce("plain", b"p%d" % i)
    # librdkafka keeps retrying the degraded partitions (messages are partitioned once):
    # nothing there completes within the time FailoverProducer needed for everything.
    stuck = plain.flush(5)
    assert stuck > 0, "the plain producer delivered everything: the fault did not bite"
    plain.purge()
    plain.flush(5)
    assert set(failed) <= bad
    assert sum(failed.values()) >= stuck


def recovered(cluster: Cluster) -> bool:
    """Full ISR and every appended record committed, on every partition of 'orders'."""
    return all(
        len(st.isr) == 3 and st.high_watermark == st.log_end_offset
        for st in cluster.describe("orders")
    )


def check_everything_consumed_back(
    cluster: Cluster, p: FailoverProducer, recover: Callable[[], None]
) -> None:
    """Every message was delivered and, once the cluster has recovered, is read back.

    Records acknowledged just before the fault may sit above the high watermark of a newly
    elected leader whose ISR is under min.insync.replicas: since Kafka 3.7 (KAFKA-15583,
    KIP-966) that high watermark does not advance until the ISR recovers. So the check reads
    after recovery; before it, such records are stored but not yet visible.
    """
    stats = p.statistics()
    assert p.close() == []
    assert stats.delivered == MESSAGES
    assert stats.final_failures == 0
    assert stats.quarantines >= 1
    recover()
    wait_for(lambda: recovered(cluster), 30, "the cluster to recover")
    records = consume_all(cluster.bootstrap_servers, "orders", MESSAGES)
    values = Counter(m.value() for m in records)
    missing = {b"m%d" % i for i in range(MESSAGES)} - set(values)
    assert not missing, (
        f"{len(missing)} delivered messages not consumed back: {sorted(missing)[:10]}; "
        f"cluster {cluster.describe('orders')}"
    )
    assert len(values) == MESSAGES  # nothing foreign
    duplicates = len(records) - len(values)
    # Copies come only from failed attempts that may have been written, and each was counted.
    assert duplicates <= stats.ambiguous_failures
    copied = sum(1 for count in values.values() if count > 1)
    assert copied <= stats.possible_duplicates


def test_two_brokers_stop_mid_run_and_nothing_is_lost(cluster: Cluster) -> None:
    p = FailoverProducer(
        {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"}, max_in_flight=IN_FLIGHT
    )
    assert p.health("orders").min_insync_replicas == 2  # learnt by DescribeConfigs

    def stop_two() -> None:
        cluster.stop_broker(4)
        cluster.stop_broker(5)

    longest = produce_steadily(p, MESSAGES, MESSAGES * 2 // 5, stop_two)
    assert longest < 1.0, f"a produce() call waited {longest:.2f} s"
    assert p.flush(60) == 0
    bad = degraded(cluster, "orders")
    assert bad, "stopping brokers 4 and 5 degraded no partition"
    wait_for(
        lambda: set(p.health("orders").unavailable) >= bad,
        5,
        "the producer's view to mark the degraded partitions unavailable",
    )
    plain_producer_stalls(cluster, degraded(cluster, "plain"))

    def restart() -> None:
        cluster.start_broker(4)
        cluster.start_broker(5)

    check_everything_consumed_back(cluster, p, restart)


def test_an_isolated_leader_is_routed_around(cluster: Cluster) -> None:
    p = FailoverProducer(
        {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"}, max_in_flight=IN_FLIGHT
    )
    p.health("orders")
    leader = cluster.partition_state("orders", 0).leader
    assert leader is not None

    longest = produce_steadily(
        p, MESSAGES, MESSAGES * 2 // 5, lambda: cluster.isolate_broker(leader)
    )
    assert longest < 1.0, f"a produce() call waited {longest:.2f} s"
    assert p.flush(60) == 0
    assert 0 in degraded(cluster, "orders")
    # 'plain' is idle: as on Kafka, a follower that stopped fetching leaves the ISR only once
    # its leader has more than it last fetched. One acks=1 write per partition.
    led = {s.partition for s in cluster.describe("plain") if s.leader == leader}
    touch = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "1"})
    for partition in range(PARTITIONS):
        touch.produce("plain", b"touch", partition=partition)
    assert touch.flush(10) == 0
    wait_for(lambda: degraded(cluster, "plain") == led, 5, "the isolated leader's ISRs to shrink")
    plain_producer_stalls(cluster, led)
    check_everything_consumed_back(cluster, p, lambda: cluster.heal_broker(leader))


def test_keys_keep_their_partition_and_only_degraded_keys_move(cluster: Cluster) -> None:
    p = FailoverProducer(
        {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"},
        key_policy="failover",
        # Learn the fault from metadata soon even with no traffic between the phases, so the
        # "during" phase starts with leaders re-elected and the producer's view settled.
        metadata_refresh_s=0.5,
        metadata_fast_refresh_s=0.2,
    )
    keys = [b"customer-%d" % i for i in range(600)]
    home = {k: partition_for_key(k, PARTITIONS) for k in keys}

    def placement() -> dict[bytes, set[int]]:
        seen: dict[bytes, set[int]] = {}

        def cb(err: Any, report: DeliveryReport) -> None:
            assert err is None, err
            key = report.key()
            assert isinstance(key, bytes)
            seen.setdefault(key, set()).add(report.partition())

        for k in keys:
            p.produce("orders", b"v", key=k, on_delivery=cb)
        assert p.flush(30) == 0
        return seen

    assert placement() == {k: {home[k]} for k in keys}

    # Exactly the partitions with replicas on both stopped brokers fall under min ISR.
    bad = {st.partition for st in cluster.describe("orders") if {4, 5} <= set(st.replicas)}
    assert bad
    cluster.stop_broker(4)
    cluster.stop_broker(5)
    wait_for(lambda: degraded(cluster, "orders") == bad, 5, "partitions to fall under min ISR")
    wait_for(
        lambda: (
            set(p.health("orders").unavailable) == bad
            and all(
                v.leader == cluster.partition_state("orders", v.partition).leader
                for v in p.health("orders").partitions
            )
        ),
        10,
        "the producer to see the fault",
        lambda: (
            bad,
            p.metadata_age_s("orders"),
            [(v.partition, v.leader, v.isr, v.quarantined) for v in p.health("orders").partitions],
            cluster.describe("orders"),
        ),
    )
    during = placement()
    unusable = set(p.health("orders").unavailable)
    for k in keys:
        if home[k] in unusable:
            assert len(during[k]) == 1
            assert not during[k] & unusable
        else:
            assert during[k] == {home[k]}, (k, home[k], during[k])
    assert any(home[k] in bad for k in keys)

    cluster.start_broker(4)
    cluster.start_broker(5)
    wait_for(lambda: not degraded(cluster, "orders"), 20, "the ISR to recover")
    wait_for(lambda: not p.health("orders").unavailable, 10, "the producer to see the recovery")
    assert placement() == {k: {home[k]} for k in keys}
    p.close()


@pytest.mark.parametrize("window", [0.0, 1.5])
def test_a_topic_the_cluster_does_not_know_fails_finally_after_its_window(window: float) -> None:
    """Waited for ``topic_propagation_max_s`` (its metadata fetched meanwhile), then failed
    with UNKNOWN_TOPIC_OR_PART saying why; a message after the window fails at once."""
    with Cluster(brokers=1, config={"auto.create.topics.enable": "false"}) as cluster:
        p = FailoverProducer(
            {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"},
            topic_propagation_max_s=window,
            metadata_fast_refresh_s=0.2,
        )
        errors: list[Any] = []
        start = time.monotonic()
        p.produce("no-such-topic", b"x", on_delivery=lambda err, report: errors.append(err))
        assert p.flush(10) == 0
        took = time.monotonic() - start
        p.produce("no-such-topic", b"y", on_delivery=lambda err, report: errors.append(err))
        assert p.flush(0.5) == 0
        stats = p.statistics()
        p.close()
    assert window <= took < window + 2.0
    assert [e.code() for e in errors] == [KafkaError.UNKNOWN_TOPIC_OR_PART] * 2
    assert "'no-such-topic' does not exist" in errors[0].str()
    assert "topic_propagation_max_s" in errors[0].str()
    assert (stats.final_failures, stats.in_flight) == (2, 0)


def test_a_topic_created_while_its_messages_wait_takes_them() -> None:
    """Messages for a topic the cluster does not list yet (created a moment later, as when a
    broker has not heard of a new topic) wait for it and are delivered, keyed ones home."""
    with Cluster(brokers=3, config={"auto.create.topics.enable": "false"}) as cluster:
        p = FailoverProducer(
            {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"},
            metadata_fast_refresh_s=0.2,
        )
        reports: list[tuple[Any, DeliveryReport]] = []
        keys = [None if i % 2 else b"k%d" % i for i in range(40)]
        for i, key in enumerate(keys):
            p.produce("late", b"v%d" % i, key=key, on_delivery=lambda e, r: reports.append((e, r)))
        p.poll(0.5)
        assert reports == []
        assert p.statistics().failed_buffer_depth == 40
        cluster.create_topic("late", partitions=4, replication_factor=3)
        assert p.flush(15) == 0
        stats = p.statistics()
        p.close()
    assert [e for e, _ in reports] == [None] * 40
    values = [r.value() for _, r in reports]
    assert sorted(v for v in values if isinstance(v, bytes)) == sorted(
        b"v%d" % i for i in range(40)
    )
    for _, r in reports:
        got = r.key()
        if isinstance(got, bytes):
            assert r.partition() == partition_for_key(got, 4), r
    assert (stats.delivered, stats.final_failures) == (40, 0)


def test_a_partition_preference_holds_while_usable_and_is_routed_around_while_not(
    cluster: Cluster,
) -> None:
    """``produce(..., partition=p)``: p while usable; elsewhere while not (never waiting on
    it); p again once usable; ``refresh`` makes partitions added to the topic usable at once."""
    p = FailoverProducer(
        {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"},
        metadata_refresh_s=0.5,
        metadata_fast_refresh_s=0.2,
    )

    def placed(count: int, *, key: bytes | None = None) -> dict[int, set[int]]:
        seen: dict[int, set[int]] = {}

        def cb(want: int, err: Any, report: DeliveryReport) -> None:
            assert err is None, err
            seen.setdefault(want, set()).add(report.partition())

        for i in range(count):
            want = i % PARTITIONS
            p.produce(
                "plain",
                b"v",
                key=key,
                headers=[("h", b"1")],
                on_delivery=functools.partial(cb, want),
                partition=want,
            )
        assert p.flush(30) == 0
        return seen

    p.health("plain")
    assert placed(240) == {q: {q} for q in range(PARTITIONS)}

    bad = {st.partition for st in cluster.describe("plain") if {4, 5} <= set(st.replicas)}
    cluster.stop_broker(4)
    cluster.stop_broker(5)
    wait_for(lambda: degraded(cluster, "plain") == bad, 5, "partitions to fall under min ISR")
    wait_for(lambda: set(p.health("plain").unavailable) == bad, 10, "the producer to see it")
    assert all(not p.usable("plain", q) for q in bad)
    during = placed(240, key=b"k")
    for q in range(PARTITIONS):
        if q in bad:
            assert len(during[q]) == 1
            assert not during[q] & bad
        else:
            assert during[q] == {q}

    cluster.start_broker(4)
    cluster.start_broker(5)
    wait_for(lambda: not degraded(cluster, "plain"), 20, "the ISR to recover")
    wait_for(lambda: not p.health("plain").unavailable, 10, "the producer to see the recovery")
    assert placed(240) == {q: {q} for q in range(PARTITIONS)}

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_partitions([NewPartitions("plain", PARTITIONS + 2)])["plain"].result()
    assert not p.usable("plain", PARTITIONS + 1)
    wait_for(lambda: p.refresh("plain").num_partitions == PARTITIONS + 2, 10, "the new partitions")
    assert p.usable("plain", PARTITIONS + 1)
    p.close()


def test_close_hands_back_a_message_still_in_flight_as_possibly_delivered() -> None:
    """A write the leader appended, waiting at acks=all for a follower that fetches slowly,
    is still in flight when close() stops waiting: it comes back ``possibly_delivered`` (the
    follower may yet copy it and the high watermark pass it), as the asyncio producer's do."""
    config = {"min.insync.replicas": "2", "replica.lag.time.max.ms": "30000"}
    with Cluster(brokers=2, config=config) as cluster:
        cluster.create_topic("held", partitions=1, replication_factor=2)
        state = cluster.partition_state("held", 0)
        follower = next(b for b in state.replicas if b != state.leader)
        p = FailoverProducer({"bootstrap.servers": cluster.bootstrap_servers})
        try:
            p.health("held")
            cluster.slow_broker(follower, 3000)
            outcomes: list[Any] = []
            for i in range(3):
                p.produce("held", b"%d" % i, on_delivery=lambda err, m: outcomes.append(err))
            wait_for(
                lambda: cluster.partition_state("held", 0).log_end_offset == 3,
                10,
                "the leader to append the writes",
            )
            left = p.close(timeout=0.3)
        finally:
            cluster.slow_broker(follower, 0)
            p.close()
        assert outcomes == []  # handed back, not reported
        assert sorted(m.value for m in left if isinstance(m.value, bytes)) == [b"0", b"1", b"2"]
        assert all(m.possibly_delivered for m in left)
        assert cluster.partition_state("held", 0).high_watermark <= 3


def test_a_leader_the_client_cannot_connect_to_is_left_at_once() -> None:
    """A broker that crashes leads its partitions, in the metadata, until the controller fences
    it (its session timeout: 30 s here). The producer leaves them as soon as its client fails
    to connect to it, rather than queue messages there until message.timeout.ms (10 s) with
    nothing failed to say so; once the broker is back, every message is delivered."""
    config = {"broker.session.timeout.ms": "30000", "replica.lag.time.max.ms": "30000"}
    with Cluster(brokers=3, config=config) as cluster:
        cluster.create_topic("crash", partitions=6, replication_factor=2)
        p = FailoverProducer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 1})
        try:
            for _ in range(60):
                p.produce("crash", b"before")
            assert p.flush(10) == 0
            led = sorted(s.partition for s in cluster.describe("crash") if s.leader == 2)
            assert led
            outcomes: list[Any] = []
            cluster.stop_broker(2)
            stopped = time.monotonic()
            while any(p.usable("crash", q) for q in led):
                assert time.monotonic() - stopped < 3, "still placing messages on broker 2"
                p.produce("crash", b"after", on_delivery=lambda err, m: outcomes.append(err))
                p.poll(0.01)
            # The metadata still names broker 2 the leader: only the failed connection told.
            assert {s.partition for s in cluster.describe("crash") if s.leader == 2} == set(led)
            assert p.statistics().final_failures == 0
            cluster.start_broker(2)
            assert p.flush(30) == 0
        finally:
            left = p.close()
        assert left == []
        assert outcomes
        assert all(err is None for err in outcomes)


def test_min_isr_lowered_by_an_operator_during_the_fault_lets_the_topic_take_writes() -> None:
    """Two of three brokers down, every ISR 1 under min ISR 2: the operator sets the topic's
    min.insync.replicas to 1 and the cluster takes acks=all writes again. The producer reads
    min ISR again every 5 s while partitions are out of use (it read it every 300 s, so its
    messages waited out the fault though the cluster would take them)."""
    with Cluster(brokers=3, config=FAST) as cluster:
        cluster.create_topic("lowered", partitions=3, replication_factor=3)
        p = FailoverProducer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 1})
        try:
            assert p.health("lowered").min_insync_replicas == 2
            cluster.stop_broker(2)
            cluster.stop_broker(3)
            wait_for(lambda: degraded(cluster, "lowered") == {0, 1, 2}, 10, "ISR 1 everywhere")
            wait_for(lambda: not p.refresh("lowered").usable, 10, "the producer to see it")
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
            lowered = ConfigResource(
                ConfigResource.Type.TOPIC,
                "lowered",
                incremental_configs=[
                    ConfigEntry(
                        "min.insync.replicas", "1", incremental_operation=AlterConfigOpType.SET
                    )
                ],
            )
            admin.incremental_alter_configs([lowered])[lowered].result(10)
            outcomes: list[Any] = []
            for i in range(10):
                p.produce("lowered", b"v%d" % i, on_delivery=lambda e, m: outcomes.append(e))
            assert p.flush(20) == 0
            assert outcomes == [None] * 10
            view = p.health("lowered")
            assert (view.min_insync_replicas, view.usable) == (1, (0, 1, 2))
        finally:
            assert p.close(1) == []


def test_close_keeps_its_timeout_with_every_broker_gone() -> None:
    """Every broker stopped: the client's failed connections quarantine every partition and
    ask metadata, which waits on an unreachable cluster (up to metadata_timeout_s, 5 s).
    close() does not wait it out: it returns the unsent messages within its timeout and 0.5 s,
    and the client is closed once that request returns."""
    with Cluster(brokers=3) as cluster:
        cluster.create_topic("gone", partitions=6, replication_factor=3)
        p = FailoverProducer({"bootstrap.servers": cluster.bootstrap_servers, "log_level": 0})
        for _ in range(20):
            p.produce("gone", b"before")
        assert p.flush(10) == 0
        for broker in (1, 2, 3):
            cluster.stop_broker(broker)
        for _ in range(50):
            p.produce("gone", b"after")
            p.poll(0.02)
        start = time.monotonic()
        left = p.close(timeout=0.2)
        took = time.monotonic() - start
    assert sorted(m.value for m in left if isinstance(m.value, bytes)) == [b"after"] * 50
    assert took < 1.5, f"close(timeout=0.2) took {took:.2f} s"
