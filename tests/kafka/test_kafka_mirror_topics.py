"""failover-mirror's topic sync and partition-preserving placement on real Apache Kafka (issue 21).

One cluster, source and target topics side by side (``rename='copy.{topic}'``), the mirror
in this process with the real clients it builds itself (consumer, producers, admin clients).

1. A new source topic (6 partitions, retention.ms and cleanup.policy set) appears as its copy
   with the same partition count and those configs; a config changed on the source reaches the
   copy; partitions added to the source appear on the copy; every message sits on its source
   partition number in source order.
2. Preserve mode with target brokers 4 and 5 paused mid-copy: nothing lost, the degraded
   partitions' messages go elsewhere and are counted, and after recovery placement is p -> p.
3. A target that refuses to create the topic (a replication factor it cannot place): a clear
   error naming the topic and why, nothing committed.
4. A consumer group that read three quarters of the source, moved with ``failover-mirror
   translate`` after a fault that rerouted messages, reads the rest on the copy with nothing
   missing and exactly the re-reads the command counted; an unknown group is a clear error.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # the stubs lag the package
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    ResourceType,
)

from failover_partitioner.mirror import Mirror, MirrorOptions, TopicSyncError
from tests.integration.test_mirror_topics_minibroker import (
    RunningMirror,
    at,
    source_of,
    topic_configs,
)
from tests.kafka.support import (
    FAULTY,
    committed,
    degraded,
    group_away_from_faults,
    high_watermarks,
    spread,
    wait_for,
    whole,
)
from tests.realkafka.cluster import KafkaCluster

CONSUMER = {
    "session.timeout.ms": "6000",
    "heartbeat.interval.ms": "500",
    "topic.metadata.refresh.interval.ms": "1000",
}


def options(cluster: KafkaCluster, group: str, source: str, **extra: Any) -> MirrorOptions:
    return MirrorOptions(
        include=re.escape(source),
        source_bootstrap=cluster.bootstrap_servers,
        target_bootstrap=cluster.bootstrap_servers,
        group_id=group,
        rename="copy.{topic}",
        consumer_config=CONSUMER,
        commit_interval_s=0.5,
        status_interval_s=0.2,
        topic_refresh_interval_s=1.0,
        config_sync_interval_s=1.0,
        **extra,
    )


def produce(bootstrap: str, topic: str, partitions: range, per_partition: int, tag: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "log_level": 0})
    for i in range(per_partition):
        for p in partitions:
            producer.produce(topic, b"%s-%d-%d" % (tag.encode(), p, i), key=b"k%d" % i, partition=p)
        producer.poll(0)
    assert producer.flush(60) == 0


def read_by_partition(bootstrap: str, topic: str, partitions: int) -> dict[int, list[Any]]:
    ends = high_watermarks(bootstrap, topic, partitions)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    out: dict[int, list[Any]] = {p: [] for p in range(partitions)}
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions) if ends[p] > 0])
        deadline = time.monotonic() + 120
        while sum(len(v) for v in out.values()) < sum(ends.values()):
            assert time.monotonic() < deadline, "could not read the copy back"
            for msg in consumer.consume(5000, 0.5):
                assert msg.error() is None, msg.error()
                out[msg.partition()].append(msg)  # type: ignore[index]
        return out
    finally:
        consumer.close()


def configs_of(admin: Any, topic: str) -> dict[str, str]:
    """The topic's own settings, or none while a broker does not know the topic yet."""
    try:
        return topic_configs(admin, topic)
    except KafkaException:
        return {}


def partitions_of(admin: Any, topic: str) -> int:
    """The topic's partition count in the metadata (0 while unknown)."""
    md = admin.list_topics(topic, timeout=10).topics[topic]
    return 0 if md.error is not None else len(md.partitions)


def test_new_topic_is_copied_with_partitions_and_configs_and_follows_changes(
    kafka_cluster: KafkaCluster,
) -> None:
    cluster = kafka_cluster
    bootstrap = cluster.bootstrap_servers
    source = f"orders-{uuid.uuid4().hex[:8]}"
    target = f"copy.{source}"
    cluster.create_topic(
        source,
        partitions=6,
        replication_factor=3,
        config={"retention.ms": "3600000", "cleanup.policy": "compact"},
    )
    produce(bootstrap, source, range(6), 50, "a")
    admin = cluster.admin()
    running = RunningMirror(options(cluster, f"sync-{source}", source, topic_replication_factor=3))
    try:
        wait_for(lambda: partitions_of(admin, target) == 6, 60, f"{target} with 6 partitions")
        wanted = {"retention.ms": "3600000", "cleanup.policy": "compact"}
        wait_for(lambda: configs_of(admin, target) == wanted, 30, f"{target}'s configs")
        assert topic_configs(admin, target) == wanted
        wait_for(lambda: running.delivered() >= 300, 60, "300 deliveries")

        resource = ConfigResource(
            ResourceType.TOPIC,
            source,
            incremental_configs=[
                ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET)
            ],
        )
        admin.incremental_alter_configs([resource])[resource].result()
        wait_for(
            lambda: configs_of(admin, target).get("retention.ms") == "7200000",
            60,
            "the changed retention.ms on the copy",
        )

        admin.create_partitions([NewPartitions(source, 8)])[source].result()
        wait_for(lambda: partitions_of(admin, target) == 8, 60, "8 partitions on the copy")
        produce(bootstrap, source, range(8), 50, "b")
        wait_for(lambda: running.delivered() >= 700, 90, "700 deliveries")
        status = running.stop()
    except BaseException:
        running.mirror.stop()
        raise
    assert status.failed == 0
    assert status.rerouted == 0
    source_ends = high_watermarks(bootstrap, source, 8)
    copy = read_by_partition(bootstrap, target, 8)
    for p, messages in copy.items():
        where = [source_of(m) for m in messages]
        assert all(t == source and sp == p for t, sp, _ in where), f"partition {p}"
        assert [o for _, _, o in where] == list(range(source_ends[p])), f"partition {p}"
    assert committed(bootstrap, f"sync-{source}", source, 8) == source_ends


def test_preserve_mode_routes_around_paused_target_brokers_and_returns_after(
    kafka_cluster: KafkaCluster,
) -> None:
    cluster = kafka_cluster
    bootstrap = cluster.bootstrap_servers
    source = f"events-{uuid.uuid4().hex[:8]}"
    target = f"copy.{source}"
    # The source on brokers 1-3 only, so pausing 4 and 5 degrades the copy alone.
    cluster.create_topic(
        source, assignment=[[(p + i) % 3 + 1 for i in range(3)] for p in range(12)]
    )
    assignment = spread()
    cluster.create_topic(target, assignment=assignment)
    down = {p for p, replicas in enumerate(assignment) if set(FAULTY) <= set(replicas)}
    group = group_away_from_faults(cluster, "preserve")
    running = RunningMirror(options(cluster, group, source))
    try:
        produce(bootstrap, source, range(12), 100, "before")
        wait_for(lambda: running.delivered() >= 1200, 60, "1200 deliveries")
        for broker in FAULTY:
            cluster.pause(broker)
        wait_for(lambda: degraded(cluster, target) == down, 60, f"partitions {down} degraded")
        produce(bootstrap, source, range(12), 100, "during")
        wait_for(lambda: running.delivered() >= 2400, 120, "2400 deliveries during the fault")
        for broker in FAULTY:
            cluster.resume(broker)
        wait_for(lambda: whole(cluster, target), 120, "the copy's ISR to recover")
        time.sleep(5)  # the producer's next metadata refresh sees it
        produce(bootstrap, source, range(12), 100, "after")
        wait_for(lambda: running.delivered() >= 3600, 120, "3600 deliveries")
        status = running.stop()
    except BaseException:
        running.mirror.stop()
        raise
    assert status.failed == 0
    copy = read_by_partition(bootstrap, target, 12)
    places: dict[bytes, list[tuple[int, int]]] = {}
    for p, messages in copy.items():
        for m in messages:
            places.setdefault(m.value(), []).append((p, source_of(m)[1]))
    expected = {
        b"%s-%d-%d" % (tag, p, i)
        for tag in (b"before", b"during", b"after")
        for p in range(12)
        for i in range(100)
    }
    assert set(places) == expected, "a source message is missing on the copy"
    away = {v for v, ps in places.items() if all(tp != sp for tp, sp in ps)}
    # Every message of a degraded partition written during the fault went elsewhere. A
    # partition led by a paused broker is briefly leaderless too (until the controller fences
    # that broker), so some of its messages may have moved as well; nothing else did, and
    # nothing after recovery.
    assert {b"during-%d-%d" % (p, i) for p in down for i in range(100)} <= away
    led_by_paused = {p for p, replicas in enumerate(assignment) if replicas[0] in FAULTY}
    assert away <= {b"during-%d-%d" % (p, i) for p in down | led_by_paused for i in range(100)}
    assert status.rerouted >= len(away)
    duplicates = sum(len(x) for x in places.values()) - len(places)
    print(
        f"degraded {sorted(down)}; away from their partition {len(away)}; rerouted counted "
        f"{status.rerouted}; duplicates {duplicates}"
    )
    assert committed(bootstrap, group, source, 12) == high_watermarks(bootstrap, source, 12)


def test_a_target_refusing_to_create_the_topic_stops_the_mirror_naming_it(
    kafka_cluster: KafkaCluster,
) -> None:
    cluster = kafka_cluster
    source = f"payments-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(source, partitions=3, replication_factor=3)
    produce(cluster.bootstrap_servers, source, range(3), 10, "x")
    group = f"refused-{source}"
    mirror = Mirror(options(cluster, group, source, topic_replication_factor=7))
    try:
        mirror.run()
    except TopicSyncError as exc:
        text = str(exc)
    else:
        raise AssertionError("the mirror ran although the target refused the topic")
    assert f"refused to create topic 'copy.{source}'" in text
    assert "INVALID_REPLICATION_FACTOR" in text
    assert f"copy.{source}" not in cluster.admin().list_topics(timeout=10).topics
    assert committed(cluster.bootstrap_servers, group, source, 3) == dict.fromkeys(range(3), -1001)


@pytest.mark.slow  # ~100 s; the same on minibroker runs by default
def test_a_group_moved_with_translate_after_a_rerouting_fault_misses_nothing(
    kafka_cluster: KafkaCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    from failover_partitioner.mirror.cli import main

    cluster = kafka_cluster
    bootstrap = cluster.bootstrap_servers
    source = f"moves-{uuid.uuid4().hex[:8]}"
    target = f"copy.{source}"
    cluster.create_topic(
        source, assignment=[[(p + i) % 3 + 1 for i in range(3)] for p in range(12)]
    )
    assignment = spread()
    cluster.create_topic(target, assignment=assignment)
    down = {p for p, replicas in enumerate(assignment) if set(FAULTY) <= set(replicas)}
    mirror_group = group_away_from_faults(cluster, "mirror")
    running = RunningMirror(options(cluster, mirror_group, source))
    try:
        produce(bootstrap, source, range(12), 50, "first")
        wait_for(lambda: running.delivered() >= 600, 60, "600 deliveries")
        for broker in FAULTY:
            cluster.pause(broker)
        wait_for(lambda: degraded(cluster, target) == down, 60, f"partitions {down} degraded")
        produce(bootstrap, source, range(12), 50, "second")
        wait_for(lambda: running.delivered() >= 1200, 120, "1200 deliveries")
        for broker in FAULTY:
            cluster.resume(broker)
        wait_for(lambda: whole(cluster, target), 120, "recovery")
        wait_for(
            lambda: (
                committed(bootstrap, mirror_group, source, 12)
                == high_watermarks(bootstrap, source, 12)
            ),
            60,
            "the mirror's commits",
        )
        time.sleep(1.5)  # a periodic commit writes the last offset syncs
        status = running.stop()
    except BaseException:
        running.mirror.stop()
        raise
    assert status.rerouted >= 50 * len(down)

    group = f"app-{source}"
    read_on_source = read_upto(bootstrap, group, source, 75, 12)
    args = ["--source", bootstrap, "--target", bootstrap, "--rename", "copy.{topic}"]
    capsys.readouterr()
    code = main(
        ["translate", *args, "--include", re.escape(source), "--group", group, "--commit", "--json"]
    )
    assert code == 0, capsys.readouterr().err
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 12
    promised = sum(r["rereads"] for r in rows)
    rest = read_rest(bootstrap, group, target, 12)
    everything = {
        b"%s-%d-%d" % (tag, p, i)
        for tag in (b"first", b"second")
        for p in range(12)
        for i in range(50)
    }
    assert read_on_source | set(rest) == everything, "the moved group missed messages"
    again = [v for v in rest if v in read_on_source]
    with capsys.disabled():
        print(
            f"degraded {sorted(down)}; rerouted {status.rerouted}; re-read {len(again)} "
            f"(promised {promised})"
        )
    assert len(again) == promised

    assert (
        main(["translate", *args, "--include", re.escape(source), "--group", f"nobody-{source}"])
        == 1
    )
    assert "has no committed offset" in capsys.readouterr().err


def read_upto(bootstrap: str, group: str, topic: str, upto: int, partitions: int) -> set[bytes]:
    """The group reads each partition of ``topic`` up to ``upto`` and commits there."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    seen: set[bytes] = set()
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        done: set[int] = set()
        deadline = time.monotonic() + 60
        while len(done) < partitions:
            assert time.monotonic() < deadline, "the group could not read its part"
            for msg in consumer.consume(1000, 0.5):
                p, offset = msg.partition(), msg.offset()
                assert p is not None
                assert offset is not None
                if offset < upto:
                    seen.add(msg.value())  # type: ignore[arg-type]
                if offset >= upto - 1:
                    done.add(p)
                    consumer.pause([TopicPartition(topic, p)])
        consumer.commit(
            offsets=[TopicPartition(topic, p, upto) for p in range(partitions)], asynchronous=False
        )
    finally:
        consumer.close()
    return seen


def read_rest(bootstrap: str, group: str, topic: str, partitions: int) -> list[bytes]:
    """The group subscribes and reads from its committed offsets to the current ends."""
    ends = high_watermarks(bootstrap, topic, partitions)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "log_level": 0,
        }
    )
    out: list[bytes] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 90
        while True:
            for msg in consumer.consume(1000, 0.5):
                assert msg.error() is None, msg.error()
                out.append(msg.value())  # type: ignore[arg-type]
            assigned = consumer.assignment()
            if len(assigned) == partitions and all(
                at(consumer, tp) >= ends[tp.partition] for tp in assigned
            ):
                return out
            assert time.monotonic() < deadline, "the group could not read the rest"
    finally:
        consumer.close()
