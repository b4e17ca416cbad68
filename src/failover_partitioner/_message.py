"""A message as the producer keeps it between attempts, and as the user gets it back.

:class:`DeliveryReport` is the per-message record: it holds what is needed to produce the message
again (topic, key, value, headers, timestamp, message id) and, once the outcome is known, the
final partition and offset or the error. The user's delivery callback receives it as its
second argument; its accessors have the names of ``confluent_kafka.Message``'s, so callbacks
written for confluent-kafka keep working, plus :meth:`attempts` and
:meth:`possibly_duplicated`. It is deliberately one object per message (no separate report
object), because allocations on the delivery path are what costs.

:class:`UndeliveredMessage` is the immutable form handed back by ``close()``, carried by
``ProduceTimeout`` and given to a dead-letter hook.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["DeliveryGroup", "DeliveryReport", "Headers", "UndeliveredMessage"]

Headers = list[tuple[str, str | bytes | None]]
"""Headers as the producer keeps them: a list of (name, value) pairs, in order."""

# confluent-kafka's timestamp types (TIMESTAMP_NOT_AVAILABLE, TIMESTAMP_CREATE_TIME), repeated
# here so the record stays client-agnostic.
_TIMESTAMP_NOT_AVAILABLE = 0
_TIMESTAMP_CREATE_TIME = 1

_R = TypeVar("_R", bound="DeliveryReport")


class DeliveryGroup:
    """An ``on_delivery`` callback shared by many messages that needs no report of a message
    delivered at its first attempt (a mirror counting what is done, say).

    Every producer may call it as ``group(err, report)``, once per message, with its final
    outcome, as any delivery callback. :class:`~failover_partitioner.FailoverProducer` instead
    calls ``group.delivered()`` (no arguments) for a message delivered at its first attempt: it
    then keeps no record of the message and makes no report, which saves most of the
    per-message cost of a callback. A message that fails is rebuilt from the client's report
    (topic, key, value, headers, timestamp) and takes the usual retry path; its final outcome,
    delivered or not, comes as ``group(err, report)``.

    Subclass it and override both methods; a subclass with ``__slots__`` stays small.
    """

    __slots__ = ("_client_report",)

    def __init__(self) -> None:
        # A weak reference to the producer's callable for the group, which it gives the client
        # with each message (made on first use, and again once none is in flight).
        self._client_report: Any = None

    def delivered(self) -> None:
        """A message of the group was delivered at its first attempt."""
        raise NotImplementedError

    def __call__(self, err: Any, report: DeliveryReport) -> None:
        """Any other final outcome: ``err`` None (delivered after a retry) or the error."""
        raise NotImplementedError


@dataclass(frozen=True, slots=True, kw_only=True)
class UndeliveredMessage:
    """A message that has no successful delivery (yet): what the caller needs to send it again.

    ``possibly_delivered`` is True when an attempt may have been written anyway (an ambiguous
    failure, or the message was still in flight at ``close()``): sending it again may duplicate.
    """

    topic: str
    value: bytes | str | None
    key: bytes | str | None
    headers: tuple[tuple[str, str | bytes | None], ...] | None
    timestamp: int | None
    attempts: int
    last_error: object | None
    possibly_delivered: bool


def not_accepted(
    topic: str,
    value: bytes | str | None,
    key: bytes | str | None,
    headers: Iterable[tuple[str, str | bytes | None]] | None,
    timestamp: int | None,
    last_error: object | None = None,
) -> UndeliveredMessage:
    """A message the producer never took (refused, or it waited too long for room): no
    attempt, so never possibly delivered."""
    return UndeliveredMessage(
        topic=topic,
        value=value,
        key=key,
        headers=None if headers is None else tuple(headers),
        timestamp=timestamp,
        attempts=0,
        last_error=last_error,
        possibly_delivered=False,
    )


class DeliveryReport:
    """One message's record and, after the outcome, its delivery report.

    Accessors mirror ``confluent_kafka.Message``: ``topic() partition() offset() key() value()
    headers() timestamp() error() latency()``.

    Fields (set by the producer; a record is built with :meth:`new` or, on a hot path, by
    assigning ``_m``, ``_cb``, ``_entry``, ``_partition`` and ``_attempts`` directly):
    ``_m`` = ``(topic, value, key, headers, timestamp)``; ``_cb`` the user's callback or None;
    ``_entry`` the retry buffer's entry; ``_partition`` and ``_attempts`` of the last attempt.
    ``_msg`` (the client's report), ``_error``, ``_dup`` and ``_solo`` (its batch was refused
    whole: send it alone) are set only when there is something to say, so readers use
    ``getattr`` with a default.
    """

    __slots__ = (
        "_attempts",
        "_cb",
        "_dup",
        "_entry",
        "_error",
        "_m",
        "_msg",
        "_partition",
        "_solo",
    )

    _m: tuple[str, bytes | str | None, bytes | str | None, Headers | None, int | None]
    _cb: Any
    _entry: Any
    _partition: int
    _attempts: int
    _msg: Any
    _error: Any
    _dup: bool
    _solo: bool

    @classmethod
    def new(
        cls: type[_R],
        topic: str,
        value: bytes | str | None = None,
        key: bytes | str | None = None,
        headers: Headers | None = None,
        timestamp: int | None = None,
        cb: Any = None,
    ) -> _R:
        rec = cls()
        rec._m = (topic, value, key, headers, timestamp)
        rec._cb = cb
        rec._entry = None
        rec._partition = -1
        rec._attempts = 0
        return rec

    # -- confluent_kafka.Message-compatible accessors -------------------------------------

    def topic(self) -> str:
        return self._m[0]

    def partition(self) -> int:
        """The partition of the last attempt (the final one once the outcome is known)."""
        msg = getattr(self, "_msg", None)
        if msg is not None:
            return int(msg.partition())
        return self._partition

    def offset(self) -> int | None:
        """The offset written, or None when the message was not delivered."""
        msg = getattr(self, "_msg", None)
        if msg is None or getattr(self, "_error", None) is not None:
            return None
        off = msg.offset()
        return None if off is None or off < 0 else int(off)

    def key(self) -> bytes | str | None:
        return self._m[2]

    def value(self) -> bytes | str | None:
        return self._m[1]

    def headers(self) -> Headers | None:
        headers = self._m[3]
        return None if headers is None else list(headers)

    def timestamp(self) -> tuple[int, int]:
        """``(type, ms)`` as confluent-kafka gives it; the first attempt's time is kept."""
        msg = getattr(self, "_msg", None)
        if msg is not None:
            t = msg.timestamp()
            return int(t[0]), int(t[1])
        ts = self._m[4]
        if ts is None:
            return _TIMESTAMP_NOT_AVAILABLE, 0
        return _TIMESTAMP_CREATE_TIME, ts

    def error(self) -> Any:
        """The final error, or None when delivered."""
        return getattr(self, "_error", None)

    def latency(self) -> float | None:
        latency = getattr(getattr(self, "_msg", None), "latency", None)
        return None if latency is None else float(latency())

    # -- what confluent-kafka's Message does not have ---------------------------------------

    def attempts(self) -> int:
        """How many times the message was handed to the client (1 when nothing went wrong)."""
        return self._attempts

    def possibly_duplicated(self) -> bool:
        """True when an earlier attempt may also have been written (an ambiguous failure)."""
        return getattr(self, "_dup", False)

    def closed_in_flight(self) -> None:
        """The client still held messages when the producer closed: an attempt of this one
        may have been written, as an ambiguous failure's may."""
        if self._attempts > 0:
            self._dup = True

    def undelivered(self) -> UndeliveredMessage:
        """This message as an :class:`UndeliveredMessage`."""
        topic, value, key, headers, timestamp = self._m
        return UndeliveredMessage(
            topic=topic,
            value=value,
            key=key,
            headers=None if headers is None else tuple(headers),
            timestamp=timestamp,
            attempts=self._attempts,
            last_error=getattr(self, "_error", None),
            possibly_delivered=self.possibly_duplicated(),
        )

    def __repr__(self) -> str:
        return (
            f"DeliveryReport(topic={self._m[0]!r}, partition={self.partition()}, "
            f"offset={self.offset()}, attempts={self._attempts}, error={self.error()!r})"
        )
