"""minibroker speed (issue 3): producer throughput against librdkafka's mock, cluster start time.

(a) One confluent-kafka Producer (acks=all, linger.ms=5, 100-byte values) produces N messages to
    a 4-partition RF=3 topic of an in-process 3-broker minibroker cluster, then flushes; the
    reference is the same producer against librdkafka's mock cluster (3 brokers, C, in the
    client's own threads; topic auto-created with 4 partitions), measured in the same run.
    Target: minibroker / mock >= 0.5.
(b) Starting a 3-broker cluster until all listeners accept: median of several starts, target
    <= 200 ms; the reference is binding and listening on one socket.
"""

from __future__ import annotations

import socket
import statistics
import time

from confluent_kafka import Producer

from harness import Figure
from minibroker import Cluster

ISSUE = 3
VALUE = b"x" * 100
PARTITIONS = 4


def _produce(config: dict[str, object], topic: str, count: int) -> float:
    """Messages per second for produce + flush of ``count`` messages (after a warm-up)."""
    errors: list[object] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    producer = Producer(
        {
            **config,
            "acks": "all",
            "linger.ms": 5,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
        }
    )
    for _ in range(1000):
        producer.produce(topic, VALUE, on_delivery=on_delivery)
    producer.flush(30)
    produce = producer.produce
    poll = producer.poll
    start = time.perf_counter()
    for i in range(count):
        try:
            produce(topic, VALUE, on_delivery=on_delivery)
        except BufferError:
            poll(0.001)
            produce(topic, VALUE, on_delivery=on_delivery)
        if i % 10_000 == 0:
            poll(0)
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - start
    if remaining or errors:
        raise RuntimeError(f"{remaining} undelivered, {len(errors)} errors: {errors[:3]}")
    return count / elapsed


def _minibroker_rate(count: int) -> float:
    with Cluster(brokers=3) as cluster:
        cluster.create_topic("bench", partitions=PARTITIONS, replication_factor=3)
        return _produce({"bootstrap.servers": cluster.bootstrap_servers}, "bench", count)


def _mock_rate(count: int) -> float:
    return _produce(
        {"test.mock.num.brokers": 3, "topic.metadata.refresh.interval.ms": 60_000},
        "bench",
        count,
    )


def _start_ms() -> float:
    start = time.perf_counter()
    cluster = Cluster(brokers=3).start()
    elapsed = time.perf_counter() - start
    cluster.close()
    return elapsed * 1000


def _bind_ms() -> float:
    start = time.perf_counter()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
    return (time.perf_counter() - start) * 1000


def run(quick: bool) -> list[Figure]:
    count = 50_000 if quick else 300_000
    rounds = 1 if quick else 3
    mini = [_minibroker_rate(count) for _ in range(rounds)]
    mock = [_mock_rate(count) for _ in range(rounds)]
    _start_ms()  # warm-up: imports and first-use caches
    starts = [_start_ms() for _ in range(5 if quick else 15)]
    binds = [_bind_ms() for _ in range(15)]
    return [
        Figure(
            issue=ISSUE,
            name="producer msg/s: minibroker vs librdkafka mock (acks=all)",
            value=statistics.median(mini),
            reference=statistics.median(mock),
            unit="msg/s",
            target=0.5,
            note=f"{count} x 100 B, linger.ms=5, RF=3, {PARTITIONS} partitions; "
            f"minibroker {[round(r) for r in mini]}, mock {[round(r) for r in mock]}",
        ),
        Figure(
            issue=ISSUE,
            name="3-broker cluster start, median (ms)",
            value=statistics.median(starts),
            reference=statistics.median(binds),
            unit="ms",
            target=200.0,
            kind="absolute_max",
            note="reference: bind + listen one socket",
        ),
    ]
