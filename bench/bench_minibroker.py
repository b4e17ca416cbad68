"""minibroker speed (issue 3): producer throughput against librdkafka's mock, cluster start time.

(a) One confluent-kafka Producer (acks=all, linger.ms=5, 100-byte values) produces N messages to
    a 4-partition RF=3 topic of an in-process 3-broker minibroker cluster, then flushes; the
    reference is the same producer against librdkafka's mock cluster (3 brokers, C, in the
    client's own threads; topic auto-created with 4 partitions), measured in the same run.
    Target: minibroker / mock >= 0.5.
(b) Starting a 3-broker cluster until all listeners accept: median of several starts, target
    <= 200 ms; the reference is binding and listening on one socket.
(c) Issue 10: the schema check every request passes before kio decodes it, on a Produce v9
    request as librdkafka sends them (4 partitions of 50 x 100-byte records), best of several
    timeit runs; the reference is kio's decoding of the same frame. Target <= 25 us: the
    producer benchmark sends about 150 Produce requests a second, so 25 us each is under 0.5%
    of one core.
"""

from __future__ import annotations

import datetime
import io
import socket
import statistics
import time
import timeit
from collections.abc import Callable

from confluent_kafka import Producer
from kio.records.schema import NewRecordBatch, Record
from kio.records.writers import write_new_batch
from kio.serial import entity_writer
from kio.static.primitive import TZAwareMicros, i8, i16, i32, i64

from harness import Figure
from minibroker import Cluster
from minibroker.protocol.codec import build, decode_request, request_class
from minibroker.protocol.validate import validate_request

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


def _produce_frame() -> bytes:
    stamp = TZAwareMicros.parse(datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC))
    records = tuple(
        Record(attributes=i8(0), timestamp=stamp, offset=i64(i), key=None, value=VALUE, headers=())
        for i in range(50)
    )
    batch = io.BytesIO()
    write_new_batch(
        batch,
        NewRecordBatch(
            producer_id=i64(-1),
            producer_epoch=i16(-1),
            base_sequence=i32(-1),
            records=records,
            attributes=i16(0),
        ),
    )
    cls = request_class(0, 9)
    body = build(
        cls,
        {
            "transactional_id": None,
            "acks": -1,
            "timeout": 5000,
            "topic_data": [
                {
                    "name": "bench",
                    "partition_data": [
                        {"index": p, "records": batch.getvalue()} for p in range(PARTITIONS)
                    ],
                }
            ],
        },
    )
    header = cls.__header_schema__(
        request_api_key=i16(0), request_api_version=i16(9), correlation_id=i32(1), client_id="b"
    )
    frame = io.BytesIO()
    entity_writer(cls.__header_schema__)(frame, header)
    entity_writer(cls)(frame, body)
    return frame.getvalue()


def _per_call_us(call: Callable[[], object], number: int) -> float:
    return min(timeit.repeat(call, number=number, repeat=7)) / number * 1e6


def run(quick: bool) -> list[Figure]:
    count = 50_000 if quick else 300_000
    rounds = 1 if quick else 3
    mini = [_minibroker_rate(count) for _ in range(rounds)]
    mock = [_mock_rate(count) for _ in range(rounds)]
    _start_ms()  # warm-up: imports and first-use caches
    starts = [_start_ms() for _ in range(5 if quick else 15)]
    binds = [_bind_ms() for _ in range(15)]
    frame = _produce_frame()
    cls = request_class(0, 9)
    number = 2_000 if quick else 20_000
    check_us = _per_call_us(lambda: validate_request(frame, 0, 9, cls), number)
    decode_us = _per_call_us(lambda: decode_request(frame), number)  # check included
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
        Figure(
            issue=10,
            name="schema check per Produce request before decoding (us)",
            value=check_us,
            reference=decode_us - check_us,
            unit="us",
            target=25.0,
            kind="absolute_max",
            note=f"Produce v9, {PARTITIONS} partitions x 50 records, {len(frame)} B; "
            "reference: kio's decoding of the same frame",
        ),
    ]
