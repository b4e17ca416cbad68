"""The commit side: commits of what is delivered, their answers, and offset syncs.

Commits store, per partition, the first offset not finally delivered (the ledger, see
``_commits``), so a crash at any moment re-mirrors at most the uncommitted window and loses
nothing. Commits wait for their answer: one that is still out would keep the window full,
and the fast lane would then be settled on every step (asynchronous commits measured 10-20
times slower on librdkafka's mock).

Each commit may record an offset sync (``_offsets``): the next offset to hand per source
partition, with the target's ends as answered before it (see ``_write_offset_syncs``). A
partition's first sync and the last one (shutdown, revocation) do not wait for the next sync
time, so that any run that committed leaves translate a sync.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from failover_partitioner.errors import ProducerClosed, ProduceTimeout

from ._clients import Clients, ProducerLike, describe
from ._commits import CommitLedger, PartitionTracker
from ._config import MirrorOptions, TopicRouter
from ._offsets import PROVENANCE_NONE, OffsetSync
from ._report import Counters
from ._targets import Targets
from ._topics import PendingEnds, TopicSync

__all__ = ["Committer"]

logger = logging.getLogger(__name__)

# How long an offset sync that cannot be left to the next sync time (a partition's first, the
# last at shutdown and revocation) waits for the target's ends, and the last for its delivery
# (skipped when they do not come: translation then reads more, never less).
_SYNC_WAIT_S = 2.0

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
        self._syncs_out = 0  # written, their delivery not reported yet
        # The producer refused one as closed (a shutdown's drain cut short): no more syncs.
        self._producer_closed = False
        self._next_offset_sync = 0.0
        # Partitions whose first sync was tried before the next sync time (see _committed).
        self._early: set[tuple[str, int]] = set()
        # The target's high watermarks, asked at one sync time and used at the next: the
        # commit path waits on the target for them only at a partition's first sync and the
        # final one (see _write_offset_syncs).
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
            if reason in _FINAL:
                # Nothing new to commit (an idle commit took it, between sync times), but the
                # syncs may lag what was handed since: the last one is written all the same.
                self._write_offset_syncs(final=True)
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
                self._write_offset_syncs(final=True)
            elif now >= self._next_offset_sync:
                self._next_offset_sync = now + self._options.commit_interval_s
                self._early.clear()
                self._write_offset_syncs(final=False)
            else:
                # A partition's first sync is not left to the next sync time; tried once until
                # then (its target topic may not be known to the sync yet).
                first = {(t, p) for t, p, _ in done} - self._synced.keys() - self._early
                if first:
                    self._early |= first
                    self._write_offset_syncs(final=False)

    def _write_offset_syncs(self, *, final: bool) -> None:
        """Record, per source partition whose next offset moved since its last sync, that
        what is handed from now on lands past the target's ends (see _offsets and
        :meth:`_ends`). The ``final`` syncs (shutdown, revocation: nothing is handed after
        them, or the partitions are another member's) are waited for until delivered, with
        the ones still out: the producer is closed next without a flush, which would drop
        them."""
        sync, topic = self._targets.sync, self._options.offset_syncs_topic
        producer = self._clients.producer
        if sync is None or topic is None or producer is None or not self._targets.offset_syncs_on:
            return
        if self._producer_closed:
            return
        deadline = self._clock() + _SYNC_WAIT_S
        synced = self._synced
        due = [
            t
            for t in self._ledger
            if t.next_offset is not None and synced.get((t.topic, t.partition)) != t.next_offset
        ]
        ends = self._ends(sync, due, final=final, deadline=deadline) if due else None
        if ends is not None:
            self._produce_syncs(producer, topic, due, ends)
        while final and self._syncs_out and not self._producer_closed:
            if self._clock() >= deadline:
                logger.debug("%d offset syncs not delivered in time", self._syncs_out)
                break
            try:
                producer.poll(0.05)
            except ProducerClosed:
                self._producer_closed = True  # see _produce_syncs

    def _ends(
        self, sync: TopicSync, due: list[PartitionTracker], *, final: bool, deadline: float
    ) -> dict[str, tuple[int, ...]] | None:
        """The target's high watermarks to pair with the ``due`` partitions' next offsets, or
        None when there are none yet.

        Whatever is handed after the answer came lands past them, so usually they are the
        answer to the last sync time's question: the commit path does not wait on the
        target. They are asked now and waited for until ``deadline`` instead (nothing is
        handed meanwhile, so the next offsets as they are pair with that answer) for a
        partition's first sync, which no earlier answer covers (else a run that commits once,
        a small topic or a mirror stopped after its first batch, would leave translate none),
        and for the final one (the closest bound: translate scans from there)."""
        first = {
            self._router.target(t.topic) for t in due if (t.topic, t.partition) not in self._synced
        }
        pending = self._pending_ends
        wait_s = 0.0  # an earlier question serves: its answer if in, else at a later sync time
        if final or pending is None or not first <= pending.topics:
            pending = self._pending_ends = self._ask_ends(sync)
            if final or first:
                wait_s = deadline - self._clock()
        if not pending.wait(wait_s):
            return None  # asked; written at a later sync time, once answered
        self._pending_ends = None if final else self._ask_ends(sync)
        try:
            return pending.result()
        except KafkaException as exc:
            logger.debug("no offset sync this time: cannot read the target's ends: %s", exc)
            return None

    def _produce_syncs(
        self,
        producer: ProducerLike,
        topic: str,
        due: list[PartitionTracker],
        ends: dict[str, tuple[int, ...]],
    ) -> None:
        for tracker in due:
            at = tracker.next_offset
            source, partition = tracker.topic, tracker.partition
            target = self._router.target(source)
            if at is None or target not in ends:
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
                producer.produce(topic, record.value(), record.key(), None, self._sync_delivered)
            except ProducerClosed:
                # The shutdown's drain was cut short and closed it: no sync goes any more.
                self._producer_closed = True
                return
            except (BufferError, ProduceTimeout, KafkaException) as exc:
                logger.debug("offset sync for %s[%d] not written: %s", source, partition, exc)
                continue
            self._syncs_out += 1
            self._synced[(source, partition)] = at

    def _ask_ends(self, sync: TopicSync) -> PendingEnds:
        return sync.ask_ends({self._router.target(t.topic) for t in self._ledger})

    def _sync_delivered(self, err: KafkaError | None, report: object) -> None:
        self._syncs_out -= 1
        if err is not None:
            # Only a hint for translation (which stays correct without it): logged, not fatal.
            logger.warning("an offset sync was not written: %s", describe(err))
