"""The threaded shell: the accounting core behind one lock, for producers fed from threads.

``failed()`` never waits for anything but the (briefly held) lock, so it is safe inside a
confluent-kafka delivery callback; ``delivered()`` takes no lock at all on its usual path.
The re-send of a failed entry happens on the producer's side of ``poll()``/``flush()``, via
``take_failed()`` or a ``Merger``: calling back into the client from its delivery callback
would re-enter librdkafka.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from typing import Generic, TypeVar

from ._core import Accounting, check_timeout
from ._dispatch import FinalFailureCallback, report_finals
from ._errors import BufferClosed, InflowTimeout, InvalidArgument
from ._model import Entry, RetryPolicy, Statistics

__all__ = ["Merger", "RetryBuffer"]

T = TypeVar("T")


def _wait(cond: threading.Condition, timeout_s: float | None) -> None:
    """``cond.wait(timeout_s)``; a bound at or past ``threading.TIMEOUT_MAX`` (an infinite
    timeout, say) raises OverflowError there, so it waits without one: every caller waits in a
    loop that checks its deadline again."""
    cond.wait(None if timeout_s is None or timeout_s >= threading.TIMEOUT_MAX else timeout_s)


class RetryBuffer(Generic[T]):
    """Inflow gate, failed buffer and retry policy for messages of type ``T``; thread-safe.

    ``clock`` drives the policy (admission times, backoff, deadlines); ``timeout`` arguments
    are real seconds. ``held``: the sender's own count of what it holds, for a sender that
    does not admit its first attempts (see the accounting core's module doc).
    """

    __slots__ = ("_cond", "_core", "_lock", "_on_final_failure", "delivered", "has_room")

    has_room: Callable[..., bool]
    """``has_room(n=1)``: room for ``n`` more messages now (a look, not a reservation). The
    core's own method, as ``delivered`` is: a sender may ask once per message."""

    delivered: Callable[[Entry[T]], None]
    """``delivered(entry)``: final success, ``entry`` is counted out. A second outcome raises.

    The accounting core's own method (one frame per delivery, the hot path): it takes no lock
    unless a thread waits for room, so delivery callbacks do not contend with the producer.
    """

    def __init__(
        self,
        max_in_flight: int = 10_000,
        policy: RetryPolicy | None = None,
        on_final_failure: FinalFailureCallback[T] | None = None,
        clock: Callable[[], float] = time.monotonic,
        *,
        held: Callable[[], int] | None = None,
    ) -> None:
        if on_final_failure is not None and not callable(on_final_failure):
            raise InvalidArgument(
                f"on_final_failure must be None or a callable, got {on_final_failure!r}"
            )
        self._lock = threading.Lock()
        cond = self._cond = threading.Condition(self._lock)

        def wake() -> None:  # closes over the condition only: no cycle through the core
            with cond:
                cond.notify_all()

        # Threads blocked in a wait are counted in core.waiting; outcome reporters notify only
        # when it is non-zero.
        self._core: Accounting[T] = Accounting(
            max_in_flight, RetryPolicy() if policy is None else policy, clock, wake, held
        )
        self._on_final_failure = on_final_failure
        self.delivered = self._core.delivered
        self.has_room = self._core.has_room

    @property
    def limit(self) -> int:
        return self._core.limit

    @property
    def in_flight(self) -> int:
        return self._core.in_flight()

    @property
    def failed_depth(self) -> int:
        """Entries waiting in the failed buffer."""
        return self._core._failed_depth

    @property
    def entries(self) -> int:
        """Entries without a final outcome: sent, or waiting in the failed buffer (with
        ``held``, the messages the sender counts alone have none)."""
        return len(self._core._live)

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

    # -- admission ---------------------------------------------------------------------------

    def admit(self, item: T, timeout: float | None = None) -> Entry[T]:
        """Count ``item`` in, waiting up to ``timeout`` seconds (None: no bound) for room.

        ``timeout=0`` refuses at once. Raises ``InflowTimeout``, or ``BufferClosed`` (its
        ``AdmissionShut`` once admission is shut, waiting or not).
        """
        if timeout is not None:
            try:  # a quick test for the usual case; check_timeout says what is wrong
                if not timeout >= 0.0:  # a float compare specializes
                    check_timeout(timeout)
            except TypeError:
                check_timeout(timeout)
        lock = self._lock
        lock.acquire()
        try:
            entry = self._core.try_admit(item)
        finally:
            lock.release()
        if entry is None:
            return self._admit_waiting(item, timeout)
        return entry

    def adopt(self, item: T) -> Entry[T]:
        """An entry for ``item``, which the sender holds (see ``held`` in docs/retry_buffer.md);
        never waits. Raises ``BufferClosed`` after ``close()``."""
        with self._lock:
            return self._core.adopt(item)

    def try_admit(self, item: T) -> Entry[T] | None:
        """Count ``item`` in if there is room now; ``None`` otherwise (``AdmissionShut`` once
        admission is shut). Never blocks."""
        with self._lock:
            return self._core.try_admit(item)

    def try_enter(self, entry: Entry[T]) -> bool:
        """``try_admit`` for an entry the sender made, new, of an ``Entry`` subclass that is
        its own item (one object per message instead of two); False while at the limit,
        ``AdmissionShut`` once admission is shut."""
        with self._lock:
            return self._core.try_enter(entry)

    def admit_many(self, items: Sequence[T], timeout: float | None = None) -> list[Entry[T]]:
        """Admit the longest prefix of ``items`` that fits, waiting for room for at least one.

        Returns the admitted entries in order (fewer than ``items`` when the limit was
        reached); the caller offers the rest again. One lock round for the whole batch.
        """
        check_timeout(timeout)
        if not items:
            return []
        with self._lock:
            entries = self._core.admit_many(items)
        if entries:
            return entries
        return [self._admit_waiting(items[0], timeout)]

    def _admit_waiting(self, item: T, timeout: float | None) -> Entry[T]:
        check_timeout(timeout)
        core = self._core
        with self._cond:
            # Registered before looking for room: delivered() frees room without the lock and
            # then reads the count, so a waiter counted only after its look could miss the wake.
            core.waiting += 1
            try:
                entry = core.try_admit(item)
                if entry is not None:
                    return entry
                if timeout == 0:
                    raise InflowTimeout(limit=core.limit, timeout_s=0)
                start = time.monotonic()
                deadline = None if timeout is None else start + timeout
                try:
                    while True:
                        remaining = None if deadline is None else deadline - time.monotonic()
                        if remaining is not None and remaining <= 0:
                            assert timeout is not None
                            raise InflowTimeout(limit=core.limit, timeout_s=timeout)
                        _wait(self._cond, remaining)
                        entry = core.try_admit(item)
                        if entry is not None:
                            return entry
                finally:
                    core.wait_s += time.monotonic() - start
            finally:
                core.waiting -= 1

    # -- outcomes ----------------------------------------------------------------------------

    def failed(
        self,
        entry: Entry[T],
        error: object,
        retriable: bool = True,
        possibly_persisted: bool = False,
    ) -> bool:
        """Record a failed attempt. Never blocks: safe inside a delivery callback.

        Returns True when the entry was queued for another attempt (take it with
        ``take_failed()`` or a ``Merger``), False when it failed finally: it is counted out and
        ``on_final_failure(entry, error)`` has been called. ``possibly_persisted`` marks the
        entry ``possibly_duplicated``.
        """
        with self._lock:
            queued = self._core.failed(entry, error, retriable, possibly_persisted)
            finals = self._core.pop_finals()
            if self._core.waiting:
                self._cond.notify_all()
        if finals:
            report_finals(finals, self._on_final_failure)
        return queued

    def take_failed(self) -> Entry[T] | None:
        """Pop the oldest failed entry whose backoff has elapsed; its ``attempts`` grows by 1.

        Never blocks. Entries found past their deadline are failed finally on the way.
        """
        core = self._core
        if not core._failed_depth:  # entries enter under the lock; a stale 0 delays one call
            return None
        with self._lock:
            entry = core.take_failed()
            finals = core.pop_finals()
            if finals and core.waiting:
                self._cond.notify_all()
        if finals:
            try:
                report_finals(finals, self._on_final_failure)
            except BaseException:
                if entry is not None:
                    with self._lock:
                        # Not lost: the next take returns it; or close() came first and handed
                        # it back. Either way the callback's exception is what the caller sees.
                        if not core.closed:
                            core.untake(entry)
                raise
        return entry

    def next_due_in(self) -> float | None:
        """Seconds until the next failed entry is due (0 if one is); None if none waits."""
        with self._lock:
            return self._core.next_due_in()

    def wait_idle(self, timeout: float | None) -> bool:
        """Wait until nothing is in flight (True) or ``timeout`` seconds pass (False)."""
        check_timeout(timeout)
        core = self._core
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            core.waiting += 1
            try:
                while core.in_flight():
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return False
                    _wait(self._cond, remaining)
                return True
            finally:
                core.waiting -= 1

    def shut_admission(self) -> None:
        """Admit nothing from now on, and let what is in flight finish.

        Threads waiting in ``admit`` or ``admit_many`` wake and raise ``AdmissionShut``, as
        any later look for room does (``try_admit`` and ``try_enter`` too: answering "no room"
        would leave the caller waiting for room that never comes; ``has_room()`` is False).
        Outcomes, ``adopt``, ``take_failed``, ``wait_idle`` and ``close`` go on as before; a
        ``Merger`` hands out only failed entries. A second call does nothing more.
        """
        with self._cond:
            self._core.shut_admission()
            self._cond.notify_all()

    def close(self) -> list[Entry[T]]:
        """Refuse further admission and return every entry not yet done, in admission order.

        The returned entries (queued failures and those still out with the producer) are
        counted out; reporting an outcome for one afterwards raises ``BufferClosed``. A second
        call returns an empty list.
        """
        with self._cond:
            left = self._core.close()
            self._cond.notify_all()
        return left

    def statistics(self) -> Statistics:
        with self._lock:
            return self._core.statistics()

    def __repr__(self) -> str:
        return (
            f"RetryBuffer(limit={self.limit}, in_flight={self.in_flight}, "
            f"failed_depth={self._core._failed_depth}, closed={self.closed})"
        )


class Merger(Generic[T]):
    """Hands out what the producer sends next: a failed entry that is due, else a fresh item.

    Fresh items are pulled from ``source`` only when there is room, so the source is never
    read ahead of the inflow limit. One thread at a time calls ``next()``; failures may be
    reported from any thread, including the one calling ``next()``.
    """

    __slots__ = ("_buffer", "_core", "_exhausted", "_lock", "_pending", "_source")

    def __init__(self, buffer: RetryBuffer[T], source: Iterable[T]) -> None:
        if not isinstance(buffer, RetryBuffer):
            raise InvalidArgument(f"Merger needs a RetryBuffer, got {buffer!r}")
        if buffer._core._held is not None:
            raise InvalidArgument("Merger admits what it sends: give it a buffer without held=")
        self._buffer = buffer
        self._core = buffer._core  # the buffer's, cached: next() runs once per message
        self._lock = buffer._lock
        self._source: Iterator[T] = iter(source)
        self._exhausted = False
        # Items pulled from the source whose admission lost a race for room with another
        # admitting thread (or met a closed buffer); they go first next time, in order.
        self._pending: deque[T] = deque()

    @property
    def exhausted(self) -> bool:
        """The source has ended and every item taken from it has been admitted."""
        return self._exhausted and not self._pending

    @property
    def finished(self) -> bool:
        """Nothing more will come: the source is exhausted (or admission shut) and nothing is
        in flight."""
        core = self._core
        return (self.exhausted or core.admission_shut) and core.in_flight() == 0

    def held(self) -> list[T]:
        """Items taken from the source but not admitted yet, in source order.

        At most one after ``next()``; after ``next_batch(n)``, at most ``n`` (only when other
        threads took the room first, or admission was shut or the buffer closed).
        """
        return list(self._pending)

    def next(self, timeout: float | None = 0.0) -> Entry[T] | None:
        """The next entry to send, waiting up to ``timeout`` seconds (None: no bound).

        Returns None when nothing is due and there is no room (or the source is exhausted)
        within the timeout; never waits longer, so the thread that reports failures may
        call it too. Raises ``BufferClosed`` after the buffer is closed.
        """
        if timeout is not None:
            try:  # a quick test for the usual case; check_timeout says what is wrong
                if not timeout >= 0.0:  # a float compare specializes
                    check_timeout(timeout)
            except TypeError:
                check_timeout(timeout)
        core = self._core
        # Fast path, the common case: nothing failed, room, the source has an item. The
        # unlocked peek only decides whether to read the source; admission is decided under
        # the lock, and an item that lost the room to another admitting thread is held.
        if (
            not self._pending
            and not core._failed_depth
            and not self._exhausted
            and len(core._live) < core._gate
        ):
            try:
                item = next(self._source)
            except StopIteration:
                self._exhausted = True
            else:
                lock = self._lock
                lock.acquire()
                try:
                    entry = None if core.admission_shut else core.try_admit(item)
                finally:
                    lock.release()
                if entry is not None:
                    return entry
                self._pending.append(item)
        entry = self._step()
        if entry is not None or timeout == 0:
            return entry
        return self._wait(timeout)

    def next_batch(self, n: int, timeout: float | None = 0.0) -> list[Entry[T]]:
        """Up to ``n`` entries to send, in the order ``next()`` would hand them out.

        For a producer that sends in batches: fresh items are read from the source (at most the
        room left, and at most ``n``) and admitted in one lock round, so a message costs about
        what ``admit_many`` does. Failed entries that are due still come first. Waits up to
        ``timeout`` seconds for the first entry only; an empty list means ``next()`` would
        have returned None. Reading ``n`` items from a source that blocks blocks too.
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise InvalidArgument(f"next_batch(n): n must be an int >= 1, got {n!r}")
        core = self._core
        if not self._pending and not core._failed_depth and not self._exhausted:
            # The common case: read what fits (an unlocked estimate), admit it in one round.
            room = core._gate - len(core._live)
            want = n if n < room else room
            if want > 0:
                items = list(islice(self._source, want))
                if len(items) < want:
                    self._exhausted = True
                if items:
                    with self._lock:
                        entries = [] if core.admission_shut else core.admit_many(items)
                    if len(entries) < len(items):
                        # Other threads took the room meanwhile (or admission was shut): these
                        # go first later; next() raises if the buffer was closed.
                        self._pending.extend(items[len(entries) :])
                    if entries:
                        return entries
        out: list[Entry[T]] = []
        entry = self.next(timeout)
        while entry is not None:
            out.append(entry)
            if len(out) >= n:
                break
            entry = self.next(0.0)
        return out

    def _pull(self) -> None:
        try:
            self._pending.append(next(self._source))
        except StopIteration:
            self._exhausted = True

    def _step(self) -> Entry[T] | None:
        buf = self._buffer
        core = buf._core
        # Unlocked peek: pull a fresh item only if room is likely and no failure waits; the
        # decision is re-made under the lock below.
        if (
            not self._pending
            and not self._exhausted
            and not core._failed_depth
            and len(core._live) < core._gate
        ):
            self._pull()
        lock = buf._lock
        lock.acquire()
        try:
            if core.closed:
                raise BufferClosed("Merger.next(): the buffer is closed")
            entry = core.take_failed() if core._failed_depth else None
            finals = core.pop_finals() if core._finals else None
            pending = self._pending
            if entry is None and pending and not finals and not core.admission_shut:
                # (with finals: after their report)
                entry = core.try_admit(pending[0])
                if entry is not None:
                    pending.popleft()
            if finals and core.waiting:
                buf._cond.notify_all()
            pull_more = (
                entry is None and not self._pending and not self._exhausted and core.has_room()
            )
        finally:
            lock.release()
        if finals:
            try:
                report_finals(finals, buf._on_final_failure)
            except BaseException:
                if entry is not None:
                    with lock:
                        # As in RetryBuffer.take_failed: close() may have handed it back.
                        if not core.closed:
                            core.untake(entry)
                raise
        if pull_more:
            self._pull()
        if entry is None and self._pending:
            with lock:
                entry = None if core.admission_shut else core.try_admit(self._pending[0])
                if entry is not None:
                    self._pending.popleft()
        return entry

    def _can_progress(self) -> bool:
        core = self._buffer._core
        if core.next_due_in() == 0:
            return True
        return core.has_room() and (bool(self._pending) or not self._exhausted)

    def _wait(self, timeout: float | None) -> Entry[T] | None:
        buf = self._buffer
        core = buf._core
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            entry = self._step()
            if entry is not None:
                return entry
            if self.finished:
                return None
            with buf._cond:
                if core.closed:
                    raise BufferClosed("Merger.next(): the buffer is closed")
                # Registered before looking, as in RetryBuffer._admit_waiting.
                core.waiting += 1
                try:
                    if self._can_progress():
                        continue  # something changed since _step looked
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return None
                    remaining = core.wait_bound_s(remaining)
                    start = time.monotonic()
                    try:
                        _wait(buf._cond, remaining)
                    finally:
                        core.wait_s += time.monotonic() - start
                finally:
                    core.waiting -= 1
