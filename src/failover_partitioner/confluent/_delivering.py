"""The delivery side of :class:`FailoverProducer` (inside confluent-kafka's poll/flush, or the
metadata thread): a failed message gets its record, the core's verdict and its partition's
quarantine; a final failure reaches the callback or the dead-letter hook; a metadata answer
reaches the core (and a topic seen for the first time has its metadata fetched); a broker the
client could not connect to has the partitions it leads quarantined."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import Any

import confluent_kafka

from failover_partitioner._calls import call_each
from failover_partitioner._message import Headers
from failover_partitioner.confluent._clients import Clients
from failover_partitioner.confluent._shared import (
    _LOCAL_UNKNOWN,
    _PLAIN_CALLBACKS,
    _REFUSAL_MEMORY_S,
    _SIGNALLED,
    _TAKEN,
    DeliveryCallback,
    _kafka_error,
    _Record,
    _report_for,
    _report_keeping,
)
from failover_partitioner.errors import REFUSED_RIGHTS, ErrorClass, MetadataUnavailable, classify
from failover_partitioner.health import TopicMetadata
from retry_buffer import Entry, RetryBufferError

logger = logging.getLogger("failover_partitioner.confluent.producer")  # the producer's own

# librdkafka names a broker "host:port/id" at the start of a connection error's text
# ("127.0.0.1:9092/4: Connect to ipv4#127.0.0.1:9092 failed: Connection refused (...)"); a
# bootstrap address, whose id is not known yet, is "host:port/bootstrap".
_CONNECT_FAILED = re.compile(r"\S*/(\d+): Connect to ")


def unreachable_broker(err: confluent_kafka.KafkaError) -> int | None:
    """The id of the broker a client's error says it could not connect to, else None."""
    if err.code() != confluent_kafka.KafkaError._TRANSPORT:
        return None
    found = _CONNECT_FAILED.match(err.str())
    return int(found.group(1)) if found else None


class Delivering(Clients):
    """What a delivery report, a failure or a metadata answer does."""

    def _reporter(self, cb: DeliveryCallback, keeping: bool = False) -> Callable[..., None]:
        """The client's delivery callback for messages sent without a record whose callback is
        ``cb`` (see ``_report_for``; ``keeping``: for messages with headers or a timestamp, to
        be bound to them, see ``_report_keeping``). The last one made of each kind is kept
        (``_reporting``, ``_reporting_kept``), so that a producer calling back to one function,
        method or other callable makes it once; a callback made anew per message (a lambda)
        gets one per message."""
        last = self._reporting_kept if keeping else self._reporting
        if cb is last[0] or (type(cb) in _PLAIN_CALLBACKS and cb == last[0]):
            return last[1]  # the same callback (a method is made anew at each reading)
        if keeping:
            report = _report_keeping(self._failed_without_record, cb)
            self._reporting_kept = (cb, report)
        else:
            report = _report_for(self._failed_without_record, cb)
            self._reporting = (cb, report)
        return report

    def _taken_when_interrupted(
        self, exc: BaseException, first: bool, previous: int = -1, partition: int = -1
    ) -> None:
        """A signal's exception ``exc`` came out of the client's produce call (see
        ``_SIGNALLED``): the client took the message, so the attempt stands as if the call had
        returned. A first attempt counts in (``produce`` would have), and ``exc`` says it was
        taken (for ``produce_batch``); a retry's move is counted."""
        if first:
            setattr(exc, _TAKEN, True)
            self._count_in()
        else:
            self._core.sent(previous, partition)

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

    def _on_failure(self, rec: _Record, err: Any, msg: Any) -> None:
        if self._buffer.closed:
            self._failed_after_close(rec, err)
            return
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

    def report_failure(self, topic: str, partition: int, err: confluent_kafka.KafkaError) -> None:
        """Take a delivery failure that another client saw, to ``topic`` [``partition``], into
        the health model as if it were the producer's own: the partition is quarantined, or the
        metadata fetched again, as the error calls for. The message itself is the caller's."""
        self._heed(topic, partition, classify(err.code(), err.name()))

    def _heed(self, topic: str, partition: int, ec: ErrorClass) -> None:
        """Do what the core makes of a failure's partition: watch the topic closely once it is
        quarantined (and leave the healthy path), look at the metadata again."""
        heed = self._core.heed(topic, partition, ec)
        if heed.quarantined:
            self._quarantined(topic)
        if heed.refresh:
            self._meta.request_refresh(topic)

    def _quarantined(self, topic: str) -> None:
        self._meta.set_fast(topic, True)
        self._attention_at = 0.0
        self._leave_whole()

    def _on_client_error(self, err: confluent_kafka.KafkaError) -> None:
        """A client's error_cb (see ``report_client_error``)."""
        self.report_client_error(err)
        super()._on_client_error(err)

    def report_client_error(self, err: confluent_kafka.KafkaError) -> bool:
        """Take an error that a client of the cluster reported (its ``error_cb``: the
        producer's own clients', or another's) into the health model. A broker it could not
        connect to (crashed, or cut off) leads partitions that take nothing until it is back or
        their leadership moves: the core quarantines them, so that new messages go elsewhere
        rather than wait in a client's queue with nothing failed to say so
        (docs/guarantees.md, "A leader the client cannot connect to"). True when that took
        partitions out of use; other errors change nothing."""
        broker = None if self._closed else unreachable_broker(err)
        struck = [] if broker is None else self._core.unreachable(broker)
        if struck:
            logger.info(
                "%s: could not connect to broker %d, a leader in %s: %s",
                self._name,
                broker,
                ", ".join(struck),
                err.str(),
            )
        for topic in struck:
            self._quarantined(topic)
            self._meta.request_refresh(topic)
        return bool(struck)

    def _on_final_failure(self, entry: Entry[_Record], error: object) -> None:
        self._final_failures += 1
        if self._report_final(entry, error):
            rec = entry.item
            logger.error(
                "message to %s failed finally after %d attempt(s): %s",
                rec._m[0],
                rec._attempts,
                rec._error,
            )

    def _failed_after_close(self, rec: _Record, err: Any) -> None:
        """A failure served after close() (by a poll in another thread). A message the failed
        buffer held is in close()'s list, its outcome; one it never held (a first attempt)
        fails finally now, so that it is told."""
        if rec._entry is None:
            self._final_failures += 1
            if self._report_final(rec, err):
                logger.error("message to %s failed after close(): %s", rec._m[0], err)

    def _report_final(self, entry: Entry[_Record] | _Record, error: object) -> bool:
        """Tell the dead-letter hook and the message's callback that it failed finally with
        ``error`` (``entry``: its buffer entry, or the record of one never held there); True
        when there is neither (the caller logs it)."""
        if isinstance(entry, Entry):
            rec = entry.item
            rec._entry = None  # the record and its entry refer to each other (see _Record)
            if entry.possibly_duplicated:
                rec._dup = True
        else:
            rec = entry
        kerr = _kafka_error(error)
        rec._error = kerr
        hook = self._dead_letter
        cb = rec._cb
        try:
            if hook is not None:
                try:
                    hook(rec.undelivered(), kerr)
                except Exception:
                    logger.exception("dead_letter hook raised for a message to %s", rec._m[0])
        finally:  # a KeyboardInterrupt in the hook skips not the callback
            if cb is not None:
                cb(kerr, rec)
        return cb is None and hook is None

    def _fail_left(self, left: list[Entry[_Record]]) -> None:
        """``close(hand_back=False)``: the messages left are reported as final failures are,
        every one even if a callback raises (the first exception is raised after), and
        counted as ended at close (``returned_on_close``, as the asyncio shell's); those
        nobody hears of (no callback, no hook) are logged once, in all."""
        self._returned += len(left)
        logger.warning(
            "%s closed with %d undelivered message(s), failed to their callbacks and the "
            "dead_letter hook",
            self._name,
            len(left),
        )
        error = confluent_kafka.KafkaError(
            confluent_kafka.KafkaError._PURGE_QUEUE,
            f"{self._name} closed before this message was delivered",
        )
        unheard = 0

        def report(entry: Entry[_Record]) -> None:
            nonlocal unheard
            unheard += self._report_final(entry, error)

        first = call_each(left, report)
        if unheard:
            logger.error(
                "%s closed with %d undelivered message(s) that have neither a callback nor a "
                "dead_letter hook; they failed finally",
                self._name,
                unheard,
            )
        if first is not None:
            raise first

    def _chooser_for(self, topic: str) -> None:
        """Fetch the metadata of a topic seen for the first time (once)."""
        with self._topics_lock:
            first = topic not in self._watched
            self._watched.add(topic)
        if not first or self._in_callback():
            self._meta.watch(topic)
            return
        try:
            self._meta.fetch_now(topic, self._metadata_timeout_s)
        except MetadataUnavailable as exc:
            self._raise_if_refused(exc)
            logger.warning("%s; messages for it wait", exc)

    def _on_metadata(self, md: TopicMetadata) -> None:
        topic = md.topic
        change = self._core.metadata(md)
        if change.new and self._bare_ok:
            self._bare[topic] = self._choosers[topic]
        if change.fast or not change.new:
            self._meta.set_fast(topic, change.fast)
        if change.changed:
            # Off the healthy path (its lanes were cut from the old view) until _service
            # looks again; a fetch that brought the same facts leaves it as it is.
            self._attention_at = 0.0
            self._leave_whole(topic)

    def _admit(self, rec: _Record) -> Entry[_Record]:
        """Give ``rec`` its retry-buffer entry (on its first failure or wait): it was counted
        in flight already, held by the client or let in by has_room."""
        entry: Entry[_Record] | None = rec._entry
        if entry is None:
            entry = rec._entry = self._buffer.adopt(rec)
        return entry

    def _wait(self, rec: _Record, why: int | BaseException, first: bool = False) -> None:
        """Put ``rec`` in the failed buffer without an attempt (nothing usable, queue full);
        ``first``: a first attempt, inside ``produce()`` or ``produce_batch()`` (see
        ``_own_end``)."""
        entry = self._admit(rec)
        try:
            if self._core.hold(entry, rec._m[0], why):
                self._leave_whole()
        except BaseException as exc:
            if not first or isinstance(exc, RetryBufferError):
                raise
            self._own_end(exc)

    def _fail_finally(self, rec: _Record, error: object, first: bool = False) -> None:
        entry = self._admit(rec)
        try:
            self._core.end(entry, error)
        except BaseException as exc:
            if not first or isinstance(exc, RetryBufferError):
                raise
            self._own_end(exc)

    def _own_end(self, exc: BaseException) -> None:
        """A callback (the message's, or the dead-letter hook) raised ``exc`` as a first
        attempt failed finally inside ``produce()`` or ``produce_batch()`` (a topic the cluster
        lacks, refused rights, no retry left): the message was accepted, and has had its
        outcome. So the call goes on and counts it in; the exception is kept for the next
        ``poll()``, ``flush()`` or ``close()``, as one a callback raises for another message
        is (``_make_way``); a signal's goes on marked taken (``_taken_when_interrupted``)."""
        if isinstance(exc, _SIGNALLED):
            self._taken_when_interrupted(exc, first=True)
            raise exc
        if not isinstance(exc, Exception):
            raise exc
        self._keep_raised(exc)
