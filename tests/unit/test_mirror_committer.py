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
    """A target cluster whose partitions' ends grow by 100 at each question."""

    def __init__(self) -> None:
        self.asked = 0

    def ask_ends(self, topics: Any) -> PendingEnds:
        self.asked += 1
        futures: dict[TopicPartition, Future[Any]] = {}
        for topic in topics:
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


def test_a_partition_first_committed_between_sync_times_gets_its_sync_at_once() -> None:
    """Its first sync is not left to the next sync time (``commit_interval_s`` later): a
    mirror that crashed meanwhile left translate no sync for a partition it had committed,
    and translate then read that target partition from its start."""
    now = [1000.0]
    options = MirrorOptions(
        source_bootstrap="source:9092",
        target_bootstrap="target:9092",
        group_id="g",
        offset_syncs_topic="syncs",
        commit_interval_s=5.0,
    )
    ledger = CommitLedger()
    clients = Clients()
    clients.consumer = _Consumer()  # type: ignore[assignment]
    producer = clients.producer = _Producer()  # type: ignore[assignment]
    targets: Any = SimpleNamespace(sync=_Target(), router=options.router(), offset_syncs_on=True)
    committer = Committer(options, ledger, clients, Counters(), targets, lambda: now[0])

    def deliver(topic: str) -> None:
        tracker = ledger.assign(topic, 0)
        tracker.handed(0)
        tracker.finished(0)
        committer.commit(None, reason="idle")

    deliver("a")  # the run's first sync time
    now[0] += 1.0
    deliver("b")  # 4 s before the next one
    synced = {key: sync["source_offset"] for key, sync in producer.syncs}
    assert synced == {b"a/0": 1, b"b/0": 1}
