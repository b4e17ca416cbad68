"""Shared pieces of the reliability tests: waiting, memory, applying faults, reading topics back."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass

from confluent_kafka import Consumer, TopicPartition

from minibroker import Cluster
from tests.chaos_plan import FaultEvent

__all__ = [
    "Record",
    "apply_fault",
    "copies",
    "full_isr",
    "read_topic",
    "read_until",
    "rss_bytes",
    "seed_from_env",
    "wait_for",
]

_PAGE = os.sysconf("SC_PAGE_SIZE")


def wait_for(
    predicate: Callable[[], bool],
    timeout_s: float,
    what: str,
    state: Callable[[], object] = lambda: "",
) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what} {state()}")
        time.sleep(0.05)


def copies(placed: Iterable[tuple[Hashable, int]]) -> tuple[int, int, int]:
    """Extra copies among ``placed`` (what was written, by a value or a source position, and
    the partition it is in): (copies in a partition other than the first's, copies in the same
    partition, things with a copy in another partition).

    The failover producers count each attempt that may have left a copy before they send the
    message again (``ambiguous_failures``), which bounds the first figure. A copy in the same
    partition can also come from the client itself: on real Kafka librdkafka sends a write
    answered NOT_LEADER_OR_FOLLOWER (a leader moved while it held the write) again without
    reporting it, and no count sees that (tests/kafka/test_kafka_min_isr.py shows it;
    docs/guarantees.md, "A copy no error reports")."""
    partitions: dict[Hashable, list[int]] = {}
    for what, partition in placed:
        partitions.setdefault(what, []).append(partition)
    elsewhere = sum(len(set(ps)) - 1 for ps in partitions.values())
    alongside = sum(len(ps) - len(set(ps)) for ps in partitions.values())
    moved = sum(1 for ps in partitions.values() if len(set(ps)) > 1)
    return elsewhere, alongside, moved


def rss_bytes() -> int:
    """This process's resident set size, from /proc/self/statm (second field, in pages)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


def seed_from_env(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return default if not raw else int(raw)


def apply_fault(cluster: Cluster, event: FaultEvent) -> None:
    b = event.broker
    if event.action == "stop":
        cluster.stop_broker(b)
    elif event.action == "start":
        cluster.start_broker(b)
    elif event.action == "isolate":
        cluster.isolate_broker(b)
    elif event.action == "heal":
        cluster.heal_broker(b)
    elif event.action == "slow":
        cluster.slow_broker(b, event.delay_ms)
    elif event.action == "unslow":
        cluster.slow_broker(b, 0)
    else:
        raise ValueError(f"unknown fault action {event.action!r}")


def full_isr(cluster: Cluster, topics: Iterable[str]) -> bool:
    """Every partition has its whole replica set in sync and everything appended committed."""
    return all(
        st.leader >= 0
        and len(st.isr) == len(st.replicas)
        and st.high_watermark == st.log_end_offset
        for topic in topics
        for st in cluster.describe(topic)
    )


@dataclass(frozen=True, slots=True)
class Record:
    partition: int
    offset: int
    value: bytes
    headers: tuple[tuple[str, bytes], ...]

    def header(self, name: str) -> bytes | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None


def _headers(raw: object) -> tuple[tuple[str, bytes], ...]:
    """A message's headers as (name, bytes) pairs (confluent-kafka returns a list of tuples)."""
    out: list[tuple[str, bytes]] = []
    for item in raw if isinstance(raw, list) else []:
        name, value = item
        out.append((str(name), value if isinstance(value, bytes) else str(value or "").encode()))
    return tuple(out)


def read_topic(cluster: Cluster, topic: str, timeout_s: float = 90.0) -> list[Record]:
    """Every record of ``topic`` below the high watermarks of the moment of the call."""
    ends = {st.partition: st.high_watermark for st in cluster.describe(topic)}
    return read_until(cluster.bootstrap_servers, topic, ends, timeout_s)


def read_until(
    bootstrap: str, topic: str, ends: Mapping[int, int], timeout_s: float = 90.0
) -> list[Record]:
    """Every record of ``topic`` below ``ends`` (partition: offset)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "reliability-reader",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
        }
    )
    out: list[Record] = []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p, end in ends.items() if end > 0])
        left = {p: end for p, end in ends.items() if end > 0}
        deadline = time.monotonic() + timeout_s
        while left:
            if time.monotonic() > deadline:
                raise AssertionError(f"could not read {topic} to its end: {left} left")
            for msg in consumer.consume(5000, 0.2):
                if msg.error() is not None:
                    raise AssertionError(f"reading {topic}: {msg.error()}")
                p, offset = msg.partition(), msg.offset()
                assert p is not None
                assert offset is not None
                if offset >= ends[p]:
                    continue
                value = msg.value()
                assert isinstance(value, bytes)
                headers = _headers(msg.headers())
                out.append(Record(p, offset, value, headers))
                if offset == ends[p] - 1:
                    left.pop(p, None)
        return out
    finally:
        consumer.close()
