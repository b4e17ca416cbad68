"""The integration scenarios against real Apache Kafka (see tests/interop/conftest.py).

These are the same outcomes the minibroker tests assert: every message produced through the
failover producer is consumed back, on whatever real cluster the conftest found. The fault
scenarios on real Kafka are in tests/kafka, on a cluster whose brokers the tests control.
"""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaError
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]  # re-exported at runtime, not in its stub

from failover_partitioner import DeliveryReport, FailoverProducer
from tests.interop.conftest import RealKafka

COUNT = 5_000


def _create_topic(bootstrap: str, partitions: int = 6) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    brokers = len(admin.list_topics(timeout=10).brokers)
    name = f"interop-{uuid.uuid4().hex[:8]}"
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=min(3, brokers))]
    )
    futures[name].result(timeout=30)
    return name


def _consume_all(bootstrap: str, topic: str, expected: int, timeout_s: float = 60) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"interop-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(values) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                value = msg.value()
                if msg.error() is None and value is not None:
                    values.append(value)
    finally:
        consumer.close()
    return values


def test_failover_producer_delivers_everything_to_real_kafka(real_kafka: RealKafka) -> None:
    topic = _create_topic(real_kafka.bootstrap_servers)
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg: DeliveryReport) -> None:
        if err is not None:
            errors.append(err)

    sent = {b"m-%d" % i for i in range(COUNT)}
    with FailoverProducer(
        {"bootstrap.servers": real_kafka.bootstrap_servers, "acks": "all"}
    ) as producer:
        for value in sent:
            producer.produce(topic, value=value, on_delivery=on_delivery)
            producer.poll(0)
        assert producer.flush(60) == 0
    assert errors == []
    assert set(_consume_all(real_kafka.bootstrap_servers, topic, COUNT)) == sent


def test_keyed_messages_land_where_the_java_partitioner_puts_them(real_kafka: RealKafka) -> None:
    from confluent_kafka import murmur2

    topic = _create_topic(real_kafka.bootstrap_servers, partitions=6)
    placed: dict[bytes, int] = {}

    def on_delivery(err: KafkaError | None, msg: DeliveryReport) -> None:
        assert err is None, err
        key = msg.key()
        assert isinstance(key, bytes)
        placed[key] = msg.partition()

    with FailoverProducer(
        {"bootstrap.servers": real_kafka.bootstrap_servers, "acks": "all"}
    ) as producer:
        for i in range(300):
            producer.produce(topic, value=b"v", key=b"key-%d" % i, on_delivery=on_delivery)
        assert producer.flush(60) == 0
    assert placed == {k: murmur2(k, 6) for k in placed}
    assert len(placed) == 300
