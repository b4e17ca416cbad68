"""failover-mirror's topic sync and partition-preserving placement between two minibroker
clusters (issue 21), with real clients: the mirror's own AdminClients, consumer and producers.

1. A new source topic (6 partitions, retention.ms and cleanup.policy set) appears on the target
   with the same partition count and those configs (and not the excluded min.insync.replicas);
   a config changed on the source reaches the target; partitions added on the source appear on
   the target, and their messages land on the same partition numbers.
2. Preserve mode while healthy: every message on its source partition number, in source order.
3. Preserve mode with target brokers 4 and 5 stopped mid-copy: nothing lost, the degraded
   partitions' messages go elsewhere and are counted, and after recovery placement returns
   to p -> p.
4. Bad input: a target that refuses topic creation, and a target topic with fewer partitions
   than its source under --partitioning preserve: clear errors, nothing committed past what
   was delivered.
5. A target leader that crashes (30 s before it is fenced): the fast lane takes back what it
   had not sent, and the mirror delivers around it within seconds; nothing lost.
6. A stop while the fast lane's messages wait for slow acknowledgements, past the drain
   timeout: what the lane gave up is reported and not committed, and its client is closed.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # the stubs lag the package
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    ResourceType,
)
from prometheus_client import CollectorRegistry

from failover_partitioner.mirror import (
    HEADER_SOURCE,
    Mirror,
    MirrorConfigError,
    MirrorOptions,
    MirrorStatus,
    TopicSyncError,
    format_status,
)
from minibroker import Cluster

FAST = {
    "min.insync.replicas": "2",
    "replica.lag.time.max.ms": "300",
    "broker.session.timeout.ms": "300",
}
CONSUMER = {
    "session.timeout.ms": "1500",
    "heartbeat.interval.ms": "300",
    # New source partitions are seen within a second (librdkafka's default is 5 minutes).
    "topic.metadata.refresh.interval.ms": "1000",
}


def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


class RunningMirror:
    """A Mirror on a thread of its own; ``latest`` is its last status."""

    def __init__(
        self, options: MirrorOptions, registry: CollectorRegistry | None = None, **factories: Any
    ) -> None:
        self.mirror = Mirror(options, metrics_registry=registry, **factories)
        self.latest: MirrorStatus | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.latest = self.mirror.run(on_status=self._status)
        except BaseException as exc:  # the test thread reports it
            self.error = exc

    def __enter__(self) -> RunningMirror:
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        """Leaving on a failure: the mirror is told to stop (its thread is a daemon)."""
        if exc_type is not None:
            self.mirror.stop()

    def _status(self, status: MirrorStatus) -> None:
        self.latest = status

    def delivered(self) -> int:
        if self.error is not None:
            raise AssertionError(f"the mirror failed: {self.error!r}")
        return self.latest.delivered if self.latest is not None else 0

    def stop(self) -> MirrorStatus:
        self.mirror.stop()
        self.thread.join(60)
        assert not self.thread.is_alive()
        if self.error is not None:
            raise self.error
        assert self.latest is not None
        return self.latest


def options(src: Cluster, dst: Cluster, group: str, **extra: Any) -> MirrorOptions:
    return MirrorOptions(
        source_bootstrap=src.bootstrap_servers,
        target_bootstrap=dst.bootstrap_servers,
        group_id=group,
        consumer_config=CONSUMER,
        commit_interval_s=0.5,
        status_interval_s=0.2,
        topic_refresh_interval_s=0.5,
        config_sync_interval_s=0.5,
        **extra,
    )


def produce(cluster: Cluster, topic: str, partitions: range, per_partition: int, tag: str) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for i in range(per_partition):
        for p in partitions:
            producer.produce(topic, b"%s-%d-%d" % (tag.encode(), p, i), key=b"k%d" % i, partition=p)
        producer.poll(0)
    assert producer.flush(30) == 0


def ends(cluster: Cluster, topic: str) -> dict[int, int]:
    return {s.partition: s.high_watermark for s in cluster.describe(topic)}


def read_all(cluster: Cluster, topic: str) -> dict[int, list[Any]]:
    """Every message of ``topic`` up to its high watermarks, by partition, in offset order."""
    want = ends(cluster, topic)
    consumer = Consumer(
        {"bootstrap.servers": cluster.bootstrap_servers, "group.id": "reader", "log_level": 0}
    )
    out: dict[int, list[Any]] = defaultdict(list)
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p, end in want.items() if end > 0])
        deadline = time.monotonic() + 60
        while sum(len(v) for v in out.values()) < sum(want.values()):
            assert time.monotonic() < deadline, "could not read the whole topic back"
            for msg in consumer.consume(2000, 0.5):
                assert msg.error() is None, msg.error()
                out[msg.partition()].append(msg)  # type: ignore[index]
        return out
    finally:
        consumer.close()


def source_of(msg: Any) -> tuple[str, int, int]:
    value = dict(msg.headers())[HEADER_SOURCE]
    topic, partition, offset = value.decode().rsplit("/", 2)
    return topic, int(partition), int(offset)


def topic_configs(admin: AdminClient, topic: str) -> dict[str, str]:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result()
    return {
        name: entry.value
        for name, entry in entries.items()
        if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    }


def committed(cluster: Cluster, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], 10)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        consumer.close()


@pytest.fixture
def pair() -> Iterator[tuple[Cluster, Cluster]]:
    with Cluster(brokers=3) as src, Cluster(brokers=3) as dst:
        yield src, dst


def test_new_topic_is_created_like_its_source_and_follows_config_and_partition_changes(
    pair: tuple[Cluster, Cluster],
) -> None:
    src, dst = pair
    src.create_topic(
        "orders",
        partitions=6,
        replication_factor=3,
        config={
            "retention.ms": "3600000",
            "cleanup.policy": "compact",
            "min.insync.replicas": "2",  # excluded, as MirrorMaker 2 does
        },
    )
    produce(src, "orders", range(6), 50, "a")
    registry = CollectorRegistry()
    running = RunningMirror(options(src, dst, "sync"), registry)
    dst_admin = AdminClient({"bootstrap.servers": dst.bootstrap_servers})
    src_admin = AdminClient({"bootstrap.servers": src.bootstrap_servers})
    with running:
        wait_for(lambda: "orders" in dst.topics(), 20, "the target topic")
        assert len(ends(dst, "orders")) == 6
        configs = topic_configs(dst_admin, "orders")
        assert configs == {"retention.ms": "3600000", "cleanup.policy": "compact"}
        wait_for(lambda: running.delivered() >= 300, 30, "300 deliveries")

        # A config changed on the source reaches the target.
        src_admin.incremental_alter_configs(
            [
                ConfigResource(
                    ResourceType.TOPIC,
                    "orders",
                    incremental_configs=[
                        ConfigEntry(
                            "retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET
                        )
                    ],
                )
            ]
        )[ConfigResource(ResourceType.TOPIC, "orders")].result()
        wait_for(
            lambda: topic_configs(dst_admin, "orders").get("retention.ms") == "7200000",
            20,
            "the changed retention.ms on the target",
        )

        # Partitions added on the source appear on the target, and their messages keep
        # their numbers.
        src_admin.create_partitions([NewPartitions("orders", 8)])["orders"].result()
        wait_for(lambda: len(ends(dst, "orders")) == 8, 20, "8 partitions on the target")
        produce(src, "orders", range(8), 50, "b")
        wait_for(lambda: running.delivered() >= 700, 40, "700 deliveries")
        # Replication latency and record age per topic, as MirrorMaker 2's metrics: the
        # records were written before the mirror read them, so both are positive.
        wait_for(
            lambda: (
                registry.get_sample_value(
                    "failover_mirror_replication_latency_ms", {"topic": "orders"}
                )
                is not None
            ),
            5,
            "the latency metric",
        )
        latency = registry.get_sample_value(
            "failover_mirror_replication_latency_ms", {"topic": "orders"}
        )
        age = registry.get_sample_value("failover_mirror_record_age_ms", {"topic": "orders"})
        assert latency is not None
        assert age is not None
        assert 0 < latency < 60_000
        assert 0 < age < 60_000
        status = running.stop()
    assert status.failed == 0
    assert status.rerouted == 0
    assert dict(status.replication_latency_ms)["orders"] > 0
    assert "latency " in format_status(status)

    # Every message on its source partition number, in source order, each exactly once.
    target = read_all(dst, "orders")
    assert sorted(target) == list(range(8))
    for p, messages in target.items():
        where = [source_of(m) for m in messages]
        assert all(t == "orders" and sp == p for t, sp, _ in where), f"partition {p}"
        offsets = [o for _, _, o in where]
        assert offsets == list(range(ends(src, "orders")[p])), f"partition {p}"
    assert committed(src, "sync", "orders", 8) == ends(src, "orders")


def test_preserve_mode_routes_around_stopped_target_brokers_and_returns_after() -> None:
    with Cluster(brokers=3) as src, Cluster(brokers=5, config=FAST) as dst:
        src.create_topic("events", partitions=12, replication_factor=3)
        running = RunningMirror(options(src, dst, "fault", topic_replication_factor=3))
        with running:
            produce(src, "events", range(12), 100, "before")
            wait_for(lambda: running.delivered() >= 1200, 30, "1200 deliveries")
            down = {s.partition for s in dst.describe("events") if {4, 5} <= set(s.replicas)}
            assert down, "some target partitions must have replicas on both 4 and 5"
            led = {s.partition for s in dst.describe("events") if s.leader in (4, 5)}
            dst.stop_broker(4)
            dst.stop_broker(5)
            wait_for(
                lambda: {s.partition for s in dst.describe("events") if len(s.isr) < 2} == down,
                10,
                f"partitions {down} under min ISR",
            )
            leo_at_fault = {p: dst.partition_state("events", p).log_end_offset for p in down}
            produce(src, "events", range(12), 100, "during")
            wait_for(lambda: running.delivered() >= 2400, 60, "2400 deliveries during the fault")
            assert {
                p: dst.partition_state("events", p).log_end_offset for p in down
            } == leo_at_fault, "degraded partitions took messages while under min ISR"
            rerouted = running.latest.rerouted if running.latest else 0
            assert rerouted >= 100 * len(down)

            dst.start_broker(4)
            dst.start_broker(5)
            wait_for(
                lambda: all(len(s.isr) == 3 for s in dst.describe("events")),
                30,
                "the ISR to recover",
            )
            time.sleep(3)  # the producer's next metadata refresh sees it
            produce(src, "events", range(12), 100, "after")
            wait_for(lambda: running.delivered() >= 3600, 60, "3600 deliveries")
            status = running.stop()
        assert status.failed == 0
        target = read_all(dst, "events")

    by_payload: dict[bytes, list[tuple[int, tuple[str, int, int]]]] = {}
    for p, messages in target.items():
        for m in messages:
            by_payload.setdefault(m.value(), []).append((p, source_of(m)))
    expected = {
        b"%s-%d-%d" % (tag, p, i)
        for tag in (b"before", b"during", b"after")
        for p in range(12)
        for i in range(100)
    }
    assert set(by_payload) == expected, "a source message is missing on the target"
    away = {v for v, places in by_payload.items() if all(tp != sp for tp, (_, sp, _) in places)}
    # Messages written while the brokers were down and meant for a degraded partition went
    # elsewhere, and so may those meant for a partition the stopped brokers led (left when the
    # client failed to connect to its leader, until the metadata showed a new one); after
    # recovery every message is on its own partition number.
    degraded = {b"during-%d-%d" % (p, i) for p in down for i in range(100)}
    assert (
        degraded <= away <= degraded | {b"during-%d-%d" % (p, i) for p in led for i in range(100)}
    )
    assert status.rerouted >= len(away)
    print(
        f"degraded {sorted(down)}, led by 4 or 5 {sorted(led)}; messages away from their "
        f"partition {len(away)}; "
        f"rerouted counted {status.rerouted}; duplicates "
        f"{sum(len(x) for x in by_payload.values()) - len(by_payload)}"
    )


def test_a_target_that_refuses_to_create_the_topic_stops_the_mirror_naming_it(
    pair: tuple[Cluster, Cluster],
) -> None:
    src, dst = pair
    src.create_topic("payments", partitions=3, replication_factor=3)
    produce(src, "payments", range(3), 10, "x")
    mirror = Mirror(options(src, dst, "refused", topic_replication_factor=5))
    with pytest.raises(TopicSyncError) as caught:
        mirror.run()
    text = str(caught.value)
    assert "refused to create topic 'payments'" in text
    assert "INVALID_REPLICATION_FACTOR" in text
    assert "--topic-replication-factor" in text
    assert "payments" not in dst.topics()
    assert committed(src, "refused", "payments", 3) == {0: -1001, 1: -1001, 2: -1001}


def test_preserve_mode_refuses_a_target_with_fewer_partitions_than_its_source(
    pair: tuple[Cluster, Cluster],
) -> None:
    src, dst = pair
    src.create_topic("clicks", partitions=6, replication_factor=3)
    dst.create_topic("clicks", partitions=4, replication_factor=3)
    produce(src, "clicks", range(6), 10, "x")
    mirror = Mirror(options(src, dst, "short", sync_topics=False, partitioning="preserve"))
    with pytest.raises(TopicSyncError) as caught:
        mirror.run()
    text = str(caught.value)
    assert "target topic 'clicks' has 4 partitions and its source 'clicks' has 6" in text
    assert "--partitioning key" in text
    assert sum(ends(dst, "clicks").values()) == 0
    assert committed(src, "short", "clicks", 6) == dict.fromkeys(range(6), -1001)


def read_half(cluster: Cluster, group: str, topic: str, upto: int, partitions: int) -> set[bytes]:
    """A consumer group reads ``topic`` on ``cluster`` up to offset ``upto`` of each partition
    and commits there; returns the payloads it read."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": group,
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    seen: set[bytes] = set()
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        position = dict.fromkeys(range(partitions), 0)
        deadline = time.monotonic() + 30
        while any(at < upto for at in position.values()):
            assert time.monotonic() < deadline, "the group could not read its half"
            for msg in consumer.consume(500, 0.5):
                p, offset = msg.partition(), msg.offset()
                assert p is not None
                assert offset is not None
                if offset < upto:
                    seen.add(msg.value())  # type: ignore[arg-type]
                    position[p] = max(position[p], offset + 1)
                else:
                    consumer.pause([TopicPartition(topic, p)])
        consumer.commit(
            offsets=[TopicPartition(topic, p, upto) for p in range(partitions)],
            asynchronous=False,
        )
    finally:
        consumer.close()
    return seen


def at(consumer: Consumer, tp: TopicPartition) -> int:
    """The consumer's position in ``tp``: where it read to, or its committed offset while it
    has read nothing there (the position is then unknown)."""
    position = consumer.position([tp])[0].offset
    if position >= 0:
        return int(position)
    return int(consumer.committed([tp], 10)[0].offset)


def read_rest(cluster: Cluster, group: str, topic: str) -> list[bytes]:
    """The group subscribes on ``cluster`` and reads from its committed offsets to the end."""
    want = ends(cluster, topic)
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "log_level": 0,
        }
    )
    out: list[bytes] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while True:
            for msg in consumer.consume(500, 0.3):
                assert msg.error() is None, msg.error()
                out.append(msg.value())  # type: ignore[arg-type]
            assigned = consumer.assignment()
            if assigned and all(at(consumer, tp) >= want[tp.partition] for tp in assigned):
                return out
            assert time.monotonic() < deadline, "the group could not read the rest"
    finally:
        consumer.close()


@pytest.mark.parametrize("fault", [False, True], ids=["healthy", "rerouted"])
def test_a_group_moved_with_translate_reads_the_rest_on_the_target_missing_nothing(
    fault: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    from failover_partitioner.mirror.cli import main

    with Cluster(brokers=3) as src, Cluster(brokers=5, config=FAST) as dst:
        src.create_topic("orders", partitions=6, replication_factor=3)
        running = RunningMirror(options(src, dst, "mirror", topic_replication_factor=3))
        with running:
            produce(src, "orders", range(6), 50, "first")
            wait_for(lambda: running.delivered() >= 300, 30, "300 deliveries")
            down: set[int] = set()
            if fault:
                down = {s.partition for s in dst.describe("orders") if {4, 5} <= set(s.replicas)}
                assert down
                dst.stop_broker(4)
                dst.stop_broker(5)
                wait_for(
                    lambda: {s.partition for s in dst.describe("orders") if len(s.isr) < 2} == down,
                    10,
                    "the fault",
                )
            produce(src, "orders", range(6), 50, "second")
            wait_for(lambda: running.delivered() >= 600, 30, "600 deliveries")
            wait_for(
                lambda: committed(src, "mirror", "orders", 6) == ends(src, "orders"),
                30,
                "the mirror's commits",
            )
            status = running.stop()  # (the stop writes the last offset syncs and waits)
        if fault:
            assert status.rerouted >= 50 * len(down)
            dst.start_broker(4)
            dst.start_broker(5)
            wait_for(lambda: all(len(s.isr) == 3 for s in dst.describe("orders")), 30, "recovery")

        # The application's group read three quarters of each source partition.
        read_on_source = read_half(src, "app", "orders", 75, 6)
        args = ["--source", src.bootstrap_servers, "--target", dst.bootstrap_servers]
        capsys.readouterr()
        # translate learns the mirror's provenance format from its offset syncs.
        assert main(["translate", *args, "--group", "app", "--commit", "--json"]) == 0
        rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert len(rows) == 6
        promised = sum(r["rereads"] for r in rows)
        rest = read_rest(dst, "app", "orders")

        # An unknown group: a clear error, nothing committed.
        assert main(["translate", *args, "--group", "nobody"]) == 1
        assert "consumer group 'nobody' has no committed offset" in capsys.readouterr().err

    everything = {
        b"%s-%d-%d" % (tag, p, i)
        for tag in (b"first", b"second")
        for p in range(6)
        for i in range(50)
    }
    assert read_on_source | set(rest) == everything, "the moved group missed messages"
    again = [v for v in rest if v in read_on_source]
    with capsys.disabled():
        print(f"fault={fault}: re-read {len(again)} (promised {promised}); rows {rows}")
    assert len(again) == promised
    if not fault:
        assert promised == 0  # preserve mode, healthy: each target partition is its source's


def test_a_crashed_target_leader_does_not_stall_the_fast_lane() -> None:
    """A target broker that crashes leads its partitions, in the metadata, until the controller
    fences it (30 s here; the leaders of the others drop it from their ISR after a second).
    The fast lane's client fails to connect to it; that failure reaches the failover producer,
    which leaves those partitions, so the mirror turns the lane off and sends the lane's
    unsent messages through the failover producer, rather than wait for them until
    message.timeout.ms (10 s), and again, until the fencing. Nothing is lost; after the
    restart everything is there."""
    slow_fence = {"broker.session.timeout.ms": "30000", "replica.lag.time.max.ms": "1000"}
    with Cluster(brokers=3) as src, Cluster(brokers=3, config=slow_fence) as dst:
        src.create_topic("events", partitions=12, replication_factor=3)
        running = RunningMirror(
            options(src, dst, "crash", topic_replication_factor=3, partitioning="preserve")
        )
        with running:
            produce(src, "events", range(12), 100, "before")
            wait_for(lambda: running.delivered() >= 1200, 30, "1200 deliveries")
            led = {s.partition for s in dst.describe("events") if s.leader == 2}
            assert led, "broker 2 must lead some target partitions"
            dst.stop_broker(2)
            stopped = time.monotonic()
            produce(src, "events", range(12), 100, "during")
            wait_for(lambda: running.delivered() >= 2400, 60, "2400 deliveries during the crash")
            took = time.monotonic() - stopped
            # The metadata still names broker 2: only the failed connection told.
            assert {s.partition for s in dst.describe("events") if s.leader == 2} == led
            # 1.3 s here; the lane waiting its messages out would take message.timeout.ms (10 s)
            assert took < 8, f"the mirror took {took:.1f} s to deliver around the crashed leader"
            dst.start_broker(2)
            status = running.stop()
        assert status.failed == 0
        target = read_all(dst, "events")
    values = {m.value() for messages in target.values() for m in messages}
    assert values == {
        b"%s-%d-%d" % (tag, p, i)
        for tag in (b"before", b"during")
        for p in range(12)
        for i in range(100)
    }
    # Preserve mode: only the crashed leader's partitions sent messages elsewhere (those the
    # lane took back from the others went to their own partition numbers again).
    away = {
        source_of(m)[1] for p, messages in target.items() for m in messages if source_of(m)[1] != p
    }
    assert away <= led
    print(
        f"led by broker 2 {sorted(led)}; delivered around it in {took:.2f} s; "
        f"partitions with messages placed away {sorted(away)}; rerouted {status.rerouted}"
    )


def test_a_stop_past_the_drain_timeout_reports_what_the_lane_gave_up_and_closes_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The target's followers slowed by 5 s (acks=all waits for them) while the fast lane
    carries messages, then a stop with a drain timeout of 0.5 s: the lane's messages are
    purged and handed back, told in the log as undelivered, none of them committed (every
    source offset below the committed one is on the target), and the lane's client is closed,
    so that its threads and connections do not outlive the run."""
    slow_acks = {"min.insync.replicas": "2", "replica.lag.time.max.ms": "60000"}
    with Cluster(brokers=1) as src, Cluster(brokers=3, config=slow_acks) as dst:
        src.create_topic("events", partitions=6, replication_factor=1)
        dst.create_topic("events", partitions=6, replication_factor=3)
        lanes: list[Producer] = []

        def lane_factory(conf: dict[str, Any]) -> Producer:
            lanes.append(Producer(conf))
            return lanes[-1]

        opts = options(src, dst, "lane-stop", drain_timeout_s=0.5, offset_syncs_topic=None)
        running = RunningMirror(opts, lane_factory=lane_factory)
        with running, caplog.at_level(logging.WARNING, logger="failover_partitioner.mirror"):
            produce(src, "events", range(6), 300, "before")
            wait_for(lambda: running.delivered() >= 1800, 30, "1800 deliveries")
            for broker in (1, 2, 3):
                dst.slow_broker(broker, 5000)
            # The lane takes these; they are acknowledged 5 s later at the earliest.
            produce(src, "events", range(6), 100, "slow")
            wait_for(lambda: len(lanes[0]) >= 100, 10, "the lane to hold 100 messages")
            status = running.stop()
        for broker in (1, 2, 3):
            dst.slow_broker(broker, 0)
        assert len(lanes) == 1
        with pytest.raises(RuntimeError, match="closed"):
            lanes[0].flush(0)
        told = re.search(
            r"(\d+) messages on the fast lane were not delivered by shutdown", caplog.text
        )
        assert told is not None, f"{status}\n{caplog.text}"
        assert 0 < int(told.group(1)) <= status.in_flight
        done = committed(src, "lane-stop", "events", 6)
        assert sum(done.values()) == status.delivered < 2400
        # What was given up may have been written anyway; wait for the target to settle.
        time.sleep(1)
        on_target: dict[int, set[int]] = defaultdict(set)
        for messages in read_all(dst, "events").values():
            for m in messages:
                _, partition, offset = source_of(m)
                on_target[partition].add(offset)
        for partition, offset in done.items():
            missing = set(range(max(offset, 0))) - on_target[partition]
            assert not missing, f"events[{partition}]: committed past {sorted(missing)[:10]}"
    print(
        f"the lane gave up {told.group(1)} messages; delivered and committed {status.delivered}, "
        f"in flight at the end {status.in_flight}"
    )


def test_one_cluster_never_mirrors_what_the_rename_could_have_written() -> None:
    """Source and target one cluster, --rename 'copy.{topic}': copy.* is the mirror's output,
    whether written by an earlier run or by this one for a source topic deleted since; none of
    it is copied again (to copy.copy.*)."""
    with Cluster(brokers=1) as cluster:
        cluster.create_topic("orders", partitions=1, replication_factor=1)
        cluster.create_topic("copy.earlier", partitions=1, replication_factor=1)
        produce(cluster, "orders", range(1), 5, "o")
        produce(cluster, "copy.earlier", range(1), 5, "e")
        opts = options(cluster, cluster, "self-copy", rename="copy.{topic}")
        with RunningMirror(opts) as running:
            wait_for(lambda: running.delivered() >= 5, 60, "orders copied")
            cluster.delete_topic("orders")
            time.sleep(3)  # several topic refreshes (every 0.5 s)
            running.stop()
        assert "copy.orders" in cluster.topics()
        assert not [t for t in cluster.topics() if t.startswith("copy.copy.")], cluster.topics()


def test_one_cluster_named_by_two_bootstrap_lists_is_told_by_its_cluster_id() -> None:
    """All brokers as the source, one of them as the target, names kept: the same cluster,
    which the mirror would copy onto itself forever. Refused at start, naming the cluster id."""
    with Cluster(brokers=2) as cluster:
        cluster.create_topic("t", partitions=1, replication_factor=2)
        produce(cluster, "t", range(1), 5, "t")
        first = cluster.bootstrap_servers.split(",")[0]
        assert first != cluster.bootstrap_servers
        opts = MirrorOptions(
            source_bootstrap=cluster.bootstrap_servers,
            target_bootstrap=first,
            group_id="alias",
            consumer_config=CONSUMER,
            status_interval_s=0.2,
        )
        running = RunningMirror(opts)
        running.thread.join(30)
        if running.thread.is_alive():
            running.mirror.stop()
            running.thread.join(30)
            pytest.fail("the mirror started copying the cluster onto itself")
        assert isinstance(running.error, MirrorConfigError), running.error
        assert "same cluster" in str(running.error)
        assert "cluster id" in str(running.error)
        assert sum(ends(cluster, "t").values()) == 5


def test_a_message_the_producer_ends_inside_produce_stops_the_mirror_naming_it() -> None:
    """A failure the failover producer reports inside produce() (here: a target topic that does
    not exist, with no propagation wait), while the mirror's span is still open: the mirror
    still finds the source message, stops at once and names it (it used to die on a bare
    StopIteration raised in the delivery callback, 30 s later)."""
    from failover_partitioner.mirror import MessageFailedError
    from failover_partitioner.producer import FailoverProducer

    with (
        Cluster(brokers=3) as src,
        Cluster(brokers=3, config={"auto.create.topics.enable": False}) as dst,
    ):
        src.create_topic("events", partitions=3, replication_factor=3)
        produce(src, "events", range(3), 100, "e")
        mirror = Mirror(
            options(src, dst, "inside", sync_topics=False, offset_syncs_topic=None, poll_batch=10),
            producer_factory=lambda conf: FailoverProducer(conf, topic_propagation_max_s=0),
        )
        started = time.monotonic()
        with pytest.raises(MessageFailedError) as caught:
            mirror.run()
        elapsed = time.monotonic() - started
        error = caught.value
        assert error.target_topic == "events"
        assert "UNKNOWN_TOPIC_OR_PART" in error.error
        assert f"source message events[{error.partition}]@0" in str(error)
        assert elapsed < 10, f"stopped after {elapsed:.1f} s"
        # Nothing was delivered: no partition is committed past its first message.
        assert all(o <= 0 for o in committed(src, "inside", "events", 3).values())
