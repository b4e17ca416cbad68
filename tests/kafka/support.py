"""What the real-Kafka tests share: a topic whose degraded partitions are known in advance,
waiting for the cluster's view, and reading a topic back to its end."""

from __future__ import annotations

import contextlib
import itertools
import time
import uuid
import warnings
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from failover_partitioner import FailoverProducer
from tests.integration.reliability_support import copies as placed_copies
from tests.integration.reliability_support import wait_for
from tests.realkafka.cluster import KafkaCluster

__all__ = [
    "FAULTY",
    "PARTITIONS",
    "SPARED",
    "committed",
    "degraded",
    "doomed",
    "group_away_from_faults",
    "high_watermarks",
    "new_topic",
    "produce_steadily",
    "read_back",
    "reassign",
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
    """Extra copies among consumed ``records`` by value (see reliability_support.copies)."""
    return placed_copies((m.value(), m.partition()) for m in records)


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


_COORDINATOR_NOT_READY = (
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
)


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets; asked again while the group's coordinator is not ready
    (NOT_COORDINATOR on a cluster started moments ago: its offsets topic still loading)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0})
    deadline = time.monotonic() + 30
    try:
        while True:
            try:
                tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], 10)
                return {tp.partition: tp.offset for tp in tps}
            except KafkaException as exc:
                code = exc.args[0].code()
                if code not in _COORDINATOR_NOT_READY or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        consumer.close()


def reassign(cluster: KafkaCluster, topic: str, partition: int, replicas: list[int]) -> None:
    """Give ``topic`` [``partition``] these replicas, the first its preferred leader, as
    kafka-reassign-partitions does (AlterPartitionReassignments); waiting for the move is the
    caller's."""
    with warnings.catch_warnings():
        # kafka-python (the Python client with AlterPartitionReassignments) loads its schemas
        # with importlib.resources.read_text (deprecated); its sockets are closed.
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.admin import KafkaAdminClient
        from kafka.structs import TopicPartition as KafkaTopicPartition

        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
        try:
            refused = admin.alter_partition_reassignments(
                {KafkaTopicPartition(topic, partition): replicas}
            )
        finally:
            admin.close()
    assert not any(refused.values()), f"reassignment refused: {refused}"


# The brokers the tests here never pause.
SPARED = [b for b in range(1, 6) if b not in FAULTY]


def group_away_from_faults(cluster: KafkaCluster, prefix: str) -> str:
    """A group id whose coordinator (the leader of its __consumer_offsets partition) is not on
    a broker the test pauses, and whose partition keeps min ISR meanwhile: the mirror's group
    then keeps its members and commits through the fault, as a mirror whose source is another
    cluster would (here source and target share one)."""

    def offsets_layout() -> dict[int, Any]:
        return {v.partition: v for v in cluster.describe("__consumer_offsets")}

    if not offsets_layout():
        # The first group request creates __consumer_offsets (answered NOT_COORDINATOR or
        # COORDINATOR_NOT_AVAILABLE while it is being created).
        with contextlib.suppress(KafkaException):
            committed(cluster.bootstrap_servers, "warm-up", "__consumer_offsets", 1)
        wait_for(lambda: bool(offsets_layout()), 60, "__consumer_offsets")

    def usable() -> list[int]:
        return [
            p
            for p, v in offsets_layout().items()
            if v.leader not in FAULTY and not set(FAULTY) <= set(v.replicas)
        ]

    # Earlier faults (a chaos run, a killed broker restarted by the fixture's heal) leave
    # replicas catching up for a while: wait for every replica to be back in first.
    with contextlib.suppress(AssertionError):
        wait_for(lambda: whole(cluster, "__consumer_offsets"), 60, "__consumer_offsets whole")
    if not usable():
        # Every partition is led by a broker the test pauses or has both among its replicas
        # (then its ISR falls under min ISR during the pause: the group can neither commit nor
        # rejoin, and its members are expired). Move one partition's replicas to brokers the
        # test leaves alone, as an operator would with kafka-reassign-partitions.
        moved = min(offsets_layout())
        reassign(cluster, "__consumer_offsets", moved, SPARED[:3])
        wait_for(lambda: moved in usable() and whole(cluster, "__consumer_offsets"), 60, "move")
    layout = offsets_layout()
    good = set(usable())
    for _ in range(100_000):
        group = f"{prefix}-{uuid.uuid4().hex[:8]}"
        partition = _java_abs(_java_hash(group)) % len(layout)
        if partition in good:
            # Shown when the test fails: where the group's coordinator was.
            print(f"group {group}: __consumer_offsets[{partition}] {layout[partition]}")
            return group
    raise AssertionError(f"no group id maps to a __consumer_offsets partition in {sorted(good)}")


def _java_hash(text: str) -> int:
    h = 0
    for ch in text:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def _java_abs(n: int) -> int:
    return 0 if n == -(1 << 31) else abs(n)  # Kafka's Utils.abs
