"""confluent-kafka (librdkafka 2.16) against minibroker over 127.0.0.1."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from minibroker import Cluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with Cluster(brokers=3, config={"min.insync.replicas": "2"}) as running:
        yield running


def _produce(cluster: Cluster, topic: str, count: int, **config: object) -> list[Message]:
    delivered: list[Message] = []
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            errors.append(err)
        else:
            delivered.append(msg)

    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, **config})
    for i in range(count):
        producer.produce(
            topic, value=f"m{i}".encode(), key=str(i).encode(), on_delivery=on_delivery
        )
    assert producer.flush(30) == 0
    assert errors == []
    return delivered


def _consume_assigned(cluster: Cluster, topic: str, partitions: int, count: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": "assign-only",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < count and time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.5):
                assert msg.error() is None, msg.error()
                values.append(msg.value() or b"")
        return values
    finally:
        consumer.close()


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_produce_with_each_acks_setting_is_consumed_back(cluster: Cluster, acks: str) -> None:
    topic = f"acks-{acks}"
    cluster.create_topic(topic, partitions=3, replication_factor=3)
    _produce(cluster, topic, 300, acks=acks, **{"linger.ms": 5})
    values = _consume_assigned(cluster, topic, 3, 300)
    assert sorted(values) == sorted(f"m{i}".encode() for i in range(300))
    states = [cluster.partition_state(topic, p) for p in range(3)]
    assert sum(s.high_watermark for s in states) == 300
    for state in states:
        # every replica holds the committed data in its own log
        assert all(end == state.high_watermark for _, end in state.replica_log_end_offsets)


def test_acks_all_offsets_are_dense_per_partition(cluster: Cluster) -> None:
    cluster.create_topic("dense", partitions=2, replication_factor=3)
    delivered = _produce(cluster, "dense", 500, acks="all", **{"linger.ms": 2})
    for partition in (0, 1):
        offsets = sorted(m.offset() or 0 for m in delivered if m.partition() == partition)
        assert offsets == list(range(len(offsets)))


def test_idempotent_producer_delivers_each_message_once(cluster: Cluster) -> None:
    cluster.create_topic("idem", partitions=3, replication_factor=3)
    _produce(cluster, "idem", 1000, **{"enable.idempotence": True, "linger.ms": 1})
    values = _consume_assigned(cluster, "idem", 3, 1000)
    assert sorted(values) == sorted(f"m{i}".encode() for i in range(1000))


def _group_consumer(cluster: Cluster, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 200,
        }
    )


def _poll_until(consumers: list[Consumer], done: object, timeout_s: float = 30) -> list[Message]:
    got: list[Message] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not (callable(done) and done(got)):
        for consumer in consumers:
            for msg in consumer.consume(500, 0.05):
                assert msg.error() is None, msg.error()
                got.append(msg)
    return got


def test_group_of_two_shares_partitions_and_rebalances_when_one_leaves(cluster: Cluster) -> None:
    cluster.create_topic("grouped", partitions=4, replication_factor=3)
    _produce(cluster, "grouped", 200, acks="all")
    first, second = _group_consumer(cluster, "pair"), _group_consumer(cluster, "pair")
    first.subscribe(["grouped"])
    second.subscribe(["grouped"])
    try:
        got = _poll_until([first, second], lambda g: len(g) >= 200)
        assert sorted(m.value() or b"" for m in got) == sorted(f"m{i}".encode() for i in range(200))

        def both_assigned(_: list[Message]) -> bool:
            return len(first.assignment()) == 2 and len(second.assignment()) == 2

        _poll_until([first, second], both_assigned)
        assert both_assigned([])
        second.close()

        def first_has_all(_: list[Message]) -> bool:
            return len(first.assignment()) == 4

        _poll_until([first], first_has_all)
        assert sorted(tp.partition for tp in first.assignment()) == [0, 1, 2, 3]
    finally:
        first.close()


def test_a_group_instance_id_too_long_for_a_member_id_is_refused_alone(cluster: Cluster) -> None:
    # A member id is `<group.instance.id>-<UUID>`, and a Kafka string holds 32,767 bytes: the
    # broker refuses the join (INVALID_REQUEST) rather than admit a member it cannot name in
    # anybody's answers, and the rest of the group is not held up.
    cluster.create_topic("long-instance", partitions=2, replication_factor=3)
    errors: list[KafkaError] = []
    refused = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": "long-instance",
            "group.instance.id": "i" * 32_740,
            "session.timeout.ms": 6000,
            "error_cb": errors.append,
        }
    )
    ordinary = _group_consumer(cluster, "long-instance")
    refused.subscribe(["long-instance"])
    ordinary.subscribe(["long-instance"])
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (errors and len(ordinary.assignment()) == 2):
            for consumer in (refused, ordinary):
                msg = consumer.poll(0.05)
                error = msg.error() if msg is not None else None
                if error is not None:
                    errors.append(error)
        assert sorted(tp.partition for tp in ordinary.assignment()) == [0, 1]
        assert KafkaError.INVALID_REQUEST in {e.code() for e in errors}, errors
        assert refused.assignment() == []
    finally:
        refused.close()
        ordinary.close()


def test_restarted_consumer_resumes_from_its_committed_offset(cluster: Cluster) -> None:
    cluster.create_topic("resume", partitions=1, replication_factor=3)
    _produce(cluster, "resume", 100, acks="all")
    consumer = _group_consumer(cluster, "resumer")
    consumer.subscribe(["resume"])
    try:
        got = _poll_until([consumer], lambda g: len(g) >= 40)
        first_part = sorted(got, key=lambda m: m.offset() or 0)[:40]
        consumer.commit(message=first_part[-1], asynchronous=False)
    finally:
        consumer.close()
    restarted = _group_consumer(cluster, "resumer")
    restarted.subscribe(["resume"])
    try:
        rest = _poll_until([restarted], lambda g: len(g) >= 60)
        assert min(m.offset() or 0 for m in rest) == 40
        assert len(rest) == 60
    finally:
        restarted.close()


def _needs_cramjam(codec: str) -> Any:
    try:
        import cramjam  # type: ignore[import-not-found,unused-ignore]  # noqa: F401
    except ImportError:
        return pytest.param(codec, marks=pytest.mark.skip(reason=f"{codec} needs cramjam"))
    return codec


@pytest.mark.parametrize(
    "compression", ["none", "gzip", *(_needs_cramjam(c) for c in ("snappy", "lz4", "zstd"))]
)
def test_offsets_for_times_finds_the_exact_record_in_a_batch(
    cluster: Cluster, compression: str
) -> None:
    # Kafka answers the first record at or after the timestamp, inside a compressed batch too.
    topic = f"times-{compression}"
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "compression.type": compression,
            "linger.ms": 200,  # the five records go out as one batch
        }
    )
    base_ms = 1_700_000_000_000
    for i in range(5):
        producer.produce(topic, value=b"x" * 100, partition=0, timestamp=base_ms + 10 * i)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "times"})
    try:
        found = [
            consumer.offsets_for_times([TopicPartition(topic, 0, base_ms + t)], timeout=10)[0]
            for t in (0, 15, 20, 31, 100)
        ]
    finally:
        consumer.close()
    assert [tp.offset for tp in found] == [0, 2, 2, 4, -1]


def test_init_transactions_fails_at_once_naming_the_cause(cluster: Cluster) -> None:
    # minibroker has no transactions: the client must say so within a round trip or two, not
    # retry a "coordinator not available" for the whole timeout and blame the coordinator.
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": "tx-refused"}
    )
    started = time.monotonic()
    with pytest.raises(KafkaException) as raised:
        producer.init_transactions(30)
    assert time.monotonic() - started < 5
    error = raised.value.args[0]
    assert error.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert error.fatal()
    assert "does not support transactions" in error.str()
