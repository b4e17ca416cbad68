"""What the parts of :class:`FailoverProducer` share: the records a message carries through
confluent-kafka (each is its own delivery callback), the callbacks of messages sent without
one, and the paths' constants and small helpers.

Every Python function the client calls (a delivery callback, ``error_cb``, the user's
``stats_cb`` ...) catches what it raises and raises it again (``except BaseException: raise``).
confluent-kafka (2.16, on Python before 3.12) keeps an exception raised in a callback by its
value alone, for poll() or flush() to raise, and an exception raised in C that nothing caught
on its way out has no value yet: a KeyError of a dict lookup, KeyboardInterrupt from Ctrl-C.
The caller of flush() would get a SystemError naming neither. Caught once, it has its value.
On the healthy path that costs nothing (a ``try`` block is free until something raises), so
the delivery callbacks do it inline; the others (the producer's ``error_cb``, the user's
``stats_cb``, ``throttle_cb`` and ``oauth_cb``) are wrapped by ``_config.surfacing``.
"""

from __future__ import annotations

import functools
import itertools
import operator
import time
import types
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import confluent_kafka
from confluent_kafka import KafkaError

from failover_partitioner._message import (
    DeliveryGroup,
    DeliveryReport,
    Headers,
    UndeliveredMessage,
)
from failover_partitioner.core import check_header_name
from failover_partitioner.errors import NoUsablePartition
from retry_buffer import BufferClosed

if TYPE_CHECKING:
    from failover_partitioner.confluent._delivering import Delivering


DeliveryCallback = Callable[[Any, DeliveryReport], None]
"""``cb(err, report)``: ``err`` is None or a ``confluent_kafka.KafkaError``."""

DeadLetterHook = Callable[[UndeliveredMessage, Any], None]
"""``hook(message, err)``: called once for each message that failed finally."""

_names = itertools.count(1)

# Once a broker refused a topic for lack of rights, librdkafka marks the topic failed until its
# next metadata and fails the messages it still holds for it as _UNKNOWN_PARTITION or
# _UNKNOWN_TOPIC. Within this many seconds of a refusal those are the refusal, ended as one.
_REFUSAL_MEMORY_S = 10.0
_LOCAL_UNKNOWN = frozenset({-190, -188})

# What a signal's handler raises (Ctrl-C's KeyboardInterrupt, a SIGTERM handler's sys.exit).
# Python raises it where it looks for signals, as a C call returns, never inside one; the
# client's produce() raises neither itself. So one that comes out of that call came after the
# client took the message: the attempt stands (its report comes as any other's), the message
# counts as accepted, and the interrupt goes on (``Delivering._taken_when_interrupted``).
_SIGNALLED = (KeyboardInterrupt, SystemExit)
# Marks such an exception carries up to produce_batch: "taken", a first attempt the client took
# (set by _taken_when_interrupted); "part", (indices not taken, end) of the part of the batch
# under way (a chunk, or messages one by one up to the one interrupted).
_TAKEN = "_failover_taken"
_PART = "_failover_part"

# librdkafka's RD_KAFKA_PARTITION_UA: the client's partitioner places the message.
_ANY_PARTITION = -1

# produce()'s healthy path: what _lanes gives for a topic that is not on it, and the lane of a
# topic whose keyless messages the client places but not its keyed ones (a C call: no frame).
_OFF: Any = object()
_CLIENT_PLACES: Callable[[], int] = itertools.repeat(_ANY_PARTITION).__next__

# produce_batch: the keys a message dict may have; the value of one the client takes as is
# (bytes or None: a str would come back as bytes in a report, and one the client cannot
# encode, a lone surrogate, is queued as a null value before the client raises).
_BATCH_KEYS = frozenset({"value", "key", "headers", "timestamp"})
_VALUE = operator.itemgetter("value")
_BATCH_VALUE_TYPES = frozenset({bytes, type(None)})
_partial = functools.partial


def _value_only(chunk: list[Any]) -> bool:
    """True when every item of ``chunk`` is a mapping whose only key is ``"value"``, and each
    value is bytes or None."""
    # Two passes in C, allocating nothing: the sizes add up to one key each, and every item
    # has "value" (else KeyError/TypeError) of one of those types.
    try:
        if sum(map(len, chunk)) != len(chunk):
            return False
        return _BATCH_VALUE_TYPES.issuperset(map(type, map(_VALUE, chunk)))
    except (TypeError, KeyError):
        return False


# librdkafka's largest queue.buffering.max.messages.
_QUEUE_MAX = 2_147_483_647


def _queue_bound(given: object, limit: int) -> object:
    """The client's queue bound: the user's, or the in-flight limit where that is lower."""
    try:
        return min(int(float(str(given))), limit)
    except ValueError:
        return given  # the client refuses it, naming the setting


def _report_for(
    failed: Callable[[Any, Any, Any], None], cb: DeliveryCallback | None = None
) -> Callable[[Any, Any], None]:
    """The delivery callback of messages produced without a record (no headers and no timestamp
    of their own, or kept by the caller): a failure is rebuilt from the client's report
    (``failed(cb, err, msg)``). A delivery needs nothing when nobody listens (deliveries are not
    counted one by one: see ``FailoverProducer.statistics``); else ``cb`` gets a report made
    from the client's (a :class:`_Delivered`), which lives only as long as the call. One
    callable serves every message of a callback: a record per message, held until its
    delivery, would leave many thousands of live objects for Python's cyclic garbage collector
    to walk again and again (with per-message callbacks that cost more than the rest of the
    path). A closure: its cells are cheaper to read than a bound method's attributes."""
    if cb is None:

        def report(err: Any, msg: Any) -> None:
            try:
                if err is not None:
                    failed(None, err, msg)
            except BaseException:
                raise  # whole, for the client to keep (see the module doc)

        return report

    def report_to(err: Any, msg: Any) -> None:
        try:
            if err is not None:
                failed(cb, err, msg)
                return
            rec = _Delivered()
            rec._msg = msg
            cb(None, rec)
        except BaseException:
            raise  # whole, for the client to keep (see the module doc)

    return report_to


# The callbacks the healthy path takes without a look further (callable, not a DeliveryGroup).
_PLAIN_CALLBACKS = frozenset({types.FunctionType, types.MethodType, types.BuiltinFunctionType})


def _report_keeping(
    failed: Callable[..., None], cb: DeliveryCallback | None = None
) -> Callable[..., None]:
    """The delivery callback of messages sent without a record with headers or a timestamp,
    which a report lacks (a delivery's too): ``functools.partial`` binds it to each message's
    headers and timestamp, a failure is rebuilt with them (``failed(cb, ...)``, as in
    ``_report_for``), and ``cb``, if any, gets a delivery's report with them (a
    :class:`_DeliveredKept`). The partial is then the one object per message that the
    collector walks again and again while the client holds it (see ``_report_for``): what it
    binds are a tuple of tuples (the headers copied into one) and an int, which the collector
    stops tracking once it has seen that nothing in them can be part of a cycle."""

    def report(
        headers: tuple[tuple[str, Any], ...] | None, timestamp: int | None, err: Any, msg: Any
    ) -> None:
        try:
            if err is not None:
                failed(cb, err, msg, None if headers is None else list(headers), timestamp)
            elif cb is not None:
                rec = _DeliveredKept()
                rec._msg = msg
                rec._headers = headers
                rec._timestamp = timestamp
                cb(None, rec)
        except BaseException:
            raise  # whole, for the client to keep (see the module doc)

    return report


def _rebuildable(value: object, key: object, cb: object) -> bool:
    """True when a message may go to the client without a record (see ``_report_for``): a
    failure report gives the client's bytes back, so a str value or key needs a record to be
    given back as it came, and a :class:`DeliveryGroup` has a report of its own. The healthy
    path of ``produce()`` asks this inline (a frame per message would show)."""
    return (
        type(value) is not str
        and type(key) is not str
        and (
            cb is None
            or type(cb) in _PLAIN_CALLBACKS
            or (callable(cb) and not isinstance(cb, DeliveryGroup))
        )
    )


def _weakly(method: Callable[..., None]) -> Callable[..., None]:
    """``method``, held weakly (a call does nothing once its producer is gone): a thread or a
    client holding the result does not keep the producer alive, so an unclosed one is
    collected, and warned of."""
    ref = weakref.WeakMethod(method)

    def call(*args: Any) -> None:
        bound = ref()
        if bound is not None:
            bound(*args)

    return call


def _count_value(counter: itertools.count[int]) -> int:
    """How many numbers ``counter`` (started at 1) has handed out, without taking one."""
    # repr is 'count(N)': N is the next number. Exact even when stores of next()'s results by
    # racing threads landed out of order.
    return int(repr(counter)[6:-1]) - 1


class _Record(DeliveryReport):
    """A message's record; calling it is the delivery callback confluent-kafka invokes."""

    __slots__ = ()

    # Set per producer on a subclass made in FailoverProducer.__init__, so that a record needs
    # no reference of its own (bound methods are not re-bound when read through an instance).
    # Typed Any: mypy would read callables stored on a class as methods taking self.
    _delivered: ClassVar[Any]
    _failure: ClassVar[Any]

    def __call__(self, err: Any, msg: Any) -> None:
        try:
            if err is None:
                entry = self._entry
                if entry is not None:
                    # The entry refers to this record (its item): let go of it, so that both
                    # are freed by their counts, not by Python's cyclic garbage collector.
                    self._entry = None
                    try:
                        self._delivered(entry)
                    except BufferClosed:
                        # Served after close() (by a poll in another thread): close() handed
                        # it back, possibly delivered; that list is its one outcome.
                        return
                cb = self._cb
                if cb is not None:
                    self._msg = msg
                    cb(None, self)
            else:
                self._failure(self, err, msg)
        except BaseException:
            raise  # whole, for the client to keep (see the module doc)


class _Delivered(DeliveryReport):
    """The report of a message delivered at its first attempt that was sent without a record
    (see ``_report_for``): made when the client's report comes, holding only that (``_msg``).
    The message's fields are read from it when asked for: copying them out of every report
    would cost a delivery as much again as the rest of its callback."""

    __slots__ = ()

    _attempts = 1
    _entry = None
    _cb = None

    @property
    def _m(  # type: ignore[override]  # read-only: a delivered report is never changed
        self,
    ) -> tuple[str, bytes | str | None, bytes | str | None, Headers | None, int | None]:
        msg = self._msg
        return (msg.topic(), msg.value(), msg.key(), None, None)


class _DeliveredKept(_Delivered):
    """A :class:`_Delivered` with the headers and timestamp its message was sent with (see
    ``_report_keeping``): a client's report carries neither."""

    __slots__ = ("_headers", "_timestamp")

    _headers: tuple[tuple[str, Any], ...] | None
    _timestamp: int | None

    @property
    def _m(  # type: ignore[override]  # read-only, as _Delivered's
        self,
    ) -> tuple[str, bytes | str | None, bytes | str | None, Headers | None, int | None]:
        msg, headers = self._msg, self._headers
        return (
            msg.topic(),
            msg.value(),
            msg.key(),
            None if headers is None else list(headers),
            self._timestamp,
        )


class _GroupReport:
    """The client's callback for the messages of one :class:`DeliveryGroup`: a delivery counts
    the message out and tells the group; a failure rebuilds the message from the report.

    Failure reports carry no headers and no timestamp: a message with either is given to the
    client as ``partial(_GroupReport.keeping, report, headers, timestamp)`` (made in C, no
    Python frame when called).

    The group holds its report weakly (``group._client_report``), and the client holds it for
    each message in flight: a strong reference back would make a cycle, left for Python's
    cyclic garbage collector with the group and all it holds (a mirror's span: its consumed
    messages)."""

    __slots__ = ("__weakref__", "_delivered", "_group", "producer")

    def __init__(self, producer: Delivering, group: DeliveryGroup) -> None:
        self.producer = producer
        self._group = group
        self._delivered = group.delivered

    def __call__(self, err: Any, msg: Any) -> None:
        try:
            if err is None:
                self._delivered()
            else:
                self.producer._failed_without_record(self._group, err, msg)
        except BaseException:
            raise  # whole, for the client to keep (see the module doc)

    def keeping(
        self,
        headers: tuple[tuple[str, Any], ...] | None,
        timestamp: int | None,
        err: Any,
        msg: Any,
    ) -> None:
        """The report of a message with headers or a timestamp (see ``_report_keeping``)."""
        try:
            if err is None:
                self._delivered()
            else:
                kept = None if headers is None else list(headers)
                self.producer._failed_without_record(self._group, err, msg, kept, timestamp)
        except BaseException:
            raise  # whole, for the client to keep (see the module doc)


# A refused login, which librdkafka tells only through a client's ``error_cb`` and then tries
# again for ever: what happened ("{cluster}": who refused, e.g. "the cluster") and the
# settings to check. The producer and the mirror name a refusal from here.
_CREDENTIALS = (
    "{cluster} refused the credentials",
    "sasl.username, sasl.password and sasl.mechanisms",
)
LOGIN_REFUSALS: Mapping[int, tuple[str, str]] = {
    KafkaError._AUTHENTICATION: _CREDENTIALS,
    KafkaError.SASL_AUTHENTICATION_FAILED: _CREDENTIALS,  # SaslAuthenticate's error code
    KafkaError._SSL: (
        "the TLS handshake with {cluster} failed",
        "ssl.ca.location (the CA that signed the brokers' certificates) and the client's own "
        "ssl.* settings",
    ),
}


def login_refusal(err: KafkaError, cluster: str = "the cluster") -> tuple[str, str] | None:
    """What a refused login ``err`` means, ``cluster`` named as who refused, and the settings
    to check; None when ``err`` is no refused login."""
    told = LOGIN_REFUSALS.get(err.code())
    return None if told is None else (told[0].format(cluster=cluster), told[1])


def kafka_error_of(exc: BaseException | None) -> KafkaError | None:
    """The ``KafkaError`` a confluent-kafka exception carries (a ``KafkaException``'s first
    argument), or None."""
    err = exc.args[0] if exc is not None and exc.args else None
    return err if isinstance(err, KafkaError) else None


def _kafka_error(error: object) -> Any:
    """The error a user callback gets: always a ``confluent_kafka.KafkaError``."""
    if isinstance(error, KafkaError):
        return error
    if isinstance(error, confluent_kafka.KafkaException):
        inner = kafka_error_of(error)
        if inner is not None:
            return inner
    if isinstance(error, NoUsablePartition):
        return KafkaError(KafkaError._MSG_TIMED_OUT, str(error))
    if isinstance(error, BufferError):
        return KafkaError(KafkaError._QUEUE_FULL, str(error) or "local queue full")
    return KafkaError(KafkaError._FAIL, repr(error))


def _normalise_headers(headers: object, topic: str) -> Headers | None:
    if headers is None:
        return None
    if isinstance(headers, Mapping):
        out = [(str(k), v) for k, v in headers.items()]
        for name, _ in out:
            check_header_name(name, topic)
        return out
    if isinstance(headers, (list, tuple)):
        out = []
        for h in headers:
            if not (isinstance(h, tuple) and len(h) == 2 and isinstance(h[0], str)):
                raise TypeError(
                    f"headers for topic {topic!r} must be a dict or a list of (str, value) "
                    f"pairs; got the item {h!r}"
                )
            check_header_name(h[0], topic)
            out.append(h)
        return out
    raise TypeError(
        f"headers for topic {topic!r} must be a dict or a list of (str, value) pairs, "
        f"got {type(headers).__name__}"
    )


def _check_header_names(headers: object, topic: str) -> None:
    """Refuse headers whose names are not all str, or not UTF-8 text: the client checks values
    but writes any name as str(name) (a bytes name becomes "b'...'"), and crashes on a lone
    surrogate, so such a name is refused here, as the checked path does. A list of ASCII names
    (the usual case) costs one pass."""
    if type(headers) is not list:
        _normalise_headers(headers, topic)  # a dict (or a bad type): checked whole
        return
    try:
        for name, _ in headers:
            if type(name) is not str or not name.isascii():
                raise TypeError
    except (TypeError, ValueError):
        _normalise_headers(headers, topic)  # raises, naming the pair (passes UTF-8 names)


def _refusal_text(exc: confluent_kafka.KafkaException) -> str:
    error = kafka_error_of(exc)
    return str(exc) if error is None else error.str()


def _check_header_items(headers: Headers, topic: str, refusal: TypeError) -> None:
    """Raise a clear error naming the pair the client refused (``refusal``), if one is bad."""
    _normalise_headers(headers, topic)
    for h in headers:
        if h[1] is not None and not isinstance(h[1], (str, bytes)):
            raise TypeError(
                f"headers for topic {topic!r} must have str, bytes or None values; "
                f"got the item {h!r}"
            ) from refusal


class _ErrorsOnly:
    """``delivery.report.only.error``: the user's callback sees failures only."""

    __slots__ = ("_cb",)

    def __init__(self, cb: DeliveryCallback) -> None:
        self._cb = cb

    def __call__(self, err: Any, report: DeliveryReport) -> None:
        if err is not None:
            self._cb(err, report)


def _key_bytes(key: object) -> bytes:
    if isinstance(key, str):
        return key.encode()
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key)
    raise TypeError(f"key must be bytes, str or None, got {type(key).__name__}")


# A purge misses a message on its way between two of librdkafka's queues (to a new leader's
# broker thread, say), which would be reported only at its timeout: purge again this often,
# for at most this long (close() and the mirror's fast lane alike).
PURGE_FOR_S = 2.0
PURGE_AGAIN_S = 0.25


def purge_until_empty(
    purge: Callable[[], None],
    settle: Callable[[float], bool],
    timeout: float = PURGE_FOR_S,
    clock: Callable[[], float] = time.monotonic,
) -> bool:
    """``purge()`` (the client gives up what it holds, each message reported failed), then
    ``settle(seconds)`` (serve the reports for up to that long; True once the client holds
    nothing), again every ``PURGE_AGAIN_S`` until it holds nothing (True) or ``timeout``
    passed (False: the messages without a report have no known outcome)."""
    deadline = clock() + timeout
    while True:
        purge()
        if settle(min(PURGE_AGAIN_S, max(0.0, deadline - clock()))):
            return True
        if clock() >= deadline:
            return False
