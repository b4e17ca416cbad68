"""The send path at the in-flight limit: waiting for room, bounded by ``produce_timeout_s``,
and the check that a call runs on the producer's own event loop.

Room comes when messages reach their final outcome. The failed messages waiting to retry are
part of the in-flight count, so their outcomes are much of what makes room: each look re-sends
those that are due, and each wait ends at the next one's due time.

Senders wait here, not in the retry buffer's ``enter``, because that one counts the message in
as soon as it wakes to room: a sender woken after ``stop()`` began would be accepted, and
nothing would send its message. Here a waiter looks at :attr:`Room.shut` first each time it
wakes, and ``stop()`` shuts the room (waking every waiter) before it does anything else.
"""

from __future__ import annotations

import asyncio
import time
from asyncio import get_running_loop
from collections.abc import Callable

from failover_partitioner.aio._lanes import Message
from failover_partitioner.errors import FailoverError, ProducerClosed, ProduceTimeout
from retry_buffer import AsyncRetryBuffer

__all__ = ["Room", "wrong_loop"]


class Room:
    """Senders waiting for room at the in-flight limit. :meth:`wake` (an outcome made room)
    wakes them to look again; :meth:`close` (``stop()`` began) wakes them to be refused."""

    __slots__ = ("shut", "waiters")

    def __init__(self) -> None:
        self.shut = False
        # One future per waiting sender; read by the outcome paths, which wake only if any.
        self.waiters: list[asyncio.Future[None]] = []

    def wake(self) -> None:
        waiters, self.waiters = self.waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def close(self) -> None:
        """Admission ends: every waiter is woken and raises :class:`ProducerClosed`."""
        self.shut = True
        self.wake()

    async def _wait(self, timeout_s: float) -> None:
        fut: asyncio.Future[None] = get_running_loop().create_future()
        self.waiters.append(fut)
        try:
            await asyncio.wait((fut,), timeout=timeout_s)
        finally:
            if not fut.done():  # timed out or cancelled: not woken, so still listed
                fut.cancel()
                self.waiters.remove(fut)

    async def admit(
        self,
        buffer: AsyncRetryBuffer[Message],
        msg: Message,
        timeout_s: float,
        service: Callable[[], object],
    ) -> None:
        """Count ``msg`` in once there is room, calling ``service`` (re-send due failed
        messages) first each time; :class:`ProduceTimeout` after ``timeout_s`` seconds, and
        :class:`ProducerClosed` once ``stop()`` began (in both, the message not accepted)."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self.shut:
                raise ProducerClosed(
                    f"send to {msg.topic!r}: stop() began while it waited for room; "
                    "the message was not accepted"
                )
            service()
            if buffer.try_enter(msg):
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ProduceTimeout(msg.undelivered(None), limit=buffer.limit, timeout_s=timeout_s)
            due_in = buffer.next_due_in()
            await self._wait(remaining if due_in is None else min(remaining, max(due_in, 0.001)))


def wrong_loop(
    loop: asyncio.AbstractEventLoop | None, name: str, call: str
) -> FailoverError | None:
    """The error for ``call`` made on another event loop than ``loop``, the producer's (None:
    not started, any will do), raised before anything is accepted or changed: asyncio objects
    belong to one loop, and one used from another thread corrupts it, or hangs."""
    if loop is None or get_running_loop() is loop:
        return None
    if loop.is_closed():
        return FailoverError(
            f"{call}() on {name}, whose event loop is closed: it can send nothing more. "
            "await stop() (from any loop) to get back the messages it still held"
        )
    if not loop.is_running():
        return FailoverError(
            f"{call}() on {name} from another event loop than the one that started it, "
            f"which is not running: call it on that loop (loop.run_until_complete(...)), "
            "or close that loop first and then await stop() to get back what it held"
        )
    return FailoverError(
        f"{call}() on {name} from another event loop than the one that started it: every "
        "call must run on the producer's loop; from another thread, use "
        f"asyncio.run_coroutine_threadsafe(producer.{call}(...), loop), with loop the one "
        "that ran start()"
    )
