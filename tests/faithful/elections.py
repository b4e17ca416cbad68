"""Scenario 4, the last ISR member lost: what leads a partition once its whole ISR has crashed.

Kafka 4.4 (a cluster formatted by 4.1 or later has eligible leader replicas on, KIP-966) keeps
more than the leader and ISR a client's Metadata shows: the ELR (replicas that left the ISR
while it was under min.insync.replicas, eligible to lead) and the last known leader. Only
DescribeTopicPartitions (API 75, what ``kafka-topics --describe`` and the Java admin client's
``describeTopics`` send) shows them, so the scenario reads them with a raw request.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from confluent_kafka.admin import AdminClient

from tests.faithful.backends import Backend, wait_until
from tests.faithful.scenarios import Outcome, leader_of, produce, read_all, unique
from tests.integration.test_minibroker_protocol import Wire, batch

__all__ = ["PartitionElr", "describe_partitions", "last_isr_member_lost"]

FETCH_VERSION = 12
PRODUCE_VERSION = 9
# A broker that is no replica of the scenario's partitions and stays up: requests go there.
BYSTANDER = 4


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionElr:
    """Partition 0 as DescribeTopicPartitions shows it; replica lists sorted."""

    leader: int
    isr: tuple[int, ...]
    elr: tuple[int, ...]
    last_known_elr: tuple[int, ...]

    def __str__(self) -> str:
        return (
            f"leader {self.leader}, ISR {list(self.isr)}, ELR {list(self.elr)}, "
            f"last known {list(self.last_known_elr)}"
        )


def describe_partitions(backend: Backend, topic: str) -> PartitionElr:
    wire = Wire(backend.address(BYSTANDER))
    try:
        response = wire.call(75, 0, {"topics": [{"name": topic}], "response_partition_limit": 10})
    finally:
        wire.close()
    (described,) = response.topics
    partition = described.partitions[0]
    return PartitionElr(
        leader=int(partition.leader_id),
        isr=tuple(sorted(partition.isr_nodes)),
        elr=tuple(sorted(partition.eligible_leader_replicas or ())),
        last_known_elr=tuple(sorted(partition.last_known_elr or ())),
    )


def metadata_view(backend: Backend, topic: str) -> tuple[int, tuple[int, ...], int]:
    """Leader, ISR and the partition's error code in a client's Metadata (librdkafka)."""
    admin = AdminClient({"bootstrap.servers": backend.bootstrap_servers, "log_level": 0})
    partition = admin.list_topics(topic, timeout=10).topics[topic].partitions[0]
    error = partition.error.code() if partition.error is not None else 0
    return partition.leader, tuple(sorted(partition.isrs)), int(error)


def broker_answers(backend: Backend, topic: str) -> tuple[int, int]:
    """The error codes of a Produce (acks=1) and a Fetch sent to a broker that is no replica."""
    wire = Wire(backend.address(BYSTANDER))
    try:
        produced = wire.call(
            0,
            PRODUCE_VERSION,
            {
                "transactional_id": None,
                "acks": 1,
                "timeout": 5000,
                "topic_data": [
                    {"name": topic, "partition_data": [{"index": 0, "records": batch([b"x"])}]}
                ],
            },
        )
        fetched = wire.call(
            1,
            FETCH_VERSION,
            {
                "max_wait": 100,
                "min_bytes": 1,
                "max_bytes": 1_000_000,
                "isolation_level": 1,
                "topics": [
                    {
                        "topic": topic,
                        "partitions": [
                            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 100_000}
                        ],
                    }
                ],
                "forgotten_topics_data": [],
            },
        )
    finally:
        wire.close()
    produce_error = produced.responses[0].partition_responses[0].error_code
    return int(produce_error), int(fetched.responses[0].partitions[0].error_code)


def isr_becomes(backend: Backend, topics: tuple[str, ...], isr: tuple[int, ...]) -> float:
    return wait_until(
        lambda: all(describe_partitions(backend, t).isr == isr for t in topics),
        60,
        f"the ISR to become {list(isr)}",
    )


def last_isr_member_lost(backend: Backend, *, every_return: bool = True) -> Outcome:
    """RF 3, min ISR 2: the followers crash one by one, then the leader; the out-of-sync replica
    returns first, then (``every_return``) the last leader, then the eligible one. Two topics:
    unclean.leader.election.enable false (Kafka's default) and true."""
    clean, unclean = unique("last-isr"), unique("last-isr-unclean")
    topics = (clean, unclean)
    backend.create_topic(clean, [[1, 2, 3]])
    backend.create_topic(unclean, [[1, 2, 3]], {"unclean.leader.election.enable": "true"})
    observed: list[tuple[str, object]] = []
    timings: list[tuple[str, float]] = []
    for topic in topics:
        produce(backend, topic, [b"a"])
    backend.kill(3)
    isr_becomes(backend, topics, (1, 2))
    observed.append(("acks=all with ISR 1,2", tuple(produce(backend, clean, [b"b"]))))
    produce(backend, unclean, [b"b"])
    backend.kill(2)
    isr_becomes(backend, topics, (1,))
    observed.append(("leader alone", describe_partitions(backend, clean)))
    observed.append(("acks=1 with ISR 1", tuple(produce(backend, clean, [b"c"], acks=1))))
    produce(backend, unclean, [b"c"], acks=1)
    observed.append(("acks=all with ISR 1", tuple(produce(backend, clean, [b"refused"]))))
    began = time.monotonic()
    backend.kill(1)
    wait_until(
        lambda: all(describe_partitions(backend, t).leader == -1 for t in topics),
        60,
        "both partitions offline",
    )
    timings.append(("offline after the leader's crash", time.monotonic() - began))
    observed += _offline(backend, clean)
    observed += _out_of_sync_returns(backend, clean, unclean, timings)
    if every_return:
        observed += _last_leader_returns(backend, clean, unclean, timings)
    return Outcome(
        scenario="4 last ISR member lost", observed=tuple(observed), timings_s=tuple(timings)
    )


def _offline(backend: Backend, topic: str) -> list[tuple[str, object]]:
    codes = produce(
        backend, topic, [b"lost"], acks=1, request_timeout_ms=2_000, message_timeout_ms=3_000
    )
    return [
        ("offline", describe_partitions(backend, topic)),
        ("offline: Metadata (leader, ISR, error)", metadata_view(backend, topic)),
        ("offline: Produce, Fetch at a non-replica", broker_answers(backend, topic)),
        ("offline: acks=1 delivery report", tuple(codes)),
    ]


def _out_of_sync_returns(
    backend: Backend, clean: str, unclean: str, timings: list[tuple[str, float]]
) -> list[tuple[str, object]]:
    """Broker 3, out of the ISR since before it was under the minimum, comes back."""
    began = time.monotonic()
    backend.restart(3)
    wait_until(lambda: leader_of(backend, unclean) >= 0, 60, "the unclean election")
    timings.append(("unclean leader after broker 3's restart", time.monotonic() - began))
    # Not read yet: Kafka restores a crashed replica's high watermark from a checkpoint written
    # every 5 s, so broker 3 may know none of its records as committed, and alone in the ISR
    # (under the minimum) it cannot advance it: ListOffsets answers 78 until the ISR grows.
    return [
        ("3 back: unclean.leader.election.enable=true", describe_partitions(backend, unclean)),
        ("3 back: default", describe_partitions(backend, clean)),
    ]


def _last_leader_returns(
    backend: Backend, clean: str, unclean: str, timings: list[tuple[str, float]]
) -> list[tuple[str, object]]:
    """Broker 1, the last leader, comes back, then broker 2, eligible when it crashed."""
    observed: list[tuple[str, object]] = []
    backend.restart(1)
    wait_until(lambda: describe_partitions(backend, unclean).isr == (1, 3), 60, "1 to follow 3")
    observed.append(("1 back: default", describe_partitions(backend, clean)))
    began = time.monotonic()
    backend.restart(2)
    wait_until(lambda: leader_of(backend, clean) >= 0, 60, "a leader once broker 2 is back")
    timings.append(("leader after broker 2's restart", time.monotonic() - began))
    observed.append(("2 back: default, leader", leader_of(backend, clean)))
    isr_becomes(backend, (clean, unclean), (1, 2, 3))
    observed.append(("all back: default, readable", tuple(read_all(backend, clean))))
    observed.append(("all back: unclean topic, readable", tuple(read_all(backend, unclean))))
    return observed
