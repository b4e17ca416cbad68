"""``shut_admission()``, in both shells: a sender that stops admits nothing more, and what it
has in flight still finishes.

Waiting admitters wake and are refused with ``AdmissionShut`` (a ``BufferClosed``), as is
every later look for room; outcomes, retries and ``close()`` go on and are counted.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator

import pytest

from retry_buffer import (
    AdmissionShut,
    AsyncMerger,
    AsyncRetryBuffer,
    BufferClosed,
    Entry,
    Merger,
    RetryBuffer,
    RetryPolicy,
)

JOIN_S = 30.0


class OwnEntry(Entry["OwnEntry"]):
    __slots__ = ()

    def __init__(self) -> None:
        pass

    @property
    def item(self) -> OwnEntry:
        return self


def test_admission_shut_is_a_buffer_closed_that_says_what_happened() -> None:
    assert issubclass(AdmissionShut, BufferClosed)
    buf: RetryBuffer[str] = RetryBuffer(max_in_flight=2)
    buf.shut_admission()
    with pytest.raises(AdmissionShut, match=r"admission was shut \(shut_admission\(\)\)"):
        buf.try_admit("late")
    buf.close()
    with pytest.raises(BufferClosed, match="the buffer is closed") as caught:
        buf.try_admit("late")
    assert type(caught.value) is BufferClosed  # closed: the entries were handed back


def test_threaded_waiters_are_refused_and_what_is_in_flight_still_ends() -> None:
    finals: list[str] = []
    buf: RetryBuffer[str] = RetryBuffer(
        max_in_flight=2,
        policy=RetryPolicy(max_attempts=2),
        on_final_failure=lambda e, err: finals.append(e.item),
    )
    a, b = buf.admit("a"), buf.admit("b")
    outcomes: list[str] = []

    def blocked(call: str) -> None:
        try:
            if call == "admit":
                buf.admit("w", timeout=JOIN_S)
            else:
                buf.admit_many(["w1", "w2"], timeout=JOIN_S)
            outcomes.append("admitted")
        except AdmissionShut:
            outcomes.append("refused")

    threads = [threading.Thread(target=blocked, args=(call,)) for call in ("admit", "many")]
    for t in threads:
        t.start()
    deadline = time.monotonic() + JOIN_S
    while buf._core.waiting < 2 and time.monotonic() < deadline:  # both blocked
        time.sleep(0.001)
    buf.shut_admission()
    for t in threads:
        t.join(JOIN_S)
    assert not any(t.is_alive() for t in threads)
    assert outcomes == ["refused", "refused"]
    assert buf.admission_shut
    assert not buf.closed

    # New looks for room are refused, not answered "no room", even with room.
    buf.delivered(a)
    assert buf.in_flight == 1
    assert not buf.has_room()
    for look in (
        lambda: buf.admit("x", timeout=0),
        lambda: buf.admit("x"),
        lambda: buf.try_admit("x"),
        lambda: buf.try_enter(OwnEntry()),  # type: ignore[arg-type]  # its own item
        lambda: buf.admit_many(["x"]),
    ):
        with pytest.raises(AdmissionShut):
            look()

    # What is in flight still fails, retries and ends.
    assert buf.failed(b, "NotEnoughReplicas")
    assert buf.take_failed() is b
    assert not buf.failed(b, "NotEnoughReplicas")  # max_attempts: fails finally
    assert finals == ["b"]
    assert buf.wait_idle(0)
    assert buf.close() == []
    stats = buf.statistics()
    assert (stats.admitted, stats.delivered, stats.final_failures, stats.retries) == (2, 1, 1, 1)
    assert stats.in_flight == stats.returned_on_close == 0


def test_async_waiters_are_refused_and_what_is_in_flight_still_ends() -> None:
    async def main() -> None:
        buf: AsyncRetryBuffer[str] = AsyncRetryBuffer(max_in_flight=2)
        a, b = await buf.admit("a"), await buf.admit("b")
        waiters = [
            asyncio.ensure_future(buf.admit("w", timeout=JOIN_S)),
            asyncio.ensure_future(buf.enter(OwnEntry(), timeout=None)),  # type: ignore[arg-type]
            asyncio.ensure_future(buf.admit_many(["w1", "w2"], timeout=JOIN_S)),
        ]
        await asyncio.sleep(0)
        assert buf._core.waiting == 3
        buf.shut_admission()
        results = await asyncio.wait_for(asyncio.gather(*waiters, return_exceptions=True), 5)
        assert [type(r) for r in results] == [AdmissionShut] * 3
        assert (len(buf._waiters), buf._core.waiting) == (0, 0)

        buf.delivered(a)  # room now, and still refused
        with pytest.raises(AdmissionShut):
            await buf.admit("x", timeout=0)
        with pytest.raises(AdmissionShut):
            buf.try_admit("x")
        with pytest.raises(AdmissionShut):
            buf.try_enter(OwnEntry())  # type: ignore[arg-type]  # its own item
        with pytest.raises(AdmissionShut):
            await buf.admit_many(["x"])

        assert buf.failed(b, "NotEnoughReplicas")
        assert buf.take_failed() is b
        flushing = asyncio.ensure_future(buf.wait_idle(JOIN_S))
        await asyncio.sleep(0)
        buf.delivered(b)
        assert await flushing
        assert buf.close() == []
        stats = buf.statistics()
        assert (stats.admitted, stats.delivered, stats.retries, stats.in_flight) == (2, 2, 1, 0)

    asyncio.run(main())


def test_async_enter_services_before_each_look_and_wakes_when_a_retry_is_due() -> None:
    """``enter(service=...)``: the sender's service runs before each look, and a wait ends when
    the next failed entry is due (no outcome wakes it: the service's retry makes the room).
    Once admission is shut, the woken waiter is refused without servicing again."""

    async def main() -> None:
        buf: AsyncRetryBuffer[OwnEntry] = AsyncRetryBuffer(
            max_in_flight=1, policy=RetryPolicy(backoff_initial_s=0.05, backoff_max_s=0.05)
        )
        first = OwnEntry()
        await buf.enter(first)
        assert buf.failed(first, "NotEnoughReplicas")
        looks: list[float] = []

        def service() -> None:  # the retry succeeds at once
            looks.append(time.monotonic())
            entry = buf.take_failed()
            if entry is not None:
                buf.delivered(entry)

        start = time.monotonic()
        second = OwnEntry()
        await buf.enter(second, JOIN_S, service=service)
        assert 0.04 <= time.monotonic() - start < 5
        assert len(looks) >= 2  # before the first look, and after the wait that ended at due
        assert buf.statistics().delivered == 1

        looks.clear()
        waiting = asyncio.ensure_future(buf.enter(OwnEntry(), JOIN_S, service=service))
        await asyncio.sleep(0)
        assert len(looks) == 1
        assert not waiting.done()
        buf.shut_admission()
        with pytest.raises(AdmissionShut):
            await waiting
        assert len(looks) == 1
        with pytest.raises(AdmissionShut):  # a late sender: refused at once, no service
            await buf.enter(OwnEntry(), JOIN_S, service=service)
        assert len(looks) == 1
        buf.delivered(second)  # the entry in flight still ends

    asyncio.run(main())


def test_threaded_merger_hands_out_only_failed_entries_once_admission_is_shut() -> None:
    buf: RetryBuffer[int] = RetryBuffer(max_in_flight=2)
    source = iter(range(10))
    merger = Merger(buf, source)
    a, b = merger.next(), merger.next()
    assert a is not None
    assert b is not None
    assert merger.next() is None  # at the limit
    buf.shut_admission()
    buf.failed(a, "NotEnoughReplicas")
    assert merger.next(timeout=JOIN_S) is a  # a retry, never a fresh item
    buf.delivered(b)
    assert (merger.next(), merger.finished) == (None, False)  # a is still out
    assert merger.next_batch(4) == []
    buf.delivered(a)
    assert merger.finished
    assert merger.next(timeout=JOIN_S) is None  # nothing more will come: no wait
    assert merger.held() == []
    assert next(source) == 2  # the source was not read past what was admitted
    assert buf.statistics().admitted == 2


def test_async_merger_hands_out_only_failed_entries_once_admission_is_shut() -> None:
    async def main() -> None:
        buf: AsyncRetryBuffer[int] = AsyncRetryBuffer(max_in_flight=2)
        source = iter(range(10))
        merger = AsyncMerger(buf, source)
        a, b = await merger.next(), await merger.next()
        assert a is not None
        assert b is not None
        assert await merger.next() is None  # at the limit
        buf.shut_admission()
        buf.failed(a, "NotEnoughReplicas")
        assert await merger.next(timeout=JOIN_S) is a  # a retry, never a fresh item
        buf.delivered(b)
        assert (await merger.next(), merger.finished) == (None, False)  # a is still out
        buf.delivered(a)
        assert merger.finished
        assert await asyncio.wait_for(merger.next(timeout=None), 5) is None
        assert merger.held() == []
        assert next(source) == 2  # the source was not read past what was admitted
        assert buf.statistics().admitted == 2

    asyncio.run(main())


def test_an_item_read_as_admission_is_shut_is_held_not_admitted() -> None:
    """Admission shut while a merger reads its source (another thread, or while an async
    source is awaited): the item read is kept in ``held()``, and ``next()`` returns None
    instead of raising, the merger finished."""
    buf: RetryBuffer[int] = RetryBuffer(max_in_flight=2)

    def source() -> Iterator[int]:
        buf.shut_admission()
        yield 7

    merger = Merger(buf, source())
    assert merger.next() is None
    assert merger.next_batch(3, timeout=JOIN_S) == []
    assert merger.held() == [7]
    assert merger.finished

    async def main() -> None:
        abuf: AsyncRetryBuffer[int] = AsyncRetryBuffer(max_in_flight=2)

        async def asource() -> AsyncIterator[int]:
            await asyncio.sleep(0)
            abuf.shut_admission()
            yield 7

        amerger = AsyncMerger(abuf, asource())
        assert await amerger.next(timeout=None) is None
        assert amerger.held() == [7]
        assert amerger.finished

    asyncio.run(main())
