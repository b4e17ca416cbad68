"""The merger and the retry policy, driven from one thread (the deadlock the design avoids)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import pytest

from retry_buffer import (
    AsyncRetryBuffer,
    BufferClosed,
    Entry,
    InflowTimeout,
    Merger,
    RetryBuffer,
    RetryPolicy,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_one_thread_takes_and_fails_every_message_several_times_and_delivers_all() -> None:
    # The producer's thread both takes from the merger and reports the outcomes (as a
    # confluent-kafka producer does from poll()), with a limit far below the message count:
    # it sends until the merger has nothing more, then reports; each message fails 3 times.
    buf: RetryBuffer[int] = RetryBuffer(max_in_flight=8)
    merger = Merger(buf, range(500))
    delivered: list[int] = []
    sends = 0
    rounds = 0
    while not merger.finished:
        rounds += 1
        assert rounds < 10_000, "no progress"
        outstanding: list[Entry[int]] = []
        while (entry := merger.next(timeout=0.0)) is not None:
            outstanding.append(entry)
        assert outstanding or merger.finished, "merger returned nothing while work remained"
        assert len(outstanding) <= 8
        sends += len(outstanding)
        for entry in outstanding:
            if entry.attempts <= 3:
                assert buf.failed(entry, "NOT_ENOUGH_REPLICAS") is True
            else:
                buf.delivered(entry)
                delivered.append(entry.item)
    assert sorted(delivered) == list(range(500))
    assert sends == 500 * 4
    stats = buf.statistics()
    assert stats.delivered == 500
    assert stats.retries == 1500
    assert stats.in_flight == 0
    assert stats.peak_in_flight == 8
    assert stats.peak_failed_depth == 8
    assert merger.next(timeout=0.5) is None  # finished: returns at once, does not hang


def test_one_thread_blocking_next_returns_within_timeout_instead_of_deadlocking() -> None:
    # At the limit, nothing due, and only this thread could report: a blocking next() must
    # give up after its timeout so the thread can go and report.
    buf: RetryBuffer[int] = RetryBuffer(max_in_flight=3)
    merger = Merger(buf, range(30))
    delivered: list[int] = []
    rounds = 0
    while not merger.finished:
        rounds += 1
        assert rounds < 1000, "no progress"
        outstanding: list[Entry[int]] = []
        while (entry := merger.next(timeout=0.01)) is not None:
            outstanding.append(entry)
        for entry in outstanding:
            if entry.attempts < 3:
                assert buf.failed(entry, "x")
            else:
                buf.delivered(entry)
                delivered.append(entry.item)
    assert sorted(delivered) == list(range(30))
    assert buf.statistics().wait_seconds > 0


def test_merger_hands_out_failed_entries_before_fresh_ones() -> None:
    buf: RetryBuffer[str] = RetryBuffer(max_in_flight=4)
    merger = Merger(buf, iter(["a", "b", "c", "d", "e"]))
    a = merger.next()
    b = merger.next()
    assert a is not None
    assert b is not None
    buf.failed(b, "x")
    buf.failed(a, "x")
    again = [merger.next(), merger.next(), merger.next()]
    assert [e.item for e in again if e is not None] == ["b", "a", "c"]


def test_merger_at_limit_with_nothing_due_returns_none_within_timeout() -> None:
    buf: RetryBuffer[int] = RetryBuffer(max_in_flight=2)
    merger = Merger(buf, range(10))
    held = [merger.next(), merger.next()]
    assert all(e is not None for e in held)
    assert merger.next() is None
    start = time.monotonic()
    assert merger.next(timeout=0.05) is None
    assert time.monotonic() - start < 5.0
    # The source was not read past the limit.
    assert merger.held() == []
    first = held[0]
    assert first is not None
    buf.delivered(first)
    nxt = merger.next()
    assert nxt is not None
    assert nxt.item == 2


def test_merger_waits_for_backoff_then_hands_out_the_entry() -> None:
    buf: RetryBuffer[int] = RetryBuffer(
        max_in_flight=1, policy=RetryPolicy(backoff_initial_s=0.02, backoff_max_s=0.02)
    )
    merger = Merger(buf, [7])
    entry = merger.next()
    assert entry is not None
    assert buf.failed(entry, "x")
    assert merger.next() is None  # not due yet, and no room for a fresh item
    again = merger.next(timeout=5.0)
    assert again is entry
    assert again.attempts == 2


def test_merger_after_close_raises_and_close_returns_unfinished() -> None:
    buf: RetryBuffer[int] = RetryBuffer(max_in_flight=3)
    merger = Merger(buf, range(10))
    e0, e1, e2 = merger.next(), merger.next(), merger.next()
    assert e0 is not None
    assert e1 is not None
    assert e2 is not None
    buf.delivered(e1)
    buf.failed(e2, "x")
    left = buf.close()
    assert [e.item for e in left] == [0, 2]
    with pytest.raises(BufferClosed):
        merger.next()
    assert buf.close() == []


def test_max_attempts_reports_final_failure_exactly_once() -> None:
    finals: list[tuple[Entry[str], object]] = []
    buf: RetryBuffer[str] = RetryBuffer(
        max_in_flight=2,
        policy=RetryPolicy(max_attempts=3),
        on_final_failure=lambda e, err: finals.append((e, err)),
    )
    entry = buf.admit("m")
    for n in range(1, 3):
        assert buf.failed(entry, f"err{n}") is True
        taken = buf.take_failed()
        assert taken is entry
    assert entry.attempts == 3
    assert buf.failed(entry, "err3") is False
    assert [(e.item, err) for e, err in finals] == [("m", "err3")]
    assert buf.take_failed() is None
    assert buf.statistics().final_failures == 1
    assert buf.in_flight == 0


def test_non_retriable_failure_is_final_at_once() -> None:
    finals: list[object] = []
    buf: RetryBuffer[str] = RetryBuffer(on_final_failure=lambda e, err: finals.append(err))
    entry = buf.admit("too-big")
    assert buf.failed(entry, "MSG_SIZE_TOO_LARGE", retriable=False) is False
    assert finals == ["MSG_SIZE_TOO_LARGE"]


def test_deadline_counts_from_the_first_failure_and_expires_in_the_failed_buffer() -> None:
    """deadline_s runs from the first failure, not from admission: the first attempt's own
    time (a write a broker held until its timeout) does not use it up."""
    clock = FakeClock()
    finals: list[tuple[int, object]] = []
    buf: RetryBuffer[int] = RetryBuffer(
        max_in_flight=4,
        policy=RetryPolicy(deadline_s=10.0),
        on_final_failure=lambda e, err: finals.append((e.item, err)),
        clock=clock,
    )
    entry = buf.admit(1)
    clock.now = 5.0
    assert buf.failed(entry, "timeout") is True
    clock.now = 14.0  # 14 s after admission, 9 after the first failure: tried again
    assert buf.take_failed() is entry
    assert buf.failed(entry, "timeout") is True
    clock.now = 15.0  # the producer came back too late
    assert buf.take_failed() is None
    assert finals == [(1, "timeout")]
    assert buf.statistics().final_failures == 1


@pytest.mark.parametrize("kind", ["buffer", "merger", "async"])
@pytest.mark.parametrize("raised", [RuntimeError("a callback bug"), KeyboardInterrupt()])
def test_a_raising_final_callback_loses_no_entry_taken_or_reported(
    raised: BaseException, kind: str
) -> None:
    """take_failed() ends "a" and "a2" (past their deadline) on the way to "b" (due); the
    callback raises for each: both are still reported, and "b" is not lost: the next take
    returns it, its attempts counted once. The same through a Merger and an AsyncRetryBuffer."""
    clock = FakeClock()
    finals: list[str] = []

    def on_final(entry: Entry[str], error: object) -> None:
        finals.append(entry.item)
        raise raised

    policy = RetryPolicy(deadline_s=10.0, backoff_initial_s=1.0, backoff_max_s=1.0)
    buf: RetryBuffer[str] | AsyncRetryBuffer[str]
    if kind == "async":
        buf = AsyncRetryBuffer(
            max_in_flight=4, policy=policy, on_final_failure=on_final, clock=clock
        )
    else:
        buf = RetryBuffer(max_in_flight=4, policy=policy, on_final_failure=on_final, clock=clock)
    a, a2 = buf.try_admit("a"), buf.try_admit("a2")
    assert a is not None
    assert a2 is not None
    take: Callable[[], Entry[str] | None] = buf.take_failed
    if kind == "merger":
        assert isinstance(buf, RetryBuffer)
        take = functools.partial(Merger(buf, []).next, 0.0)
    buf.failed(a, "x")
    buf.failed(a2, "x")
    clock.now = 9.5
    b = buf.try_admit("b")
    assert b is not None
    buf.failed(b, "x")  # due at 10.5, before its deadline (19.5)
    clock.now = 10.5  # "a" and "a2" past their deadline, "b" due
    with pytest.raises(type(raised)):
        take()
    assert finals == ["a", "a2"]  # both reported although the first raised
    assert take() is b
    assert b.attempts == 2
    assert buf.statistics().in_flight == 1
    assert buf.statistics().final_failures == 2


@pytest.mark.parametrize("kind", ["buffer", "merger", "async"])
def test_a_callback_that_closes_the_buffer_and_raises_is_what_the_taker_sees(kind: str) -> None:
    """take_failed() ends "a" (past its deadline) on the way to "b" (due); the callback closes
    the buffer (as another thread could at that moment) and raises. Its exception reaches the
    caller, not a BufferClosed from putting "b" back: close() has handed "b" back already."""
    clock = FakeClock()
    handed_back: list[Entry[str]] = []
    buffers: list[RetryBuffer[str] | AsyncRetryBuffer[str]] = []

    def on_final(entry: Entry[str], error: object) -> None:
        handed_back.extend(buffers[0].close())
        raise ValueError("from on_final_failure")

    policy = RetryPolicy(deadline_s=10.0)
    buf: RetryBuffer[str] | AsyncRetryBuffer[str]
    if kind == "async":
        buf = AsyncRetryBuffer(
            max_in_flight=4, policy=policy, on_final_failure=on_final, clock=clock
        )
    else:
        buf = RetryBuffer(max_in_flight=4, policy=policy, on_final_failure=on_final, clock=clock)
    buffers.append(buf)
    take: Callable[[], Entry[str] | None] = buf.take_failed
    if kind == "merger":
        assert isinstance(buf, RetryBuffer)
        take = functools.partial(Merger(buf, []).next, 0.0)
    a = buf.try_admit("a")
    assert a is not None
    buf.failed(a, "x")
    clock.now = 5.0
    b = buf.try_admit("b")
    assert b is not None
    buf.failed(b, "x")
    clock.now = 10.0  # "a" is past its deadline, "b" is not
    with pytest.raises(ValueError, match="from on_final_failure"):
        take()
    assert handed_back == [b]
    stats = buf.statistics()
    assert (stats.final_failures, stats.returned_on_close, stats.in_flight) == (1, 1, 0)


def test_backoff_doubles_per_attempt_up_to_the_maximum() -> None:
    clock = FakeClock()
    buf: RetryBuffer[int] = RetryBuffer(
        policy=RetryPolicy(backoff_initial_s=1.0, backoff_max_s=3.0), clock=clock
    )
    entry = buf.admit(1)
    waits = []
    for _ in range(4):
        buf.failed(entry, "x")
        waits.append(buf.next_due_in())
        assert buf.take_failed() is None
        clock.now += buf.next_due_in() or 0.0
        assert buf.take_failed() is entry
    assert waits == [1.0, 2.0, 3.0, 3.0]


def test_oldest_due_entry_first_across_backoff_levels() -> None:
    clock = FakeClock()
    buf: RetryBuffer[str] = RetryBuffer(
        policy=RetryPolicy(backoff_initial_s=1.0, backoff_max_s=8.0), clock=clock
    )
    a, b = buf.admit("a"), buf.admit("b")
    buf.failed(a, "x")  # due at 1
    assert buf.take_failed() is None
    clock.now = 1.0
    assert buf.take_failed() is a
    buf.failed(a, "x")  # second failure: due at 1 + 2 = 3
    clock.now = 1.5
    buf.failed(b, "x")  # due at 2.5
    clock.now = 10.0
    assert [buf.take_failed(), buf.take_failed(), buf.take_failed()] == [a, b, None]


def test_admit_timeout_zero_refuses_at_once_naming_limit() -> None:
    buf: RetryBuffer[int] = RetryBuffer(max_in_flight=1)
    buf.admit(1)
    with pytest.raises(InflowTimeout, match=r"1 messages are in flight.*timeout=0"):
        buf.admit(2, timeout=0)
    with pytest.raises(InflowTimeout, match=r"timeout=0\.01"):
        buf.admit(2, timeout=0.01)
    assert buf.try_admit(2) is None


def test_admit_many_admits_the_prefix_that_fits() -> None:
    buf: RetryBuffer[int] = RetryBuffer(max_in_flight=5)
    first = buf.admit_many([0, 1, 2])
    assert [e.item for e in first] == [0, 1, 2]
    assert [e.seq for e in first] == [0, 1, 2]
    second = buf.admit_many([3, 4, 5, 6])
    assert [e.item for e in second] == [3, 4]
    with pytest.raises(InflowTimeout):
        buf.admit_many([5], timeout=0)
    buf.delivered(first[0])
    assert [e.item for e in buf.admit_many([5, 6])] == [5]
    assert buf.statistics().peak_in_flight == 5


_PUBLIC_FIELDS = (
    "item",
    "seq",
    "attempts",
    "admitted_at",
    "first_failure_at",
    "last_error",
    "possibly_duplicated",
)


def _fields(entry: Entry[str]) -> list[object]:
    return [getattr(entry, name) for name in _PUBLIC_FIELDS]


def test_admitted_entries_read_like_constructed_ones_until_and_after_a_failure() -> None:
    # Admission sets an entry's fields itself (no __init__ on the hot path): whichever way an
    # entry is made, its public fields read the same.
    clock = FakeClock()
    clock.now = 7.0
    buf: RetryBuffer[str] = RetryBuffer(clock=clock)
    abuf: AsyncRetryBuffer[str] = AsyncRetryBuffer(clock=clock)
    made = [buf.admit("a"), buf.try_admit("b"), *buf.admit_many(["c"]), abuf.try_admit("d")]
    built = [Entry("a", 0, 7.0), Entry("b", 1, 7.0), Entry("c", 2, 7.0), Entry("d", 0, 7.0)]
    for m, b in zip(made, built, strict=True):
        assert m is not None
        assert isinstance(m, Entry)
        assert _fields(m) == _fields(b) == [b.item, b.seq, 1, 7.0, None, None, False]
        assert repr(m) == repr(b)
    first = made[0]
    assert first is not None
    clock.now = 9.0
    assert buf.failed(first, "boom", possibly_persisted=True)
    clock.now = 11.0
    again = buf.take_failed()
    assert again is first
    assert buf.failed(first, "bang")
    assert _fields(first) == ["a", 0, 2, 7.0, 9.0, "bang", True]


def test_final_failure_without_callback_is_logged_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    buf: RetryBuffer[str] = RetryBuffer()
    buf.failed(buf.admit("m"), "fatal", retriable=False)
    assert buf.statistics().final_failures == 1
    assert "seq=0 failed finally" in caplog.text


def test_a_raising_callback_does_not_lose_the_count() -> None:
    def boom(entry: Entry[str], error: object) -> None:
        raise RuntimeError("callback failed")

    buf: RetryBuffer[str] = RetryBuffer(on_final_failure=boom)
    entry = buf.admit("m")
    with pytest.raises(RuntimeError, match="callback failed"):
        buf.failed(entry, "fatal", retriable=False)
    stats = buf.statistics()
    assert (stats.final_failures, stats.in_flight) == (1, 0)
