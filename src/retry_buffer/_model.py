"""Values shared by the accounting core and its shells: the retry policy, an entry, a snapshot."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Generic, TypeVar

from ._errors import InvalidArgument

__all__ = ["Entry", "RetryPolicy", "Statistics"]

T = TypeVar("T")

# Entry life cycle. An entry is in flight from admission until it is delivered, finally
# failed or handed back by close(); while in flight it is either out with the producer
# (_SENT) or waiting in the failed buffer (_QUEUED).
_SENT = 0
_QUEUED = 1
_DONE = 2
_CLOSED = 3


def _non_negative_finite(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"{name} must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise InvalidArgument(f"{name} must be a finite number >= 0 seconds, got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """How often and how long a failed message is tried again.

    The default retries without end: a message leaves the buffer only delivered, explicitly
    failed as non-retriable, or handed back by ``close()``. ``max_attempts`` counts attempts
    started (the first send included); ``deadline_s`` is measured from the entry's first
    failure (how long a failed message is tried again: the first attempt's own time does not
    count, so a sender that admits at its first failure and one that admits at the first send
    agree), and no attempt starts after it. A failed entry becomes due again after
    ``backoff_initial_s``, doubling with each attempt up to ``backoff_max_s``.
    """

    max_attempts: int | None = None
    deadline_s: float | None = None
    backoff_initial_s: float = 0.0
    backoff_max_s: float = 1.0

    def __post_init__(self) -> None:
        if self.max_attempts is not None and (
            isinstance(self.max_attempts, bool)
            or not isinstance(self.max_attempts, int)
            or self.max_attempts < 1
        ):
            raise InvalidArgument(
                f"max_attempts must be None (unlimited) or an int >= 1, got {self.max_attempts!r}"
            )
        if self.deadline_s is not None:
            _non_negative_finite("deadline_s", self.deadline_s)
            if self.deadline_s == 0:
                raise InvalidArgument("deadline_s must be > 0 seconds or None, got 0")
        _non_negative_finite("backoff_initial_s", self.backoff_initial_s)
        _non_negative_finite("backoff_max_s", self.backoff_max_s)
        if self.backoff_max_s < self.backoff_initial_s:
            raise InvalidArgument(
                f"backoff_max_s ({self.backoff_max_s!r}) must be >= backoff_initial_s "
                f"({self.backoff_initial_s!r})"
            )

    def backoff_s(self, attempts: int) -> float:
        """Delay before the next attempt of an entry whose ``attempts``-th attempt just failed."""
        if self.backoff_initial_s == 0:
            return 0.0
        return min(self.backoff_max_s, self.backoff_initial_s * 2.0 ** min(attempts - 1, 64))


class Entry(Generic[T]):
    """One admitted message's bookkeeping. Read its fields; only the buffer changes them.

    ``seq`` is unique per buffer and follows admission order; ``attempts`` counts attempts
    started (1 at admission); ``possibly_duplicated`` is set once a failure was reported with
    ``possibly_persisted=True`` (the broker may have stored it, so a retry may duplicate it).

    Entries hash and compare by identity (a buffer's in-flight table is keyed by them): a
    subclass must not define ``__eq__`` or ``__hash__``.
    """

    # A slotted class rather than a dataclass: admission creates one per message, on the hot path.
    # The failure fields stay unset until the first failure (most entries never fail, and each
    # store costs on that path); their properties read an unset one as its default.
    __slots__ = (
        "_due_at",
        "_failed_order",
        "_first_failure_at",
        "_item",
        "_last_error",
        "_possibly_duplicated",
        "_state",
        "admitted_at",
        "attempts",
        "seq",
    )

    _item: T
    seq: int
    attempts: int
    admitted_at: float
    _state: int
    _first_failure_at: float  # set at the first failure
    _last_error: object  # set at each failure
    _possibly_duplicated: bool  # set when a failure says the broker may have stored it
    _due_at: float  # set when the entry enters the failed buffer
    _failed_order: int  # likewise: failure order, to hand out the oldest due entry first

    def __init__(self, item: T, seq: int, admitted_at: float) -> None:
        self._item = item
        self.seq = seq
        self.attempts = 1
        self.admitted_at = admitted_at
        self._state = _SENT

    @property
    def item(self) -> T:
        """The message this entry counts. A sender's own entry class (see ``try_enter``) may
        give itself: one object per message."""
        return self._item

    @property
    def first_failure_at(self) -> float | None:
        """Clock time of the first failed attempt; None while none has failed."""
        try:
            return self._first_failure_at
        except AttributeError:
            return None

    @property
    def last_error(self) -> object | None:
        """The error reported with the latest failed attempt; None while none has failed."""
        try:
            return self._last_error
        except AttributeError:
            return None

    @property
    def possibly_duplicated(self) -> bool:
        """A failure was reported with ``possibly_persisted=True``: a retry may duplicate it."""
        try:
            return self._possibly_duplicated
        except AttributeError:
            return False

    def __repr__(self) -> str:
        return (
            f"Entry(seq={self.seq}, attempts={self.attempts}, item={self.item!r}, "
            f"last_error={self.last_error!r}, possibly_duplicated={self.possibly_duplicated})"
        )


class _AdmittedEntry(Entry[T]):
    """The entries a buffer creates: an ``Entry`` whose fields the accounting core sets itself.

    Without an ``__init__`` of its own, creating one runs no Python frame; admission creates
    one per message, so that frame was a tenth of the cost of admit + delivered.
    """

    __slots__ = ()
    __init__ = object.__init__  # no arguments: the core sets the fields


@dataclass(frozen=True, slots=True, kw_only=True)
class Statistics:
    """A consistent snapshot of a buffer's counters.

    ``admitted == delivered + final_failures + returned_on_close + in_flight`` always holds.
    ``failed_depth`` counts entries waiting in the failed buffer (they are in flight too);
    ``retries`` counts attempts handed out again after a failure; ``wait_seconds`` is the total
    time callers spent blocked waiting for room (admit and merger). ``possibly_duplicated``
    counts entries marked so.
    """

    limit: int
    admitted: int
    delivered: int
    final_failures: int
    returned_on_close: int
    in_flight: int
    peak_in_flight: int
    failed_depth: int
    peak_failed_depth: int
    retries: int
    possibly_duplicated: int
    wait_seconds: float
    closed: bool
