"""Consume the demo topic back to its end and count which messages are really there."""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from failover_partitioner.demo.messages import decode
from failover_partitioner.demo.producers import CLIENT_LOGGER

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumedBack:
    """Copies found per producer and sequence number; ``unread`` partitions ran out of time."""

    found: dict[str, Counter[int]]
    records: int
    unread: tuple[int, ...]


def consume_back(
    *, bootstrap_servers: str, topic: str, partitions: int, run_id: str, timeout_s: float
) -> ConsumedBack:
    """Read every partition from the beginning up to the high watermark found at the start.

    Partitions are assigned directly (no group join and rebalance to wait for); the high
    watermark is what acks=all made durable, so it is where reading can stop.
    """
    deadline = time.monotonic() + timeout_s
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": f"failover-demo-{run_id}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "logger": CLIENT_LOGGER,
        }
    )
    found: dict[str, Counter[int]] = {}
    records = 0
    try:
        ends: dict[int, int] = {}
        for p in range(partitions):
            _low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, p), timeout=max(0.1, deadline - time.monotonic())
            )
            if high > 0:
                ends[p] = high
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        remaining = set(ends)
        while remaining and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                err = msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        log.warning("consume-back: %s", err)
                    continue
                part, offset = msg.partition(), msg.offset()
                if part is None or offset is None:
                    continue
                records += 1
                mid = decode(msg.value())
                if mid is not None and mid.run_id == run_id:
                    found.setdefault(mid.producer, Counter())[mid.seq] += 1
                if offset >= ends.get(part, 0) - 1:
                    remaining.discard(part)
    finally:
        consumer.close()
    return ConsumedBack(found=found, records=records, unread=tuple(sorted(remaining)))
