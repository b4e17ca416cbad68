"""Which source offsets may be committed: the unbroken delivered prefix of each partition.

Messages of one source partition are handed to the producer in offset order, but they finish
out of order: a message refused by a degraded target partition is produced again elsewhere and
finishes after its successors. Committing "everything polled" after a flush (MirrorMaker 1) would
skip a message that finally failed. Like Kafka Connect's ``SubmittedRecords`` (KAFKA-12226) and
Brooklin's flushless mode, the tracker commits one past the longest run of consecutive offsets
that are all finally delivered, so the committed offset never passes an undelivered message.

Pure bookkeeping: no clients, no clock, no threads. The mirror calls it from one thread.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

__all__ = ["CommitLedger", "PartitionProgress", "PartitionTracker"]


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionProgress:
    """A snapshot of one source partition's commit state."""

    topic: str
    partition: int
    committed_offset: int | None
    """The last offset committed by this process (the next message to read after a restart)."""
    committable_offset: int | None
    """What a commit now would store: the first offset not finally delivered."""
    in_flight: int
    """Messages handed to the producer and not finished."""
    uncommitted: int
    """Messages consumed whose offsets are not committed yet (in flight or delivered)."""
    failed_offset: int | None
    """The first offset that finally failed; the committed offset never passes it."""


class PartitionTracker:
    """Commit state of one assigned source partition.

    ``handed(offset)`` records a message given to the producer (offsets must increase; gaps, as
    left by compaction or transaction markers, are fine). ``finished(offset)`` records its final
    delivery, in any order. ``committable`` is the first offset still unfinished, or one past the
    last handed offset when everything finished.
    """

    __slots__ = (
        "_committed",
        "_delivered",
        "_failed",
        "_finished",
        "_next",
        "_pending",
        "dropped",
        "failed_offset",
        "partition",
        "topic",
    )

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        # Handed offsets not yet popped off the head; some may already be finished (out of order).
        self._pending: deque[int] = deque()
        self._finished: set[int] = set()
        # Offsets popped off the head (delivered in order) and not yet covered by a commit.
        self._delivered: deque[int] = deque()
        self._next: int | None = None
        self._committed: int | None = None
        self._failed: set[int] = set()
        self.failed_offset: int | None = None
        # Set when the partition is revoked or lost: late outcomes no longer count.
        self.dropped = False

    def handed(self, offset: int) -> None:
        """Record that the message at ``offset`` was given to the producer."""
        if self._next is not None and offset < self._next:
            raise ValueError(
                f"{self.topic}[{self.partition}]: offset {offset} handed after {self._next - 1}; "
                "offsets of one partition must be handed in increasing order"
            )
        self._pending.append(offset)
        self._next = offset + 1

    def withdraw(self, offset: int) -> None:
        """Take back the last handed offset: the producer never accepted that message."""
        pending = self._pending
        if not pending or pending[-1] != offset or offset in self._finished:
            raise ValueError(
                f"{self.topic}[{self.partition}]: only the last handed offset can be withdrawn, "
                f"not {offset}"
            )
        pending.pop()
        self._failed.discard(offset)
        # The consumer delivered this offset, so every earlier one of this assignment was
        # handed or committed before: committing the withdrawn offset itself is safe.
        self._next = offset

    def finished(self, offset: int) -> None:
        """Record that the message at ``offset`` was finally delivered (or dead-lettered)."""
        pending = self._pending
        if pending and pending[0] == offset and not self._failed:
            # The common case, in-order completion: no set traffic.
            pending.popleft()
            self._delivered.append(offset)
            if self._finished:
                self._pop_finished_head()
            return
        self._check_out(offset)
        if offset == pending[0]:
            pending.popleft()
            self._delivered.append(offset)
            self._pop_finished_head()
        else:
            self._finished.add(offset)

    def _pop_finished_head(self) -> None:
        pending, finished = self._pending, self._finished
        while pending and pending[0] in finished:
            head = pending.popleft()
            finished.remove(head)
            self._delivered.append(head)

    def failed(self, offset: int) -> None:
        """Record that the message at ``offset`` finally failed: it stays unfinished for good."""
        self._check_out(offset)
        self._failed.add(offset)
        if self.failed_offset is None or offset < self.failed_offset:
            self.failed_offset = offset

    def _check_out(self, offset: int) -> None:
        """Raise unless ``offset`` was handed and its outcome has not come back yet."""
        pending = self._pending
        if not pending or offset < pending[0] or offset >= (self._next or 0):
            raise ValueError(
                f"{self.topic}[{self.partition}]: outcome for offset {offset}, "
                "which is not in flight"
            )
        if offset in self._finished or offset in self._failed:
            raise ValueError(f"{self.topic}[{self.partition}]: offset {offset} ended twice")

    @property
    def committable(self) -> int | None:
        """The offset a commit would store now, or None when nothing was handed yet."""
        if self._pending:
            return self._pending[0]
        return self._next

    def to_commit(self) -> int | None:
        """The offset to commit, or None when it would not move past the last commit."""
        offset = self.committable
        if offset is None or (self._committed is not None and offset <= self._committed):
            return None
        return offset

    def committed(self, offset: int) -> None:
        """Record a successful commit of ``offset``."""
        if self._committed is not None and offset < self._committed:
            return  # an older commit confirmed late; the newer one stands
        self._committed = offset
        delivered = self._delivered
        while delivered and delivered[0] < offset:
            delivered.popleft()

    @property
    def committed_offset(self) -> int | None:
        return self._committed

    @property
    def in_flight(self) -> int:
        """Messages handed to the producer whose outcome has not come back."""
        return len(self._pending) - len(self._finished) - len(self._failed)

    @property
    def uncommitted(self) -> int:
        """Messages consumed and not covered by a commit."""
        return len(self._pending) + len(self._delivered)

    def progress(self) -> PartitionProgress:
        return PartitionProgress(
            topic=self.topic,
            partition=self.partition,
            committed_offset=self._committed,
            committable_offset=self.committable,
            in_flight=self.in_flight,
            uncommitted=self.uncommitted,
            failed_offset=self.failed_offset,
        )


class CommitLedger:
    """The trackers of every assigned partition, and the messages of dropped ones still out.

    ``window`` counts what the mirror bounds with ``--max-in-flight``: messages consumed and not
    committed in assigned partitions, plus messages of revoked partitions the producer still holds.
    A crash duplicates at most that many messages, since only they can be delivered and uncommitted.
    """

    __slots__ = ("_abandoned", "_abandoned_by_topic", "_trackers")

    def __init__(self) -> None:
        self._trackers: dict[tuple[str, int], PartitionTracker] = {}
        self._abandoned = 0
        # Every message ever abandoned, per source topic (whether or not it came back since).
        self._abandoned_by_topic: dict[str, int] = {}

    def assign(self, topic: str, partition: int) -> PartitionTracker:
        """Start tracking a newly assigned partition (a fresh tracker if it was known)."""
        tracker = PartitionTracker(topic, partition)
        old = self._trackers.get((topic, partition))
        if old is not None:
            self._abandon(old)
        self._trackers[(topic, partition)] = tracker
        return tracker

    def get(self, topic: str, partition: int) -> PartitionTracker | None:
        return self._trackers.get((topic, partition))

    def drop(self, topic: str, partition: int) -> PartitionTracker | None:
        """Stop tracking a revoked or lost partition; its unfinished messages become abandoned."""
        tracker = self._trackers.pop((topic, partition), None)
        if tracker is not None:
            self._abandon(tracker)
        return tracker

    def _abandon(self, tracker: PartitionTracker) -> None:
        tracker.dropped = True
        in_flight = tracker.in_flight
        self._abandoned += in_flight
        if in_flight:
            by_topic = self._abandoned_by_topic
            by_topic[tracker.topic] = by_topic.get(tracker.topic, 0) + in_flight

    def abandoned_finished(self) -> None:
        """A message of a dropped partition came back from the producer (delivered or not)."""
        if self._abandoned > 0:
            self._abandoned -= 1

    @property
    def abandoned(self) -> int:
        return self._abandoned

    def __iter__(self) -> Iterator[PartitionTracker]:
        return iter(list(self._trackers.values()))

    def __len__(self) -> int:
        return len(self._trackers)

    @property
    def in_flight(self) -> int:
        """Messages the producer holds: unfinished in assigned partitions plus abandoned ones."""
        return sum(t.in_flight for t in self._trackers.values()) + self._abandoned

    def counts(self) -> tuple[int, int]:
        """(window, in_flight) in one pass."""
        window = in_flight = self._abandoned
        for t in self._trackers.values():
            window += t.uncommitted
            in_flight += t.in_flight
        return window, in_flight

    def unfinished_by_topic(self) -> dict[str, int]:
        """Per source topic: messages in flight in assigned partitions plus every message ever
        abandoned. Consumed minus these (and minus failed and dead-lettered) is delivered."""
        out = dict(self._abandoned_by_topic)
        for t in self._trackers.values():
            out[t.topic] = out.get(t.topic, 0) + t.in_flight
        return out

    @property
    def window(self) -> int:
        return sum(t.uncommitted for t in self._trackers.values()) + self._abandoned

    def to_commit(
        self, partitions: Iterable[tuple[str, int]] | None = None
    ) -> list[tuple[str, int, int]]:
        """(topic, partition, offset) for every tracked partition whose commit would advance."""
        if partitions is None:
            trackers: Iterable[PartitionTracker] = self._trackers.values()
        else:
            trackers = [t for tp in partitions if (t := self._trackers.get(tp)) is not None]
        out = []
        for tracker in trackers:
            offset = tracker.to_commit()
            if offset is not None:
                out.append((tracker.topic, tracker.partition, offset))
        return out

    def committed(self, offsets: Iterable[tuple[str, int, int]]) -> None:
        """Record a successful commit of (topic, partition, offset) triples."""
        for topic, partition, offset in offsets:
            tracker = self._trackers.get((topic, partition))
            if tracker is not None:
                tracker.committed(offset)

    def failures(self) -> list[PartitionTracker]:
        return [t for t in self._trackers.values() if t.failed_offset is not None]
