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
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from failover_partitioner._message import DeliveryGroup, DeliveryReport

__all__ = ["CommitLedger", "OutcomeHandler", "PartitionProgress", "PartitionTracker", "Span"]


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionProgress:
    """A snapshot of one source partition's commit state."""

    topic: str
    partition: int
    committed_offset: int | None
    """The offset the group stores, as last read or committed by this process (the next
    message to read after a restart)."""
    committable_offset: int | None
    """What a commit now would store: the first offset not finally delivered."""
    in_flight: int
    """Messages handed to the producer and not finished."""
    uncommitted: int
    """Messages consumed whose offsets are not committed yet (in flight or delivered)."""
    failed_offset: int | None
    """The first offset that finally failed; the committed offset never passes it."""


class Span(DeliveryGroup):
    """Consecutive messages of one source partition handed to the producer together; they
    share one delivery callback (a :class:`~failover_partitioner.DeliveryGroup`) and are
    committed together once every one has its outcome.

    ``pending`` counts the messages without an outcome, plus one while the span is open (the
    mirror still handing it messages), so that it cannot be done before it is closed.
    ``failed`` is its lowest offset that finally failed, if any.
    """

    __slots__ = (
        "count",
        "end",
        "failed",
        "first",
        "lane",
        "on_outcome",
        "open",
        "pending",
        "settled",
        "source",
        "stamp_ms",
        "tracker",
    )

    def __init__(
        self, tracker: PartitionTracker, first: int, on_outcome: OutcomeHandler | None
    ) -> None:
        super().__init__()
        self.tracker = tracker
        self.first = first
        self.end = first
        self.count = 0
        self.pending = 1
        # Of those, messages sent on a client that reports failures only: their deliveries
        # are counted when that client has none left (see delivered_many).
        self.lane = 0
        self.open = True
        self.failed: int | None = None
        # Its messages without an outcome were handed back (see PartitionTracker.handed_back).
        self.settled = False
        self.on_outcome = on_outcome
        # The timestamp (ms since the epoch) of its last record, -1 if unknown: its
        # replication latency is measured when it is done (see CommitLedger).
        self.stamp_ms = -1
        # What the caller keeps to tell its messages apart (the mirror: the consumed batch).
        self.source: Any = None

    def delivered(self) -> None:
        """One message has its final outcome (delivered, dead-lettered or failed)."""
        self.pending -= 1
        tracker = self.tracker
        if tracker.dropped:
            tracker._abandoned_one()  # of a revoked partition: counted back, not committed
        elif not self.pending:
            tracker._span_done(self)

    def delivered_many(self, n: int) -> None:
        """``n`` messages have their final outcome: ``delivered()`` ``n`` times, in one step."""
        if n <= 0:
            return
        self.pending -= n
        tracker = self.tracker
        if tracker.dropped:
            for _ in range(n):
                tracker._abandoned_one()
        elif not self.pending:
            tracker._span_done(self)

    def __call__(self, err: Any, report: DeliveryReport) -> None:
        handler = self.on_outcome
        if handler is None:
            if err is not None:
                raise ValueError("a span without an outcome handler cannot take a failure")
            self.delivered()
        else:
            handler(self, err, report)


OutcomeHandler = Callable[[Span, Any, DeliveryReport], None]


class PartitionTracker:
    """Commit state of one assigned source partition.

    The mirror hands messages in spans: :meth:`open` at a span's first offset, one
    ``span.pending += 1`` per message given to the producer, :meth:`close` with one past its
    last offset; each message's outcome calls ``span.delivered()`` (see :class:`Span`), and a
    message that finally failed is recorded with :meth:`failed_in` first. Spans finish in any
    order. ``committable`` is the first offset of the first span not finished, the lowest failed
    offset of a finished span that had a failure, or one past the last handed offset.

    ``handed(offset)`` / ``finished(offset)`` / ``failed(offset)`` / ``withdraw(offset)`` do the
    same one message at a time (a span of one). Offsets must increase; gaps, as left by
    compaction or transaction markers, are fine.
    """

    __slots__ = (
        "_by_offset",
        "_committed",
        "_committed_known",
        "_delivered",
        "_ledger",
        "_next",
        "_pending",
        "dropped",
        "failed_offset",
        "partition",
        "topic",
    )

    def __init__(self, topic: str, partition: int, ledger: CommitLedger | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self._ledger = ledger
        # Spans in hand order not yet popped off the head; some may be finished (out of order).
        self._pending: deque[Span] = deque()
        # Spans popped off the head (all delivered) and not yet covered by a commit.
        self._delivered: deque[Span] = deque()
        # The one-message spans of handed()/finished(), by offset, until their outcome.
        self._by_offset: dict[int, Span] = {}
        self._next: int | None = None
        self._committed: int | None = None
        self._committed_known = False
        self.failed_offset: int | None = None
        # Set when the partition is revoked or lost: late outcomes no longer count.
        self.dropped = False

    # -- spans ------------------------------------------------------------------------------

    def open(self, first: int, on_outcome: OutcomeHandler | None = None) -> Span:
        """Start a span at ``first``; outcomes other than a first-attempt delivery go to
        ``on_outcome(span, err, report)``."""
        if self._next is not None and first < self._next:
            raise ValueError(
                f"{self.topic}[{self.partition}]: offset {first} handed after {self._next - 1}; "
                "offsets of one partition must be handed in increasing order"
            )
        span = Span(self, first, on_outcome)
        self._pending.append(span)
        self._next = first
        return span

    def close(self, span: Span, end: int, count: int) -> None:
        """The span holds ``count`` messages, its last before offset ``end``."""
        span.end = end
        span.count = count
        span.open = False
        self._next = end
        span.pending -= 1  # lets go of the hold taken by open()
        if not span.pending and not self.dropped:
            self._span_done(span)

    def failed_in(self, span: Span, offset: int) -> None:
        """The message at ``offset`` of ``span`` finally failed: the committed offset never
        passes it. Its ``span.delivered()`` still follows, as for any outcome."""
        if span.failed is None or offset < span.failed:
            span.failed = offset
        if self.failed_offset is None or offset < self.failed_offset:
            self.failed_offset = offset

    def unfinished(self) -> list[Span]:
        """Closed spans with messages still out, in hand order."""
        return [s for s in self._pending if s.pending and not s.open]

    def handed_back(self, span: Span, offsets: Iterable[int]) -> None:
        """The producer returned these messages of ``span`` undelivered, and had an outcome
        for every other: the span commits up to its lowest returned offset (its first offset
        when none could be told). They still count in flight: nothing delivered them."""
        lowest = min(offsets, default=span.first)
        if span.failed is None or lowest < span.failed:
            span.failed = lowest
        span.settled = True

    def _span_done(self, span: Span) -> None:
        """``span`` has every outcome: move the finished, failure-free head spans to
        delivered."""
        ledger = self._ledger
        if ledger is not None and span.stamp_ms >= 0 and span.failed is None:
            ledger.span_delivered(self.topic, span.stamp_ms)
        pending = self._pending
        while pending and not pending[0].pending and pending[0].failed is None:
            self._delivered.append(pending.popleft())

    def _abandoned_one(self) -> None:
        if self._ledger is not None:
            self._ledger.abandoned_finished()

    # -- one message at a time ----------------------------------------------------------------

    def handed(self, offset: int) -> None:
        """Record that the message at ``offset`` was given to the producer."""
        span = self.open(offset)
        span.pending += 1
        self.close(span, offset + 1, 1)
        self._by_offset[offset] = span

    def withdraw(self, offset: int) -> None:
        """Take back the last handed offset: the producer never accepted that message."""
        pending = self._pending
        span = self._by_offset.get(offset)
        if span is None or not pending or pending[-1] is not span:
            raise ValueError(
                f"{self.topic}[{self.partition}]: only the last handed offset can be withdrawn, "
                f"not {offset}"
            )
        pending.pop()
        del self._by_offset[offset]
        # The consumer delivered this offset, so every earlier one of this assignment was
        # handed or committed before: committing the withdrawn offset itself is safe.
        self._next = offset

    def finished(self, offset: int) -> None:
        """Record that the message at ``offset`` was finally delivered (or dead-lettered)."""
        self._take(offset).delivered()

    def failed(self, offset: int) -> None:
        """Record that the message at ``offset`` finally failed: it stays unfinished for good."""
        span = self._take(offset)
        self.failed_in(span, offset)
        span.delivered()

    def _take(self, offset: int) -> Span:
        """The one-message span of ``offset``, whose outcome has not come back yet."""
        span = self._by_offset.pop(offset, None)
        if span is None:
            ended = any(s.first == offset for s in self._pending) or any(
                s.first == offset for s in self._delivered
            )
            what = "ended twice" if ended else "which is not in flight"
            raise ValueError(f"{self.topic}[{self.partition}]: outcome for offset {offset}, {what}")
        return span

    # -- commits ------------------------------------------------------------------------------

    @property
    def committable(self) -> int | None:
        """The offset a commit would store now, or None when nothing was handed yet."""
        pending = self._pending
        if pending:
            head = pending[0]
            if head.failed is not None and (not head.pending or head.settled):
                return head.failed
            return head.first
        return self._next

    def to_commit(self) -> int | None:
        """The offset to commit, or None when the group stores it already.

        A lower offset than the stored one is committed too: the group's offset may be past
        the log's end (the log truncated, the topic recreated, an operator's reset), the
        consumer then reads from where ``auto.offset.reset`` puts it, and a commit that did not
        store that position would have the next run skip what lies in between. Kafka's own
        consumer and MirrorMaker 2 commit the position they read from, lower or not."""
        offset = self.committable
        if offset is None or offset == self._committed:
            return None
        return offset

    def committed(self, offset: int) -> None:
        """Record that the group stores ``offset``: read when the partition was assigned, or
        committed since (commits are synchronous, so the last answer is the stored one)."""
        self._committed = offset
        self._committed_known = True
        delivered = self._delivered
        while delivered and delivered[0].end <= offset:
            delivered.popleft()

    def no_committed_offset(self) -> None:
        """Record that the group stores no offset for this partition (read when assigned)."""
        self._committed_known = True

    @property
    def committed_offset(self) -> int | None:
        return self._committed

    @property
    def committed_known(self) -> bool:
        """Whether ``committed_offset`` is the group's, None meaning it stores none: false
        while the group's offset could not be read at assignment and nothing was committed."""
        return self._committed_known

    @property
    def next_offset(self) -> int | None:
        """The next offset to hand: every offset handed so far is below it (None before the
        first). Offset syncs pair it with the target's ends (see ``_offsets``)."""
        return self._next

    @property
    def in_flight(self) -> int:
        """Messages handed to the producer whose outcome has not come back."""
        return sum(s.pending - s.open for s in self._pending)

    @property
    def uncommitted(self) -> int:
        """Messages consumed and not covered by a commit."""
        return sum(s.count for s in self._pending) + sum(s.count for s in self._delivered)

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

    __slots__ = ("_abandoned", "_abandoned_by_topic", "_trackers", "_wall_ms", "latency_ms")

    def __init__(self, wall_ms: Callable[[], float] | None = None) -> None:
        self._trackers: dict[tuple[str, int], PartitionTracker] = {}
        # Replication latency: when a span is done, the wall clock minus its last record's
        # timestamp (MirrorMaker 2's replication-latency-ms), latest per source topic.
        self._wall_ms = wall_ms
        self.latency_ms: dict[str, float] = {}
        self._abandoned = 0
        # Every message ever abandoned, per source topic (whether or not it came back since).
        self._abandoned_by_topic: dict[str, int] = {}

    def assign(self, topic: str, partition: int) -> PartitionTracker:
        """Start tracking a newly assigned partition (a fresh tracker if it was known)."""
        tracker = PartitionTracker(topic, partition, self)
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

    def span_delivered(self, topic: str, stamp_ms: int) -> None:
        """A span of ``topic`` whose last record has timestamp ``stamp_ms`` is delivered."""
        if self._wall_ms is not None:
            self.latency_ms[topic] = max(0.0, self._wall_ms() - stamp_ms)

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
