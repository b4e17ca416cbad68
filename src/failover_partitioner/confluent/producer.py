"""``FailoverProducer``: confluent-kafka's Producer, routing around partitions under min ISR.

Theory of operation (DESIGN.md sections 1, 3 and 4):

* **Inflow.** In flight is what the clients hold (``len(producer)``: queued, in flight, or
  with a report not yet served) plus the failed buffer: the :class:`retry_buffer.RetryBuffer`
  counts it so (``held=``) and keeps the bound, ``max_in_flight``; its hypothesis model covers
  this form (tests/unit/test_retry_buffer_held.py). The client's queue is bounded at the same
  limit (``queue.buffering.max.messages``, or the user's if lower). Paths other than the
  healthy one ask the buffer for room first; at the limit ``produce`` waits (serving
  callbacks), then raises :class:`ProduceTimeout`. Accepted messages are counted (an
  ``itertools.count``, atomic) for the statistics only; a delivery is what remains once final
  failures, hand-backs and what is in flight are taken away, so no report counts one.
* **The quiet client.** A producer without ``conf['on_delivery']`` starts *quiet*: first
  attempts without a callback go to a second client made with
  ``delivery.report.only.error=true``, so a delivery costs no report at all (the report, a
  Python call per message, is most of what separates a wrapper from the raw client); a
  failure's report rebuilds the message as the main client's does. Whatever must be heard of
  when delivered (a callback's message, a retry the buffer counts) goes to the main client.
  The first message with a callback ends the quiet mode for good (``_end_quiet``): the quiet
  client's messages are let end first (it takes nothing new meanwhile: other threads' first
  attempts wait as at a full queue), then every message goes to the main client, so no
  message overtakes an earlier one to the same partition. While quiet, the healthy path
  reopens only once the main client holds no retry, so that the quiet client's queue bound
  stays the in-flight limit.
* **The healthy path.** While every partition of a topic is usable and nothing waits in the
  failed buffer, a message without headers or timestamp goes straight to the client: no
  partition (librdkafka places it: murmur2 for keys, ``murmur2_random``, the Java client's
  rule the keyed choice follows; its sticky partitioner for keyless ones, unless ``headroom``
  or ``client_rack`` want the rotation), no check of its own (the client's bounded queue
  refuses at the limit: the message then waits for room as a raw producer's caller would), no
  record (a failed message is rebuilt from the client's report: without a callback by the
  client's one config-level callback, with one by a client callback made once per user
  callback, ``_report_for``, which also makes the callback's report when a delivery's comes;
  a record per message held until delivery would keep Python's cyclic garbage collector
  busy). A message with a callback and a ``str`` value or key keeps a record, to be given
  back as it came (without a callback, ``close()`` gives them back as UTF-8 bytes).
  The first failure, quarantine, metadata change or message
  that must wait takes every topic off this path (``_leave_whole``); ``_service`` puts the
  topics back once nothing waits (``_reopen_whole``). A topic some of whose partitions are
  out of use (under min ISR, no leader) stays on the path for its keyless messages, placed by
  the chooser's own rotation over the usable partitions; its keyed ones (a ``bytes`` key) take
  the chooser's keyed choice (the key's home while usable, else its bucket's rendezvous
  winner), called from ``produce()`` itself as the rotation is.
* **Other first attempts** go to the client with an explicit ``partition=`` chosen from the
  topic's current :class:`~failover_partitioner.health.TopicView` (confluent-kafka cannot take
  a Python partitioner), except where librdkafka's own partitioner follows the same rule while
  every partition is usable (keys with ``murmur2_random``; keyless ``sticky``): then the
  chooser answers ``CLIENT_PARTITIONER`` and the client places it (see
  :mod:`failover_partitioner.choose`). A message without headers (and, with a callback, without
  a timestamp or a ``str`` value or key) needs no record of its own: if it failed, it is
  rebuilt from the client's report (topic, key, value, timestamp are all there;
  ``_send_rebuildable``). Other messages carry a record (a :class:`DeliveryReport` subclass
  whose ``__call__`` is the callback, so no closure is made per message). Headers given as a
  list of pairs (confluent-kafka's own form) are copied and passed through unchecked: the
  client checks each pair as it converts it, and when it refuses one the caller gets a
  ``TypeError`` naming the bad pair, before the message is accepted. A dict, or a list
  before the topic's metadata is known, is checked in Python.
* **Batches.** ``produce_batch`` hands value-only keyless messages to the client's
  ``produce_batch``, one call per partition, after one chooser step for the chunk
  (:meth:`~failover_partitioner.choose.PartitionChooser.keyless_deal`). They carry no record:
  with a callback, the callback's client callback makes each message's report when the
  client's comes. What the client refuses (queue full, a partition it does not know yet, a
  bad value) and every other kind of message take the single path, already counted in.
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
* **Layout.** One class in layers, each a base class of the next and calling only those
  below it: :class:`~failover_partitioner.confluent._state.ProducerState` (what the producer
  holds, the healthy path's switch), ``Clients``, ``Delivering`` (the delivery side),
  ``Producing`` (``produce``, the paths of one message, retries due), ``Batching``
  (``produce_batch``), and this class (setup, ``poll``/``flush``/``close``, views).
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import confluent_kafka

from failover_partitioner._config import (
    ClientSettings,
    FailoverConfigWarning,
    check_positive_number,
    client_settings,
    companion_conf,
    surfacing,
)
from failover_partitioner._message import UndeliveredMessage
from failover_partitioner._options import (
    FailoverOptions,
    ProducerOptions,
    produce_timeout,
    producer_options,
)
from failover_partitioner.choose import PartitionChooser
from failover_partitioner.confluent._batching import Batching
from failover_partitioner.confluent._clients import close_all, signals_held
from failover_partitioner.confluent._shared import (
    _QUEUE_MAX,
    DeadLetterHook,
    DeliveryCallback,
    _count_value,
    _names,
    _queue_bound,
    _Record,
    _refusal_text,
    _report_for,
    _report_keeping,
    _weakly,
)
from failover_partitioner.confluent._state import CallDepth
from failover_partitioner.core import FailoverCore, ProducerStatistics, check_topic
from failover_partitioner.core.statistics import MetricsSnapshot, metrics_snapshot
from failover_partitioner.errors import ConfigError, MetadataUnavailable, ProducerClosed
from failover_partitioner.health import TopicView
from failover_partitioner.metadata import MetadataRefresher
from failover_partitioner.metadata.confluent import ConfluentMetadataSource, admin_config
from failover_partitioner.metrics import ProducerMetrics
from retry_buffer import Entry, RetryBuffer

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's own from Python 3.12 (PEP 692)

__all__ = ["DeadLetterHook", "DeliveryCallback", "FailoverProducer", "ProducerStatistics"]

logger = logging.getLogger(__name__)

# poll(0) serves the clients at most this often (see FailoverProducer.poll).
POLL_GAP_S = 0.0002


class FailoverProducer(Batching):
    """A Kafka producer that keeps producing, losing nothing, while partitions are under min ISR.

    ``conf`` is confluent-kafka's config dict; it is copied, never changed. Unless it sets them,
    the inner client runs with ``retries=0``, ``message.timeout.ms=10000`` and
    ``request.timeout.ms=5000`` so that a refused message comes back within a round trip and is
    produced again elsewhere. ``conf['on_delivery']`` is the callback for messages produced
    without one. The keyword arguments are the failover options (:class:`FailoverOptions`:
    ``min_insync_replicas``, ``strategy``, ``max_in_flight``, ...); an unknown one is refused.
    See docs/configuration.md for every option and its default.
    """

    def __init__(self, conf: Mapping[str, Any], **options: Unpack[FailoverOptions]) -> None:
        settings = client_settings(conf)
        for text in settings.warnings:
            warnings.warn(text, FailoverConfigWarning, stacklevel=2)
        opts = producer_options(dead_letter_args="message, err", **options)
        # Ctrl-C or SIGTERM while confluent-kafka reads the settings came out of it as a
        # TypeError: held until the producer is made (nothing here waits), then raised as they
        # came, the producer closed first. Nothing was accepted yet.
        try:
            with signals_held():
                self._setup_accounting(conf, opts, settings)
                self._make_client(settings)
                self._setup_paths(conf, opts, settings)
                self._start_services(conf, opts)
                self._opened = True  # from here on, __del__ warns unless close() was called
        except BaseException:
            if getattr(self, "_opened", False):
                self.close(0)
            elif hasattr(self, "_client"):  # a later step refused (e.g. a busy metrics port)
                close_all((self._client, *self._others()))()
            raise

    def _setup_accounting(
        self, conf: Mapping[str, Any], opts: ProducerOptions, settings: ClientSettings
    ) -> None:
        """The counters, the retry buffer and the record classes bound to them."""
        limit = opts.max_in_flight
        self._produce_timeout_s = produce_timeout(opts.produce_timeout_s, settings.holds_message_s)
        self._metadata_timeout_s = opts.metadata_timeout_s
        self._default_cb = settings.default_on_delivery
        self._only_errors = settings.report_only_errors
        self._message_id_header = opts.message_id_header
        self._id_prefix = os.urandom(8).hex().encode()
        self._ids = itertools.count()
        self._dead_letter = opts.dead_letter
        self._count_bytes = opts.choice.counts_bytes
        self._name = str(conf.get("client.id") or f"failover-producer-{next(_names)}")
        self._limit = limit

        # Messages accepted: counted in by produce() once the client or the retry buffer holds
        # them (itertools.count: next() is atomic, so producing threads need no lock), and by
        # produce_batch per chunk; what is in flight is the retry buffer's to count (see the
        # module doc). A delivery is what remains, so no report has to count one, and the
        # quiet client needs none.
        self._c_in = itertools.count(1)
        self._count_in = self._c_in.__next__
        self._batched = 0
        self._delivered_seen = 0
        self._count_lock = threading.Lock()
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
                "_delivered": self._buffer.delivered,
                "_failure": self._on_failure,
            },
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
        client_conf["error_cb"] = surfacing(_weakly(self._on_client_error))
        try:
            # The report of a message sent without a record (see _report_for).
            # Weakly: the metadata thread holds the client, the client this callback.
            failed = _weakly(self._failed_without_record)
            self._report_cb = _report_for(failed)
            # The same for messages with headers or a timestamp (see _report_keeping).
            self._report_kept = _report_keeping(failed)
            self._reporting_kept = (None, self._report_kept)
            # The last callback and its client callback (see _reporter); None: none yet.
            self._reporting = (None, self._report_cb)
            self._client = confluent_kafka.Producer({**client_conf, "on_delivery": self._report_cb})
            self._client_conf = client_conf
            # The client for records sent alone (see the module doc), made on first need.
            self._solo_client: Any = None
            self._quiet_client = self._quiet = None
            if self._default_cb is None:
                # The quiet client (see the module doc): first attempts nobody waits to hear
                # of, reported only when they fail. It carries most of the traffic, so the
                # user's statistics and throttle callbacks hear of it too.
                kept: dict[str, Any] = {
                    k: client_conf[k] for k in ("stats_cb", "throttle_cb") if k in client_conf
                }
                self._quiet_client = self._quiet = confluent_kafka.Producer(
                    companion_conf(
                        client_conf,
                        "quiet",
                        settings={
                            **kept,
                            "delivery.report.only.error": True,
                            "on_delivery": self._report_cb,
                            "error_cb": client_conf["error_cb"],
                        },
                    )
                )
            quiet = self._quiet_client
            self._polled = (self._client,) if quiet is None else (self._client, quiet)
        except confluent_kafka.KafkaException as exc:  # e.g. a misspelt property name
            raise ConfigError(f"the client refused conf: {_refusal_text(exc)}") from None

    def _setup_paths(
        self, conf: Mapping[str, Any], opts: ProducerOptions, settings: ClientSettings
    ) -> None:
        """The produce paths' shortcuts, and the core that decides for them."""
        limit = self._limit
        options = opts.choice
        # First attempts without a callback: the quiet client while the producer is quiet.
        self._produce_reported = self._client.produce
        self._produce_batch_reported = self._client.produce_batch
        sender = self._client if self._quiet is None else self._quiet
        self._produce_raw = sender.produce
        self._produce_batch_raw = sender.produce_batch
        # produce_batch hands the client at most this many at once, and never more than the
        # in-flight limit (a chunk must fit under it).
        self._batch_step = min(10_000, limit)
        # A message needs a record when someone must hear of it: a callback (its own or the
        # default) or an id header to add. Without, its headers and timestamp are kept for a
        # retry by its report's partial (a failure report does not carry them).
        self._plain = self._default_cb is None and opts.message_id_header is None
        # A record can be made inline in produce() (no headers to build, no wrapper needed).
        self._simple = opts.message_id_header is None and not self._only_errors
        # The choosers of topics whose keyless messages without headers or timestamp take
        # produce()'s shortest path (filled only when every such message can).
        self._bare: dict[str, PartitionChooser] = {}
        self._bare_ok = self._simple and not self._count_bytes
        # Every topic seen, with its lane on the healthy path (nothing waiting): None where
        # the client places every message (keys too) and there is no default callback; else
        # the call answering a keyless message's partition (the next of the rotation over
        # the usable partitions, or _ANY_PARTITION where the client places keyless messages);
        # _OFF while off the path. One lookup, no Python frame. All set off under _whole_lock
        # whenever something starts waiting or a view changes; set again by _service once
        # nothing waits (_reopen_whole).
        self._lanes: dict[str, Callable[[], int] | None] = {}
        # Those of them with every partition usable, whose keyed messages the client places
        # (murmur2) when it is the Java client's partitioner; empty otherwise.
        self._whole: set[str] = set()
        # Those of them not whole: the keyed choice of each (the chooser's, for its view),
        # through a memo of its answers while the topic's keys are few (_keyed_path), the
        # choice and what produce() calls for it kept in _memos.
        self._keyed: dict[str, Callable[[bytes], int]] = {}
        self._memos: dict[str, tuple[Callable[[bytes], int], Callable[[bytes], int]]] = {}
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
            propagation_s=opts.topic_propagation_max_s,
        )
        self._choosers = self._core.choosers  # the fast paths' lookup
        self._topics_lock = threading.Lock()
        self._watched: set[str] = set()
        self._local = CallDepth()
        self._next_poll = 0.0  # poll(0) serves the clients from then on (see poll)
        self._closed = self._closing = False
        self._unsure = 0  # what the clients still held, unreported, at close()
        self._undelivered: list[UndeliveredMessage] | None = None
        # Something waits (failed messages, quarantines to release): the next produce or poll
        # looks at the clock and services it. A plain flag keeps the idle produce path cheap.
        self._attention = False
        self._attention_at = 0.0
        self._kept_raised = None

    def _start_services(self, conf: Mapping[str, Any], opts: ProducerOptions) -> None:
        """The metadata thread and the metrics exporter."""
        self._source = ConfluentMetadataSource(
            self._client, admin_config(conf), want_racks=opts.choice.client_rack is not None
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
        self._metrics = ProducerMetrics(
            self._name,
            self._metrics_snapshot,
            registry=opts.metrics_registry,
            http_port=opts.metrics_port,
            http_addr=opts.metrics_addr,
        )
        self._meta.start()

    # -- the caller's side: polling, flushing, closing -----------------------------------------

    def poll(self, timeout: float = 0.0) -> int:
        """Serve delivery callbacks for up to ``timeout`` seconds and re-produce failures.

        Returns the number of events served, like confluent-kafka's ``poll``. ``poll(0)``
        called again within ``POLL_GAP_S`` (0.2 ms) of the one before, with nothing to retry,
        serves nothing and returns 0: the reports it would have served are served by the
        next call after that (or by any waiting ``poll``/``flush``).
        """
        if timeout == 0 and not (
            self._attention or self._closed or self._local.depth or self._kept_raised
        ):
            # Nothing due and no wait: the call many applications make after each produce().
            # Serving the clients costs a raw client's poll per client, about 1 us in all;
            # made at most every POLL_GAP_S, it costs well under 1 % of the time whatever
            # the rate, and a report waits at most that much longer (librdkafka's own linger,
            # 5 ms by default, and a broker's round trip are far longer).
            now = time.monotonic()
            if now < self._next_poll:
                return 0
            self._next_poll = now + POLL_GAP_S
            return self._serve("poll", 0)
        self._check_not_in_callback("poll")
        if self._closed:
            raise ProducerClosed("poll() after close()")
        timeout = check_positive_number("timeout", timeout, allow_zero=True)
        self._raise_kept()
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
        self._raise_kept()
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
            if self._client_len():
                self._flush_client(slice_s)
            else:
                # Only waiting messages: sleep until one is due, serving callbacks meanwhile.
                if self._attention:
                    slice_s = min(slice_s, max(0.001, self._attention_at - time.monotonic()))
                self._poll_client(slice_s)

    def close(
        self, timeout: float | None = 30.0, *, hand_back: bool = True
    ) -> list[UndeliveredMessage]:
        """Flush for up to ``timeout`` seconds, stop, and return every undelivered message.

        Messages handed back here get no callback: the returned list is their outcome.
        ``possibly_delivered`` marks those that may have been written anyway (an ambiguous
        failure, or still in flight when the client was purged). Calling ``close`` again
        returns the same list. A metadata request the producer has in flight (one to an
        unreachable cluster lasts ``metadata_timeout_s``) is waited for up to 0.5 s past
        ``timeout``; the client is closed once it returns.

        ``hand_back=False`` (what leaving a ``with`` block does, where nobody could take the
        list): the undelivered messages are reported as final failures are instead (the
        ``dead_letter`` hook, the callback with a ``_PURGE_QUEUE`` error), still counted in
        ``returned_on_close``, and the list is empty. Should a callback raise, the others
        still get theirs, then the first exception is raised.
        """
        if self._undelivered is not None:
            return list(self._undelivered)
        self._check_not_in_callback("close")
        if timeout is not None:  # refused before anything is closed
            timeout = check_positive_number("timeout", timeout, allow_zero=True)
        kept, self._kept_raised = self._kept_raised, None  # raised once closed
        self._begin_closing()
        client = self._client
        try:
            left_in_client = True
            try:
                left_in_client = self.flush(timeout) > 0
            finally:  # also when the flush is interrupted (Ctrl-C): what is left is told
                if left_in_client:
                    self._purge_clients(client)
        finally:
            self._closed = True
            self._reporting = (None, self._report_cb)  # let go of the last callback
            self._reporting_kept = (None, self._report_kept)
            left = self._buffer.close()
            unsure = self._client_len()
            if unsure:
                for entry in left:
                    entry.item.closed_in_flight()
            undelivered = [e.item.undelivered() for e in left] if hand_back else []
            self._returned += len(undelivered)
            self._unsure = unsure
            self._undelivered = undelivered
            # A metadata request in flight on the client is not waited for past 0.5 s: the
            # client is closed when it returns.
            self._meta.close(0.5, then=None if unsure else close_all((client, *self._others())))
            self._metrics.close()
            self._source.close()
            # Told even when the flush was interrupted (Ctrl-C again while a with block ends).
            if unsure:
                logger.error(
                    "%s closed while the client still held %d message(s) whose delivery "
                    "reports never came; they may or may not have been delivered",
                    self._name,
                    unsure,
                )
            if undelivered:
                logger.warning(
                    "%s closed with %d undelivered message(s), returned by close()",
                    self._name,
                    len(undelivered),
                )
            elif left and not hand_back:
                self._fail_left(left)
        if kept is not None:
            raise kept
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
        self.close(hand_back=False)  # nobody takes the list: each message fails finally

    def __len__(self) -> int:
        """Messages without a final outcome (in flight, including those waiting to retry);
        until the next poll, also an error event the client has not served yet."""
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
        check_topic(topic)  # before it is watched: the refresher would ask for it for ever
        timeout_s = check_positive_number(
            "timeout", self._metadata_timeout_s if timeout is None else timeout
        )
        with self._topics_lock:
            self._watched.add(topic)
        try:
            self._meta.fetch_now(topic, timeout_s)
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

    def metadata_age_s(self, topic: str) -> float | None:
        """Seconds since ``topic``'s metadata was fetched, or None if it never was."""
        return self._meta.age_s(topic)

    def statistics(self) -> ProducerStatistics:
        # Read in this order, a message moving on meanwhile is counted twice (accepted: held
        # before it is counted in; ended: still in flight when read), never missed, so the
        # derived deliveries are never overstated. What the clients hold includes events
        # other than messages (errors) until served: in flight is overstated then too. The
        # figure is kept from going back (it feeds a Prometheus counter).
        produced = _count_value(self._c_in) + self._batched
        # After close() the clients may be gone: what they held unreported is unsure.
        in_flight = self._unsure if self._closed else self._buffer.in_flight
        ended = self._final_failures + self._returned
        delivered = self._delivered_seen = max(self._delivered_seen, produced - ended - in_flight)
        return self._core.statistics(
            produced=produced,
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
