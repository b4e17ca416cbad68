"""Reading a topic back in full, for the Spark tests' set-equality checks."""

from __future__ import annotations

import time
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition


@dataclass(frozen=True, slots=True, kw_only=True)
class Record:
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def read_topic(bootstrap: str, topic: str, *, timeout_s: float = 60.0) -> list[Record]:
    """Every committed record of ``topic`` (up to each partition's high watermark at the start)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"spark-tests-{topic}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            # Large fetches: these tests read back hundreds of thousands of small records.
            "fetch.max.bytes": 64 * 1024 * 1024,
            "max.partition.fetch.bytes": 16 * 1024 * 1024,
            "fetch.wait.max.ms": 50,
            "queued.max.messages.kbytes": 256 * 1024,
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends: dict[int, int] = {}
        for p in partitions:
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high > 0:
                ends[p] = high
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        records: list[Record] = []
        position = dict.fromkeys(ends, 0)
        deadline = time.monotonic() + timeout_s
        while any(position[p] < ends[p] for p in ends):
            if time.monotonic() > deadline:
                missing = {p: ends[p] - position[p] for p in ends if position[p] < ends[p]}
                raise TimeoutError(f"reading {topic} back timed out; left per partition {missing}")
            for msg in consumer.consume(num_messages=10_000, timeout=0.5):
                err = msg.error()
                if err is not None:
                    raise KafkaException(err)
                p, offset = msg.partition(), msg.offset()
                assert p is not None
                assert offset is not None
                if offset >= ends[p]:
                    continue
                position[p] = offset + 1
                key, value = msg.key(), msg.value()
                records.append(
                    Record(
                        topic=topic,
                        partition=p,
                        offset=offset,
                        timestamp_ms=msg.timestamp()[1],
                        key=key if isinstance(key, bytes) or key is None else key.encode(),
                        value=value
                        if isinstance(value, bytes) or value is None
                        else value.encode(),
                        headers=_headers(msg.headers()),
                    )
                )
        return records
    finally:
        consumer.close()


def _headers(raw: object) -> tuple[tuple[str, bytes | None], ...]:
    if not raw:
        return ()
    assert isinstance(raw, list)
    return tuple((k, v.encode() if isinstance(v, str) else v) for k, v in raw)
