"""What the real-Kafka tests share: a topic whose degraded partitions are known in advance,
waiting for the cluster's view, and reading a topic back to its end."""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from failover_partitioner import FailoverProducer
from tests.integration.reliability_support import wait_for
from tests.realkafka.cluster import KafkaCluster

__all__ = [
    "FAULTY",
    "PARTITIONS",
    "degraded",
    "doomed",
    "high_watermarks",
    "new_topic",
    "produce_steadily",
    "read_back",
    "spread",
    "wait_for",
    "whole",
]

PARTITIONS = 12
# Answers of a partition whose leadership is moving; some come marked not retriable.
_MOVING = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.OFFSET_NOT_AVAILABLE,  # a new leader's high watermark not caught up yet
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
    }
)
FAULTY = (4, 5)  # the brokers the scenarios pause or kill


def spread(brokers: int = 5, partitions: int = PARTITIONS) -> list[list[int]]:
    """A replica assignment (RF 3) using every 3-broker set in turn, leaders rotating.

    With brokers 4 and 5 down, exactly the partitions whose set holds both fall under
    min.insync.replicas=2: with 5 brokers and 12 partitions, partitions 5, 8 and 9.
    """
    sets = list(itertools.combinations(range(1, brokers + 1), 3))
    out = []
    for p in range(partitions):
        replicas = list(sets[p % len(sets)])
        shift = p % 3
        out.append(replicas[shift:] + replicas[:shift])
    return out


def doomed(assignment: list[list[int]], down: tuple[int, ...] = FAULTY) -> set[int]:
    """Partitions left with fewer than two live replicas when ``down`` are gone."""
    return {p for p, replicas in enumerate(assignment) if len(set(replicas) - set(down)) < 2}


def new_topic(
    cluster: KafkaCluster, prefix: str, *, config: dict[str, str] | None = None
) -> tuple[str, set[int]]:
    """A fresh topic of 12 partitions, RF 3 (spread as above); its partitions doomed by 4+5."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    assignment = spread()
    cluster.create_topic(name, assignment=assignment, config=config)
    return name, doomed(assignment)


def produce_steadily(
    p: FailoverProducer,
    topic: str,
    count: int,
    rate_per_s: float,
    fault_at: int,
    fault: Callable[[], None],
) -> float:
    """``count`` keyless messages ``m-N`` at a steady rate, ``fault()`` before message
    ``fault_at``; the longest a single produce() call took."""
    longest = 0.0
    start = time.monotonic()
    for i in range(count):
        if i == fault_at:
            fault()
        if i % 100 == 0:
            ahead = start + i / rate_per_s - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
            p.poll(0)
        t = time.monotonic()
        p.produce(topic, b"m-%d" % i)
        longest = max(longest, time.monotonic() - t)
    return longest


def degraded(cluster: KafkaCluster, topic: str, min_isr: int = 2) -> set[int]:
    """Partitions that take no acks=all write: ISR below the minimum or no leader."""
    return {v.partition for v in cluster.describe(topic) if v.leader < 0 or len(v.isr) < min_isr}


def whole(cluster: KafkaCluster, topic: str) -> bool:
    """Every partition led and its ISR all its replicas."""
    views = cluster.describe(topic)
    return bool(views) and all(v.leader >= 0 and set(v.isr) == set(v.replicas) for v in views)


def high_watermarks(
    bootstrap: str, topic: str, partitions: int = PARTITIONS, timeout_s: float = 60.0
) -> dict[int, int]:
    """Each partition's high watermark, asked again while the answer is a retriable error
    (leadership moves for a while after brokers return: NOT_LEADER_OR_FOLLOWER, ...)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks", "log_level": 0})
    deadline = time.monotonic() + timeout_s
    try:
        out: dict[int, int] = {}
        for p in range(partitions):
            while p not in out:
                try:
                    out[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                except KafkaException as exc:
                    error = exc.args[0]
                    if not error.retriable() and error.code() not in _MOVING:
                        raise
                    if time.monotonic() > deadline:
                        raise AssertionError(f"no high watermark of {topic}[{p}]: {error}") from exc
                    time.sleep(0.2)
        return out
    finally:
        consumer.close()


def copies(records: list[Any]) -> tuple[int, int, int]:
    """Extra copies among ``records`` by value: (copies in a partition other than the value's
    first, copies in the same partition, values with a copy in another partition).

    The failover producers count each attempt that may have left a copy before they send the
    message again (``ambiguous_failures``), which bounds the first figure. A copy in the same
    partition can also come from the client itself: librdkafka sends a write answered
    NOT_LEADER_OR_FOLLOWER (a leader moved while it held the write) again without reporting
    it, and no count sees that (test_kafka_min_isr.py shows it; docs/guarantees.md)."""
    partitions: dict[bytes, list[int]] = {}
    for m in records:
        partitions.setdefault(m.value(), []).append(m.partition())
    elsewhere = sum(len(set(ps)) - 1 for ps in partitions.values())
    alongside = sum(len(ps) - len(set(ps)) for ps in partitions.values())
    moved = sum(1 for ps in partitions.values() if len(set(ps)) > 1)
    return elsewhere, alongside, moved


def read_back(
    bootstrap: str, topic: str, partitions: int = PARTITIONS, timeout_s: float = 120.0
) -> list[Any]:
    """Every record of ``topic`` up to the high watermarks at the time of the call."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"read-back-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
            "log_level": 0,
        }
    )
    try:
        ends = high_watermarks(bootstrap, topic, partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions) if ends[p] > 0])
        out: list[Any] = []
        position = dict.fromkeys(range(partitions), 0)
        deadline = time.monotonic() + timeout_s
        while any(position[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            for message in consumer.consume(5000, 0.2):
                partition, offset = message.partition(), message.offset()
                if message.error() is None and partition is not None and offset is not None:
                    out.append(message)
                    position[partition] = offset + 1
        short = {p: (position[p], ends[p]) for p in ends if position[p] < ends[p]}
        assert not short, f"could not read {topic} to its end (position, end): {short}"
        return out
    finally:
        consumer.close()
