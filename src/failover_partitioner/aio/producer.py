"""``AsyncFailoverProducer``: aiokafka's producer, routing around partitions under min ISR.

Theory of operation (DESIGN.md sections 1, 3 and 4; the asyncio twin of ``FailoverProducer``):

* ``send`` counts the message in at the inflow gate (an :class:`retry_buffer.AsyncRetryBuffer`:
  at most ``max_in_flight`` messages without a final outcome; it waits up to
  ``produce_timeout_s`` there, then raises :class:`ProduceTimeout`), chooses a partition from
  the topic's current :class:`~failover_partitioner.health.TopicView`, and appends the message
  to that partition's open batch. It never waits on the network: one task per partition hands
  closed batches to aiokafka (``send_batch``) one at a time, each after the last one's
  answer, so a stalled partition cannot hold up ``send`` for the others.
* The inner producer answers with the broker's first reply (``_client``). A batch's
  done-callback only reports: delivered messages resolve their futures; failed ones are
  classified, their partition is quarantined at once when the error says so, and they wait in
  the failed buffer. The messages still in a quarantined partition's lane, never sent, are
  placed again at once (appended to other lanes, whose tasks send them).
* A retry task takes due failed messages and appends them again, as new messages with a new
  partition choice. It is a task of its own: nothing is re-sent from inside a done-callback.
* Metadata (partitions, ISR, min.insync.replicas) is refreshed by a task of its own
  (``_aio_metadata``), faster while a partition is quarantined.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import logging
import os
import time
import warnings
from asyncio import get_running_loop
from collections.abc import Callable, Mapping
from typing import Any

from aiokafka.errors import (  # type: ignore[import-untyped,unused-ignore]  # no py.typed
    MessageSizeTooLargeError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)
from aiokafka.record.default_records import (  # type: ignore[import-untyped,unused-ignore]
    DefaultRecordBatchBuilder,
)
from aiokafka.structs import (  # type: ignore[import-untyped,unused-ignore]  # no py.typed
    RecordMetadata,
)

from failover_partitioner._calls import call_each
from failover_partitioner._config import FailoverConfigWarning, check_positive_number
from failover_partitioner._message import UndeliveredMessage
from failover_partitioner._options import (
    OPTION_NAMES,
    ProducerOptions,
    produce_timeout,
    producer_options,
)
from failover_partitioner.aio._client import start_inner_producer
from failover_partitioner.aio._errors import error_class
from failover_partitioner.aio._inflow import enter_when_room, wrong_loop
from failover_partitioner.aio._lanes import Batch, Headers, Lanes, Message
from failover_partitioner.aio._metadata import AioMetadataRefresher, AioMetadataSource
from failover_partitioner.aio._settings import AioClientSettings, aio_client_settings
from failover_partitioner.aio._stopping import (
    _CLOSED,
    _CLOSING,
    _NEW,
    _RUNNING,
    _STARTING,
    AsyncDeadLetterHook,
    Stopping,
    close_buffer,
    shut_at_once,
    unclosed,
)
from failover_partitioner.aio._wake import Wakeup
from failover_partitioner.core import (
    NO_RIGHTS,
    NO_TOPIC,
    FailoverCore,
    ProducerStatistics,
    check_header_name,
    check_timestamp,
    check_topic,
)
from failover_partitioner.core.statistics import MetricsSnapshot, metrics_snapshot
from failover_partitioner.errors import (
    FailoverError,
    MetadataUnavailable,
    ProducerClosed,
)
from failover_partitioner.health import TopicMetadata, TopicView
from failover_partitioner.metrics import ProducerMetrics
from retry_buffer import AsyncRetryBuffer, Entry

__all__ = ["AsyncDeadLetterHook", "AsyncFailoverProducer"]

logger = logging.getLogger(__name__)

HeadersIn = Mapping[str, bytes | str | None] | list[tuple[str, bytes | str | None]] | None

_names = itertools.count(1)


def _as_bytes(what: str, topic: str, value: object) -> bytes | None:
    if value is None or type(value) is bytes:
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(
        f"{what} for topic {topic!r} must be bytes, str or None (or give a {what}_serializer), "
        f"got {type(value).__name__}"
    )


def _normalise_headers(headers: object, topic: str) -> Headers:
    items: Any
    if isinstance(headers, Mapping):
        items = headers.items()
    elif isinstance(headers, (list, tuple)):
        items = headers
    else:
        raise TypeError(
            f"headers for topic {topic!r} must be a dict or a list of (str, bytes) pairs, "
            f"got {type(headers).__name__}"
        )
    out: Headers = []
    for h in items:
        if not (isinstance(h, tuple) and len(h) == 2 and isinstance(h[0], str)):
            raise TypeError(
                f"headers for topic {topic!r} must be (str, bytes) pairs; got the item {h!r}"
            )
        name = h[0]
        check_header_name(name, topic)  # aiokafka encodes it when the batch is built: late
        out.append((name, _as_bytes("header value", topic, h[1])))
    return out


# More than aiokafka's estimate of a one-record batch adds to its key and value when it has no
# headers (a batch header, the record's overhead, two lengths and a header count: 93 bytes):
# a message whose key and value are this much under max_request_size needs no estimate.
_RECORD_OVERHEAD_BOUND = 1024


def _checked_message(
    settings: AioClientSettings,
    topic: str,
    value: object,
    key: object,
    headers: object,
    timestamp_ms: int | None,
    id_header: bool,
    future: asyncio.Future[Any],
) -> Message:
    """A message serialised and checked as aiokafka's ``send`` would (types, size)."""
    if settings.key_serializer is not None:
        key = settings.key_serializer(key)
    if settings.value_serializer is not None:
        value = settings.value_serializer(value)
    # (bytes and None pass as they are: the common case without a frame)
    kbytes = key if key is None or type(key) is bytes else _as_bytes("key", topic, key)
    vbytes = value if value is None or type(value) is bytes else _as_bytes("value", topic, value)
    hlist = None if headers is None else _normalise_headers(headers, topic)
    if hlist is None and id_header:
        hlist = []
    if timestamp_ms is not None:
        check_timestamp(timestamp_ms, "timestamp_ms")
    if hlist is None and (
        (0 if kbytes is None else len(kbytes)) + (0 if vbytes is None else len(vbytes))
        <= settings.max_request_size - _RECORD_OVERHEAD_BOUND
    ):
        return Message(topic, vbytes, kbytes, hlist, timestamp_ms, future)  # fits for sure
    size = DefaultRecordBatchBuilder.estimate_size_in_bytes(kbytes, vbytes, hlist or [])
    if size > settings.max_request_size:
        raise MessageSizeTooLargeError(
            f"a message to {topic!r} is {size} bytes when serialized, larger than "
            f"max_request_size={settings.max_request_size}; it was not accepted"
        )
    return Message(topic, vbytes, kbytes, hlist, timestamp_ms, future)


class AsyncFailoverProducer(Stopping):
    """An asyncio Kafka producer that keeps producing, losing nothing, while partitions are
    under min ISR.

    Its keyword arguments are of two kinds. The failover options
    (:class:`~failover_partitioner.FailoverOptions`: ``min_insync_replicas``,
    ``strategy``, ``max_in_flight``, ...) have the names, defaults and meaning of
    :class:`FailoverProducer`'s (docs/configuration.md). Every other one is
    ``AIOKafkaProducer``'s own (``bootstrap_servers``, ``acks``, ``linger_ms``,
    ``max_batch_size``, security settings, serializers, ...): copied, never changed, and refused
    when aiokafka has no such setting. Unless given, ``acks="all"`` and
    ``request_timeout_ms=5000``. See docs/aio.md.

    Use ``async with AsyncFailoverProducer(...) as ap:`` or ``await start()`` /
    ``await stop()``. Every method must be called from the loop that started the producer.
    """

    def __init__(self, **kwargs: Any) -> None:
        options = {name: value for name, value in kwargs.items() if name in OPTION_NAMES}
        client_kwargs = {name: value for name, value in kwargs.items() if name not in options}
        settings = aio_client_settings(client_kwargs)
        for text in settings.warnings:
            warnings.warn(text, FailoverConfigWarning, stacklevel=2)
        self._setup(settings, producer_options(dead_letter_args="message, exc", **options))

    def _setup(self, settings: AioClientSettings, opts: ProducerOptions) -> None:
        """The retry buffer, the core over it, and the state ``start()`` fills in."""
        self._produce_timeout_s = produce_timeout(opts.produce_timeout_s, settings.holds_message_s)
        self._metadata_timeout_s = opts.metadata_timeout_s
        self._opts = opts  # the refresher's and the exporter's settings, for start()

        self._settings = settings
        self._message_id_header = opts.message_id_header
        self._id_prefix = os.urandom(8).hex().encode()
        self._dead_letter: AsyncDeadLetterHook | None = opts.dead_letter
        self._count_bytes = opts.choice.counts_bytes
        self._name = settings.client_id or f"failover-async-producer-{next(_names)}"

        self._buffer: AsyncRetryBuffer[Message] = AsyncRetryBuffer(
            max_in_flight=opts.max_in_flight,
            policy=opts.retry_policy,
            on_final_failure=self._on_final_failure,
        )
        # The decisions (routing, failures, quarantine, retries); one event loop: no lock.
        self._core: FailoverCore[Entry[Message]] = FailoverCore(
            self._buffer,
            options=opts.choice,
            quarantine=opts.quarantine,
            clock=time.monotonic,
            propagation_s=opts.topic_propagation_max_s,
        )
        self._state = _NEW
        self._loop: asyncio.AbstractEventLoop | None = None
        self._inner: Any = None
        self._first_answer = False
        self._meta: AioMetadataRefresher | None = None
        self._metrics: ProducerMetrics | None = None
        self._lanes: Lanes | None = None  # made by start(), with the inner client
        self._first_fetch: dict[str, asyncio.Task[None]] = {}
        self._retry_task: asyncio.Task[None] | None = None
        self._retry_wake = Wakeup()
        self._started = asyncio.Event()  # set when start() has ended, started or undone
        self._undelivered: list[UndeliveredMessage] | None = None
        self._handed_back = False  # a stop() caller took the list
        self._stopping: asyncio.Task[list[UndeliveredMessage]] | None = None

    # -- life cycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect to the cluster and start the background tasks.

        A ``stop()`` meanwhile waits for it, then stops. If it fails (or is cancelled), what
        it started is stopped again before its error goes on, and the producer is stopped.
        """
        if self._state != _NEW:
            raise FailoverError(
                "start() was already called on this AsyncFailoverProducer; create a new one"
            )
        self._state = _STARTING  # before the first await: a second start() is refused
        self._loop = get_running_loop()  # every later call is checked against it
        try:
            await self._start()
        except BaseException:
            await self._undo_start()
            raise
        finally:
            self._started.set()

    async def _start(self) -> None:
        loop = get_running_loop()
        inner, first_answer = await start_inner_producer(self._settings.client_kwargs, self._name)
        self._inner = inner
        self._first_answer = first_answer
        self._lanes = Lanes(loop, inner, self._buffer, self._batch_failed)
        self._meta = AioMetadataRefresher(
            AioMetadataSource(inner.client),
            self._on_metadata,
            min_insync_replicas=self._opts.min_insync_replicas,
            request_timeout_s=self._metadata_timeout_s,
            refresh_s=self._opts.refresh_s,
            fast_refresh_s=self._opts.fast_refresh_s,
            min_isr_refresh_s=self._opts.min_isr_refresh_s,
        )
        self._meta.start()
        self._retry_task = loop.create_task(self._retry_loop())
        self._metrics = ProducerMetrics(
            self._name,
            self._metrics_snapshot,
            registry=self._opts.metrics_registry,
            http_port=self._opts.metrics_port,
            http_addr=self._opts.metrics_addr,
        )
        self._state = _RUNNING

    async def _undo_start(self) -> None:
        """After a failed start(): the tasks and clients it started, stopped again. Nothing was
        accepted yet; the producer is stopped, with nothing to hand back."""
        self._state = _CLOSED
        self._undelivered = []
        close_buffer(self._buffer)
        if self._metrics is not None:
            self._metrics.close()
        if self._retry_task is not None:
            self._retry_task.cancel()
            await asyncio.gather(self._retry_task, return_exceptions=True)
        if self._inner is not None:
            await shut_at_once(self._meta, self._inner, self._name)

    async def __aenter__(self) -> AsyncFailoverProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop(hand_back=False)  # nobody takes the list: the dead-letter hook does

    def __del__(self, _warn: Callable[..., None] = warnings.warn) -> None:
        if getattr(self, "_state", _CLOSED) in (_STARTING, _RUNNING, _CLOSING):
            # Logged first (the warning is hidden by default, or raised where it is an error).
            unclosed(self._name, self._buffer.in_flight, "was garbage-collected without stop()")
            _warn(
                f"unclosed AsyncFailoverProducer {self._name!r}: call await stop() so that "
                "undelivered messages are handed back",
                ResourceWarning,
                source=self,
            )

    # -- producing --------------------------------------------------------------------------

    async def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        *,
        headers: HeadersIn = None,
        timestamp_ms: int | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Accept a message and return a future of its final outcome.

        The future resolves to the ``RecordMetadata`` of the delivery that succeeded (its
        partition and offset, after any reroutes), or raises the final error. Cancelling the
        future does not stop the delivery. ``send`` itself waits only while ``max_in_flight``
        messages are in flight, up to ``produce_timeout_s``, then raises
        :class:`ProduceTimeout` carrying the message (not accepted).
        """
        # On the producer's loop (a C call and a compare), and running.
        if get_running_loop() is not self._loop or self._state != _RUNNING:
            raise self._refused(topic, "send")
        if self._lanes is not None and self._lanes.backlog:
            # The caller outruns a partition (closed batches pile up behind its task): give
            # the tasks and the I/O a turn, as aiokafka's send does when a batch is full.
            await asyncio.sleep(0)
            if self._state != _RUNNING:
                raise self._not_running(topic)
        known = topic in self._core.topics
        if not known:
            check_topic(topic)  # a known topic was checked when first seen
        assert self._loop is not None
        # Validated and serialised: raises before anything is accepted.
        msg = _checked_message(
            self._settings,
            topic,
            value,
            key,
            headers,
            timestamp_ms,
            self._message_id_header is not None,
            self._loop.create_future(),
        )
        if not known:
            await self._first_metadata(topic)
            if self._state != _RUNNING:
                raise self._not_running(topic)
        if not self._buffer.try_enter(msg):  # at the in-flight limit
            await enter_when_room(self._buffer, msg, self._produce_timeout_s, self._service)
        if self._message_id_header is not None:
            assert msg.headers is not None  # made a list in _checked_message
            msg.headers.append((self._message_id_header, b"%s-%d" % (self._id_prefix, msg.seq)))
        self._dispatch_or_end(msg)
        return msg.future

    async def send_and_wait(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        *,
        headers: HeadersIn = None,
        timestamp_ms: int | None = None,
    ) -> RecordMetadata:
        """Send a message and wait for its final outcome (see :meth:`send`).

        Cancelling the wait does not stop the delivery: the message was accepted.
        """
        if get_running_loop() is not self._loop:  # (send checks it too; this names the call)
            raise self._refused(topic, "send_and_wait")
        future = await self.send(topic, value, key, headers=headers, timestamp_ms=timestamp_ms)
        return await asyncio.shield(future)

    def _refused(self, topic: str, call: str) -> FailoverError:
        """Why ``call`` is refused: another event loop than the producer's, or its state."""
        error = None if self._state == _CLOSED else wrong_loop(self._loop, self._name, call)
        return error or self._not_running(topic)

    def _not_running(self, topic: str) -> FailoverError:
        if self._state == _NEW:
            return FailoverError(
                f"send to {topic!r} before start(): use `async with AsyncFailoverProducer(...)` "
                "or await start() first"
            )
        if self._state == _STARTING:
            return FailoverError(f"send to {topic!r} while start() runs: await it first")
        return ProducerClosed(f"send to {topic!r} after stop()")

    def _dispatch(self, msg: Message) -> None:
        """Choose a partition and append ``msg`` to its open batch, or let it wait."""
        topic = msg.topic
        core = self._core
        chooser = core.choosers.get(topic) if msg.key is None and not self._count_bytes else None
        if chooser is not None:
            # Keyless, no byte budget: the chooser's own next answer, what route() would give,
            # without its frame; an answer that is no partition goes to route() to say why.
            p = chooser.next_keyless()
            if p < 0:
                p = core.route(topic, None)
        else:
            p = core.route(topic, msg.key, len(msg.value or b"") if self._count_bytes else 0)
        if p < 0:
            if p == NO_TOPIC:
                core.end(msg, UnknownTopicOrPartitionError(core.missing(topic)))
            elif p == NO_RIGHTS:
                core.end(msg, TopicAuthorizationFailedError(core.refused(topic)))
            elif core.hold(msg, topic, p):
                self._retry_wake.set()
            return
        assert self._lanes is not None
        self._lanes.append(topic, p, msg)  # (first: if it raises, the partition is not taken)
        core.sent(msg.partition, p)
        msg.partition = p

    def _dispatch_or_end(self, msg: Message) -> None:
        """:meth:`_dispatch`; if it raises, ``msg`` ends with that error as its final outcome,
        logged, and the caller goes on (the retry task, a done-callback, send).

        Messages are checked before they are accepted, so this is a bug's net (one message
        that aiokafka cannot encode); without it, the message would stay counted in flight
        with its future never resolved, and the retry task would die, sending nothing again.
        """
        try:
            self._dispatch(msg)
        except Exception as exc:
            logger.exception(
                "%s: a message to %s could not be sent and fails finally", self._name, msg.topic
            )
            self._core.end(msg, exc)

    def _batch_failed(self, batch: Batch, exc: BaseException) -> None:
        ec = error_class(exc)
        lane = batch.lane
        heed = self._core.heed(lane.topic, lane.partition, ec)
        meta = self._meta
        first: BaseException | None = None  # a dead_letter hook's (Ctrl-C): raised at the end
        if heed.quarantined:
            if meta is not None:
                meta.set_fast(lane.topic, True)
            self._retry_wake.set()
            assert self._lanes is not None
            waiting = self._lanes.withdraw(lane.topic, lane.partition)
            first = call_each(waiting, self._dispatch_or_end)
        if heed.refresh:
            if meta is not None:
                meta.request_refresh(lane.topic)
            # The inner client does not refresh its own routing for an error it does not retry.
            self._inner.client.force_metadata_update()
        failed = self._core.failed
        size = len(batch.messages)
        queued = False

        def fail(m: Message) -> None:
            nonlocal queued
            m.sent = False
            # A batch refused for one record's sake is split: its messages are tried alone.
            verdict = failed(m, exc, ec, batch_size=size, alone=m.solo)
            m.solo = verdict.alone
            if verdict.possibly_persisted:
                m.dup = True
            queued |= verdict.queued

        first = call_each(batch.messages, fail, first)  # every one, even after a hook raised
        if queued:
            self._retry_wake.set()
        if first is not None:
            raise first

    def _on_final_failure(self, entry: Entry[Message], error: object) -> None:
        msg = entry.item
        if entry.possibly_duplicated:
            msg.dup = True
        exc = error if isinstance(error, BaseException) else FailoverError(repr(error))
        if not msg.future.done():
            # A copy per message, so tracebacks of a shared batch error do not pile up.
            msg.future.set_exception(copy.copy(exc))
        if self._dead_letter is not None:
            # After the future: a hook that raises (Ctrl-C) leaves no future pending.
            self._to_dead_letter(msg.undelivered(exc), exc)

    # -- metadata ---------------------------------------------------------------------------

    def _on_metadata(self, md: TopicMetadata) -> None:
        change = self._core.metadata(md)
        if change.leaders_moved and self._inner is not None:
            # Leaders moved: have the inner client route by the new ones before it is told
            # so by a failed request.
            self._inner.client.force_metadata_update()
        if self._meta is not None:
            # Watched closely while anything is out of use: its recovery lets messages back.
            self._meta.set_fast(md.topic, change.fast)
        self._retry_wake.set()

    async def _first_metadata(self, topic: str) -> None:
        """The first send to a topic waits (bounded) for its metadata, once."""
        task = self._first_fetch.get(topic)
        if task is None:
            assert self._loop is not None
            task = self._loop.create_task(self._fetch_first(topic, self._metadata_timeout_s))
            self._first_fetch[topic] = task
        if not task.done():
            # On timeout the message waits in the failed buffer until metadata comes.
            await asyncio.wait((task,), timeout=self._metadata_timeout_s)

    async def _fetch_first(self, topic: str, timeout_s: float) -> None:
        assert self._meta is not None
        try:
            await self._meta.fetch_now(topic, timeout_s)
        except MetadataUnavailable as exc:
            logger.warning("%s; messages for it wait", exc)

    # -- retries ----------------------------------------------------------------------------

    async def _retry_loop(self) -> None:
        wake = self._retry_wake
        try:
            while self._state != _CLOSED and not self._buffer.closed:
                wake.clear()
                delay = self._service()
                if not wake.is_set():
                    await wake.wait(delay)
        except asyncio.CancelledError:
            if self._state == _RUNNING:  # not by stop(): asyncio.run ends with it running
                unclosed(self._name, len(self), "is running as its tasks are cancelled")
            raise
        except (KeyboardInterrupt, SystemExit):
            # From a dead_letter hook: it goes on to the loop's runner, and a new task takes
            # over, or nothing failed would be sent again.
            if self._state == _RUNNING and self._loop is not None:
                self._retry_task = self._loop.create_task(self._retry_loop())
            raise

    def _service(self) -> float:
        """Release due quarantines and send due failed messages again; seconds to the next."""
        core = self._core
        tick = core.tick()
        if self._meta is not None:
            for topic, fast in tick.fast.items():
                self._meta.set_fast(topic, fast)
        if self._buffer.closed:
            return 1.0
        for entry in core.due():
            self._dispatch_or_end(entry.item)
        now = time.monotonic()
        next_at = core.next_at(tick)
        return 1.0 if next_at is None else max(0.0, min(next_at - now, 1.0))

    # -- flush and stop -----------------------------------------------------------------------

    async def flush(self, timeout: float | None = None) -> int:
        """Wait until every accepted message has its final outcome, or ``timeout`` seconds.

        Returns how many messages are still without a final outcome (0: all done).
        """
        if timeout is not None:
            timeout = check_positive_number("timeout", timeout, allow_zero=True)
        if self._state in (_NEW, _STARTING, _CLOSED):
            return 0
        error = wrong_loop(self._loop, self._name, "flush")
        if error is not None:
            raise error
        await self._buffer.wait_idle(timeout)
        return self._buffer.in_flight

    def __len__(self) -> int:
        """Messages without a final outcome (in flight, including those waiting to retry)."""
        return self._buffer.in_flight

    # -- what the producer knows -------------------------------------------------------------

    def health(self, topic: str) -> TopicView:
        """The topic's current health snapshot.

        Raises :class:`MetadataUnavailable` for a topic the producer has no metadata for yet
        (``await refresh(topic)`` fetches it).
        """
        check_topic(topic)
        state = self._core.topics.get(topic)
        if state is None:
            raise MetadataUnavailable(
                f"no metadata for topic {topic!r} yet; send to it or await refresh({topic!r})"
            )
        return state.chooser.view

    async def refresh(self, topic: str, timeout: float | None = None) -> TopicView:
        """Fetch ``topic``'s metadata now, watch it from now on, and return its health."""
        check_topic(topic)  # before the cluster is asked: send() trusts a topic it knows
        if get_running_loop() is not self._loop or self._state != _RUNNING or self._meta is None:
            raise self._refused(topic, "refresh")
        t = self._metadata_timeout_s if timeout is None else timeout
        await self._meta.fetch_now(topic, check_positive_number("timeout", t))
        return self.health(topic)

    def metadata_age_s(self, topic: str) -> float | None:
        """Seconds since ``topic``'s metadata was fetched, or None if it never was."""
        return None if self._meta is None else self._meta.age_s(topic)

    @property
    def rerouting_at_first_answer(self) -> bool:
        """True when a refused batch comes back at once (False: after aiokafka's retries)."""
        return self._first_answer

    def statistics(self) -> ProducerStatistics:
        """A snapshot of the counters, in the same shape as ``FailoverProducer.statistics()``."""
        return self._core.statistics()

    @property
    def metrics_registry(self) -> Any:
        """The prometheus registry this producer reports to (None before start())."""
        return None if self._metrics is None else self._metrics.registry

    @property
    def metrics_port(self) -> int | None:
        """The port of the HTTP exporter, when ``metrics_port`` was given (0 picks one)."""
        return None if self._metrics is None else self._metrics.http_port

    def _metrics_snapshot(self) -> MetricsSnapshot:
        return metrics_snapshot(self.statistics(), self._core.topics, self.metadata_age_s)

    def __repr__(self) -> str:
        state = ("new", "starting", "running", "stopping", "stopped")[self._state]
        return (
            f"AsyncFailoverProducer(name={self._name!r}, {state}, "
            f"in_flight={self._buffer.in_flight})"
        )
