"""What happened to every message of one producer, and the figures the demo reports from it.

``DeliveryLog`` records sends and final outcomes as they happen (thread-safe, clock injected);
``summarize`` turns a finished log plus what consuming the topic back found into a
``ProducerSummary``. Loss is decided by the consume-back, never by the callbacks: a message whose
callback said "failed" may still be in the topic (an ambiguous failure), and a message whose
callback said "delivered" must be there.
"""

from __future__ import annotations

import enum
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass


class Status(enum.Enum):
    PENDING = "pending"  # sent, no outcome yet
    ACKED = "acked"  # the producer reported success
    FAILED = "failed"  # the producer reported a final error
    UNDELIVERED = "undelivered"  # still not delivered at the deadline: purged or handed back


@dataclass(frozen=True, slots=True, kw_only=True)
class Record:
    """One message: when it was sent and when (and how) its outcome came, seconds since start."""

    sent_s: float
    status: Status = Status.PENDING
    done_s: float | None = None
    error: str | None = None


class DeliveryLog:
    """Sends and outcomes of one producer, indexed by message sequence number.

    ``begin`` hands out the next sequence number and records the send before ``produce`` is
    called, so an outcome can never arrive for a message the log does not know yet.
    """

    def __init__(self, *, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._records: list[Record] = []
        self._acked = 0
        self._failed = 0

    def begin(self) -> int:
        with self._lock:
            self._records.append(Record(sent_s=self._clock()))
            return len(self._records) - 1

    def withdraw(self, seq: int) -> None:
        """Forget the last ``begin``: ``produce`` refused the message, so it was never sent."""
        with self._lock:
            if seq != len(self._records) - 1 or self._records[seq].status is not Status.PENDING:
                raise ValueError(f"seq={seq}: only the latest pending message can be withdrawn")
            self._records.pop()

    def acked(self, seq: int) -> None:
        self._finish(seq, Status.ACKED, None)

    def failed(self, seq: int, error: str) -> None:
        self._finish(seq, Status.FAILED, error)

    def undelivered(self, seq: int, reason: str) -> None:
        self._finish(seq, Status.UNDELIVERED, reason)

    def _finish(self, seq: int, status: Status, error: str | None) -> None:
        now_s = self._clock()
        with self._lock:
            record = self._records[seq]
            if record.status is not Status.PENDING:
                return  # the first final outcome stands
            self._records[seq] = Record(
                sent_s=record.sent_s, status=status, done_s=now_s, error=error
            )
            if status is Status.ACKED:
                self._acked += 1
            elif status is Status.FAILED:
                self._failed += 1

    def counts(self) -> tuple[int, int, int]:
        """(sent, acked, failed) so far, for the progress line."""
        with self._lock:
            return len(self._records), self._acked, self._failed

    def pending(self) -> list[int]:
        with self._lock:
            return [i for i, r in enumerate(self._records) if r.status is Status.PENDING]

    def records(self) -> tuple[Record, ...]:
        with self._lock:
            return tuple(self._records)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerSummary:
    """The figures of one producer's run. Times in seconds since the run started."""

    name: str
    sent: int
    delivered: int  # the producer reported success
    failed: int  # the producer reported a final error
    undelivered: int  # neither by the deadline: purged, handed back or never reported
    found: int  # distinct messages found by consuming the topic back
    lost: int  # sent but not found in the topic
    lost_after_ack: int  # reported delivered yet not in the topic: acks=all broken
    duplicates: int  # extra copies found in the topic
    duplicated_messages: int  # messages found more than once (a producer counts these)
    possible_duplicates: int | None  # the producer's own count; None if it keeps none
    rerouted: int
    longest_stall_s: float  # longest any message waited for success (or its deadline)
    not_delivered_within_1s: int  # late, failed or undelivered
    p50_ms: float | None
    p99_ms: float | None
    delivered_per_s: tuple[int, ...]  # successes per one-second bin since the start


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank ``q``-th percentile (0 < q <= 100) of ``values``; None when empty."""
    if not 0 < q <= 100:
        raise ValueError(f"q={q!r}: a percentile lies in (0, 100]")
    if not values:
        return None
    ordered = sorted(values)
    rank = math.ceil(q / 100 * len(ordered))
    return ordered[max(0, rank - 1)]


def per_second(times_s: Sequence[float], *, end_s: float) -> tuple[int, ...]:
    """How many of ``times_s`` fall in each one-second bin [i, i+1) from 0 up to ``end_s``."""
    bins = [0] * max(1, math.ceil(end_s))
    for t in times_s:
        if 0 <= t < len(bins):
            bins[int(t)] += 1
    return tuple(bins)


def summarize(
    *,
    name: str,
    records: Sequence[Record],
    found: Mapping[int, int],
    end_s: float,
    rerouted: int,
    possible_duplicates: int | None,
) -> ProducerSummary:
    """Figures for one producer from its log and ``found`` (sequence -> copies in the topic).

    ``end_s`` is the deadline the run gave up waiting at: a message without success by then
    counts as having waited until it.
    """
    latencies_s: list[float] = []
    ack_times_s: list[float] = []
    longest_s = 0.0
    slow = 0
    counts = dict.fromkeys(Status, 0)
    lost_after_ack = 0
    for seq, r in enumerate(records):
        counts[r.status] += 1
        if r.status is Status.ACKED and r.done_s is not None:
            waited_s = r.done_s - r.sent_s
            latencies_s.append(waited_s)
            ack_times_s.append(r.done_s)
            if seq not in found:
                lost_after_ack += 1
        elif r.done_s is not None:  # failed, or given up on at the deadline
            waited_s = r.done_s - r.sent_s
        else:
            waited_s = max(0.0, end_s - r.sent_s)
        longest_s = max(longest_s, waited_s)
        if r.status is not Status.ACKED or waited_s > 1.0:
            slow += 1
    sent = len(records)
    found_sent = sum(1 for seq in found if 0 <= seq < sent)
    p50 = percentile(latencies_s, 50)
    p99 = percentile(latencies_s, 99)
    return ProducerSummary(
        name=name,
        sent=sent,
        delivered=counts[Status.ACKED],
        failed=counts[Status.FAILED],
        undelivered=counts[Status.UNDELIVERED] + counts[Status.PENDING],
        found=found_sent,
        lost=sent - found_sent,
        lost_after_ack=lost_after_ack,
        duplicates=sum(max(0, n - 1) for n in found.values()),
        duplicated_messages=sum(1 for n in found.values() if n > 1),
        possible_duplicates=possible_duplicates,
        rerouted=rerouted,
        longest_stall_s=longest_s,
        not_delivered_within_1s=slow,
        p50_ms=None if p50 is None else p50 * 1000,
        p99_ms=None if p99 is None else p99 * 1000,
        delivered_per_s=per_second(ack_times_s, end_s=end_s),
    )
