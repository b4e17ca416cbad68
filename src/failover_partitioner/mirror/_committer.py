"""The commit side: commits of what is delivered, their answers, and offset syncs.

Commits store, per partition, the first offset not finally delivered (the ledger, see
``_commits``), so a crash at any moment re-mirrors at most the uncommitted window and loses
nothing. Commits wait for their answer: one that is still out would keep the window full,
and the fast lane would then be settled on every step (asynchronous commits measured 10-20
times slower on librdkafka's mock).

Each commit may record an offset sync (``_offsets``): the next offset to hand per source
partition, then the target's ends, read with nothing handed in between.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from failover_partitioner.errors import ProduceTimeout

from ._clients import Clients, describe
from ._commits import CommitLedger
from ._config import MirrorOptions, TopicRouter
from ._offsets import PROVENANCE_NONE, OffsetSync
from ._report import Counters
from ._targets import Targets
from ._topics import PendingEnds, TopicSync

__all__ = ["Committer"]

logger = logging.getLogger(__name__)

# offset sync (skipped when they do not come: translation then reads a little more).
_FINAL_SYNC_WAIT_S = 2.0

# Commits after which the partitions are gone (or the mirror is): the last offset sync matters.
_FINAL = frozenset({"shutdown", "revocation"})


class Committer:
    """Commits the ledger's delivered prefixes and writes the offset syncs that go with them.

    ``every``: delivered, uncommitted messages that call for a commit before the interval (a
    quarter of the window)."""

    def __init__(
        self,
        options: MirrorOptions,
        ledger: CommitLedger,
        clients: Clients,
        counters: Counters,
        targets: Targets,
        clock: Callable[[], float],
    ) -> None:
        self._options = options
        self._router: TopicRouter = targets.router
        self._ledger = ledger
        self._clients = clients
        self._counters = counters
        self._targets = targets
        self._clock = clock
        self.every = max(1, options.max_in_flight // 4)
        # Offset syncs (see _offsets): the next offset last recorded per source partition.
        self._synced: dict[tuple[str, int], int] = {}
        self._next_offset_sync = 0.0
        # The target's high watermarks, asked at one sync time and used at the next (or at a
        # shutdown's, waited for): the commit path never waits on the target for them.
        self._pending_ends: PendingEnds | None = None
        # Said in each sync, so that translate reads this mirror's headers, not an upstream's.
        self._provenance = (
            options.provenance_format if options.provenance_headers else PROVENANCE_NONE
        )

    def commit(self, partitions: Sequence[tuple[str, int]] | None, *, reason: str) -> None:
        """Commit what is delivered, and wait for the answer."""
        consumer = self._clients.consumer
        assert consumer is not None
        offsets = self._ledger.to_commit(partitions)
        if not offsets:
            return
        tps = [TopicPartition(t, p, o) for t, p, o in offsets]
        try:
            result = consumer.commit(offsets=tps, asynchronous=False)
        except KafkaException as exc:
            # A rebalance in progress refuses commits; the offsets stay uncommitted and are
            # committed on revocation or by the next periodic commit.
            self._counters.commit_failures += 1
            logger.warning("%s commit of %d partitions refused: %s", reason, len(offsets), exc)
            return
        self._committed(result, reason)

    def _committed(self, result: Sequence[TopicPartition], reason: str) -> None:
        done = []
        for tp in result:
            if tp.error is None:
                done.append((tp.topic, tp.partition, tp.offset))
            else:
                self._counters.commit_failures += 1
                logger.warning(
                    "%s commit of %s[%d] refused: %s", reason, tp.topic, tp.partition, tp.error
                )
        self._ledger.committed(done)
        if done:
            self._counters.commits += 1
            logger.debug("%s commit: %s", reason, done)
            now = self._clock()
            if reason in _FINAL:
                self._write_offset_syncs(wait_s=_FINAL_SYNC_WAIT_S)
            elif now >= self._next_offset_sync:
                self._next_offset_sync = now + self._options.commit_interval_s
                self._write_offset_syncs(wait_s=0.0)

    def _write_offset_syncs(self, *, wait_s: float) -> None:
        """Record, per source partition, that what is handed from now on lands past target
        positions (see _offsets). Those are high watermarks asked for earlier (at the last
        sync time), so the commit path does not wait on the target: whatever is handed after
        the answer came lands past them. Waits up to ``wait_s`` for an answer (at shutdown
        and revocation, where nothing is handed any more and the last sync matters most)."""
        sync, topic = self._targets.sync, self._options.offset_syncs_topic
        producer = self._clients.producer
        if sync is None or topic is None or producer is None or not self._targets.offset_syncs_on:
            return
        pending = self._pending_ends
        if pending is None:
            pending = self._pending_ends = self._ask_ends(sync)
        if not pending.wait(wait_s):
            return  # asked; written at a later sync time, once answered
        self._pending_ends = self._ask_ends(sync) if wait_s == 0 else None
        try:
            ends = pending.result()
        except KafkaException as exc:
            logger.debug("no offset sync this time: cannot read the target's ends: %s", exc)
            return
        for tracker in self._ledger:
            at = tracker.next_offset
            source, partition = tracker.topic, tracker.partition
            target = self._router.target(source)
            if at is None or self._synced.get((source, partition)) == at or target not in ends:
                continue
            record = OffsetSync(
                source_topic=source,
                source_partition=partition,
                source_offset=at,
                target_topic=target,
                target_offsets=ends[target],
                provenance=self._provenance,
            )
            try:
                producer.produce(topic, record.value(), record.key(), None, _on_sync_delivery)
            except (BufferError, ProduceTimeout, KafkaException) as exc:
                logger.debug("offset sync for %s[%d] not written: %s", source, partition, exc)
                continue
            self._synced[(source, partition)] = at

    def _ask_ends(self, sync: TopicSync) -> PendingEnds:
        return sync.ask_ends({self._router.target(t.topic) for t in self._ledger})


def _on_sync_delivery(err: KafkaError | None, report: object) -> None:
    if err is not None:
        # Only a hint for translation (which stays correct without it): logged, not fatal.
        logger.warning("an offset sync was not written: %s", describe(err))
