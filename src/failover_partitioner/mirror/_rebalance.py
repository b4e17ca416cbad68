"""Rebalances: what the mirror does when the group gives or takes its partitions.

Rebalance callbacks run inside ``consume``: a revoked partition's in-flight messages are
finished (or, past ``drain_timeout_s``, abandoned) and its delivered prefix committed before
the partition goes to another member, as MirrorMaker does since KAFKA-4521. A lost partition
(the session expired) is dropped uncommitted: the group has moved on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from confluent_kafka import KafkaException, TopicPartition

from ._clients import Clients, names
from ._commits import CommitLedger
from ._committer import Committer
from ._config import MirrorOptions
from ._failures import Failures
from ._lane import LaneControl

__all__ = ["Rebalance"]

logger = logging.getLogger(__name__)


class Rebalance:
    """The consumer's rebalance callbacks (``on_assign``, ``on_revoke``, ``on_lost``).

    ``hurry``: a second stop request; waits for in-flight messages end at once."""

    def __init__(
        self,
        options: MirrorOptions,
        ledger: CommitLedger,
        clients: Clients,
        committer: Committer,
        lanes: LaneControl,
        failures: Failures,
        *,
        clock: Callable[[], float],
        hurry: Callable[[], bool],
    ) -> None:
        self._options = options
        self._ledger = ledger
        self._clients = clients
        self._committer = committer
        self._lanes = lanes
        self._failures = failures
        self._clock = clock
        self._hurry = hurry

    def on_assign(self, consumer: object, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self._ledger.assign(tp.topic, tp.partition)
        logger.info("assigned %s", names(partitions))
        if not partitions:
            return
        # The group's committed offsets: the lag is known at once, and a commit of the offset
        # the group stores already is skipped (a lower one is not: see PartitionTracker.to_commit).
        source = self._clients.consumer
        assert source is not None
        try:
            committed = source.committed(
                [TopicPartition(tp.topic, tp.partition) for tp in partitions], timeout=10
            )
        except KafkaException as exc:
            logger.warning("cannot read the committed offsets of %s: %s", names(partitions), exc)
            return
        for tp in committed:
            tracker = self._ledger.get(tp.topic, tp.partition)
            if tracker is None or tp.error is not None:
                continue
            if tp.offset >= 0:
                tracker.committed(tp.offset)
            else:  # OFFSET_INVALID: the group stores none, the consumer starts at the reset
                tracker.no_committed_offset()

    def on_revoke(self, consumer: object, partitions: list[TopicPartition]) -> None:
        self._unpause(partitions)
        tps = [(tp.topic, tp.partition) for tp in partitions]
        if not self._clients.closing:
            self._finish(tps, self._clock() + self._options.drain_timeout_s)
        self._committer.commit(tps, reason="revocation")
        abandoned = 0
        for topic, partition in tps:
            tracker = self._ledger.drop(topic, partition)
            if tracker is not None:
                abandoned += tracker.in_flight
        if abandoned:
            logger.warning(
                "revoked %s with %d messages still in flight; their offsets are not committed, "
                "the next owner mirrors them again",
                names(partitions),
                abandoned,
            )
        else:
            logger.info("revoked %s", names(partitions))

    def on_lost(self, consumer: object, partitions: list[TopicPartition]) -> None:
        # The group moved on without us: committing now would be refused; the next owner
        # re-reads from the group's committed offsets.
        logger.warning("lost %s (session expired); not committing them", names(partitions))
        self._unpause(partitions)
        for tp in partitions:
            self._ledger.drop(tp.topic, tp.partition)

    def _unpause(self, partitions: list[TopicPartition]) -> None:
        """Resume partitions on their way out. librdkafka keeps a partition's pause across a
        rebalance, and the loop resumes only what it owns when it leaves its pause: a partition
        paused now and assigned again after that would never be read again. Resumed here, it
        comes back like any new partition (read at once, or given back if the loop is paused)."""
        source = self._clients.consumer
        if source is None or not partitions:
            return
        try:
            source.resume(partitions)
        except KafkaException as exc:
            logger.debug("cannot resume %s on their way out: %s", names(partitions), exc)

    def _finish(self, tps: Sequence[tuple[str, int]], deadline: float) -> None:
        """Poll the producer until the given partitions have nothing in flight, or deadline."""
        while self._clock() < deadline and not self._hurry():
            pending = 0
            for topic, partition in tps:
                tracker = self._ledger.get(topic, partition)
                if tracker is not None:
                    pending += tracker.in_flight
            if not pending:
                return
            self._lanes.serve()
            self._failures.handle()
