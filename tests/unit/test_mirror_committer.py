"""The mirror's commit side alone (``_committer.Committer``): a real ledger and committer,
with a consumer that accepts every commit, a producer that delivers every offset sync at once
and a target whose ends are answered at once."""

from __future__ import annotations

import json
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

from confluent_kafka import TopicPartition

from failover_partitioner.mirror import MirrorOptions
from failover_partitioner.mirror._clients import Clients
from failover_partitioner.mirror._commits import CommitLedger
from failover_partitioner.mirror._committer import Committer
from failover_partitioner.mirror._report import Counters
from failover_partitioner.mirror._topics import PendingEnds


class _Target:
    """A target cluster whose partitions' ends grow by 100 at each question; of ``unknown``
    topics it tells nothing (the topic sync does not know them yet)."""

    def __init__(self, unknown: frozenset[str] = frozenset()) -> None:
        self.asked = 0
        self.unknown = unknown

    def ask_ends(self, topics: Any) -> PendingEnds:
        self.asked += 1
        futures: dict[TopicPartition, Future[Any]] = {}
        for topic in set(topics) - self.unknown:
            future: Future[Any] = Future()
            future.set_result(SimpleNamespace(offset=100 * self.asked))
            futures[TopicPartition(topic, 0)] = future
        return PendingEnds(futures, frozenset(topics))


class _Consumer:
    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, tp.offset) for tp in offsets]


class _Producer:
    def __init__(self) -> None:
        self.syncs: list[tuple[bytes, dict[str, Any]]] = []

    def produce(self, topic: str, value: bytes, key: bytes, headers: Any, cb: Any) -> None:
        self.syncs.append((key, json.loads(value)))
        cb(None, None)

    def poll(self, timeout: float) -> int:
        return 0


class _Rig:
    def __init__(self, target: _Target) -> None:
        self.now = 1000.0
        options = MirrorOptions(
            source_bootstrap="source:9092",
            target_bootstrap="target:9092",
            group_id="g",
            offset_syncs_topic="syncs",
            commit_interval_s=5.0,
        )
        self.ledger = CommitLedger()
        clients = Clients()
        clients.consumer = _Consumer()  # type: ignore[assignment]
        self.producer = clients.producer = _Producer()  # type: ignore[assignment]
        targets: Any = SimpleNamespace(sync=target, router=options.router(), offset_syncs_on=True)
        self.committer = Committer(
            options, self.ledger, clients, Counters(), targets, lambda: self.now
        )

    def deliver(self, topic: str, offset: int = 0) -> None:
        tracker = self.ledger.get(topic, 0) or self.ledger.assign(topic, 0)
        tracker.handed(offset)
        tracker.finished(offset)
        self.committer.commit(None, reason="idle")


def test_a_partition_first_committed_between_sync_times_gets_its_sync_at_once() -> None:
    """Its first sync is not left to the next sync time (``commit_interval_s`` later): a
    mirror that crashed meanwhile left translate no sync for a partition it had committed,
    and translate then read that target partition from its start."""
    rig = _Rig(_Target())
    rig.deliver("a")  # the run's first sync time
    rig.now += 1.0
    rig.deliver("b")  # 4 s before the next one
    synced = {key: sync["source_offset"] for key, sync in rig.producer.syncs}
    assert synced == {b"a/0": 1, b"b/0": 1}


def test_a_first_sync_that_cannot_be_written_yet_is_tried_once_until_the_next_sync_time() -> None:
    """A target topic the sync does not know yet (``--no-sync-topics``, made by the first
    produce) has no ends: its partitions' first sync waits for the next sync time after one
    early try, rather than asking the target and writing syncs at every commit (50 commits
    in one interval asked 51 times and wrote 50 syncs)."""
    target = _Target(unknown=frozenset({"b"}))
    rig = _Rig(target)
    rig.deliver("a")
    rig.deliver("b")
    for offset in range(1, 50):  # 49 more commits within the interval
        rig.now += 0.09
        rig.deliver("a", offset)
        rig.deliver("b", offset)
    assert target.asked <= 4  # (each answer taken is followed by the next question)
    assert len(rig.producer.syncs) == 1  # a's first
