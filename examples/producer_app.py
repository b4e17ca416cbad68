"""A producer application: 1,000 orders through FailoverProducer, then read back.

Runs against an embedded minibroker cluster unless BOOTSTRAP names a real one::

    python examples/producer_app.py
    BOOTSTRAP=kafka:9092 python examples/producer_app.py
"""

from __future__ import annotations

import os
import sys
import time

from confluent_kafka import Consumer, KafkaError

from failover_partitioner import DeliveryReport, FailoverProducer
from minibroker import Cluster

TOPIC = "orders"
COUNT = 1000


def produce_orders(bootstrap: str, count: int = COUNT) -> tuple[int, list[KafkaError]]:
    """Produce ``count`` orders; return (messages still undelivered, final errors seen)."""
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg: DeliveryReport) -> None:
        if err is not None:
            errors.append(err)  # after the retry policy gave up; never silent

    with FailoverProducer({"bootstrap.servers": bootstrap, "acks": "all"}) as producer:
        for i in range(count):
            producer.produce(TOPIC, value=b"order %d" % i, on_delivery=on_delivery)
            producer.poll(0)
        undelivered = producer.flush(30)
    return undelivered, errors


def read_back(bootstrap: str, expected: int, timeout_s: float = 30.0) -> set[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "example-reader",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([TOPIC])
    seen: set[bytes] = set()
    try:
        deadline = time.monotonic() + timeout_s
        while len(seen) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.5):
                value = msg.value()
                if msg.error() is None and value is not None:
                    seen.add(value)
    finally:
        consumer.close()
    return seen


def main() -> int:
    bootstrap = os.environ.get("BOOTSTRAP")
    if bootstrap:
        return _run(bootstrap)
    with Cluster(brokers=3, config={"min.insync.replicas": "2"}) as cluster:
        cluster.create_topic(TOPIC, partitions=6, replication_factor=3)
        return _run(cluster.bootstrap_servers)


def _run(bootstrap: str) -> int:
    undelivered, errors = produce_orders(bootstrap)
    seen = read_back(bootstrap, COUNT)
    print(f"undelivered={undelivered} final_errors={len(errors)} read_back={len(seen)}/{COUNT}")
    return 0 if undelivered == 0 and not errors and len(seen) == COUNT else 1


if __name__ == "__main__":
    sys.exit(main())
