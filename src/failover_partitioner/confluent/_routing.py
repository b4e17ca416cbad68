"""The failover path of a single message in :class:`FailoverProducer`: the core routes it (or
the healthy path's choice of a topic with some partitions out of use), a first attempt goes to
the client with a record only when its report could not rebuild it, due retries are produced
again, and a refusal by the client at once leads on (wait for room, try a full queue again,
fail, or raise to the caller)."""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Mapping
from typing import Any

import confluent_kafka
from confluent_kafka import KafkaError

from failover_partitioner._message import DeliveryGroup, Headers, not_accepted
from failover_partitioner.choose import CLIENT_PARTITIONER, PartitionChooser
from failover_partitioner.confluent._delivering import Delivering
from failover_partitioner.confluent._shared import (
    _ANY_PARTITION,
    _OFF,
    _SIGNALLED,
    DeliveryCallback,
    _check_header_items,
    _check_header_names,
    _ErrorsOnly,
    _GroupReport,
    _kafka_error,
    _key_bytes,
    _normalise_headers,
    _partial,
    _rebuildable,
    _Record,
)
from failover_partitioner.core import (
    NO_RIGHTS,
    NO_TOPIC,
    check_partition,
    check_timestamp,
    check_topic,
)
from failover_partitioner.errors import (
    REFUSED_RIGHTS,
    ProducerClosed,
    ProduceTimeout,
)

logger = logging.getLogger("failover_partitioner.confluent.producer")  # the producer's own


class Routing(Delivering):
    """The paths a single message takes to the client off the healthy path."""

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
        """``produce`` off its inline healthy path: the core routes the message (the keyless
        common case through the chooser's own rotation). A header list to a topic the client
        places for (whole, sticky), with no callback or one a report can serve: the healthy
        path still, the headers kept for the report (the inline path is kept to messages
        without)."""
        if self._closing:  # (a plain read: this runs for every message off the healthy path)
            self._refuse_if_closing("produce()")
        if partition is not None:
            self._check_partition(topic, partition)
        if (
            type(headers) is list
            and timestamp is None
            and partition is None
            and self._lanes.get(topic, _OFF) is None
            and (
                on_delivery is None
                or (self._quiet is None and _rebuildable(value, key, on_delivery))
            )
        ):
            _check_header_names(headers, topic)
            self._send_rebuildable(topic, value, key, _ANY_PARTITION, on_delivery, None, headers)
            return
        if self._attention:
            self._make_way()  # also raises ProducerClosed once closed
        if on_delivery is not None and self._quiet is not None and not self._end_quiet():
            raise self._timed_out(topic, value, key, headers, timestamp)
        if key is None and headers is None and timestamp is None and partition is None:
            # Keyless, nothing but perhaps a callback to keep. The dict holds a topic only
            # when such a message needs nothing else (no id header, no errors-only wrapper,
            # no byte budget), so one lookup stands for all those checks.
            chooser = self._bare.get(topic)
            if chooser is not None:
                self._produce_bare(chooser, topic, value, on_delivery)
                return
        if timestamp is not None:
            check_timestamp(timestamp)
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

    def _check_partition(self, topic: str, partition: object) -> None:
        """Refuse a ``partition=`` that is no partition of ``topic`` (its metadata fetched
        first, on first sight), before the message is accepted."""
        if topic not in self._choosers:
            check_topic(topic)
            self._chooser_for(topic)
        state = self._core.topics.get(topic)
        check_partition(partition, topic, None if state is None else state.metadata)

    def _produce_bare(
        self,
        chooser: PartitionChooser,
        topic: str,
        value: bytes | str | None,
        on_delivery: DeliveryCallback | None,
    ) -> None:
        """A keyless message without headers or timestamp: the chooser's own next answer (the
        core's answer for it, without the core's frame)."""
        if on_delivery is None:
            on_delivery = self._default_cb
        elif not callable(on_delivery):
            raise TypeError(f"on_delivery must be callable(err, msg) or None, got {on_delivery!r}")
        if not self._buffer.has_room():
            self._wait_for_room(topic, value, None, None, None)
        p = chooser.next_keyless()
        if p < 0:
            if p != CLIENT_PARTITIONER:  # nothing usable: the message waits
                self._produce_with_record(topic, value, None, None, on_delivery, None)
                return
            p = _ANY_PARTITION
        self._produce_routed(topic, value, None, None, on_delivery, None, p)

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
        if headers is not None:
            _check_header_names(headers, topic)
        if on_delivery is None and self._plain:
            self._send_rebuildable(topic, value, key, p, None, timestamp, headers)
            return
        if isinstance(on_delivery, DeliveryGroup):
            # No record: the group hears of a first-attempt delivery without a report,
            # and a failure is rebuilt from the client's (see DeliveryGroup), with the
            # headers and timestamp the report's partial keeps (see _report_keeping).
            # _group_report, inline (a mirror sends every message this way: a frame shows).
            held = on_delivery._client_report  # weakly (see _GroupReport)
            report = None if held is None else held()
            if report is None or report.producer is not self:
                report = _GroupReport(self, on_delivery)
                on_delivery._client_report = weakref.ref(report)
            if headers is not None or timestamp is not None:
                report = _partial(
                    _GroupReport.keeping,
                    report,
                    None if headers is None else tuple(headers),
                    timestamp,
                )
            try:
                self._produce_reported(topic, value, key, p, report, None, timestamp or 0, headers)
            except BaseException as exc:
                kept = None if headers is None else headers[:]
                rec = self._record_cls.new(topic, value, key, kept, timestamp, on_delivery)
                rec._partition = p
                rec._attempts = 1
                self._produce_raised(rec, exc, first=True)
            return
        cb = self._default_cb if on_delivery is None else on_delivery
        if cb is not None and _rebuildable(value, key, cb):
            self._send_rebuildable(topic, value, key, p, cb, timestamp, headers)
            return
        kept = None if headers is None else headers[:]
        rec = self._record_cls()
        rec._cb = cb
        rec._entry = None
        rec._m = (topic, value, key, kept, timestamp)
        rec._partition = p
        rec._attempts = 1
        try:
            self._sender(rec)(topic, value, key, p, rec, None, timestamp or 0, kept)
        except BaseException as exc:
            self._produce_raised(rec, exc, first=True)

    def _group_report(self, group: DeliveryGroup) -> _GroupReport:
        """The client's callback for ``group``'s messages sent without a record, made on
        first use and held by the group weakly (see _GroupReport)."""
        held = group._client_report
        report: _GroupReport | None = None if held is None else held()
        if report is None or report.producer is not self:
            report = _GroupReport(self, group)
            group._client_report = weakref.ref(report)
        return report

    def _send_rebuildable(
        self,
        topic: str,
        value: bytes | str | None,
        key: bytes | str | None,
        p: int,
        cb: DeliveryCallback | None,
        timestamp: int | None = None,
        headers: Headers | None = None,
    ) -> None:
        """Send a first attempt whose failure the client's report can rebuild without a
        record: with the producer's own report when nobody listens, else with ``cb``'s (see
        ``_report_for``). Headers and a timestamp, which a report lacks, are bound to it by a
        partial (``_report_keeping``), the headers as a copy (the caller's list goes to the
        client, which copies it). A full queue or a refusal: the record path waits or
        decides."""
        send = self._produce_raw if cb is None else self._produce_reported
        if timestamp is None and headers is None:
            sent = self._report_cb if cb is None else self._reporter(cb)
        else:
            sent = _partial(
                self._report_kept if cb is None else self._reporter(cb, keeping=True),
                None if headers is None else tuple(headers),
                timestamp,
            )
        try:
            send(topic, value, key, p, sent, None, timestamp or 0, headers)
        except (BufferError, confluent_kafka.KafkaException):
            self._produce_with_record(topic, value, key, headers, cb, timestamp)
        except _SIGNALLED as exc:
            self._taken_when_interrupted(exc, first=True)
            raise
        except TypeError as exc:
            if headers is not None:
                _check_header_items(headers, topic, exc)  # names a bad pair
            raise

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
        deadline = time.monotonic() + self._produce_timeout_s
        has_room = self._buffer.has_room
        while not has_room(need):
            self._refuse_if_closing("produce()")
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._in_callback():
                raise self._timed_out(topic, value, key, headers, timestamp)
            self._make_way(min(remaining, 0.05))

    def _timed_out(
        self,
        topic: str,
        value: bytes | str | None,
        key: bytes | str | None,
        headers: object,
        timestamp: int | None,
    ) -> ProduceTimeout:
        """The refusal of a message that waited ``produce_timeout_s`` for room (not accepted:
        the exception carries it back)."""
        message = not_accepted(topic, value, key, _normalise_headers(headers, topic), timestamp)
        return ProduceTimeout(message, limit=self._limit, timeout_s=self._produce_timeout_s)

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
                error = KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, self._core.missing(topic))
                self._fail_finally(rec, error, first)
                return
            if p == NO_RIGHTS:
                refused = self._core.refused(topic)
                error = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, refused)
                self._fail_finally(rec, error, first)
                return
            self._wait(rec, p, first)
            return
        previous = rec._partition
        rec._partition = p
        rec._attempts += 1
        produce = self._sender(rec)
        try:
            produce(topic, value, key, p, rec, None, timestamp or 0, headers)
        except BaseException as exc:
            self._produce_raised(rec, exc, first=first, previous=previous)
            return
        self._core.sent(previous, p)

    def _sender(self, rec: _Record) -> Any:
        """The produce call for ``rec``: the solo client's once its batch was refused whole, the
        main client's when a delivery must be heard of (a callback, or a retry the buffer
        counts), else the one for first attempts (the quiet client while the producer is)."""
        if getattr(rec, "_solo", False):
            return self._solo().produce
        if rec._cb is None and rec._entry is None:
            return self._produce_raw
        return self._produce_reported

    def _produce_raised(
        self, rec: _Record, exc: BaseException, *, first: bool, previous: int = -1
    ) -> None:
        """The client refused ``rec`` at once (queue full, a bad argument), or took it and a
        signal's exception came as the call returned."""
        partition = rec._partition
        if isinstance(exc, _SIGNALLED):
            self._taken_when_interrupted(exc, first, previous, partition)
            raise exc
        rec._attempts -= 1
        rec._partition = previous
        if isinstance(exc, BufferError):
            if not self._retry_queue_full(rec, exc, partition, first, previous):
                self._wait(rec, exc, first)
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
                self._fail_finally(rec, exc, first=True)
                return
            # The caller's own mistake (a bad value type, ...): the message was not accepted:
            # the caller sees the exception.
            headers = rec._m[3]
            if headers is not None and isinstance(exc, TypeError):
                _check_header_items(headers, rec._m[0], exc)
            raise exc
        logger.error("producing a retried message to %s failed: %r", rec._m[0], exc)
        self._fail_finally(rec, exc)

    def _retry_queue_full(
        self, rec: _Record, full: BufferError, partition: int, first: bool, previous: int
    ) -> bool:
        """librdkafka's queue is full (``full``, its refusal): serve callbacks and try again,
        within produce_timeout_s. False: still full (``rec`` as before the first try)."""
        if self._in_callback():
            return False
        topic, value, key, headers, timestamp = rec._m
        produce = self._sender(rec)
        deadline = time.monotonic() + self._produce_timeout_s
        while time.monotonic() < deadline:
            try:
                self._poll_client(0.01)
            except Exception as exc:  # another message's callback (see _keep_raised)
                self._keep_raised(exc)
            except _SIGNALLED:
                if rec._entry is not None:
                    self._wait(rec, full)  # a retry keeps its place; a first attempt
                raise  # was not accepted
            rec._partition = partition
            rec._attempts += 1
            try:
                produce(topic, value, key, partition, rec, None, timestamp or 0, headers)
            except BufferError:
                rec._attempts -= 1
                rec._partition = previous
                continue
            except _SIGNALLED as exc:
                self._taken_when_interrupted(exc, first, previous, partition)
                raise
            self._core.sent(previous, partition)  # as _dispatch counts an attempt it made
            return True
        return False

    def _make_way(self, timeout: float | None = None) -> None:
        """What ``produce()`` and ``produce_batch()`` do for room or before a message: serve
        the clients' callbacks for up to ``timeout`` seconds (None: not at all) and the due
        retries. A callback that raises here raised for another message, whose outcome it
        had: the exception is kept for the next ``poll()``, ``flush()`` or ``close()`` to
        raise (``_raise_kept``), so that ``produce()`` raises only about its own message and
        goes on to accept it."""
        try:
            if timeout is not None:
                self._poll_client(timeout)
            if self._attention:
                self._service()
        except ProducerClosed:
            raise
        except Exception as exc:
            self._keep_raised(exc)

    def _service(self) -> None:
        """Produce due failed messages again and release due quarantines."""
        if self._closed:
            raise ProducerClosed("produce() after close()")
        now = time.monotonic()
        if now < self._attention_at:
            return
        self._attention = False
        core = self._core
        try:
            tick = core.tick()
            for topic, fast in tick.fast.items():
                self._meta.set_fast(topic, fast)
            for entry in core.due():
                self._dispatch(entry.item)
        except BaseException:
            # A callback raised (a message's final failure on the way): what is left is due
            # at the next look.
            self._attention, self._attention_at = True, 0.0
            raise
        next_at = core.next_at(tick)
        if next_at is not None and self._buffer.failed_depth:
            self._attention_at = next_at
            self._attention = True
            return
        # Nothing waits to be retried. A quarantine's back-off may still run: the healthy path
        # serves the view without its partition meanwhile, and a metadata fetch when it ends
        # brings the release (a change of the view: _on_metadata leaves the healthy path, and
        # this looks again).
        for topic, end in tick.ends.items():
            self._meta.request_at(topic, end)
        self._reopen_whole()
