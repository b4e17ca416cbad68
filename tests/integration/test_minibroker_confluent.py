"""confluent-kafka (librdkafka 2.16) against minibroker over 127.0.0.1."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

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
