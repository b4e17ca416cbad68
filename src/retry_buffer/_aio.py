"""The asyncio shell: the same accounting core, woken through futures on the running loop.

Every method must be called from the event loop's thread (from another thread, go through
``loop.call_soon_threadsafe``). ``failed()`` and ``delivered()`` are plain functions that
never block, so they may be called from an aiokafka send future's done-callback.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator, Sequence
from typing import Generic, TypeVar

from ._core import Accounting, check_timeout
from ._dispatch import FinalFailureCallback, report_finals
from ._errors import BufferClosed, InflowTimeout, InvalidArgument
from ._model import Entry, RetryPolicy, Statistics, _AdmittedEntry

__all__ = ["AsyncMerger", "AsyncRetryBuffer"]

T = TypeVar("T")


class AsyncRetryBuffer(Generic[T]):
    """Inflow gate, failed buffer and retry policy for asyncio producers (loop thread only)."""

    __slots__ = ("_core", "_on_final_failure", "_waiters", "delivered", "try_admit", "try_enter")

    delivered: Callable[[Entry[T]], None]
    """``delivered(entry)``: final success, ``entry`` is counted out. A second outcome raises.

    The accounting core's own method (one frame per delivery, the hot path); it wakes waiting
    coroutines itself.
    """

    try_admit: Callable[[T], Entry[T] | None]
    """``try_admit(item)``: count ``item`` in if there is room now; ``None`` otherwise, and
    ``AdmissionShut`` once admission is shut.

    The accounting core's own method: with no lock to take, the shell adds nothing to it.
    """

    try_enter: Callable[[Entry[T]], bool]
    """``try_enter(entry)``: ``try_admit`` for an entry the sender made, new, of an ``Entry``
    subclass that is its own item (one object per message instead of two); False while at the
    limit, ``AdmissionShut`` once admission is shut. The accounting core's own method.
    """

    def __init__(
        self,
        max_in_flight: int = 10_000,
        policy: RetryPolicy | None = None,
        on_final_failure: FinalFailureCallback[T] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if on_final_failure is not None and not callable(on_final_failure):
            raise InvalidArgument(
                f"on_final_failure must be None or a callable, got {on_final_failure!r}"
            )
        self._core: Accounting[T] = Accounting(
            max_in_flight, RetryPolicy() if policy is None else policy, clock, self._wake
        )
        self._on_final_failure = on_final_failure
        # Futures of coroutines waiting for a change; all are woken on any change. Their
        # number is also in core.waiting, which is what core.delivered() looks at. A dict (no
        # values) for the order and an O(1) removal when a wait ends without a wake.
        self._waiters: dict[asyncio.Future[None], None] = {}
        self.delivered = self._core.delivered
        self.try_admit = self._core.try_admit
        self.try_enter = self._core.try_enter

    @property
    def limit(self) -> int:
        return self._core.limit

    @property
    def in_flight(self) -> int:
        return self._core.in_flight()

    @property
    def policy(self) -> RetryPolicy:
        return self._core.policy

    @property
    def closed(self) -> bool:
        return self._core.closed

    @property
    def admission_shut(self) -> bool:
        """``shut_admission()`` (or ``close()``) was called: nothing is admitted any more."""
        return self._core.admission_shut

    def _wake(self) -> None:
        waiters = self._waiters
        self._waiters = {}
        for fut in waiters:
            # A future of a loop closed while its coroutine waited cannot be woken (set_result
            # raises there); it must not keep the others asleep, nor make delivered() raise
            # for an entry already counted out.
            if not fut.done() and not fut.get_loop().is_closed():
                fut.set_result(None)

    async def _wait_change(self, timeout_s: float | None) -> None:
        """Wait until an outcome, a close or ``timeout_s`` seconds, whichever comes first."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters[fut] = None
        core = self._core
        core.waiting += 1
        start = time.monotonic()
        try:
            await asyncio.wait((fut,), timeout=timeout_s)
        finally:
            core.waiting -= 1
            if not fut.done():
                fut.cancel()
            # Timed out or cancelled: not woken, so still listed; a stalled broker times out
            # every wait, and the list would grow without bound.
            self._waiters.pop(fut, None)
            core.wait_s += time.monotonic() - start

    # -- admission ---------------------------------------------------------------------------

    async def admit(self, item: T, timeout: float | None = None) -> Entry[T]:
        """Count ``item`` in, waiting up to ``timeout`` seconds (None: no bound) for room."""
        entry: Entry[T] = _AdmittedEntry()
        entry._item = item
        await self.enter(entry, timeout)
        return entry

    async def enter(
        self,
        entry: Entry[T],
        timeout: float | None = None,
        *,
        service: Callable[[], object] | None = None,
    ) -> None:
        """``admit`` for an entry the sender made (see ``try_enter``).

        ``service``: for a sender that re-sends due failed entries itself (their outcomes are
        much of what makes room), called before each look for room; each wait then ends by
        the next failed entry's due time too. Raises ``InflowTimeout``, or ``AdmissionShut``
        (``BufferClosed`` after ``close()``) at once, waiting or not, once admission is shut.
        """
        if timeout is not None:
            try:  # a quick test for the usual case; check_timeout says what is wrong
                if not timeout >= 0.0:  # a float compare specializes
                    check_timeout(timeout)
            except TypeError:
                check_timeout(timeout)
        core = self._core
        try_enter = core.try_enter
        if service is not None:
            if core.admission_shut:  # refused before the sender's service runs
                raise core.refusal()
            service()
        if try_enter(entry):
            return
        if timeout == 0:
            raise InflowTimeout(limit=core.limit, timeout_s=0)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                assert timeout is not None
                raise InflowTimeout(limit=core.limit, timeout_s=timeout)
            await self._wait_change(remaining if service is None else core.wait_bound_s(remaining))
            if core.admission_shut:  # refused before the sender's service runs again
                raise core.refusal()
            if service is not None:
                service()
            if try_enter(entry):
                return

    async def admit_many(self, items: Sequence[T], timeout: float | None = None) -> list[Entry[T]]:
        """Admit the longest prefix of ``items`` that fits, waiting for room for at least one."""
        check_timeout(timeout)
        if not items:
            return []
        entries = self._core.admit_many(items)
        if entries:
            return entries
        return [await self.admit(items[0], timeout)]

    # -- outcomes ----------------------------------------------------------------------------

    def failed(
        self,
        entry: Entry[T],
        error: object,
        retriable: bool = True,
        possibly_persisted: bool = False,
    ) -> bool:
        """Record a failed attempt; True if queued for another, False if failed finally."""
        queued = self._core.failed(entry, error, retriable, possibly_persisted)
        finals = self._core.pop_finals()
        if self._waiters:
            self._wake()
        if finals:
            report_finals(finals, self._on_final_failure)
        return queued

    def take_failed(self) -> Entry[T] | None:
        """Pop the oldest failed entry whose backoff has elapsed; its ``attempts`` grows by 1."""
        core = self._core
        if not core._failed_depth:
            return None
        entry = core.take_failed()
        finals = core.pop_finals()
        if finals:
            if self._waiters:
                self._wake()
            try:
                report_finals(finals, self._on_final_failure)
            except BaseException:
                # Not lost: the next take returns it; or the callback closed the buffer, and
                # close() handed it back. Either way its exception is what the caller sees.
                if entry is not None and not core.closed:
                    core.untake(entry)
                raise
        return entry

    def next_due_in(self) -> float | None:
        return self._core.next_due_in()

    async def wait_idle(self, timeout: float | None) -> bool:
        """Wait until nothing is in flight (True) or ``timeout`` seconds pass (False)."""
        check_timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._core.in_flight():
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            await self._wait_change(remaining)
        return True

    def shut_admission(self) -> None:
        """Admit nothing from now on, and let what is in flight finish.

        Coroutines waiting in ``admit``, ``enter`` or ``admit_many`` wake and raise
        ``AdmissionShut``, as any later look for room does (``try_admit`` and ``try_enter``
        too: answering "no room" would leave the caller waiting for room that never comes).
        Outcomes, ``take_failed``, ``wait_idle`` and ``close`` go on as before; an
        ``AsyncMerger`` hands out only failed entries. A second call does nothing more.
        """
        self._core.shut_admission()
        self._wake()

    def close(self) -> list[Entry[T]]:
        """Refuse further admission; return every entry not yet done, in admission order."""
        left = self._core.close()
        self._wake()
        return left

    def statistics(self) -> Statistics:
        return self._core.statistics()

    def __repr__(self) -> str:
        return (
            f"AsyncRetryBuffer(limit={self.limit}, in_flight={self.in_flight}, "
            f"failed_depth={self._core._failed_depth}, closed={self.closed})"
        )


_NOTHING: object = object()


class AsyncMerger(Generic[T]):
    """``Merger`` for ``AsyncRetryBuffer``: failed-and-due entries first, else a fresh item.

    ``source`` may be a plain or an async iterable; it is read only when there is room.
    """

    __slots__ = ("_aiter", "_buffer", "_exhausted", "_held", "_iter")

    def __init__(self, buffer: AsyncRetryBuffer[T], source: Iterable[T] | AsyncIterable[T]) -> None:
        if not isinstance(buffer, AsyncRetryBuffer):
            raise InvalidArgument(f"AsyncMerger needs an AsyncRetryBuffer, got {buffer!r}")
        self._buffer = buffer
        self._iter: Iterator[T] | None = None
        self._aiter: AsyncIterator[T] | None = None
        if isinstance(source, AsyncIterable):
            self._aiter = aiter(source)
        else:
            self._iter = iter(source)
        self._exhausted = False
        self._held: object = _NOTHING

    @property
    def exhausted(self) -> bool:
        return self._exhausted and self._held is _NOTHING

    @property
    def finished(self) -> bool:
        """Nothing more will come: the source is exhausted (or admission shut) and nothing is
        in flight."""
        core = self._buffer._core
        return (self.exhausted or core.admission_shut) and core.in_flight() == 0

    def held(self) -> list[T]:
        """Items taken from the source but not admitted yet (at most one; kept, once admission
        is shut)."""
        return [] if self._held is _NOTHING else [self._held]  # type: ignore[list-item]  # a T

    async def _pull(self) -> None:
        try:
            if self._iter is not None:
                self._held = next(self._iter)
            else:
                assert self._aiter is not None
                self._held = await anext(self._aiter)
        except (StopIteration, StopAsyncIteration):
            self._exhausted = True

    async def _step(self) -> Entry[T] | None:
        buf = self._buffer
        core = buf._core
        if core.closed:
            raise BufferClosed("AsyncMerger.next(): the buffer is closed")
        entry = buf.take_failed()
        if entry is not None:
            return entry
        if self._held is _NOTHING and not self._exhausted and core.has_room():
            await self._pull()
        if self._held is not _NOTHING and not core.admission_shut:
            # Another coroutine may have taken the room while the source was awaited.
            entry = core.try_admit(self._held)  # type: ignore[arg-type]  # held is a T here
            if entry is not None:
                self._held = _NOTHING
        return entry

    async def next(self, timeout: float | None = 0.0) -> Entry[T] | None:
        """The next entry to send, waiting up to ``timeout`` seconds (None: no bound)."""
        check_timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        core = self._buffer._core
        while True:
            entry = await self._step()
            if entry is not None or timeout == 0 or self.finished:
                return entry
            if core.next_due_in() == 0 or (
                core.has_room() and (self._held is not _NOTHING or not self._exhausted)
            ):
                continue
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return None
            await self._buffer._wait_change(core.wait_bound_s(remaining))

    async def next_batch(self, n: int, timeout: float | None = 0.0) -> list[Entry[T]]:
        """Up to ``n`` entries in ``next()``'s order; waits up to ``timeout`` for the first only.

        The asyncio buffer takes no lock, so this saves no lock rounds; it is here so both
        mergers serve a batching producer alike.
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise InvalidArgument(f"next_batch(n): n must be an int >= 1, got {n!r}")
        out: list[Entry[T]] = []
        entry = await self.next(timeout)
        while entry is not None:
            out.append(entry)
            if len(out) >= n:
                break
            entry = await self.next(0.0)
        return out
