"""The threaded flavour under real threads: producers blocking at the limit, a callback thread.

Every wait here is bounded by a timeout; a deadlock shows up as a failed join, not a hang.
"""

from __future__ import annotations

import queue
import threading
import time

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
