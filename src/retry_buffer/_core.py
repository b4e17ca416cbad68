"""The accounting core: counters, the in-flight entries and the failed buffer, and nothing else.

Theory of operation. Every admitted message is *in flight* until it gets exactly one final
outcome: delivered, finally failed (policy exhausted or not retriable), or handed back by
``close()``. Admission is refused while ``limit`` messages are in flight. A failed message
stays in flight while it waits in the failed buffer, so that buffer can never hold more than
``limit`` entries: its bound follows from the inflow count, no size has to be guessed, and
wiring failures back into the input cannot deadlock (the producer takes failed entries first,
and there is always room for them).

The core is plain Python with an injected clock: no locks, threads or event loops, and it
never calls user code. Final failures are queued in ``pop_finals()`` for the shell to report
after it has released its lock.

``delivered()`` is the hot path, and both shells hand it to their users as is: their
``delivered`` *is* this method, so a delivery runs one Python frame. The threaded shell calls it
without its lock: it changes shared state with a single ``dict.pop`` on the in-flight table,
which is atomic in CPython (under the GIL, and under the dict's own lock in free-threaded
builds). Every other change runs under the shell's lock, and the counters are arranged so that
none of them races with that pop: the in-flight count is ``len(live)`` and ``delivered`` is
derived, not incremented. ``close()`` pops entries one at a time for the same reason (each pop
one ``popitem()``, ending at the ``KeyError``: a ``while live`` test before it would be a second
step, and a delivery could take the last entry in between), so each entry ends either delivered
or handed back; ``closed`` is set before the first pop, so a delivery that finds its entry gone
says ``BufferClosed``. The shells count callers blocked waiting for room in ``waiting``, and
register there *before* they look for room; ``delivered()`` reads it after its pop and calls the
shell's ``wake`` only when someone waits. So a waiter either sees the room or is woken: never
neither.

Held by the sender. A sender whose client keeps its own count of what it holds (confluent-kafka's
``len(producer)``: queued, in flight, or with a report not yet served) need not admit its first
attempts: made with ``held`` (that count), the buffer counts in flight as ``held()`` plus the
failed buffer's depth. ``try_admit``, ``admit_many`` and ``has_room`` compare that with the
limit; a message whose attempt failed leaves the sender's count as it enters the failed buffer
(``adopt`` gives it an entry without looking for room: it was counted already), and going back
to the sender moves it the other way, so only new messages raise the sum. The sender may also
let its client keep the bound while the buffer has no entry (``entries``: nothing waits, no
retry is out), a client queue bounded at the limit: the sum is then that client's count alone.
(The failed buffer being empty is not enough when retries go to another client than first
attempts.) ``admitted`` and ``delivered`` in ``statistics()`` then count only the entries the
buffer gave out, and waiting for room is the sender's (its client frees room without telling
the buffer).

Admission shut. ``shut_admission()`` ends admission and nothing else, for a sender that stops:
from then on every look for room (``try_admit``, ``try_enter``, ``admit_many``) raises
``AdmissionShut``, and the shell wakes its waiters to look and be refused; outcomes, the
failed buffer, ``adopt`` (a message the sender held already) and ``close()`` go on, so what is
in flight can finish. It costs the hot path nothing: it sets the gate to 0, as ``close()``
does (which shuts admission too, raising ``BufferClosed``), so every look takes the slow
branch, where the refusal is decided. Refusing, not answering "no room": a sender that reads
no room as "wait" would wait for room that never comes.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from ._errors import AdmissionShut, BufferClosed, InvalidArgument, RetryBufferError
from ._model import _CLOSED, _DONE, _QUEUED, _SENT, Entry, RetryPolicy, Statistics, _AdmittedEntry

__all__ = ["Accounting"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Backoff delays double per attempt; past this many levels they are all backoff_max_s anyway.
_MAX_LEVELS = 64


def check_limit(limit: object) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
        raise InvalidArgument(
            f"max_in_flight must be an int >= 1 (the most messages admitted and not yet done), "
            f"got {limit!r}"
        )
    return limit


def check_timeout(timeout: float | None) -> None:
    """``None`` waits without bound; otherwise a finite or infinite number of seconds >= 0."""
    if timeout is None:
        return
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0:
        raise InvalidArgument(
            f"timeout must be None (wait without bound) or a number of seconds >= 0, "
            f"got {timeout!r}"
        )


class Accounting(Generic[T]):
    """Counters, in-flight table and failed buffer of one retry buffer (single-threaded use)."""

    __slots__ = (
        "_clock",
        "_delays",
        "_duplicates",
        "_failed_depth",
        "_failed_order",
        "_final_failures",
        "_finals",
        "_gate",
        "_held",
        "_levels",
        "_live",
        "_next_seq",
        "_peak_failed",
        "_peak_in_flight",
        "_retries",
        "_returned",
        "_wake",
        "admission_shut",
        "closed",
        "limit",
        "policy",
        "wait_s",
        "waiting",
    )

    def __init__(
        self,
        limit: int,
        policy: RetryPolicy,
        clock: Callable[[], float],
        wake: Callable[[], None] = lambda: None,
        held: Callable[[], int] | None = None,
    ) -> None:
        self.limit = check_limit(limit)
        if held is not None and not callable(held):
            raise InvalidArgument(f"held must be None or a callable returning a count: {held!r}")
        # See "Held by the sender" in the module doc.
        self._held = held
        if not isinstance(policy, RetryPolicy):
            raise InvalidArgument(f"policy must be a RetryPolicy, got {policy!r}")
        if not callable(clock):
            raise InvalidArgument(f"clock must be a callable returning seconds, got {clock!r}")
        self.policy = policy
        self._clock = clock
        self.closed = False
        self.admission_shut = False  # set by shut_admission() and by close()
        self.wait_s = 0.0
        # Callers blocked waiting for a change, counted by the shell; delivered() calls
        # wake() (the shell's, which must not call back into the core) while it is non-zero.
        self.waiting = 0
        self._wake = wake
        # Admission compares the in-flight count with _gate: the limit, or 0 once admission is
        # shut (or the buffer closed), so the hot path needs one comparison.
        self._gate = limit
        self._next_seq = 0
        # Every in-flight entry, including those waiting in the failed buffer, keyed by itself
        # (entries hash by identity): "is this entry in flight here" is one lookup, which
        # try_enter makes per call. Insertion order is admission order.
        self._live: dict[Entry[T], Entry[T]] = {}
        # The failed buffer: one FIFO per backoff delay. Within one FIFO every entry waits the
        # same delay, so failure order is due order and only heads need looking at.
        self._delays = self._backoff_levels(policy)
        self._levels: tuple[deque[Entry[T]], ...] = tuple(deque() for _ in self._delays)
        self._failed_depth = 0
        self._failed_order = 0
        self._finals: list[tuple[Entry[T], object]] = []
        self._final_failures = 0
        self._returned = 0
        self._retries = 0
        self._duplicates = 0
        self._peak_in_flight = 0
        self._peak_failed = 0

    @staticmethod
    def _backoff_levels(policy: RetryPolicy) -> tuple[float, ...]:
        delays = [policy.backoff_s(1)]
        while delays[-1] < policy.backoff_max_s and len(delays) < _MAX_LEVELS:
            delays.append(policy.backoff_s(len(delays) + 1))
        return tuple(delays)

    # -- admission ---------------------------------------------------------------------------

    def in_flight(self) -> int:
        held = self._held
        if held is None:
            return len(self._live)
        return held() + self._failed_depth

    def has_room(self, n: int = 1) -> bool:
        """Room for ``n`` more messages now (``in_flight()`` inline: a sender asks per message)."""
        held = self._held
        count = len(self._live) if held is None else held() + self._failed_depth
        return count + n <= self._gate

    def try_admit(self, item: T) -> Entry[T] | None:
        """Count ``item`` in and return its entry, or ``None`` while at the limit."""
        # Entry.__init__'s fields, set without its frame (here and in try_enter): this is the
        # hot path.
        entry: Entry[T] = _AdmittedEntry()
        entry._item = item
        return entry if self.try_enter(entry) else None

    def try_enter(self, entry: Entry[T]) -> bool:
        """``try_admit`` for an entry the sender made, new, of an ``Entry`` subclass that is
        its own item (its ``item`` property returns itself): one object per message instead
        of two. Counts it in and sets its fields; False while at the limit. An entry this
        buffer counts in flight already raises ``RetryBufferError`` (it would be counted twice
        and end twice)."""
        live = self._live
        if entry in live:
            raise RetryBufferError(
                f"try_enter() got entry seq={entry.seq}, which this buffer counts in flight "
                "already; enter each message once, and only a new entry"
            )
        n = len(live) if self._held is None else self._held() + self._failed_depth
        if n >= self._gate:
            if self.admission_shut:
                raise self.refusal()
            return False
        seq = self._next_seq
        self._next_seq = seq + 1
        clock = self._clock  # a local call specializes; self._clock() would not
        entry.seq = seq
        entry.attempts = 1
        entry.admitted_at = clock()
        entry._state = _SENT
        live[entry] = entry
        if n >= self._peak_in_flight:
            self._peak_in_flight = n + 1
        return True

    def adopt(self, item: T) -> Entry[T]:
        """Give an entry, without looking for room, to ``item``, which the sender holds and
        counts in ``held()`` (sent without admission); its outcome is then reported here as
        any entry's. Only with ``held``."""
        if self._held is None:
            raise InvalidArgument("adopt() needs a buffer made with held=")
        if self.closed:
            raise BufferClosed("cannot adopt: the buffer is closed")
        seq = self._next_seq
        self._next_seq = seq + 1
        entry: Entry[T] = Entry(item, seq, self._clock())
        self._live[entry] = entry
        return entry

    def admit_many(self, items: Sequence[T]) -> list[Entry[T]]:
        """Admit the longest prefix of ``items`` that fits; return its entries."""
        if self.admission_shut:
            raise self.refusal()
        live = self._live
        # In flight as try_enter counts it: with held, what the sender holds and the failed
        # buffer's depth.
        n = len(live) if self._held is None else self._held() + self._failed_depth
        room = self._gate - n
        if room <= 0 or not items:
            return []
        take = items if len(items) <= room else items[:room]
        seq = self._next_seq
        now = self._clock()
        entries = [Entry(item, s, now) for s, item in enumerate(take, seq)]
        self._next_seq = seq + len(entries)
        live.update(zip(entries, entries, strict=True))
        if n + len(entries) > self._peak_in_flight:
            self._peak_in_flight = n + len(entries)
        return entries

    def shut_admission(self) -> None:
        """Admit nothing from now on (see "Admission shut" in the module doc); the shell wakes
        its waiters after this, for them to be refused."""
        self.admission_shut = True
        self._gate = 0

    def refusal(self) -> BufferClosed:
        """What a look for room raises once admission is shut."""
        if self.closed:
            return BufferClosed("cannot admit: the buffer is closed")
        return AdmissionShut(
            "cannot admit: admission was shut (shut_admission()); the entries in flight still "
            "get their outcomes"
        )

    # -- outcomes ----------------------------------------------------------------------------

    def delivered(self, entry: Entry[T]) -> None:
        """Record final success. Safe without the shell's lock (see the module doc)."""
        if entry._state == _SENT and self._live.pop(entry, None) is not None:
            entry._state = _DONE
            if self.waiting:  # read after the pop: see the module doc
                self._wake()
            return
        raise self._misuse(entry, "delivered")

    def failed(
        self, entry: Entry[T], error: object, retriable: bool, possibly_persisted: bool
    ) -> bool:
        """Record a failed attempt: queue the entry for another (True) or fail it finally."""
        if self.closed or entry._state != _SENT or entry not in self._live:
            raise self._misuse(entry, "failed")
        now = self._clock()
        entry._last_error = error
        if entry.attempts == 1:  # its first failure: attempts grow only when one is retried
            entry._first_failure_at = now
        if possibly_persisted and not entry.possibly_duplicated:
            entry._possibly_duplicated = True
            self._duplicates += 1
        policy = self.policy
        if retriable and (policy.max_attempts is None or entry.attempts < policy.max_attempts):
            level = min(entry.attempts, len(self._delays)) - 1
            due_at = now + self._delays[level]
            if policy.deadline_s is None or due_at < entry._first_failure_at + policy.deadline_s:
                self._enqueue(entry, level, due_at)
                return True
        self._finish_failed(entry, error)
        return False

    def _enqueue(self, entry: Entry[T], level: int, due_at: float) -> None:
        # The bound is enforced here, where entries enter; it cannot trip unless the
        # accounting above is broken, because a queued entry is still counted in flight.
        if self._failed_depth >= self.limit and self._held is None:
            raise RetryBufferError(
                f"failed buffer overflow: {self._failed_depth} entries queued with capacity "
                f"{self.limit}; this is a bug in retry_buffer's accounting"
            )
        entry._state = _QUEUED
        entry._due_at = due_at
        entry._failed_order = self._failed_order
        self._failed_order += 1
        self._levels[level].append(entry)
        depth = self._failed_depth + 1
        self._failed_depth = depth
        if depth > self._peak_failed:
            self._peak_failed = depth

    def _finish_failed(self, entry: Entry[T], error: object) -> None:
        entry._state = _DONE
        self._live.pop(entry, None)
        self._final_failures += 1
        self._finals.append((entry, error))

    def pop_finals(self) -> list[tuple[Entry[T], object]]:
        """Final failures not yet reported to the user: the shell calls the callback for each."""
        finals = self._finals
        if finals:
            self._finals = []
        return finals

    def _misuse(self, entry: Entry[T], what: str) -> RetryBufferError:
        state = entry._state
        # Closed first: close() pops every entry before it marks any _CLOSED, so a report
        # racing it can find its entry gone and still _SENT. It was handed back (or is being).
        if self.closed or state == _CLOSED:
            return BufferClosed(
                f"{what}() for entry seq={entry.seq} after close(): the buffer is closed and "
                "close() handed back every unfinished entry"
            )
        if entry not in self._live and state in (_SENT, _QUEUED):
            return RetryBufferError(
                f"{what}() got entry seq={entry.seq} that this buffer did not admit"
            )
        if state == _DONE:
            return RetryBufferError(
                f"{what}() for entry seq={entry.seq}, which already had its final outcome "
                "(delivered or finally failed); report each attempt's outcome once"
            )
        return RetryBufferError(
            f"{what}() for entry seq={entry.seq}, which is waiting in the failed buffer; take "
            "it with take_failed() and send it before reporting another outcome"
        )

    # -- the failed buffer ---------------------------------------------------------------------

    def take_failed(self) -> Entry[T] | None:
        """Pop the oldest failed entry whose backoff has elapsed, starting its next attempt."""
        if not self._failed_depth:
            return None
        now = self._clock()
        deadline_s = self.policy.deadline_s
        while self._failed_depth:
            best: Entry[T] | None = None
            best_queue: deque[Entry[T]] | None = None
            for queue in self._levels:
                if queue:
                    head = queue[0]
                    if head._due_at <= now and (
                        best is None or head._failed_order < best._failed_order
                    ):
                        best = head
                        best_queue = queue
            if best is None or best_queue is None:
                return None
            best_queue.popleft()
            self._failed_depth -= 1
            if deadline_s is not None and now >= best._first_failure_at + deadline_s:
                self._finish_failed(best, best.last_error)
                continue
            best.attempts += 1
            best._state = _SENT
            self._retries += 1
            return best
        return None

    def untake(self, entry: Entry[T]) -> None:
        """Undo the ``take_failed()`` that just returned ``entry``, before any attempt: it is
        the oldest due entry again (its caller could not send it, a callback having raised on
        the way)."""
        if entry not in self._live or entry._state != _SENT:
            raise self._misuse(entry, "untake")
        entry.attempts -= 1
        entry._state = _QUEUED
        self._retries -= 1
        self._levels[min(entry.attempts, len(self._delays)) - 1].appendleft(entry)
        self._failed_depth += 1

    def next_due_in(self) -> float | None:
        """Seconds until the next failed entry is due (0 if one is), ``None`` if none waits."""
        if not self._failed_depth:
            return None
        due_at = min(queue[0]._due_at for queue in self._levels if queue)
        return max(0.0, due_at - self._clock())

    def wait_bound_s(self, remaining_s: float | None) -> float | None:
        """How long a waiter may sleep: ``remaining_s`` (None: no bound), cut short to when
        the next failed entry is due (a millisecond at least: a backoff of 0 would spin)."""
        due_in = self.next_due_in()
        if due_in is not None:
            due_in = max(due_in, 0.001)
        if due_in is not None and (remaining_s is None or due_in < remaining_s):
            return due_in
        return remaining_s

    # -- the end -----------------------------------------------------------------------------

    def close(self) -> list[Entry[T]]:
        """Refuse admission from now on; count out and return every unfinished entry."""
        if self.closed:
            return []
        self.closed = True
        self.admission_shut = True
        self._gate = 0
        for queue in self._levels:
            queue.clear()
        self._failed_depth = 0
        live = self._live
        left = []
        while True:
            try:
                left.append(live.popitem()[1])  # one atomic pop each: see the module doc
            except KeyError:  # empty, perhaps by a delivery of the last entry just now
                break
        left.reverse()  # popitem() is LIFO: back to admission order
        for entry in left:
            entry._state = _CLOSED
        self._returned += len(left)
        return left

    def statistics(self) -> Statistics:
        entries = len(self._live)
        in_flight = entries if self._held is None else self.in_flight()
        return Statistics(
            limit=self.limit,
            admitted=self._next_seq,
            delivered=self._next_seq - self._final_failures - self._returned - entries,
            final_failures=self._final_failures,
            returned_on_close=self._returned,
            in_flight=in_flight,
            peak_in_flight=self._peak_in_flight,
            failed_depth=self._failed_depth,
            peak_failed_depth=self._peak_failed,
            retries=self._retries,
            possibly_duplicated=self._duplicates,
            wait_seconds=self.wait_s,
            closed=self.closed,
        )
