"""A wake-up flag for one background task, with a timeout, that never swallows a cancellation.

``asyncio.wait_for(event.wait(), t)`` can lose a ``cancel()`` that arrives just as the event is
set (CPython issue 86296, fixed only in 3.12): the task then runs on and ``stop()`` waits for
it forever. ``asyncio.wait`` on a plain future does not have that race.
"""

from __future__ import annotations

import asyncio

__all__ = ["Wakeup"]


class Wakeup:
    """Level-triggered: :meth:`set` wakes the waiter, or the next :meth:`wait` returns at once."""

    __slots__ = ("_future", "_set")

    def __init__(self) -> None:
        self._set = False
        self._future: asyncio.Future[None] | None = None

    def set(self) -> None:
        self._set = True
        future = self._future
        if future is not None and not future.done():
            future.set_result(None)

    def clear(self) -> None:
        self._set = False

    def is_set(self) -> bool:
        return self._set

    async def wait(self, timeout_s: float | None) -> None:
        """Return once set, or after ``timeout_s`` seconds (None: no bound)."""
        if self._set:
            return
        future = asyncio.get_running_loop().create_future()
        self._future = future
        try:
            await asyncio.wait((future,), timeout=timeout_s)
        finally:
            self._future = None
