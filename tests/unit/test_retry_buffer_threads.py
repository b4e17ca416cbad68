"""The threaded flavour under real threads: producers blocking at the limit, a callback thread.

Every wait here is bounded by a timeout; a deadlock shows up as a failed join, not a hang.
"""

from __future__ import annotations

import functools
import math
import queue
import threading
import time
from collections.abc import Callable

import pytest

from retry_buffer import (
    BufferClosed,
    Entry,
    InflowTimeout,
    Merger,
    RetryBuffer,
    RetryPolicy,
)
from retry_buffer._core import Accounting

JOIN_S = 30.0


def _join_all(threads: list[threading.Thread]) -> None:
    deadline = time.monotonic() + JOIN_S
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "threads still running: deadlock?"


def test_producers_block_at_limit_while_a_callback_thread_delivers_and_fails() -> None:
    limit, producers, per_producer = 16, 4, 400
    finals: list[int] = []
    buf: RetryBuffer[tuple[int, int]] = RetryBuffer(
        max_in_flight=limit,
        policy=RetryPolicy(max_attempts=3),
        on_final_failure=lambda e, err: finals.append(e.seq),
    )
    outbox: queue.Queue[Entry[tuple[int, int]] | None] = queue.Queue()
    errors: list[BaseException] = []
    max_seen = 0

    def producer(p: int) -> None:
        nonlocal max_seen
        try:
            for i in range(per_producer):
                entry = buf.admit((p, i), timeout=JOIN_S)
                max_seen = max(max_seen, buf.in_flight)
                outbox.put(entry)
                # Like a producer between produce() calls: re-send what failed.
                while (again := buf.take_failed()) is not None:
                    outbox.put(again)
        except BaseException as exc:
            errors.append(exc)

    def callbacks() -> None:
        # Like librdkafka's delivery reports: every third attempt fails, some finally.
        n = 0
        try:
            while (entry := outbox.get(timeout=JOIN_S)) is not None:
                n += 1
                if n % 3 == 0:
                    buf.failed(entry, "NOT_ENOUGH_REPLICAS", possibly_persisted=n % 2 == 0)
                else:
                    buf.delivered(entry)
        except BaseException as exc:
            errors.append(exc)

    cb = threading.Thread(target=callbacks)
    ps = [threading.Thread(target=producer, args=(p,)) for p in range(producers)]
    cb.start()
    for t in ps:
        t.start()
    _join_all(ps)
    # Drain what failed after the producers stopped, from this thread.
    deadline = time.monotonic() + JOIN_S
    while buf.in_flight and time.monotonic() < deadline:
        while (again := buf.take_failed()) is not None:
            outbox.put(again)
        buf.wait_idle(0.01)
    outbox.put(None)
    _join_all([cb])
    assert errors == []
    stats = buf.statistics()
    total = producers * per_producer
    assert stats.admitted == total
    assert stats.in_flight == 0
    assert stats.delivered + stats.final_failures == total
    assert stats.final_failures == len(finals) == len(set(finals))
    assert stats.peak_in_flight <= limit
    assert max_seen <= limit
    assert stats.peak_failed_depth <= limit
    assert stats.retries > 0
    assert stats.wait_seconds > 0  # producers did block at the limit


def test_merger_thread_and_callback_thread_deliver_everything() -> None:
    buf: RetryBuffer[int] = RetryBuffer(max_in_flight=8)
    merger = Merger(buf, range(2000))
    outbox: queue.Queue[Entry[int] | None] = queue.Queue()
    delivered: list[int] = []
    errors: list[BaseException] = []

    def produce() -> None:
        try:
            while not merger.finished:
                entry = merger.next(timeout=0.05)
                if entry is not None:
                    outbox.put(entry)
            outbox.put(None)
        except BaseException as exc:
            errors.append(exc)

    def callbacks() -> None:
        try:
            while (entry := outbox.get(timeout=JOIN_S)) is not None:
                if entry.attempts < 3 and entry.item % 4 == 0:
                    buf.failed(entry, "timeout")
                else:
                    delivered.append(entry.item)
                    buf.delivered(entry)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=produce), threading.Thread(target=callbacks)]
    for t in threads:
        t.start()
    _join_all(threads)
    assert errors == []
    assert sorted(delivered) == list(range(2000))
    assert buf.statistics().retries == 2 * 500


def test_close_wakes_blocked_admitters_and_every_entry_ends_once() -> None:
    buf: RetryBuffer[int] = RetryBuffer(max_in_flight=2)
    first = [buf.admit(0), buf.admit(1)]
    outcomes: list[str] = []

    def blocked() -> None:
        try:
            buf.admit(99, timeout=JOIN_S)
            outcomes.append("admitted")
        except BufferClosed:
            outcomes.append("closed")

    t = threading.Thread(target=blocked)
    t.start()
    deadline = time.monotonic() + JOIN_S
    while buf._core.waiting == 0 and time.monotonic() < deadline:  # wait until it blocks
        time.sleep(0.001)
    left = buf.close()
    _join_all([t])
    assert outcomes == ["closed"]
    assert left == first
    assert buf.wait_idle(0) is True


def test_admit_times_out_when_nobody_reports() -> None:
    buf: RetryBuffer[int] = RetryBuffer(max_in_flight=1)
    buf.admit(0)
    start = time.monotonic()
    with pytest.raises(InflowTimeout) as caught:
        buf.admit(1, timeout=0.05)
    assert (caught.value.limit, caught.value.timeout_s) == (1, 0.05)
    assert time.monotonic() - start >= 0.05
    assert buf.statistics().wait_seconds >= 0.05


def test_a_delivery_just_before_an_admit_starts_waiting_still_wakes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The window is between a blocked admit's look for room (under the lock) and its wait;
    # delivered() frees room without the lock. The hook delivers from another thread exactly
    # there; the admit must then get in rather than sleep until its timeout.
    buf: RetryBuffer[int] = RetryBuffer(max_in_flight=1)
    first = buf.admit(0)
    real_try_admit = Accounting.try_admit
    refusals: list[int] = []
    deliverer = threading.Thread(target=buf.delivered, args=(first,))

    def try_admit(core: Accounting[int], item: int) -> Entry[int] | None:
        entry = real_try_admit(core, item)
        if entry is None:
            refusals.append(item)
            if len(refusals) == 2:  # the look made by the waiting path, under the lock
                deliverer.start()
                deliverer.join(0.5)  # done, or blocked on the lock to wake this admit
        return entry

    monkeypatch.setattr(Accounting, "try_admit", try_admit)
    admitted: list[Entry[int]] = []
    # No timeout: a missed wake leaves it asleep for good, which the join reports.
    admitter = threading.Thread(target=lambda: admitted.append(buf.admit(1)), daemon=True)
    admitter.start()
    _join_all([admitter, deliverer])
    assert [e.item for e in admitted] == [1]
    assert refusals == [1, 1]
    assert buf.statistics().delivered == 1


def test_a_delivery_just_before_a_merger_starts_waiting_still_wakes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As above, for Merger.next(timeout=None): the delivery lands between its last look
    # (whether it can progress) and its wait.
    buf: RetryBuffer[int] = RetryBuffer(max_in_flight=1)
    first = buf.admit(0)
    merger = Merger(buf, [1])
    real_can_progress = Merger._can_progress
    looks: list[bool] = []
    deliverer = threading.Thread(target=buf.delivered, args=(first,))

    def can_progress(self: Merger[int]) -> bool:
        answer = real_can_progress(self)
        looks.append(answer)
        if len(looks) == 1:
            assert not answer  # full, nothing due: it is about to wait
            deliverer.start()
            deliverer.join(0.5)  # done, or blocked on the lock to wake the merger
        return answer

    monkeypatch.setattr(Merger, "_can_progress", can_progress)
    taken: list[Entry[int] | None] = []
    taker = threading.Thread(target=lambda: taken.append(merger.next(timeout=None)), daemon=True)
    taker.start()
    _join_all([taker, deliverer])
    assert [None if e is None else e.item for e in taken] == [1]
    assert buf.statistics().delivered == 1


def _race_delivered_against_close() -> None:
    buf: RetryBuffer[int] = RetryBuffer(max_in_flight=500)
    entries = buf.admit_many(list(range(500)))
    delivered: list[int] = []
    closed_errors: list[int] = []
    go = threading.Event()

    def deliver() -> None:
        go.wait(JOIN_S)
        for e in entries:
            try:
                buf.delivered(e)
                delivered.append(e.item)
            except BufferClosed:
                closed_errors.append(e.item)

    t = threading.Thread(target=deliver)
    t.start()
    go.set()
    left = buf.close()
    _join_all([t])
    returned = [e.item for e in left]
    assert sorted(delivered + returned) == list(range(500))
    assert closed_errors == returned
    stats = buf.statistics()
    assert (stats.delivered, stats.returned_on_close) == (len(delivered), len(returned))


def test_delivered_races_with_close_and_each_entry_ends_exactly_once() -> None:
    for _ in range(20):
        _race_delivered_against_close()


def _in_another_thread(call: Callable[[], object]) -> BaseException | None:
    """Run ``call`` in a thread of its own (a polling thread reporting an outcome) and wait
    for it; what it raised, or None."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:
            raised.append(exc)

    t = threading.Thread(target=run)
    t.start()
    _join_all([t])
    return raised[0] if raised else None


class _HookedTable(dict[Entry[int], Entry[int]]):
    """The core's in-flight table, with a hook on each side of every ``popitem()`` (close()'s
    pops): another thread's report runs exactly in a window of close()."""

    def __init__(
        self,
        table: dict[Entry[int], Entry[int]],
        before: Callable[[_HookedTable], None] = lambda table: None,
        after: Callable[[_HookedTable], None] = lambda table: None,
    ) -> None:
        super().__init__(table)
        self.before = before
        self.after = after

    def popitem(self) -> tuple[Entry[int], Entry[int]]:
        self.before(self)
        popped = super().popitem()
        self.after(self)
        return popped


def test_a_delivery_of_the_last_entry_while_close_pops_is_counted_once() -> None:
    # close() knows one entry is left and is about to pop it; the polling thread delivers that
    # entry first. close() must hand back the others (not raise KeyError and drop them).
    buf: RetryBuffer[int] = RetryBuffer(max_in_flight=3)
    entries = [buf.admit(i) for i in range(3)]
    raised: list[BaseException | None] = []

    def before(table: _HookedTable) -> None:
        if len(table) == 1 and not raised:  # popitem() is LIFO: the one left is entries[0]
            raised.append(_in_another_thread(functools.partial(buf.delivered, entries[0])))

    buf._core._live = _HookedTable(buf._core._live, before=before)
    left = buf.close()
    assert raised == [None]  # delivered
    assert [e.item for e in left] == [1, 2]
    stats = buf.statistics()
    assert (stats.delivered, stats.returned_on_close, stats.in_flight) == (1, 2, 0)
    assert buf.close() == []


def test_a_delivery_after_close_took_its_entry_raises_buffer_closed() -> None:
    # close() has popped every entry and not yet marked them; a delivery of one of them is a
    # report after close() (FailoverProducer catches BufferClosed there), not a foreign entry.
    buf: RetryBuffer[int] = RetryBuffer(max_in_flight=3)
    entries = [buf.admit(i) for i in range(3)]
    raised: list[BaseException | None] = []

    def after(table: _HookedTable) -> None:
        if not table and not raised:
            raised.append(_in_another_thread(functools.partial(buf.delivered, entries[0])))

    buf._core._live = _HookedTable(buf._core._live, after=after)
    left = buf.close()
    assert len(raised) == 1
    assert isinstance(raised[0], BufferClosed), raised[0]
    assert left == entries
    stats = buf.statistics()
    assert (stats.delivered, stats.returned_on_close, stats.in_flight) == (0, 3, 0)


@pytest.mark.parametrize("timeout", [math.inf, 2 * threading.TIMEOUT_MAX], ids=["inf", "huge"])
@pytest.mark.parametrize("call", ["admit", "wait_idle", "merger"])
def test_a_timeout_past_what_a_lock_can_wait_waits_without_one(
    call: str, timeout: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Condition.wait raises OverflowError past threading.TIMEOUT_MAX; such a timeout is
    # documented as valid (finite or infinite, >= 0) and means: wait until woken. The delivery
    # is started from the wait itself, so it lands while the caller waits (its wake needs the
    # lock, which the wait releases).
    buf: RetryBuffer[int] = RetryBuffer(max_in_flight=1)
    first = buf.admit(0)
    deliverer = threading.Thread(target=buf.delivered, args=(first,))
    real_wait = threading.Condition.wait

    def wait(cond: threading.Condition, timeout: float | None = None) -> bool:
        if cond is buf._cond and deliverer.ident is None:
            deliverer.start()
        return real_wait(cond, timeout)

    monkeypatch.setattr(threading.Condition, "wait", wait)
    operations: dict[str, Callable[[], object]] = {
        "admit": lambda: buf.admit(1, timeout=timeout).item,
        "wait_idle": lambda: buf.wait_idle(timeout),
        "merger": lambda: getattr(Merger(buf, [1]).next(timeout=timeout), "item", None),
    }
    results: list[object] = []
    waiter = threading.Thread(target=lambda: results.append(operations[call]()), daemon=True)
    waiter.start()
    _join_all([waiter])
    assert deliverer.ident is not None  # it did wait
    _join_all([deliverer])
    assert results == [True if call == "wait_idle" else 1]
    assert buf._core.waiting == 0
