"""The reliability scenarios that need no fault injection, against real Apache Kafka.

The asyncio producer delivers everything it accepted, and the mirror copies a topic (to a
renamed one in the same cluster) and commits exactly what it delivered. Faults, outages and
hostile input need control over the brokers and run against minibroker in tests/integration.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]  # re-exported at runtime, not in its stub

from failover_partitioner.aio import AsyncFailoverProducer
from failover_partitioner.mirror import Mirror, MirrorOptions, MirrorStatus
from tests.interop.conftest import RealKafka

COUNT = 5_000
PARTITIONS = 6


def _topics(bootstrap: str, *names: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    brokers = len(admin.list_topics(timeout=10).brokers)
    futures = admin.create_topics(
        [NewTopic(n, num_partitions=PARTITIONS, replication_factor=min(3, brokers)) for n in names]
    )
    for future in futures.values():
        future.result(timeout=30)


def _values(bootstrap: str, topic: str, expected: int, timeout_s: float = 60) -> list[bytes]:
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
                if msg.error() is None and isinstance(value, bytes):
                    values.append(value)
        end = time.monotonic() + 1.0  # anything more would be a duplicate: look for it
        while time.monotonic() < end:
            values.extend(
                v
                for msg in consumer.consume(1000, 0.2)
                if msg.error() is None and isinstance(v := msg.value(), bytes)
            )
    finally:
        consumer.close()
    return values


def test_the_async_producer_delivers_everything_to_real_kafka(real_kafka: RealKafka) -> None:
    topic = f"interop-aio-{uuid.uuid4().hex[:8]}"
    _topics(real_kafka.bootstrap_servers, topic)
    sent = [b"a-%d" % i for i in range(COUNT)]

    async def run() -> list[Any]:
        async with AsyncFailoverProducer(
            bootstrap_servers=real_kafka.bootstrap_servers
        ) as producer:
            futures = [await producer.send(topic, value) for value in sent]
            assert await producer.flush(60) == 0
            return await asyncio.gather(*futures, return_exceptions=True)

    results = asyncio.run(run())
    assert [r for r in results if isinstance(r, BaseException)] == []
    assert sorted(_values(real_kafka.bootstrap_servers, topic, COUNT)) == sorted(sent)


def test_the_mirror_copies_a_topic_and_commits_what_it_delivered(real_kafka: RealKafka) -> None:
    bootstrap = real_kafka.bootstrap_servers
    source = f"interop-src-{uuid.uuid4().hex[:8]}"
    _topics(bootstrap, source, f"copy.{source}")
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    sent = {b"s-%d" % i for i in range(COUNT)}
    for value in sent:
        producer.produce(source, value)
    assert producer.flush(60) == 0

    group = f"interop-mirror-{uuid.uuid4().hex[:8]}"
    mirror = Mirror(
        MirrorOptions(
            source_bootstrap=bootstrap,
            target_bootstrap=bootstrap,
            group_id=group,
            include=source,
            rename="copy.{topic}",
            commit_interval_s=0.5,
            status_interval_s=0.2,
        )
    )
    latest: list[MirrorStatus] = []
    thread = threading.Thread(target=mirror.run, kwargs={"on_status": latest.append})
    thread.start()
    try:
        deadline = time.monotonic() + 90
        while not latest or latest[-1].delivered < COUNT or latest[-1].uncommitted:
            assert time.monotonic() < deadline, latest[-1:]
            assert thread.is_alive(), "the mirror stopped"
            time.sleep(0.2)
    finally:
        mirror.stop()
        thread.join(60)

    assert set(_values(bootstrap, f"copy.{source}", COUNT)) == sent
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        offsets = consumer.committed([TopicPartition(source, p) for p in range(PARTITIONS)], 10)
        assert sum(tp.offset for tp in offsets if tp.offset > 0) == COUNT
    finally:
        consumer.close()
