"""``FailoverProducer``: confluent-kafka's Producer, routing around partitions under min ISR.

Theory of operation (DESIGN.md sections 1, 3 and 4):

* **Inflow.** In flight is what the clients hold (``len(producer)``: queued, in flight, or
  with a report not yet served) plus the failed buffer: the :class:`retry_buffer.RetryBuffer`
  counts it so (``held=``) and keeps the bound, ``max_in_flight``; its hypothesis model covers
  this form (tests/unit/test_retry_buffer_held.py). The client's queue is bounded at the same
  limit (``queue.buffering.max.messages``, or the user's if lower). Paths other than the
  healthy one ask the buffer for room first; at the limit ``produce`` waits (serving
  callbacks), then raises :class:`ProduceTimeout`. Deliveries are counted (an
  ``itertools.count``, atomic) for the statistics only.
* **The healthy path.** While every partition of a topic is usable and nothing waits in the
  failed buffer, a message without headers or timestamp goes straight to the client: no
  partition (librdkafka places it: murmur2 for keys, ``murmur2_random``, the Java client's
  rule the keyed choice follows; its sticky partitioner for keyless ones, unless ``headroom``
  or ``client_rack`` want the rotation), no check of its own (the client's bounded queue
  refuses at the limit: the message then waits for room as a raw producer's caller would), no
  record without a callback (the client's one config-level callback, ``_report_for``, counts
  a delivery and rebuilds a failed message from the report), and with one a record holding
  only the message and the callback. The first failure, quarantine, metadata change or message
  that must wait takes every topic off this path (``_leave_whole``); ``_service`` puts whole
  topics back once nothing waits (``_reopen_whole``).
* **Other first attempts** go to the client with an explicit ``partition=`` chosen from the
  topic's current :class:`~failover_partitioner.health.TopicView` (confluent-kafka cannot take
  a Python partitioner), except where librdkafka's own partitioner follows the same rule while
  every partition is usable (keys with ``murmur2_random``; keyless ``sticky``): then the
  chooser answers ``CLIENT_PARTITIONER`` and the client places it (see
  :mod:`failover_partitioner.choose`). A message without a callback or headers needs no record
  of its own: the producer's one delivery callback counts it, and if it failed, rebuilds
  it from the client's report (topic, key, value, timestamp are all there). Other messages
  carry a record (a :class:`DeliveryReport` subclass whose ``__call__`` is the callback, so no
  closure is made per message). Headers given as a list of pairs (confluent-kafka's own form)
  are copied and passed through unchecked: the client checks each pair as it converts it, and
  when it refuses one the caller gets a ``TypeError`` naming the bad pair, before the message
  is accepted. A dict, or a list before the topic's metadata is known, is checked in Python.
* **Batches.** ``produce_batch`` hands value-only keyless messages to the client's
  ``produce_batch``, one call per partition, after one chooser step for the chunk
  (:meth:`~failover_partitioner.choose.PartitionChooser.keyless_deal`). They carry no record:
  with a callback, one callable for the call makes each message's record when its report
  comes. What the client refuses (queue full, a partition it does not know yet, a bad value)
  and every other kind of message take the single path, already counted in.
* **A batch refused whole.** A broker answers a batch larger than its ``message.max.bytes``
  (or holding one bad record) with MSG_SIZE_TOO_LARGE, RECORD_LIST_TOO_LARGE, INVALID_RECORD
  or CORRUPT_MESSAGE for every record in it. librdkafka cannot be told to split a batch, so
  each such record is produced again alone, through a second client made on first need with
  ``batch.num.messages=1``: a record refused there is refused for itself and ends with the
  error; the others are delivered.
* **Failures** are classified (:func:`~failover_partitioner.errors.classify`); the partition
  is quarantined at once when the error says so, and the message enters the
  :class:`retry_buffer.RetryBuffer`, the failed buffer with its retry policy. It can never
  overflow: every message in it is counted in flight.
  The callback never calls ``poll``, ``flush`` or ``list_topics``: inside a delivery callback
  that re-enters librdkafka.
* **Retries** are produced again, as new messages with a new partition choice, from the
  caller's side: at the start of ``produce`` and in ``poll``/``flush``.
* **Metadata** is refreshed on a thread of its own (:mod:`failover_partitioner.metadata`).
"""

from __future__ import annotations

import collections
import functools
import itertools
import logging
import operator
import os
import threading
import time
import types
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar

import confluent_kafka
from confluent_kafka import KafkaError

from failover_partitioner._config import (
    STICKY_BYTES_DEFAULT,
    STICKY_MESSAGES_DEFAULT,
    ClientSettings,
    FailoverConfigWarning,
    ProducerOptions,
    check_positive_number,
    client_settings,
    companion_conf,
    producer_options,
)
from failover_partitioner._message import (
    DeliveryGroup,
    DeliveryReport,
    Headers,
    UndeliveredMessage,
)
from failover_partitioner.choose import CLIENT_PARTITIONER, NO_PARTITION, PartitionChooser
from failover_partitioner.core import NO_TOPIC, FailoverCore, ProducerStatistics, check_topic
from failover_partitioner.core.statistics import MetricsSnapshot, metrics_snapshot
from failover_partitioner.errors import (
    REFUSED_RIGHTS,
    AuthenticationFailed,
    BatchRefused,
    ConfigError,
    ErrorClass,
    FailoverError,
    MetadataUnavailable,
    NoUsablePartition,
    ProducerClosed,
    ProduceTimeout,
    classify,
)
from failover_partitioner.health import (
    TopicMetadata,
    TopicView,
)
from failover_partitioner.metadata import MetadataRefresher
from failover_partitioner.metadata.confluent import ConfluentMetadataSource, admin_config
from failover_partitioner.metrics import ProducerMetrics
from retry_buffer import Entry, RetryBuffer

__all__ = ["DeadLetterHook", "DeliveryCallback", "FailoverProducer", "ProducerStatistics"]

logger = logging.getLogger(__name__)

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

# librdkafka's RD_KAFKA_PARTITION_UA: the client's partitioner places the message.
_ANY_PARTITION = -1

# produce()'s healthy path: what _whole gives for a topic that is not on it.
_NOT_WHOLE: Any = object()

# produce_batch: the keys a message dict may have, and the keys of one the client takes as is.
_BATCH_KEYS = frozenset({"value", "key", "headers", "timestamp"})
_VALUE = operator.itemgetter("value")
_drain = collections.deque  # deque(iterator, maxlen=0) consumes it in C
_partial = functools.partial


def _value_only(chunk: list[Any]) -> bool:
    """True when every item of ``chunk`` is a mapping whose only key is ``"value"``."""
    # Two passes in C, allocating nothing: every item has "value" (else KeyError/TypeError),
    # and the sizes add up to one key each.
    try:
        if sum(map(len, chunk)) != len(chunk):
            return False
        _drain(map(_VALUE, chunk), maxlen=0)
    except (TypeError, KeyError):
        return False
    return True


# librdkafka's largest queue.buffering.max.messages.
_QUEUE_MAX = 2_147_483_647


def _queue_bound(given: object, limit: int) -> object:
    """The client's queue bound: the user's, or the in-flight limit where that is lower."""
    try:
        return min(int(float(str(given))), limit)
    except ValueError:
        return given  # the client refuses it, naming the setting


def _report_for(
    count: Callable[[], int], failed: Callable[[None, Any, Any], None]
) -> Callable[[Any, Any], None]:
    """The delivery callback of messages produced without a record: a delivery is counted, a
    failure rebuilt from the report (``failed``). A closure, called once per message: its
    cells are cheaper to read than a bound method's attributes."""

    def report(err: Any, msg: Any) -> None:
        if err is None:
            count()
        else:
            failed(None, err, msg)

    return report


# The callbacks the healthy path takes without a look further (callable, not a DeliveryGroup).
_PLAIN_CALLBACKS = frozenset({types.FunctionType, types.MethodType, types.BuiltinFunctionType})


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
    _c_out: ClassVar[Any]
    _delivered: ClassVar[Any]
    _failure: ClassVar[Any]

    def __call__(self, err: Any, msg: Any) -> None:
        if err is None:
            entry = self._entry
            if entry is not None:
                self._delivered(entry)
            next(self._c_out)
            cb = self._cb
            if cb is not None:
                self._msg = msg
                cb(None, self)
        else:
            self._failure(self, err, msg)


class _Fresh(DeliveryReport):
    """The record of a message sent on the healthy path with a callback: the message and the
    callback only (``_m``, ``_cb``); a delivery's partition, offset and time come from the
    client's report. A failure turns it into a full record that takes the usual path."""

    __slots__ = ()

    # Set per producer on a subclass, as _Record's are.
    _c_out: ClassVar[Any]
    _failed: ClassVar[Any]

    def __call__(self, err: Any, msg: Any) -> None:
        if err is None:
            next(self._c_out)
            self._msg = msg
            self._cb(None, self)
        else:
            self._failed(self, err, msg)

    def attempts(self) -> int:
        return 1

    def __repr__(self) -> str:
        return (
            f"DeliveryReport(topic={self._m[0]!r}, partition={self.partition()}, "
            f"offset={self.offset()}, attempts=1, error=None)"
        )


class _GroupReport:
    """The client's callback for the messages of one :class:`DeliveryGroup`: a delivery counts
    the message out and tells the group; a failure rebuilds the message from the report.

    Failure reports carry no headers and no timestamp: a message with either is given to the
    client as ``partial(report.keeping, headers, timestamp)`` (made in C, no Python frame when
    called)."""

    __slots__ = ("_c_out", "_delivered", "_group", "keeping", "producer")

    def __init__(self, producer: FailoverProducer, group: DeliveryGroup) -> None:
        self.producer = producer
        self._group = group
        self._c_out = producer._c_out
        self._delivered = group.delivered
        self.keeping = self._keeping  # bound once

    def __call__(self, err: Any, msg: Any) -> None:
        if err is None:
            next(self._c_out)
            self._delivered()
        else:
            self.producer._failed_without_record(self._group, err, msg)

    def _keeping(self, headers: Headers | None, timestamp: int | None, err: Any, msg: Any) -> None:
        if err is None:
            next(self._c_out)
            self._delivered()
        else:
            self.producer._failed_without_record(self._group, err, msg, headers, timestamp)


def _kafka_error(error: object) -> Any:
    """The error a user callback gets: always a ``confluent_kafka.KafkaError``."""
    if isinstance(error, KafkaError):
        return error
    if isinstance(error, confluent_kafka.KafkaException) and error.args:
        inner = error.args[0]
        if isinstance(inner, KafkaError):
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
        return [(str(k), v) for k, v in headers.items()]
    if isinstance(headers, (list, tuple)):
        out: Headers = []
        for h in headers:
            if not (isinstance(h, tuple) and len(h) == 2 and isinstance(h[0], str)):
                raise TypeError(
                    f"headers for topic {topic!r} must be a dict or a list of (str, value) "
                    f"pairs; got the item {h!r}"
                )
            out.append(h)
        return out
    raise TypeError(
        f"headers for topic {topic!r} must be a dict or a list of (str, value) pairs, "
        f"got {type(headers).__name__}"
    )


def _refusal_text(exc: confluent_kafka.KafkaException) -> str:
    error = exc.args[0] if exc.args else None
    return error.str() if isinstance(error, KafkaError) else str(exc)


def _check_header_items(headers: Headers, topic: str, refusal: TypeError) -> None:
    """Raise a clear error naming the pair the client refused (``refusal``), if one is bad."""
    _normalise_headers(headers, topic)
    for h in headers:
        if h[1] is not None and not isinstance(h[1], (str, bytes)):
            raise TypeError(
                f"headers for topic {topic!r} must have str, bytes or None values; "
                f"got the item {h!r}"
            ) from refusal


class FailoverProducer:
    """A Kafka producer that keeps producing, losing nothing, while partitions are under min ISR.

    ``conf`` is confluent-kafka's config dict; it is copied, never changed. Unless it sets them,
    the inner client runs with ``retries=0``, ``message.timeout.ms=10000`` and
    ``request.timeout.ms=5000`` so that a refused message comes back within a round trip and is
    produced again elsewhere. ``conf['on_delivery']`` is the callback for messages produced
    without one. See docs/configuration.md for every option.
    """

    def __init__(
        self,
        conf: Mapping[str, Any],
        *,
        min_insync_replicas: int | Mapping[str, int] | None = None,
        strategy: str = "round_robin",
        key_policy: str = "failover",
        headroom: bool = False,
        client_rack: str | None = None,
        sticky_messages: int = STICKY_MESSAGES_DEFAULT,
        sticky_bytes: int | None = STICKY_BYTES_DEFAULT,
        max_in_flight: int = 50_000,
        produce_timeout_s: float = 5.0,
        delivery_timeout_s: float | None = None,
        max_attempts: int | None = None,
        retry_backoff_s: float = 0.01,
        retry_backoff_max_s: float = 1.0,
        metadata_refresh_s: float = 30.0,
        metadata_fast_refresh_s: float = 0.5,
        min_isr_refresh_s: float = 300.0,
        metadata_timeout_s: float = 5.0,
        quarantine_backoff_s: float = 0.5,
        quarantine_max_s: float = 30.0,
        message_id_header: str | None = None,
        dead_letter: DeadLetterHook | None = None,
        metrics_registry: Any = None,
        metrics_port: int | None = None,
        metrics_addr: str = "0.0.0.0",
    ) -> None:
        settings = client_settings(conf)
        for text in settings.warnings:
            warnings.warn(text, FailoverConfigWarning, stacklevel=2)
        opts = producer_options(
            strategy=strategy,
            key_policy=key_policy,
            headroom=headroom,
            client_rack=client_rack,
            sticky_messages=sticky_messages,
            sticky_bytes=sticky_bytes,
            max_in_flight=max_in_flight,
            produce_timeout_s=produce_timeout_s,
            delivery_timeout_s=delivery_timeout_s,
            max_attempts=max_attempts,
            retry_backoff_s=retry_backoff_s,
            retry_backoff_max_s=retry_backoff_max_s,
            metadata_refresh_s=metadata_refresh_s,
            metadata_fast_refresh_s=metadata_fast_refresh_s,
            min_isr_refresh_s=min_isr_refresh_s,
            metadata_timeout_s=metadata_timeout_s,
            quarantine_backoff_s=quarantine_backoff_s,
            quarantine_max_s=quarantine_max_s,
            min_insync_replicas=min_insync_replicas,
            message_id_header=message_id_header,
            dead_letter=dead_letter,
            metrics_port=metrics_port,
            dead_letter_args="message, err",
        )
        self._setup_accounting(conf, opts, settings, message_id_header, dead_letter)
        self._make_client(settings)
        self._setup_paths(conf, opts, settings, message_id_header)
        self._start_services(conf, opts, client_rack, metrics_registry, metrics_port, metrics_addr)
        self._opened = True  # from here on, __del__ warns unless close() was called

    def _setup_accounting(
        self,
        conf: Mapping[str, Any],
        opts: ProducerOptions,
        settings: ClientSettings,
        message_id_header: str | None,
        dead_letter: DeadLetterHook | None,
    ) -> None:
        """The counters, the retry buffer and the record classes bound to them."""
        limit = opts.max_in_flight
        self._produce_timeout_s = opts.produce_timeout_s
        self._default_cb = settings.default_on_delivery
        self._only_errors = settings.report_only_errors
        self._message_id_header = message_id_header
        self._id_prefix = os.urandom(8).hex().encode()
        self._ids = itertools.count()
        self._dead_letter = dead_letter
        self._count_bytes = opts.choice.counts_bytes
        self._name = str(conf.get("client.id") or f"failover-producer-{next(_names)}")
        self._limit = limit

        # Deliveries, counted as their reports come (itertools.count: next() is atomic, so
        # the threads serving reports need no lock); what is in flight is the retry buffer's
        # to count (see the module doc).
        self._c_out = itertools.count(1)
        self._final_failures = 0
        self._returned = 0

        self._buffer: RetryBuffer[_Record] = RetryBuffer(
            max_in_flight=limit,
            policy=opts.retry_policy,
            on_final_failure=self._on_final_failure,
            held=self._client_len,
        )
        self._record_cls: type[_Record] = type(
            "_Record",
            (_Record,),
            {
                "__slots__": (),
                "_c_out": self._c_out,
                "_delivered": self._buffer.delivered,
                "_failure": self._on_failure,
            },
        )
        self._fresh_cls: type[_Fresh] = type(
            "_Fresh",
            (_Fresh,),
            {"__slots__": (), "_c_out": self._c_out, "_failed": self._fresh_failed},
        )

    def _make_client(self, settings: ClientSettings) -> None:
        """The confluent-kafka client, its queue bounded at the in-flight limit."""
        limit = self._limit
        client_conf = dict(settings.client_conf)
        # The healthy path sends without a check of its own: the client's queue bound is the
        # in-flight limit (or the user's, if lower), so a full queue is the limit reached.
        queued = client_conf.get("queue.buffering.max.messages")
        bound = min(limit, _QUEUE_MAX) if queued is None else _queue_bound(queued, limit)
        client_conf["queue.buffering.max.messages"] = bound
        # len(client) also counts events waiting for poll (errors, statistics), not only
        # messages: capped at the queue's bound, it is never more than the messages it can hold.
        self._queue_cap = bound if isinstance(bound, int) else limit
        # librdkafka tells of a refused login only through error_cb (served by poll): kept, so
        # that "no metadata" can say why; the user's own error_cb still gets every error.
        self._auth_error: str | None = None
        # topic -> (when, the error) of the last refusal for lack of rights (see _on_failure).
        self._refusals: dict[str, tuple[float, Any]] = {}
        self._user_error_cb = client_conf.get("error_cb")
        client_conf["error_cb"] = _weakly(self._on_client_error)
        try:
            # The report of a message sent without a callback (see _report).
            # Weakly: the metadata thread holds the client, the client this callback.
            self._report_cb = _report_for(
                self._c_out.__next__, _weakly(self._failed_without_record)
            )
            self._client = confluent_kafka.Producer({**client_conf, "on_delivery": self._report_cb})
            self._client_conf = client_conf
            # The client for records sent alone (see the module doc), made on first need.
            self._solo_client: Any = None
        except confluent_kafka.KafkaException as exc:  # e.g. a misspelt property name
            raise ConfigError(f"the client refused conf: {_refusal_text(exc)}") from None

    def _setup_paths(
        self,
        conf: Mapping[str, Any],
        opts: ProducerOptions,
        settings: ClientSettings,
        message_id_header: str | None,
    ) -> None:
        """The produce paths' shortcuts, and the core that decides for them."""
        limit = self._limit
        options = opts.choice
        self._produce_raw = self._client.produce
        self._produce_batch_raw = self._client.produce_batch
        # produce_batch hands the client at most this many at once, and never more than the
        # in-flight limit (a chunk must fit under it).
        self._batch_step = min(10_000, limit)
        # A message needs a record when someone must hear of it: a callback (its own or the
        # default), or headers to keep for a retry (delivery reports do not carry them).
        self._plain = self._default_cb is None and message_id_header is None
        # A record can be made inline in produce() (no headers to build, no wrapper needed).
        self._simple = message_id_header is None and not self._only_errors
        # The choosers of topics whose keyless messages without headers or timestamp take
        # produce()'s shortest path (filled only when every such message can).
        self._bare: dict[str, PartitionChooser] = {}
        self._bare_ok = self._simple and not self._count_bytes
        # The healthy path's topics (whole, nothing waiting): the keyless rotation of each, or
        # None where the client places keyless messages itself.
        # Emptied under _whole_lock whenever something starts waiting or a view changes;
        # filled again by _service once nothing waits (_reopen_whole).
        self._whole: dict[str, Iterator[int] | None] = {}
        # Those of them whose every message the client places (keys too), when there is no
        # default callback: a message without a callback needs no more than the lookup.
        self._placed: set[str] = set()
        self._whole_lock = threading.Lock()
        # sticky.partitioning.linger.ms=0 turns librdkafka's sticky partitioner off.
        linger = str(conf.get("sticky.partitioning.linger.ms", "")).strip()
        # Keys go to librdkafka's partitioner only when it is the Java client's (murmur2).
        self._client_keyed = settings.client_conf.get("partitioner") == "murmur2_random"
        # The decisions (routing, failures, quarantine, retries, the healthy path's on/off).
        self._core: FailoverCore[Entry[_Record]] = FailoverCore(
            self._buffer,
            options=options,
            quarantine=opts.quarantine,
            clock=time.monotonic,
            lock=threading.Lock,
            client_sticky=linger not in ("0", "0.0"),
            client_keyed=self._client_keyed,
        )
        self._choosers = self._core.choosers  # the fast paths' lookup
        self._topics_lock = threading.Lock()
        self._watched: set[str] = set()
        self._local = threading.local()
        self._closed = False
        self._unsure = 0  # what the clients still held, unreported, at close()
        self._undelivered: list[UndeliveredMessage] | None = None
        # Something waits (failed messages, quarantines to release): the next produce or poll
        # looks at the clock and services it. A plain flag keeps the idle produce path cheap.
        self._attention = False
        self._attention_at = 0.0

    def _start_services(
        self,
        conf: Mapping[str, Any],
        opts: ProducerOptions,
        client_rack: str | None,
        metrics_registry: Any,
        metrics_port: int | None,
        metrics_addr: str,
    ) -> None:
        """The metadata thread and the metrics exporter."""
        self._source = ConfluentMetadataSource(
            self._client, admin_config(conf), want_racks=client_rack is not None
        )
        self._meta = MetadataRefresher(
            self._source,
            _weakly(self._on_metadata),
            min_insync_replicas=opts.min_insync_replicas,
            refresh_s=opts.refresh_s,
            fast_refresh_s=opts.fast_refresh_s,
            min_isr_refresh_s=opts.min_isr_refresh_s,
            request_timeout_s=opts.metadata_timeout_s,
            name=f"{self._name}-metadata",
        )
        try:
            self._metrics = ProducerMetrics(
                self._name,
                self._metrics_snapshot,
                registry=metrics_registry,
                http_port=metrics_port,
                http_addr=metrics_addr,
            )
        except Exception:
            self._client.close()
            raise
        self._meta.start()

    # -- producing --------------------------------------------------------------------------

    def produce(
        self,
        topic: str,
        value: bytes | str | None = None,
        key: bytes | str | None = None,
        headers: Mapping[str, Any] | list[tuple[str, Any]] | None = None,
        on_delivery: DeliveryCallback | None = None,
        timestamp: int | None = None,
        partition: int | None = None,
    ) -> None:
        """Accept a message; it is delivered, or its callback gets the final error.

        ``partition``: a preference, not a pin. The first attempt goes there while that
        partition is usable (see :meth:`usable`); otherwise, and for every retry, the message
        is placed as any other (by key, or spread), so it is routed around a degraded partition.

        Waits up to ``produce_timeout_s`` while ``max_in_flight`` messages are in flight, then
        raises :class:`ProduceTimeout` carrying the message (not accepted).
        """
        # The healthy path (see the module doc): the topic is whole and nothing waits, so the
        # message goes to the client as a raw producer's would, placed by the topic's rotation
        # (keyless) or by librdkafka's murmur2 (keys). Every frame and allocation here is a
        # measurable share of a message's time next to librdkafka's own produce().
        if topic in self._placed and headers is None and timestamp is None and partition is None:
            # The commonest cases, kept shortest: the client places the message.
            if on_delivery is None:
                try:
                    self._produce_raw(topic, value, key)
                except BaseException as exc:
                    self._forward_raised(exc, topic, value, key, _ANY_PARTITION, None)
                return
            if type(on_delivery) in _PLAIN_CALLBACKS:
                fresh = self._fresh_cls()
                fresh._cb = on_delivery
                fresh._m = (topic, value, key, None, None)
                try:
                    self._produce_raw(topic, value, key, _ANY_PARTITION, fresh)
                except BaseException as exc:
                    self._forward_raised(exc, topic, value, key, _ANY_PARTITION, fresh)
                return
        rotation = self._whole.get(topic, _NOT_WHOLE)
        if (
            rotation is not _NOT_WHOLE
            and headers is None
            and timestamp is None
            and partition is None  # a preference is checked against the view, below
            and (key is None or self._client_keyed)
        ):
            p = _ANY_PARTITION if rotation is None or key is not None else next(rotation)
            if on_delivery is None:
                on_delivery = self._default_cb
                if on_delivery is None:
                    try:
                        self._produce_raw(topic, value, key, p)
                    except BaseException as exc:
                        self._forward_raised(exc, topic, value, key, p, None)
                    return
            if callable(on_delivery) and not isinstance(on_delivery, DeliveryGroup):
                fresh = self._fresh_cls()
                fresh._cb = on_delivery
                fresh._m = (topic, value, key, None, None)
                try:
                    self._produce_raw(topic, value, key, p, fresh)
                except BaseException as exc:
                    self._forward_raised(exc, topic, value, key, p, fresh)
                return
        self._produce_failover(topic, value, key, headers, on_delivery, timestamp, partition)

    def _produce_failover(
        self,
        topic: str,
        value: bytes | str | None,
        key: bytes | str | None,
        headers: Mapping[str, Any] | list[tuple[str, Any]] | None,
        on_delivery: DeliveryCallback | None,
        timestamp: int | None,
        partition: int | None,
    ) -> None:
        """``produce`` off the healthy path: the core routes the message (the keyless common
        case through the chooser's own rotation, the core's answer for it, without a frame)."""
        if self._attention:
            self._service()  # also raises ProducerClosed once closed
        if key is None and headers is None and timestamp is None and partition is None:
            # Keyless, nothing but perhaps a callback to keep. The dict holds a topic only
            # when such a message needs nothing else (no id header, no errors-only wrapper, no
            # byte budget), so one lookup stands for all those checks.
            chooser = self._bare.get(topic)
            if chooser is not None:
                if on_delivery is None:
                    on_delivery = self._default_cb
                elif not callable(on_delivery):
                    raise TypeError(
                        f"on_delivery must be callable(err, msg) or None, got {on_delivery!r}"
                    )
                if not self._buffer.has_room():
                    self._wait_for_room(topic, value, None, None, None)
                p = chooser.next_keyless()
                if p < 0:
                    if p != CLIENT_PARTITIONER:  # nothing usable: the message waits
                        self._produce_with_record(topic, value, None, None, on_delivery, None)
                        return
                    p = _ANY_PARTITION
                if on_delivery is None:
                    # No callback either: no record (see _report).
                    try:
                        self._produce_raw(topic, value, None, p, self._report_cb)
                    except (BufferError, confluent_kafka.KafkaException):
                        # Queue full, or refused: the record path waits or decides.
                        self._produce_with_record(topic, value, None, None, None, None)
                    return
                rec = self._record_cls()
                rec._cb = on_delivery
                rec._entry = None
                rec._m = (topic, value, None, None, None)
                rec._partition = p
                rec._attempts = 1
                try:
                    self._produce_raw(topic, value, None, p, rec)
                except BaseException as exc:
                    self._produce_raised(rec, exc, first=True)
                return
        if not self._buffer.has_room():
            self._wait_for_room(topic, value, key, headers, timestamp)
        if key is not None and type(key) is not bytes:
            _key_bytes(key)  # a bad key type raises here, before the message is accepted
        if on_delivery is not None and not callable(on_delivery):
            raise TypeError(f"on_delivery must be callable(err, msg) or None, got {on_delivery!r}")
        known = topic in self._choosers
        if not known:
            check_topic(topic)  # a known topic was checked when first seen
        # Headers already in confluent-kafka's list-of-pairs form (the mirror's) stay inline
        # too: the client checks each pair as it converts them, and a refusal is reported
        # with a clear message before the message is accepted (see _produce_raised).
        if known and self._simple and (headers is None or type(headers) is list):
            p = self._core.route(
                topic,
                key if key is None or type(key) is bytes else _key_bytes(key),
                len(value) if value and self._count_bytes else 0,
                partition,
            )
            if p >= 0 or p == CLIENT_PARTITIONER:
                self._produce_routed(topic, value, key, headers, on_delivery, timestamp, p)
                return
        self._produce_with_record(
            topic, value, key, headers, on_delivery, timestamp, prefer=partition
        )

    def _produce_routed(
        self,
        topic: str,
        value: bytes | str | None,
        key: bytes | str | None,
        headers: list[tuple[str, Any]] | None,
        on_delivery: DeliveryCallback | None,
        timestamp: int | None,
        p: int,
    ) -> None:
        """Send a first attempt the core routed to ``p``, with no record where none is needed."""
        if p < 0:
            p = _ANY_PARTITION
        if headers is None:
            if on_delivery is None and self._plain:
                # No callback, no headers: no record either (see _report).
                try:
                    # A failure report has no timestamp: one given is kept for a retry.
                    report = (
                        self._report_cb
                        if timestamp is None
                        else _partial(self._report_keeping, None, timestamp)
                    )
                    self._produce_raw(topic, value, key, p, report, None, timestamp or 0)
                except (BufferError, confluent_kafka.KafkaException):
                    # Queue full, or refused: the record path waits or decides.
                    self._produce_with_record(topic, value, key, headers, on_delivery, timestamp)
                return
            kept = None
        else:
            # The client checks values but writes any name as str(name) (a bytes
            # name becomes "b'...'"): refuse that here, as the checked path does.
            try:
                for name, _ in headers:
                    if type(name) is not str:
                        raise TypeError
            except (TypeError, ValueError):
                _normalise_headers(headers, topic)  # raises, naming the pair
            kept = headers
        if isinstance(on_delivery, DeliveryGroup):
            # No record: the group hears of a first-attempt delivery without a report,
            # and a failure is rebuilt from the client's (see DeliveryGroup).
            report = on_delivery._client_report
            if report is None or report.producer is not self:
                report = on_delivery._client_report = _GroupReport(self, on_delivery)
            if kept is not None or timestamp is not None:
                if kept is not None:
                    kept = kept[:]  # the caller may reuse its list; a retry needs these
                report = _partial(report.keeping, kept, timestamp)
            try:
                self._produce_raw(topic, value, key, p, report, None, timestamp or 0, kept)
            except BaseException as exc:
                rec = self._record_cls.new(topic, value, key, kept, timestamp, on_delivery)
                rec._partition = p
                rec._attempts = 1
                self._produce_raised(rec, exc, first=True)
            return
        if kept is not None:
            kept = kept[:]  # the caller may reuse its list; a retry needs these
        rec = self._record_cls()
        rec._cb = self._default_cb if on_delivery is None else on_delivery
        rec._entry = None
        rec._m = (topic, value, key, kept, timestamp)
        rec._partition = p
        rec._attempts = 1
        try:
            self._produce_raw(topic, value, key, p, rec, None, timestamp or 0, kept)
        except BaseException as exc:
            self._produce_raised(rec, exc, first=True)

    def produce_batch(
        self,
        topic: str,
        messages: list[dict[str, Any]],
        on_delivery: DeliveryCallback | None = None,
    ) -> None:
        """Accept many messages for ``topic`` in one call; each ends as ``produce``'s would.

        ``messages`` is a list of dicts with ``"value"`` and optionally ``"key"``,
        ``"headers"`` and ``"timestamp"`` (the dicts are not kept and come back unchanged);
        ``on_delivery`` is every message's callback (default: ``conf['on_delivery']``).
        Keyless messages given as ``{"value": v}`` alone go to the client in one call per
        partition (confluent-kafka's ``produce_batch``), with or without a callback: round
        robin deals them out over the usable partitions, sticky gives a batch to one. Every
        other message takes ``produce``'s own path, in order.

        Raises :class:`~failover_partitioner.errors.BatchRefused` naming the messages that
        were not accepted (a bad value, or :class:`ProduceTimeout` at the in-flight limit,
        which refuses the rest too); all the others were accepted.
        """
        if type(messages) is not list:
            raise TypeError(f"messages must be a list of dicts, got {type(messages).__name__}")
        if on_delivery is not None and not callable(on_delivery):
            raise TypeError(f"on_delivery must be callable(err, msg) or None, got {on_delivery!r}")
        if self._attention:
            self._service()
        refused: list[tuple[int, BaseException]] = []
        chooser = self._bare.get(topic)
        if chooser is None:
            self._produce_each(topic, messages, 0, len(messages), on_delivery, refused)
        else:
            cb = self._default_cb if on_delivery is None else on_delivery
            step = self._batch_step
            for start in range(0, len(messages), step):
                chunk = messages[start : start + step]
                if not _value_only(chunk):
                    end = start + len(chunk)
                    if not self._produce_each(topic, messages, start, end, on_delivery, refused):
                        break
                elif not self._produce_chunk(topic, chooser, chunk, start, refused, cb):
                    # Timed out at the in-flight limit: the rest is refused with it.
                    exc = refused[-1][1]
                    refused.extend((i, exc) for i in range(start + len(chunk), len(messages)))
                    break
        if refused:
            raise BatchRefused(topic, refused)

    def _produce_each(
        self,
        topic: str,
        messages: list[dict[str, Any]],
        start: int,
        end: int,
        on_delivery: DeliveryCallback | None,
        refused: list[tuple[int, BaseException]],
    ) -> bool:
        """``produce`` each of ``messages[start:end]``; False once one timed out (the rest
        are then refused too)."""
        for i in range(start, end):
            m = messages[i]
            try:
                if type(m) is not dict or not m.keys() <= _BATCH_KEYS:
                    raise TypeError(
                        f"each message must be a dict with keys among {sorted(_BATCH_KEYS)}, "
                        f"got {m!r}"
                    )
                self.produce(
                    topic,
                    m.get("value"),
                    m.get("key"),
                    m.get("headers"),
                    on_delivery,
                    m.get("timestamp"),
                )
            except ProduceTimeout as exc:
                refused.extend((j, exc) for j in range(i, len(messages)))
                return False
            except Exception as exc:
                refused.append((i, exc))
        return True

    def _produce_chunk(
        self,
        topic: str,
        chooser: PartitionChooser,
        chunk: list[dict[str, Any]],
        start: int,
        refused: list[tuple[int, BaseException]],
        cb: DeliveryCallback | None,
    ) -> bool:
        """Hand ``chunk`` (value-only dicts, ``cb`` their callback or None) to the client, one
        call per partition; False when it could not be counted in (the rest is then refused)."""
        k = len(chunk)
        if not self._buffer.has_room(k):
            try:
                # Waits until the chunk fits under max_in_flight.
                self._wait_for_room(topic, chunk[0]["value"], None, None, None, need=k)
            except ProduceTimeout as exc:
                refused.extend((start + j, exc) for j in range(k))
                return False
        # One chooser step for the chunk: slice j holds messages j, j+c, j+2c, ... so round
        # robin deals them out exactly as one by one would; sticky gives all one partition.
        parts = chooser.keyless_deal(k)
        c = len(parts)
        groups: dict[int, list[dict[str, Any]]] = {}
        left: list[dict[str, Any]] = []
        for j, p in enumerate(parts):
            part = chunk[j::c] if c > 1 else chunk
            if p == NO_PARTITION:
                left.extend(part)  # nothing usable: they wait, as produce()'s would
                continue
            if p == CLIENT_PARTITIONER:
                p = _ANY_PARTITION
            group = groups.get(p)
            if group is None:
                groups[p] = part
            else:
                group.extend(part)
        # The client's reports go to one callable for the chunk: the producer's own when nobody
        # listens, else one that makes each message's record only when its report comes.
        report = self._report_cb if cb is None else functools.partial(self._report_to, cb)
        batch = self._produce_batch_raw
        for p, group in groups.items():
            try:
                queued = batch(topic, group, partition=p, on_delivery=report)
            except TypeError:  # a bad value: refused before anything was queued
                queued = 0
                for m in group:
                    m["_error"] = None
            except BufferError:
                # Those refused carry '_error' (queued ones do not); none marked: all refused.
                queued = 0
                if not any("_error" in m for m in group):
                    for m in group:
                        m["_error"] = None
            if queued < len(group):
                left.extend(m for m in group if "_error" in m)
        # Refused by the client (queue full, partition unknown to it yet, too large, a bad
        # value): each takes the single path, already counted in, and waits or raises there.
        for m in left:
            m.pop("_error", None)
            try:
                self._produce_with_record(topic, m["value"], None, None, cb, None)
            except Exception as exc:
                index = next(i for i, x in enumerate(chunk) if x is m)
                refused.append((start + index, exc))
        return True

    def _forward_raised(
        self,
        exc: BaseException,
        topic: str,
        value: bytes | str | None,
        key: bytes | str | None,
        partition: int,
        report: _Fresh | None,
    ) -> None:
        """The client refused a message of the healthy path at once (it is counted in)."""
        if isinstance(exc, confluent_kafka.KafkaException):
            # Refused (e.g. the topic refuses this user): the record path decides.
            cb = None if report is None else report._cb
            self._produce_with_record(topic, value, key, None, cb, None)
            return
        if not isinstance(exc, BufferError):
            # Not accepted (a value or key of a wrong type, an interrupt).
            if isinstance(exc, TypeError) and key is not None:
                _key_bytes(key)  # names the key's type, as the other paths do
            raise exc
        # librdkafka's queue is full, and its bound is the in-flight limit: serve reports
        # until it takes the message, as a raw producer's caller does (a poll serves them by
        # the batch), within produce_timeout_s.
        deadline = time.monotonic() + self._produce_timeout_s
        while not self._in_callback() and time.monotonic() < deadline:
            self._poll_client(0.005)
            if self._attention:
                self._service()
            if topic not in self._whole:
                # Off the healthy path meanwhile (a failure came back and waits): the failover
                # path places it, once the failed buffer and the client leave room for it.
                if not self._buffer.has_room():
                    continue
                cb = None if report is None else report._cb
                self._produce_with_record(topic, value, key, None, cb, None)
                return
            try:
                if report is None:
                    self._produce_raw(topic, value, key, partition)
                else:
                    self._produce_raw(topic, value, key, partition, report)
                return
            except BufferError:
                continue
            except BaseException as again:
                raise again from None
        message = UndeliveredMessage(
            topic=topic,
            value=value,
            key=key,
            headers=None,
            timestamp=None,
            attempts=0,
            last_error=None,
            possibly_delivered=False,
        )
        raise ProduceTimeout(message, limit=self._limit, timeout_s=self._produce_timeout_s)

    def _produce_with_record(
        self,
        topic: str,
        value: bytes | str | None,
        key: bytes | str | None,
        headers: object,
        on_delivery: DeliveryCallback | None,
        timestamp: int | None,
        *,
        prefer: int | None = None,
    ) -> None:
        rec = self._record_cls()
        cb = self._default_cb if on_delivery is None else on_delivery
        if cb is not None and self._only_errors:
            cb = _ErrorsOnly(cb)
        rec._cb = cb
        rec._entry = None
        rec._partition = -1
        rec._attempts = 0
        out = _normalise_headers(headers, topic)
        if self._message_id_header is not None:
            out = [] if out is None else out
            out.append((self._message_id_header, b"%s-%d" % (self._id_prefix, next(self._ids))))
        rec._m = (topic, value, key, out, timestamp)
        self._dispatch(rec, first=True, prefer=prefer)

    def _wait_for_room(
        self,
        topic: str,
        value: bytes | str | None,
        key: bytes | str | None,
        headers: object,
        timestamp: int | None,
        *,
        need: int = 1,
    ) -> None:
        """Serve callbacks and retries until ``need`` messages fit under the in-flight limit,
        or time out."""
        timeout = self._produce_timeout_s
        deadline = time.monotonic() + timeout
        has_room = self._buffer.has_room
        while not has_room(need):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._in_callback():
                out = _normalise_headers(headers, topic)
                message = UndeliveredMessage(
                    topic=topic,
                    value=value,
                    key=key,
                    headers=None if out is None else tuple(out),
                    timestamp=timestamp,
                    attempts=0,
                    last_error=None,
                    possibly_delivered=False,
                )
                raise ProduceTimeout(message, limit=self._limit, timeout_s=timeout)
            self._poll_client(min(remaining, 0.05))
            if self._attention:
                self._service()

    def _report_to(self, cb: DeliveryCallback, err: Any, msg: Any) -> None:
        """The delivery callback of batched messages with a callback ``cb``: their record is
        made here, from the report (they had no key, headers or timestamp), not when sent."""
        if err is not None:
            self._failed_without_record(cb, err, msg)
            return
        rec = self._record_cls()
        rec._cb = cb
        rec._entry = None
        rec._attempts = 1
        rec._m = (msg.topic(), msg.value(), None, None, None)
        rec._msg = msg
        next(self._c_out)
        cb(None, rec)

    def _report_keeping(self, headers: None, timestamp: int, err: Any, msg: Any) -> None:
        """``_report`` for a message with a timestamp, which a failure report lacks."""
        if err is None:
            next(self._c_out)
            return
        self._failed_without_record(None, err, msg, headers, timestamp)

    def _failed_without_record(
        self,
        cb: DeliveryCallback | None,
        err: Any,
        msg: Any,
        headers: Headers | None = None,
        timestamp: int | None = None,
    ) -> None:
        """Rebuild a message sent without a record from the client's report (a failure report
        has no headers and no timestamp: the caller kept those it had), and treat its failure
        as a record's."""
        rec = self._record_cls()
        if timestamp is None:
            ts_type, ts = msg.timestamp()
            if ts_type == confluent_kafka.TIMESTAMP_CREATE_TIME:
                timestamp = ts
        rec._m = (msg.topic(), msg.value(), msg.key(), headers, timestamp)
        rec._cb = cb
        rec._entry = None
        partition = msg.partition()  # None for a message purged before it had one
        rec._partition = -1 if partition is None else partition
        rec._attempts = 1
        self._on_failure(rec, err, msg)

    def _fresh_failed(self, fresh: _Fresh, err: Any, msg: Any) -> None:
        """A message of the healthy path failed: it gets a full record and the usual path."""
        rec = self._record_cls()
        rec._m = fresh._m
        rec._cb = fresh._cb
        rec._entry = None
        partition = msg.partition() if msg is not None else None
        rec._partition = -1 if partition is None else partition
        rec._attempts = 1
        self._on_failure(rec, err, msg)

    def _dispatch(self, rec: _Record, *, first: bool = False, prefer: int | None = None) -> None:
        """Choose a partition and hand ``rec`` to the client, or let it wait. ``prefer``: the
        caller's partition, taken while usable (first attempts only; see ``produce``)."""
        topic, value, key, headers, timestamp = rec._m
        if topic not in self._choosers:
            self._chooser_for(topic)
        p = self._core.route(
            topic,
            key if key is None or type(key) is bytes else _key_bytes(key),
            len(value or b"") if self._count_bytes else 0,
            prefer,
        )
        if p == CLIENT_PARTITIONER:
            p = _ANY_PARTITION
        elif p < 0:
            if p == NO_TOPIC:
                error = KafkaError(
                    KafkaError.UNKNOWN_TOPIC_OR_PART,
                    f"topic {topic!r} does not exist (per cluster metadata)",
                )
                self._fail_finally(rec, error)
                return
            self._wait(rec, p)
            return
        previous = rec._partition
        rec._partition = p
        rec._attempts += 1
        produce = self._produce_raw if not getattr(rec, "_solo", False) else self._solo().produce
        try:
            produce(topic, value, key, p, rec, None, timestamp or 0, headers)
        except BaseException as exc:
            self._produce_raised(rec, exc, first=first, previous=previous)
            return
        self._core.sent(previous, p)

    def _produce_raised(
        self, rec: _Record, exc: BaseException, *, first: bool, previous: int = -1
    ) -> None:
        """The client refused ``rec`` at once (queue full, a bad argument, an interrupt)."""
        partition = rec._partition
        rec._attempts -= 1
        rec._partition = previous
        if isinstance(exc, BufferError):
            if not self._retry_queue_full(rec, partition):
                self._wait(rec, exc)
            return
        if first and rec._entry is None:
            if (
                isinstance(exc, confluent_kafka.KafkaException)
                and _kafka_error(exc).code() in REFUSED_RIGHTS
            ):
                # The client already knows the cluster refuses this user: not the caller's
                # mistake, so the message ends here as any refused one does (callback,
                # dead-letter hook), never rerouted.
                self._refusals[rec._m[0]] = (time.monotonic(), _kafka_error(exc))
                self._fail_finally(rec, exc)
                return
            # The caller's own mistake (a bad value type, ...) or Ctrl-C: the message was not
            # accepted: the caller sees the exception.
            headers = rec._m[3]
            if headers is not None and isinstance(exc, TypeError):
                _check_header_items(headers, rec._m[0], exc)
            raise exc
        if not isinstance(exc, Exception):
            self._wait(rec, exc)  # interrupted while re-producing: keep the message
            raise exc
        logger.error("producing a retried message to %s failed: %r", rec._m[0], exc)
        self._fail_finally(rec, exc)

    def _retry_queue_full(self, rec: _Record, partition: int) -> bool:
        """librdkafka's queue is full: serve callbacks and try again, within produce_timeout_s."""
        if self._in_callback():
            return False
        topic, value, key, headers, timestamp = rec._m
        produce = self._produce_raw if not getattr(rec, "_solo", False) else self._solo().produce
        deadline = time.monotonic() + self._produce_timeout_s
        while time.monotonic() < deadline:
            self._poll_client(0.01)
            rec._partition = partition
            rec._attempts += 1
            try:
                produce(topic, value, key, partition, rec, None, timestamp or 0, headers)
                return True
            except BufferError:
                rec._attempts -= 1
        return False

    def _solo(self) -> Any:
        """The client that sends each record in a batch of its own (made on first need)."""
        solo = self._solo_client
        if solo is None:
            conf = companion_conf(
                self._client_conf,
                "solo",
                # A refused login is told only through error_cb: this client's too.
                settings={
                    "batch.num.messages": 1,
                    "linger.ms": 0,
                    "error_cb": self._on_client_error,
                },
            )
            solo = self._solo_client = confluent_kafka.Producer(conf)
            logger.warning(
                "%s: a broker refused a whole batch (too large, or a bad record in it); its "
                "records are sent again one by one. If this repeats, set batch.size below the "
                "topic's max.message.bytes",
                self._name,
            )
        return solo

    def _admit(self, rec: _Record) -> Entry[_Record]:
        """Give ``rec`` its retry-buffer entry (on its first failure or wait): it was counted
        in flight already, held by the client or let in by has_room."""
        entry: Entry[_Record] | None = rec._entry
        if entry is None:
            entry = rec._entry = self._buffer.adopt(rec)
        return entry

    def _wait(self, rec: _Record, why: int | BaseException) -> None:
        """Put ``rec`` in the failed buffer without an attempt (nothing usable, queue full)."""
        if self._core.hold(self._admit(rec), rec._m[0], why):
            self._leave_whole()

    def _fail_finally(self, rec: _Record, error: object) -> None:
        self._core.end(self._admit(rec), error)

    def _chooser_for(self, topic: str) -> None:
        """Fetch the metadata of a topic seen for the first time (once)."""
        with self._topics_lock:
            first = topic not in self._watched
            self._watched.add(topic)
        if not first or self._in_callback():
            self._meta.watch(topic)
            return
        try:
            self._meta.fetch_now(topic, max(self._produce_timeout_s, 0.5))
        except MetadataUnavailable as exc:
            self._raise_if_refused(exc)
            logger.warning("%s; messages for it wait", exc)

    def _on_client_error(self, err: confluent_kafka.KafkaError) -> None:
        if err.code() == confluent_kafka.KafkaError._AUTHENTICATION:
            if self._auth_error is None:
                logger.error(
                    "the cluster refused this producer's credentials: %s; check sasl.username, "
                    "sasl.password and sasl.mechanisms (nothing is sent until they are right)",
                    err.str(),
                )
            self._auth_error = err.str()
        if self._user_error_cb is not None:
            self._user_error_cb(err)

    def _raise_if_refused(self, exc: MetadataUnavailable) -> None:
        """Raise AuthenticationFailed instead of ``exc`` when a refused login is the cause."""
        self._client.poll(0)  # serves error_cb: a refused login is told only there
        if self._auth_error is not None:
            raise AuthenticationFailed(
                f"{exc}: the cluster refused the credentials ({self._auth_error})"
            ) from exc

    # -- the delivery side (inside confluent-kafka's poll/flush) ------------------------------

    def _on_failure(self, rec: _Record, err: Any, msg: Any) -> None:
        code = err.code()
        if code in REFUSED_RIGHTS:
            self._refusals[rec._m[0]] = (time.monotonic(), err)
        elif code in _LOCAL_UNKNOWN:
            refused = self._refusals.get(rec._m[0])
            if refused is not None and time.monotonic() - refused[0] < _REFUSAL_MEMORY_S:
                err = refused[1]
                code = err.code()
        ec = classify(code, err.name())
        partition = msg.partition() if msg is not None else rec._partition
        if partition is None or partition < 0:
            partition = rec._partition
        self._heed(rec._m[0], partition, ec)
        if rec._m[4] is None and msg is not None:
            # Keep the first attempt's CreateTime on every later attempt.
            ts_type, ts = msg.timestamp()
            if ts_type == confluent_kafka.TIMESTAMP_CREATE_TIME:
                rec._m = (*rec._m[:4], ts)
        # librdkafka's reports do not say the batch's size (None).
        verdict = self._core.failed(
            self._admit(rec), err, ec, fatal=err.fatal(), alone=getattr(rec, "_solo", False)
        )
        if verdict.alone:
            rec._solo = True
        if verdict.possibly_persisted:
            rec._dup = True
        if verdict.queued:
            self._attention_at = 0.0
            self._leave_whole()

    def _heed(self, topic: str, partition: int, ec: ErrorClass) -> None:
        """Do what the core makes of a failure's partition: watch the topic closely once it is
        quarantined (and leave the healthy path), look at the metadata again."""
        heed = self._core.heed(topic, partition, ec)
        if heed.quarantined:
            self._meta.set_fast(topic, True)
            self._attention_at = 0.0
            self._leave_whole()
        if heed.refresh:
            self._meta.request_refresh(topic)

    def _on_final_failure(self, entry: Entry[_Record], error: object) -> None:
        rec = entry.item
        self._final_failures += 1
        kerr = _kafka_error(error)
        rec._error = kerr
        if entry.possibly_duplicated:
            rec._dup = True
        hook = self._dead_letter
        if hook is not None:
            try:
                hook(rec.undelivered(), kerr)
            except Exception:
                logger.exception("dead_letter hook raised for a message to %s", rec._m[0])
        cb = rec._cb
        if cb is not None:
            cb(kerr, rec)
        elif hook is None:
            logger.error(
                "message to %s failed finally after %d attempt(s): %s",
                rec._m[0],
                rec._attempts,
                kerr,
            )

    # -- metadata (refresher thread, or the caller's in fetch_now) ----------------------------

    def _on_metadata(self, md: TopicMetadata) -> None:
        topic = md.topic
        change = self._core.metadata(md)
        if change.new and self._bare_ok:
            self._bare[topic] = self._choosers[topic]
        if change.fast or not change.new:
            self._meta.set_fast(topic, change.fast)
        self._attention_at = 0.0
        # The view may have changed: off the healthy path until _service looks again.
        self._leave_whole()

    # -- the caller's side: retries, quarantine release, polling ------------------------------

    def _service(self) -> None:
        """Produce due failed messages again and release due quarantines."""
        if self._closed:
            raise ProducerClosed("produce() after close()")
        now = time.monotonic()
        if now < self._attention_at:
            return
        self._attention = False
        core = self._core
        tick = core.tick()
        for topic, fast in tick.fast.items():
            self._meta.set_fast(topic, fast)
        for entry in core.due():
            self._dispatch(entry.item)
        next_at = core.next_at(tick)
        if next_at is not None:
            self._attention_at = next_at
            self._attention = True
        else:
            self._reopen_whole()

    def _leave_whole(self) -> None:
        """Something waits, or a view changed: every message takes the failover path until
        ``_service`` finds nothing waiting (``_reopen_whole``)."""
        with self._whole_lock:
            self._attention = True
            self._placed.clear()
            self._whole.clear()

    def _reopen_whole(self) -> None:
        """Nothing waits: whole topics take the healthy path again."""
        with self._whole_lock:
            if self._attention or self._closed or not self._bare_ok:
                return
            whole = self._core.healthy_path(self._buffer.failed_depth)
            self._whole.update(whole)
            if self._client_keyed and self._default_cb is None:
                self._placed.update(t for t, rotation in whole.items() if rotation is None)

    def _client_len(self) -> int:
        """Messages the clients hold (queued, in flight, or reports not yet served), at most."""
        solo = self._solo_client
        held = min(len(self._client), self._queue_cap)
        return held if solo is None else held + len(solo)

    def _in_callback(self) -> bool:
        return bool(getattr(self._local, "depth", 0))

    def _poll_client(self, timeout: float) -> int:
        local = self._local
        local.depth = getattr(local, "depth", 0) + 1
        try:
            served = int(self._client.poll(timeout))
            if self._solo_client is not None:
                served += int(self._solo_client.poll(0))
            return served
        finally:
            local.depth -= 1

    def _flush_client(self, timeout: float) -> int:
        local = self._local
        local.depth = getattr(local, "depth", 0) + 1
        try:
            left = int(self._client.flush(timeout))
            if self._solo_client is not None:
                left += int(self._solo_client.flush(0))
            return left
        finally:
            local.depth -= 1

    def _check_not_in_callback(self, what: str) -> None:
        if self._in_callback():
            raise FailoverError(
                f"{what}() was called from inside a delivery callback; confluent-kafka cannot "
                "re-enter poll/flush there (it aborts). Return from the callback instead"
            )

    def poll(self, timeout: float = 0.0) -> int:
        """Serve delivery callbacks for up to ``timeout`` seconds and re-produce failures.

        Returns the number of events served, like confluent-kafka's ``poll``.
        """
        self._check_not_in_callback("poll")
        if self._closed:
            raise ProducerClosed("poll() after close()")
        timeout = check_positive_number("timeout", timeout, allow_zero=True)
        deadline = time.monotonic() + timeout
        served = 0
        while True:
            if self._attention:
                self._service()
            remaining = deadline - time.monotonic()
            slice_s = max(0.0, min(remaining, 0.1))
            if self._attention:
                slice_s = min(slice_s, max(0.0, self._attention_at - time.monotonic()))
            served += self._poll_client(slice_s)
            if served or deadline - time.monotonic() <= 0:
                if self._attention:
                    self._service()
                return served

    def flush(self, timeout: float | None = None) -> int:
        """Wait until every message has its final outcome, or ``timeout`` seconds pass.

        Returns how many messages are still without a final outcome (0: all done).
        """
        self._check_not_in_callback("flush")
        if self._closed:
            raise ProducerClosed("flush() after close()")
        if timeout is not None:
            timeout = check_positive_number("timeout", timeout, allow_zero=True)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._attention:
                self._service()
            in_flight = self._buffer.in_flight
            if in_flight <= 0:
                return 0
            remaining = 0.1 if deadline is None else deadline - time.monotonic()
            if remaining <= 0:
                return in_flight
            slice_s = min(remaining, 0.1)
            if len(self._client):
                self._flush_client(slice_s)
            elif self._solo_client is not None and len(self._solo_client):
                self._solo_client.flush(slice_s)
                self._poll_client(0)
            else:
                # Only waiting messages: sleep until one is due, serving callbacks meanwhile.
                if self._attention:
                    slice_s = min(slice_s, max(0.001, self._attention_at - time.monotonic()))
                self._poll_client(slice_s)

    def close(self, timeout: float | None = 30.0) -> list[UndeliveredMessage]:
        """Flush for up to ``timeout`` seconds, stop, and return every undelivered message.

        Messages handed back here get no callback: the returned list is their outcome.
        ``possibly_delivered`` marks those that may have been written anyway (an ambiguous
        failure, or still in flight when the client was purged). Calling ``close`` again
        returns the same list.
        """
        if self._undelivered is not None:
            return list(self._undelivered)
        self._check_not_in_callback("close")
        if timeout is not None:  # refused before anything is closed
            timeout = check_positive_number("timeout", timeout, allow_zero=True)
        client = self._client
        try:
            if self.flush(timeout):
                # Take back what librdkafka still holds and serve the purge reports, so that
                # every message ends up in the failed buffer, from where close() returns it.
                client.purge(in_queue=True, in_flight=True, blocking=True)
                solo = self._solo_client
                if solo is not None:
                    solo.purge(in_queue=True, in_flight=True, blocking=True)
                deadline = time.monotonic() + 2.0
                while self._client_len() and time.monotonic() < deadline:
                    self._poll_client(0.05)
                self._poll_client(0)
        finally:
            self._closed = True
            self._leave_whole()  # the next produce() looks, and raises ProducerClosed
            left = self._buffer.close()
            unsure = self._client_len()
            undelivered = [e.item.undelivered(in_flight=unsure > 0) for e in left]
            self._returned += len(left)
            self._unsure = unsure
            self._undelivered = undelivered
            self._meta.close()
            self._metrics.close()
            self._source.close()
            if not unsure:
                client.close()
                if self._solo_client is not None:
                    self._solo_client.close()
        if unsure:
            logger.error(
                "%s closed while the client still held %d message(s) whose delivery reports "
                "never came; they may or may not have been delivered",
                self._name,
                unsure,
            )
        if undelivered:
            logger.warning(
                "%s closed with %d undelivered message(s), returned by close()",
                self._name,
                len(undelivered),
            )
        return list(undelivered)

    def __del__(self, _warn: Callable[..., None] = warnings.warn) -> None:
        if getattr(self, "_opened", False) and not self._closed:
            _warn(
                f"unclosed FailoverProducer {self._name!r}: call close() (or use it in a with "
                "block) so that undelivered messages are handed back",
                ResourceWarning,
                source=self,
            )
            self._meta.close(timeout_s=0)
            self._metrics.close()

    def __enter__(self) -> FailoverProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        """Messages without a final outcome (in flight, including those waiting to retry)."""
        return self._unsure if self._closed else self._buffer.in_flight

    # -- what the producer knows -------------------------------------------------------------

    def health(self, topic: str, timeout: float | None = None) -> TopicView:
        """The topic's current health snapshot (fetches metadata if the topic is new)."""
        state = self._core.topics.get(topic)
        if state is None:
            return self._fetch_now(topic, timeout, "health", f"health({topic!r}) of a new topic")
        return state.view

    def refresh(self, topic: str, timeout: float | None = None) -> TopicView:
        """Fetch ``topic``'s metadata now rather than at the next periodic refresh (after
        partitions were added to it, say); returns its new health snapshot."""
        return self._fetch_now(topic, timeout, "refresh", f"refresh({topic!r})")

    def _fetch_now(self, topic: str, timeout: float | None, name: str, call: str) -> TopicView:
        """``topic``'s metadata fetched now, for the method ``name`` (``call`` as the user
        wrote it, for the error after close)."""
        self._check_not_in_callback(name)
        if self._closed:  # the client is gone: its metadata cannot be fetched
            raise ProducerClosed(f"{call} after close()")
        with self._topics_lock:
            self._watched.add(topic)
        try:
            self._meta.fetch_now(topic, self._produce_timeout_s if timeout is None else timeout)
        except MetadataUnavailable as exc:
            self._raise_if_refused(exc)
            raise
        return self._core.topics[topic].view

    def whole(self, topic: str) -> bool:
        """True while every partition of ``topic`` is usable in the producer's latest view
        (a leader, ISR at least min.insync.replicas, not quarantined); False for a topic it has
        no metadata of yet (neither produced to nor asked ``health()`` of). For a caller that
        lets another client place messages while nothing needs routing around (the mirror's
        fast lane)."""
        return self._core.whole(topic)

    def usable(self, topic: str, partition: int) -> bool:
        """True while ``topic`` [``partition``] is usable in the producer's latest view (a
        leader, ISR at least min.insync.replicas, not quarantined); False for a partition the
        topic does not have, or a topic it has no metadata of yet (see :meth:`whole`)."""
        return self._core.usable(topic, partition)

    def report_failure(self, topic: str, partition: int, err: confluent_kafka.KafkaError) -> None:
        """Take a delivery failure that another client saw, to ``topic`` [``partition``], into
        the health model as if it were the producer's own: the partition is quarantined, or the
        metadata fetched again, as the error calls for. The message itself is the caller's."""
        self._heed(topic, partition, classify(err.code(), err.name()))

    def metadata_age_s(self, topic: str) -> float | None:
        """Seconds since ``topic``'s metadata was fetched, or None if it never was."""
        return self._meta.age_s(topic)

    def statistics(self) -> ProducerStatistics:
        delivered = _count_value(self._c_out)
        # After close() the clients may be gone: what they held unreported is unsure.
        in_flight = self._unsure if self._closed else self._buffer.in_flight
        return self._core.statistics(
            produced=delivered + self._final_failures + self._returned + in_flight,
            delivered=delivered,
            final_failures=self._final_failures,
            returned_on_close=self._returned,
            in_flight=in_flight,
        )

    @property
    def metrics_registry(self) -> Any:
        """The prometheus registry this producer reports to."""
        return self._metrics.registry

    @property
    def metrics_port(self) -> int | None:
        """The port of the HTTP exporter, when ``metrics_port`` was given (0 picks one)."""
        return self._metrics.http_port

    def _metrics_snapshot(self) -> MetricsSnapshot:
        return metrics_snapshot(self.statistics(), self._core.topics, self.metadata_age_s)


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
