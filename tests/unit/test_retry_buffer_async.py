"""The asyncio flavour: admission waits on the loop, outcomes come from plain callbacks."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from retry_buffer import (
    AsyncMerger,
    AsyncRetryBuffer,
    BufferClosed,
    Entry,
    InflowTimeout,
    RetryPolicy,
)


def test_admit_waits_for_room_freed_by_callbacks() -> None:
    async def main() -> None:
        buf: AsyncRetryBuffer[int] = AsyncRetryBuffer(max_in_flight=4)
        loop = asyncio.get_running_loop()
        delivered: list[int] = []

        def on_done(entry: Entry[int]) -> None:
            # A send future's done-callback: the first attempt fails and is sent again (from
            # the loop, which is allowed here), the second succeeds.
            if entry.attempts == 1:
                assert buf.failed(entry, "NotEnoughReplicasError")
                again = buf.take_failed()
                assert again is entry
                loop.call_later(0.0005, on_done, again)
            else:
                delivered.append(entry.item)
                buf.delivered(entry)

        for i in range(200):
            entry = await buf.admit(i, timeout=10.0)
            assert buf.in_flight <= 4
            loop.call_later(0.0005, on_done, entry)
        assert await buf.wait_idle(10.0)
        assert sorted(delivered) == list(range(200))
        stats = buf.statistics()
        assert (stats.delivered, stats.retries, stats.peak_in_flight) == (200, 200, 4)
        assert stats.wait_seconds > 0

    asyncio.run(main())


def test_async_admit_timeout_and_close() -> None:
    async def main() -> None:
        buf: AsyncRetryBuffer[str] = AsyncRetryBuffer(max_in_flight=1)
        first = await buf.admit("a")
        with pytest.raises(InflowTimeout):
            await buf.admit("b", timeout=0)
        start = time.monotonic()
        with pytest.raises(InflowTimeout, match=r"timeout=0\.02"):
            await buf.admit("b", timeout=0.02)
        assert time.monotonic() - start >= 0.02
        waiter = asyncio.ensure_future(buf.admit("c", timeout=10.0))
        await asyncio.sleep(0)
        assert buf.close() == [first]
        with pytest.raises(BufferClosed):
            await waiter
        with pytest.raises(BufferClosed):
            buf.delivered(first)

    asyncio.run(main())


class OwnEntry(Entry["OwnEntry"]):
    """A sender's message object that is its own entry (see ``try_enter``)."""

    __slots__ = ("value",)

    def __init__(self, value: str) -> None:
        self.value = value

    @property
    def item(self) -> OwnEntry:
        return self


def test_an_entry_the_sender_made_is_counted_in_as_an_admitted_one() -> None:
    """``try_enter`` / ``enter``: the same gate, waits and outcomes as ``admit``, for an entry
    the sender made; the buffer hands back that very object."""

    async def main() -> None:
        buf: AsyncRetryBuffer[OwnEntry] = AsyncRetryBuffer(max_in_flight=1)
        first, second, third = OwnEntry("a"), OwnEntry("b"), OwnEntry("c")
        assert buf.try_enter(first)
        assert (first.seq, first.attempts, first.item) == (0, 1, first)
        assert not buf.try_enter(second)
        with pytest.raises(InflowTimeout, match=r"timeout=0\.02"):
            await buf.enter(second, timeout=0.02)
        waiter = asyncio.ensure_future(buf.enter(second, timeout=10.0))
        await asyncio.sleep(0)
        assert not waiter.done()
        buf.delivered(first)
        await waiter
        assert second.seq == 1
        assert buf.failed(second, "NotEnoughReplicasError", retriable=True)
        assert buf.take_failed() is second
        assert not buf.try_enter(third)  # the retry still counts
        assert buf.close() == [second]
        with pytest.raises(BufferClosed):
            buf.try_enter(third)
        stats = buf.statistics()
        assert (stats.admitted, stats.delivered, stats.returned_on_close) == (2, 1, 1)

    asyncio.run(main())


def test_async_merger_single_task_fails_and_resends_everything() -> None:
    async def source() -> AsyncIterator[int]:
        for i in range(100):
            yield i

    async def main() -> None:
        finals: list[int] = []
        buf: AsyncRetryBuffer[int] = AsyncRetryBuffer(
            max_in_flight=5,
            policy=RetryPolicy(max_attempts=4),
            on_final_failure=lambda e, err: finals.append(e.item),
        )
        merger = AsyncMerger(buf, source())
        delivered: list[int] = []
        rounds = 0
        while not merger.finished:
            rounds += 1
            assert rounds < 10_000
            outstanding = []
            while (entry := await merger.next(timeout=0.005)) is not None:
                outstanding.append(entry)
            assert len(outstanding) <= 5
            for entry in outstanding:
                if entry.item % 10 == 0:
                    buf.failed(entry, "fatal")  # fails until max_attempts
                elif entry.attempts < 3:
                    buf.failed(entry, "retriable")
                else:
                    delivered.append(entry.item)
                    buf.delivered(entry)
        assert sorted(finals) == list(range(0, 100, 10))
        assert sorted(delivered + finals) == list(range(100))

    asyncio.run(main())


def test_async_merger_waits_for_room_from_another_task() -> None:
    async def main() -> None:
        buf: AsyncRetryBuffer[int] = AsyncRetryBuffer(max_in_flight=1)
        merger = AsyncMerger(buf, [1, 2])
        first = await merger.next()
        assert first is not None
        asyncio.get_running_loop().call_later(0.01, buf.delivered, first)
        second = await merger.next(timeout=10.0)
        assert second is not None
        assert second.item == 2
        assert await merger.next(timeout=0.01) is None
        buf.delivered(second)
        assert await merger.next(timeout=10.0) is None  # learns the source ended; no wait
        assert merger.finished

    asyncio.run(main())


def test_a_waiter_left_on_a_closed_loop_keeps_no_other_waiter_asleep() -> None:
    """A coroutine waiting for room on a loop that was closed (not cancelled) leaves a future
    nobody can wake. The buffer, used on from a new loop, must still wake that loop's waiters,
    and delivered() must not raise for an entry it has counted out."""
    buf: AsyncRetryBuffer[str] = AsyncRetryBuffer(max_in_flight=1)
    old_loop = asyncio.new_event_loop()
    # Its pending task is reported ("destroyed but it is pending") when collected: expected.
    old_loop.set_exception_handler(lambda loop, context: None)
    try:
        first = old_loop.run_until_complete(buf.admit("a"))
        stale = old_loop.create_task(buf.admit("b"))
        old_loop.run_until_complete(asyncio.sleep(0))
        assert not stale.done()  # waiting for room
    finally:
        old_loop.close()

    async def main() -> None:
        waiter = asyncio.ensure_future(buf.admit("c", timeout=10.0))
        await asyncio.sleep(0)
        assert not waiter.done()
        buf.delivered(first)
        assert (await waiter).item == "c"
        assert buf.statistics().delivered == 1

    asyncio.run(main())


def test_waits_that_end_without_a_wake_leave_nothing_behind() -> None:
    """Against a stalled broker every wait times out (or its task is cancelled): each must
    take its future with it, or the buffer grows by one per wait until some outcome comes."""

    async def main() -> None:
        buf: AsyncRetryBuffer[int] = AsyncRetryBuffer(max_in_flight=1)
        first = await buf.admit(0)
        for _ in range(20):
            with pytest.raises(InflowTimeout):
                await buf.admit(1, timeout=0.001)
        assert not await buf.wait_idle(0.001)
        cancelled = asyncio.ensure_future(buf.admit(1))
        await asyncio.sleep(0)
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        assert (len(buf._waiters), buf._core.waiting) == (0, 0)
        buf.delivered(first)
        assert (await buf.admit(1, timeout=0)).item == 1

    asyncio.run(main())
