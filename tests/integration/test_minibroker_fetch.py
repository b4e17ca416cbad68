"""Fetch and ListOffsets as Kafka's ``ReplicaManager`` answers them: which check comes first on a
broker that is not the leader, and how a response's byte limits cut what it returns. Raw frames,
on the kio client of ``test_minibroker_protocol``; the expected answers are those Kafka 4.4 gave
to the same requests (tests/realkafka)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from kio.schema.errors import ErrorCode

from minibroker import Cluster
from tests.integration.test_minibroker_protocol import Wire, batch, produce

_FETCH, _LIST_OFFSETS, _CREATE_TOPICS = 1, 2, 19
_BATCHES = 3  # per partition of "limits", all of one size


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with Cluster(brokers=3) as running:
        yield running


def _wire(cluster: Cluster, broker_id: int) -> Wire:
    return Wire(cluster.bootstrap_servers.split(",")[broker_id - 1])


def _wait(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _fetch(
    wire: Wire, topic: str, partitions: list[tuple[int, int, int]], max_bytes: int, epoch: int = -1
) -> list[Any]:
    """Fetch v12 of (partition, offset, partition_max_bytes), without waiting."""
    request = {
        "max_wait": 0,
        "min_bytes": 1,
        "max_bytes": max_bytes,
        "isolation_level": 0,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": p,
                        "fetch_offset": offset,
                        "partition_max_bytes": limit,
                        "current_leader_epoch": epoch,
                    }
                    for p, offset, limit in partitions
                ],
            }
        ],
        "forgotten_topics_data": [],
    }
    return list(wire.call(_FETCH, 12, request).responses[0].partitions)


def _list_latest(wire: Wire, topic: str, epoch: int) -> int:
    request = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {"partition_index": 0, "current_leader_epoch": epoch, "timestamp": -1}
                ],
            }
        ],
    }
    return int(wire.call(_LIST_OFFSETS, 7, request).topics[0].partitions[0].error_code)


def test_a_follower_checks_the_epoch_before_leadership_and_names_no_leader(
    cluster: Cluster,
) -> None:
    # Kafka's Partition.getLocalLog: a replica answers FENCED_LEADER_EPOCH (74) or
    # UNKNOWN_LEADER_EPOCH (75) to an epoch not its own, and only then NOT_LEADER_OR_FOLLOWER;
    # a broker without a replica (ReplicaManager.getPartitionOrError) answers 6 whatever the
    # epoch. ListOffsets reads through the same check.
    cluster.create_topic("epochs", partitions=1, replication_factor=2)
    first = cluster.partition_state("epochs", 0)
    outsider = next(b for b in cluster.broker_ids if b not in first.replicas)
    cluster.stop_broker(first.leader)
    _wait(lambda: cluster.partition_state("epochs", 0).leader not in (-1, first.leader), "a leader")
    cluster.start_broker(first.leader)
    state = cluster.partition_state("epochs", 0)
    epoch = state.leader_epoch
    assert epoch > 0
    follower, other = _wire(cluster, first.leader), _wire(cluster, outsider)
    try:
        asked = (-1, epoch - 1, epoch, epoch + 1)
        answers = {
            e: int(_fetch(follower, "epochs", [(0, 0, 1000)], 10_000, e)[0].error_code)
            for e in asked
        }
        # (v11+ at the follower with its own epoch or none: Kafka serves the read from the
        # follower, KIP-392; minibroker keeps consumers on the leader.)
        assert answers == {-1: 6, epoch - 1: 74, epoch: 6, epoch + 1: 75}
        # Kafka names the current leader in a Fetch answer from v16 only (KIP-951).
        hint = _fetch(follower, "epochs", [(0, 0, 1000)], 10_000)[0].current_leader
        assert (hint.leader_id, hint.leader_epoch) == (-1, -1)
        assert {e: _list_latest(follower, "epochs", e) for e in asked} == answers
        answers = {
            e: int(_fetch(other, "epochs", [(0, 0, 1000)], 10_000, e)[0].error_code) for e in asked
        }
        assert answers == dict.fromkeys(asked, 6)
        assert {e: _list_latest(other, "epochs", e) for e in asked} == answers
    finally:
        follower.close()
        other.close()


@pytest.fixture(scope="module")
def limits(cluster: Cluster) -> Iterator[tuple[Wire, int]]:
    """Topic "limits": three partitions led by broker 1, each holding three batches of one size;
    a connection to broker 1 and that size."""
    wire = _wire(cluster, 1)
    created = wire.call(
        _CREATE_TOPICS,
        7,
        {
            "topics": [
                {
                    "name": "limits",
                    "num_partitions": -1,
                    "replication_factor": -1,
                    "assignments": [{"partition_index": p, "broker_ids": [1]} for p in range(3)],
                    "configs": [],
                }
            ],
            "timeout": 5000,
            "validate_only": False,
        },
    )
    assert created.topics[0].error_code == ErrorCode.none
    sizes = set()
    for p in range(3):
        for i in range(_BATCHES):
            records = batch([bytes([65 + i]) * 40])
            sizes.add(len(records))
            assert produce(wire, "limits", p, records).error_code == ErrorCode.none
    assert len(sizes) == 1
    yield wire, sizes.pop()
    wire.close()


# (max_bytes, ((offset, partition_max_bytes) for partitions 0-2), bytes each partition gets),
# sizes in batches. Kafka 4.4 answered each of these with exactly these byte counts.
_LIMITS = [
    (1, ((0, 100), (0, 100), (0, 100)), (1, 0, 0)),
    (0, ((0, 100), (0, 100), (0, 100)), (1, 0, 0)),
    (2.5, ((0, 100), (0, 100), (0, 100)), (2.5, 0, 0)),
    (3.5, ((0, 100), (0, 100), (0, 100)), (3, 0, 0)),
    (100, ((0, 1.5), (0, 1.5), (0, 1.5)), (1.5, 1.5, 1.5)),
    (100, ((0, 0.5), (0, 0.5), (0, 0.5)), (1, 0, 0)),
    (100, ((3, 0.5), (0, 0.5), (0, 0.5)), (0, 1, 0)),
    (1.5, ((0, 100), (1, 100), (2, 100)), (1.5, 0, 0)),
]


@pytest.mark.parametrize(("max_bytes", "asked", "expected"), _LIMITS)
def test_fetch_cuts_its_records_at_the_byte_limits_as_kafka_does(
    limits: tuple[Wire, int],
    max_bytes: float,
    asked: tuple[tuple[int, float], ...],
    expected: tuple[float, ...],
) -> None:
    # Kafka's ReplicaManager.readFromLog and LogSegment.read: the first batch of the first
    # partition with data comes whole past both limits (KIP-74); after it, each partition gets
    # at most min(partition_max_bytes, what is left of max_bytes) bytes, the last batch cut
    # short, and nothing when its first batch does not fit.
    wire, size = limits
    parts = [(p, offset, int(limit * size)) for p, (offset, limit) in enumerate(asked)]
    got = _fetch(wire, "limits", parts, int(max_bytes * size))
    assert [len(p.records or b"") for p in got] == [int(n * size) for n in expected]
    everything = _fetch(wire, "limits", [(p, o, 10**6) for p, o, _ in parts], 10**6)
    whole = {p.partition_index: bytes(p.records or b"") for p in everything}
    for p in got:
        assert bytes(p.records or b"") == whole[p.partition_index][: len(p.records or b"")]


def test_a_consumer_with_small_fetch_limits_reads_every_record_once(
    cluster: Cluster, limits: tuple[Wire, int]
) -> None:
    _, size = limits
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": "small-fetches",
            # librdkafka's floor for both; the partition limit cuts batches short
            "fetch.max.bytes": 1000,
            "message.max.bytes": 1000,
            "max.partition.fetch.bytes": int(1.5 * size),
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition("limits", p, 0) for p in range(3)])
        seen: list[tuple[int | None, int | None]] = []
        deadline = time.monotonic() + 15
        while len(seen) < 3 * _BATCHES and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                seen.append((message.partition(), message.offset()))
        assert sorted(seen) == [(p, o) for p in range(3) for o in range(_BATCHES)]
    finally:
        consumer.close()
