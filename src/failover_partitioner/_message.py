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

from dataclasses import dataclass
from typing import Any

__all__ = ["DeliveryReport", "Headers", "UndeliveredMessage"]

Headers = list[tuple[str, bytes | None]]
"""Headers as the producer keeps them: a list of (name, value) pairs, in order."""

# confluent-kafka's timestamp types (TIMESTAMP_NOT_AVAILABLE, TIMESTAMP_CREATE_TIME), repeated
# here so the record stays client-agnostic.
_TIMESTAMP_NOT_AVAILABLE = 0
_TIMESTAMP_CREATE_TIME = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class UndeliveredMessage:
    """A message that has no successful delivery (yet): what the caller needs to send it again.

    ``possibly_delivered`` is True when an attempt may have been written anyway (an ambiguous
    failure, or the message was still in flight at ``close()``): sending it again may duplicate.
    """

    topic: str
    value: bytes | str | None
    key: bytes | str | None
    headers: tuple[tuple[str, bytes | None], ...] | None
    timestamp: int | None
    attempts: int
    last_error: object | None
    possibly_delivered: bool


class DeliveryReport:
    """One message's record and, after the outcome, its delivery report.

    Accessors mirror ``confluent_kafka.Message``: ``topic() partition() offset() key() value()
    headers() timestamp() error() latency()``.
    """

    __slots__ = (
        "_attempts",
        "_cb",
        "_dup",
        "_entry",
        "_error",
        "_headers",
        "_key",
        "_msg",
        "_partition",
        "_timestamp",
        "_topic",
        "_value",
    )

    def __init__(
        self,
        topic: str,
        value: bytes | str | None,
        key: bytes | str | None,
        headers: Headers | None,
        timestamp: int | None,
        cb: Any,
    ) -> None:
        self._topic = topic
        self._value = value
        self._key = key
        self._headers = headers
        self._timestamp = timestamp
        self._cb = cb
        self._attempts = 0
        self._partition = -1
        self._msg: Any = None
        self._error: Any = None
        self._dup = False
        self._entry: Any = None

    # -- confluent_kafka.Message-compatible accessors -------------------------------------

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        """The partition of the last attempt (the final one once the outcome is known)."""
        msg = self._msg
        if msg is not None:
            return int(msg.partition())
        return self._partition

    def offset(self) -> int | None:
        """The offset written, or None when the message was not delivered."""
        msg = self._msg
        if msg is None or self._error is not None:
            return None
        off = msg.offset()
        return None if off is None or off < 0 else int(off)

    def key(self) -> bytes | str | None:
        return self._key

    def value(self) -> bytes | str | None:
        return self._value

    def headers(self) -> Headers | None:
        return None if self._headers is None else list(self._headers)

    def timestamp(self) -> tuple[int, int]:
        """``(type, ms)`` as confluent-kafka gives it; the first attempt's time is kept."""
        msg = self._msg
        if msg is not None:
            t = msg.timestamp()
            return int(t[0]), int(t[1])
        if self._timestamp is None:
            return _TIMESTAMP_NOT_AVAILABLE, 0
        return _TIMESTAMP_CREATE_TIME, self._timestamp

    def error(self) -> Any:
        """The final error, or None when delivered."""
        return self._error

    def latency(self) -> float | None:
        latency = getattr(self._msg, "latency", None)
        return None if latency is None else float(latency())

    # -- what confluent-kafka's Message does not have ---------------------------------------

    def attempts(self) -> int:
        """How many times the message was handed to the client (1 when nothing went wrong)."""
        return self._attempts

    def possibly_duplicated(self) -> bool:
        """True when an earlier attempt may also have been written (an ambiguous failure)."""
        return self._dup

    def undelivered(self, *, in_flight: bool = False) -> UndeliveredMessage:
        """This message as an :class:`UndeliveredMessage`."""
        headers = self._headers
        return UndeliveredMessage(
            topic=self._topic,
            value=self._value,
            key=self._key,
            headers=None if headers is None else tuple(headers),
            timestamp=self._timestamp,
            attempts=self._attempts,
            last_error=self._error,
            possibly_delivered=self._dup or (in_flight and self._attempts > 0),
        )

    def __repr__(self) -> str:
        return (
            f"DeliveryReport(topic={self._topic!r}, partition={self.partition()}, "
            f"offset={self.offset()}, attempts={self._attempts}, error={self._error!r})"
        )
