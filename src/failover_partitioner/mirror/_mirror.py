"""The mirror loop: consume from the source, produce through the failover producer, commit.

Theory of operation
-------------------
One thread does everything, so every piece of state has one writer:

* ``consume`` hands each message to the producer and records its offset in the partition's
  :class:`~._commits.PartitionTracker`. Delivery callbacks run inside ``producer.poll`` on the
  same thread; they only update trackers (delivered counts derive from them) and queue
  failures (``_failures``). Nothing blocking (poll, flush, produce, commit) ever runs inside a
  delivery callback: librdkafka would re-enter.
* While every partition of a target topic is usable, messages take the fast lane instead
  (``_lane``): a second client that reports failures only; its deliveries are counted when it
  holds nothing any more (settled), before anything needs them, and its failures are sent
  again through the failover producer.
* Commits store, per partition, the first offset not finally delivered (``_commits``,
  ``_committer``), so a crash at any moment re-mirrors at most the uncommitted window and loses
  nothing.
* The window (messages consumed and not committed) is bounded by ``max_in_flight``: the loop
  asks the consumer for no more than the room left and pauses the assignment when there is none,
  still calling ``consume`` so the group does not evict it (``max.poll.interval.ms``).
* Rebalance callbacks run inside ``consume``: a revoked partition's in-flight messages are
  finished (or, past ``drain_timeout_s``, abandoned) and its delivered prefix committed before
  the partition goes to another member, as MirrorMaker does since KAFKA-4521.
* Before a source topic is consumed, and at each topic refresh, its target topic is created,
  grown and configured like it (``_topics``), and its placement decided once (``preserve``:
  source partition p to target p while usable; see ``_targets``).
* Each commit may record an offset sync (``_offsets``): the next offset to hand per source
  partition, with the target's ends as answered before it (``_committer``).
* A message that finally fails stops the mirror: the other in-flight messages are finished,
  every partition is committed up to (not past) its first undelivered message, and ``run``
  raises :class:`MessageFailedError`. With a dead-letter topic the message goes there instead.

This module holds the loop, the hot path (``Mirror._hand_batch``), rebalances and shutdown;
the parts named above are collaborators the :class:`Mirror` owns, one decision in each.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from functools import partial

from confluent_kafka import (
    TIMESTAMP_NOT_AVAILABLE,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from prometheus_client.registry import CollectorRegistry

from failover_partitioner.errors import ProduceTimeout

from ._clients import (
    AdminFactory,
    Clients,
    ConsumerFactory,
    LaneFactory,
    ProducerFactory,
    build,
    default_admin,
    default_consumer,
    default_lane,
    default_producer,
    describe,
    produce_consumed,
)
from ._commits import CommitLedger, Span
from ._committer import Committer
from ._config import MirrorOptions
from ._errors import MirrorError
from ._failures import Failures
from ._lane import LaneControl
from ._logins import LOGIN_REFUSALS, refused_login
from ._provenance import HEADER_SOURCE, HEADER_SOURCE_OFFSET, Headers, Provenance
from ._rebalance import Rebalance
from ._report import Counters, Reporter
from ._status import MirrorStatus
from ._targets import Targets

__all__ = ["Mirror"]

logger = logging.getLogger(__name__)

# The provenance prefix of a run whose provenance format does not use one (never changed).
_NO_PREFIX: Headers = []

# What the source consumer reports when the source cluster refuses the mirror's principal:
# the Java consumer throws them from poll() and MirrorMaker 2 fails the task; librdkafka only
# reports them once and then idles, so the mirror stops at the first (a grant takes effect at
# the restart). Fatal errors and a message that finally fails stop it the same way.
_SOURCE_REFUSALS = LOGIN_REFUSALS | {
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
}


def source_refusal(err: KafkaError, group: str, topics: str) -> str:
    """The error of a source consumer refused by the source cluster: what was refused and
    the right the principal lacks (``topics``: the topic named, or those subscribed)."""
    code = err.code()
    if code in LOGIN_REFUSALS:
        return refused_login("source", "--consumer.config", err)
    if code == KafkaError.TOPIC_AUTHORIZATION_FAILED:
        what = (
            f"the source cluster refuses to let the mirror read topic {topics}: "
            "the source principal needs READ (and DESCRIBE) on each source topic"
        )
    elif code == KafkaError.GROUP_AUTHORIZATION_FAILED:
        what = (
            f"the source cluster refuses the mirror's consumer group {group!r}: the source "
            "principal needs READ on the group"
        )
    else:
        what = "the source cluster refuses the mirror's consumer a cluster-wide request"
    return (
        f"{what} ({describe(err)}). Stopped; nothing undelivered was committed. Grant it (see "
        "docs/configuration.md) and restart: the mirror resumes where it committed"
    )


def consumer_error(
    err: KafkaError | None, topic: str | None, group: str, subscribed: Sequence[str] | None
) -> None:
    """Raise :class:`MirrorError` for an error the source consumer returned instead of a
    message that stops the mirror (``topic``: the one it names, if any), else log it. Raising
    stops the mirror as ``run`` does for any error: in-flight messages are finished and only
    what was delivered is committed."""
    if err is None:
        return
    if err.fatal():
        raise MirrorError(f"the source consumer failed: {describe(err)}")
    code = err.code()
    if code == KafkaError._PARTITION_EOF:
        return
    if code in _SOURCE_REFUSALS:
        named = (topic,) if topic else subscribed or ()
        topics = ", ".join(repr(t) for t in named) or "?"
        raise MirrorError(source_refusal(err, group, topics))
    logger.warning("source consumer: %s", describe(err))


class Mirror:
    """Mirror topics from a source cluster to a target cluster, at least once.

    ``run()`` blocks until :meth:`stop` is called (from a signal handler or another thread), then
    finishes in-flight messages, commits and returns the final :class:`MirrorStatus`. It raises
    :class:`MessageFailedError` after committing up to a message that finally failed.

    ``consumer_factory`` and ``producer_factory`` build the clients from their config dicts
    (defaults: ``confluent_kafka.Consumer`` and the failover producer). ``lane_factory`` builds
    the fast lane's client (``confluent_kafka.Producer`` by default, when the producer is the
    default one too; with a producer factory of your own, pass one to have the lane); the lane
    runs only with ``options.fast_lane`` and a producer that has the failover producer's
    ``whole``, ``health``, ``report_failure`` and ``flush``. ``admin_factory`` builds the admin
    clients of the topic sync and offset syncs (``confluent_kafka.admin.AdminClient`` by
    default, when neither client factory is given; without one there is neither).
    """

    def __init__(
        self,
        options: MirrorOptions,
        *,
        metrics_registry: CollectorRegistry | None = None,
        consumer_factory: ConsumerFactory | None = None,
        producer_factory: ProducerFactory | None = None,
        lane_factory: LaneFactory | None = None,
        admin_factory: AdminFactory | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._options = options
        self._consumer_factory = consumer_factory or default_consumer
        self._producer_factory = producer_factory or partial(
            default_producer, max_in_flight=options.max_in_flight, registry=metrics_registry
        )
        if lane_factory is None and producer_factory is None:
            lane_factory = default_lane
        if admin_factory is None and producer_factory is None and consumer_factory is None:
            admin_factory = default_admin
        self._lane_factory = lane_factory if options.fast_lane else None
        self._clock = clock
        # Wall-clock time only to compare with record timestamps (latency and age).
        self._wall_clock = wall_clock
        self._clients = clients = Clients()
        self._ledger = ledger = CommitLedger(lambda: wall_clock() * 1000.0)
        # Counters: plain ints and dicts on the hot path, published to metrics now and then.
        self._counters = counters = Counters()
        self._provenance = provenance = Provenance(options)
        self._targets = targets = Targets(options, clients, admin_factory, clock)
        self._failures = Failures(options, targets.router, clients, counters, provenance)
        self._committer = Committer(options, ledger, clients, counters, targets, clock)
        self._lanes = LaneControl(
            options,
            clients,
            targets,
            self._failures,
            counters,
            provenance,
            clock=clock,
            when_room=self._produce_when_room,
            stopping=lambda: self._stop_requested,
        )
        self._stop_requested = False
        self._hurry = False
        self._started = False
        self._state = "starting"
        self._paused = False
        self._rebalance = Rebalance(
            options,
            ledger,
            clients,
            self._committer,
            self._lanes,
            self._failures,
            clock=clock,
            hurry=lambda: self._hurry,
        )
        reset = options.consumer_config["auto.offset.reset"]
        self._reporter = Reporter(counters, ledger, clients, clock, metrics_registry, reset=reset)

    # -- public --------------------------------------------------------------------------

    @property
    def options(self) -> MirrorOptions:
        return self._options

    def stop(self) -> None:
        """Ask ``run`` to stop: no more consuming; finish in-flight messages, commit, return.

        Safe from a signal handler. A second call stops waiting for in-flight messages: what
        is not delivered by then is not committed, and is mirrored again after a restart.
        """
        if self._stop_requested:
            self._hurry = True
        self._stop_requested = True

    def run(self, on_status: Callable[[MirrorStatus], None] | None = None) -> MirrorStatus:
        """Mirror until stopped; returns the final status.

        ``on_status`` is called every ``status_interval_s`` from this thread.
        """
        if self._started:
            raise MirrorError("a Mirror runs once; create a new one to run again")
        self._started = True
        opts = self._options
        clients = self._clients
        # Its error_cb: a refused login is told only there (see _logins).
        consumer_config = {**opts.consumer_config, "error_cb": self._targets.source_logins.error_cb}
        clients.consumer = consumer = build(
            "source consumer", self._consumer_factory, consumer_config
        )
        try:
            clients.producer = build(
                "target producer", self._producer_factory, opts.producer_config
            )
            self._lanes.start(self._lane_factory)
            self._targets.start()
        except BaseException:
            try:
                self._lanes.close()  # it holds nothing yet: its threads and connections end
            finally:
                consumer.close()
                if clients.producer is not None:
                    clients.producer.close(0)
            raise
        logger.info(
            "mirroring %s -> %s, group %r, include %r exclude %r rename %r, max in flight %d",
            opts.source_servers,
            opts.target_servers,
            opts.group,
            opts.include,
            opts.exclude,
            opts.rename,
            opts.max_in_flight,
        )
        try:
            self._loop(on_status)
        except BaseException:
            # Committing is still safe: only delivered prefixes are ever committed.
            self._shutdown(failed=True)
            raise
        self._shutdown(failed=self._failures.fatal is not None)
        fatal = self._failures.fatal  # the drain may have met it too
        if fatal is not None:
            raise self._failures.fatal_error(fatal)
        status = self.status()
        if on_status is not None and opts.status_interval_s > 0:
            on_status(status)
        return status

    def status(self) -> MirrorStatus:
        """The current status (call from the thread running ``run``, e.g. in ``on_status``)."""
        return self._reporter.status(self._state, paused=self._paused)

    # -- the loop ------------------------------------------------------------------------

    def _loop(self, on_status: Callable[[MirrorStatus], None] | None) -> None:
        opts = self._options
        clock = self._clock
        now = clock()
        next_refresh = now
        next_commit = now + opts.commit_interval_s
        next_status = now + opts.status_interval_s if opts.status_interval_s > 0 else float("inf")
        next_publish = now
        self._state = "running"
        failures, targets, rebalance = self._failures, self._targets, self._rebalance
        while not self._stop_requested and failures.fatal is None:
            now = clock()
            if now >= next_refresh:
                targets.refresh(rebalance.on_assign, rebalance.on_revoke, rebalance.on_lost)
                # Until some topic matches, look again soon.
                refresh_s = opts.topic_refresh_interval_s
                next_refresh = now + (refresh_s if targets.subscribed else min(1.0, refresh_s))
            self._step()
            now = clock()
            if now >= next_commit:
                self._lanes.settle()
                self._committer.commit(None, reason="periodic")
                next_commit = now + opts.commit_interval_s
            if now >= next_publish:
                self._reporter.publish(paused=self._paused)
                next_publish = now + 1.0
            if now >= next_status and on_status is not None:
                status = self.status()
                on_status(status)
                self._reporter.mark(now, status.delivered)
                next_status = now + opts.status_interval_s

    def _step(self) -> None:
        consumer, producer = self._clients.consumer, self._clients.producer
        assert consumer is not None
        assert producer is not None
        producer.poll(0)
        failures = self._failures
        if failures.queue:
            failures.handle()
            if failures.fatal is not None:
                return
        opts = self._options
        window, in_flight = self._ledger.counts()
        lanes = self._lanes
        lane = lanes.lane
        if lane is not None:
            if lane.spans and opts.max_in_flight - window < opts.poll_batch:
                # The next batch would not fit: learn the lane's deliveries (until then its
                # messages count as in flight), as a loop that commits after flush() does.
                lanes.settle()
                window, in_flight = self._ledger.counts()
            else:
                lanes.retry()
        if window - in_flight >= self._committer.every:
            # Delivered, uncommitted messages fill a quarter of the window: a commit frees it
            # (no round trip when their prefix is still blocked by an in-flight message).
            self._committer.commit(None, reason="window")
            window, in_flight = self._ledger.counts()
        room = opts.max_in_flight - window
        if self._paused and room >= opts.max_in_flight // 4 + 1:
            self._set_paused(False)
        elif not self._paused and room <= 0:
            self._set_paused(True)
        if self._paused or self._targets.subscribed is None:
            # Still call consume: it serves rebalance callbacks and keeps the group membership.
            logins = self._targets.source_logins
            told = logins.told
            for msg in consumer.consume(1, 0.05 if self._paused else 0.2):
                logins.fetched(told)  # (a refusal told before is old)
                self._rewind_paused(msg)
            if self._paused:
                producer.poll(0.02)
            return
        timeout = 0.05 if in_flight else 0.2
        logins = self._targets.source_logins
        told = logins.told
        batch = consumer.consume(min(room, opts.poll_batch), timeout)
        if batch:
            logins.fetched(told)  # a refused login its error_cb told before is old news
            self._hand_batch(batch)
        elif window > in_flight or (lane is not None and lane.spans):
            # Caught up with the source: commit what is delivered now rather than at the next
            # interval (a restart then repeats nothing; no round trip if nothing advanced).
            lanes.settle()
            producer.poll(0)
            self._committer.commit(None, reason="idle")

    def _hand_batch(self, batch: list[Message]) -> None:
        """The hot path: locals only. A run of messages from one partition is a Span, one
        delivery callback for them all (counted down without a report per message): what they
        share is looked up once (``_open_run``), and they are counted once (``_close_run``)."""
        producer = self._clients.producer
        assert producer is not None
        lane_produce = lane.produce if (lane := self._lanes.lane) is not None else None
        produce, rerouted, close_run = producer.produce, self._counters.rerouted, self._close_run
        provenance, compact = self._options.provenance_headers, self._provenance.compact
        last_topic, last_partition, count, end, last_ts, on_lane = "", -1, 0, 0, 0, 0
        span: Span | None = None
        source_header, no_timestamp = HEADER_SOURCE, TIMESTAMP_NOT_AVAILABLE
        now_ms = self._wall_clock() * 1000.0  # for record ages
        try:
            for msg in batch:
                if (err := msg.error()) is not None:
                    self._consumer_error(err, msg.topic())
                    continue
                topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
                assert topic is not None
                assert partition is not None
                assert offset is not None
                if partition != last_partition or topic != last_topic:
                    if span is not None:
                        close_run(span, last_topic, count, end, on_lane, last_ts, now_ms)
                        span, on_lane = None, 0
                    last_topic, last_partition = topic, partition
                    span, count = self._open_span(batch, topic, partition, offset), 0
                    target, place, away, tag, prefix, lane_cb = self._open_run(span, msg)
                if span is None:
                    continue  # revoked while the batch was out; the new owner reads it again
                # A consumed message's headers are always a list of pairs, never the dict form.
                headers: Headers | None = msg.headers()  # type: ignore[assignment]
                if not provenance:
                    pass
                elif compact:
                    # One new list per message: the client may hand the consumed one out again
                    # (failure reports read it). A str value: the client writes it as UTF-8, and
                    # an f-string is the cheapest way to make it (bytes costs about twice as much).
                    if headers:
                        headers = [*headers, (source_header, f"{tag}{offset}")]
                    else:
                        headers = [(source_header, f"{tag}{offset}")]
                elif headers:
                    headers = [*headers, *prefix, (HEADER_SOURCE_OFFSET, b"%d" % offset)]
                else:
                    headers = [*prefix, (HEADER_SOURCE_OFFSET, b"%d" % offset)]
                ts_type, ts = msg.timestamp()
                stamp = ts if ts_type != no_timestamp and ts > 0 else None  # create_time()
                last_ts = stamp or 0  # the lane's "no timestamp" too
                if away:
                    rerouted[topic] = rerouted.get(topic, 0) + 1
                if lane_cb is not None:
                    try:  # place -1: the client's partitioner places it
                        lane_produce(  # type: ignore[misc]  # set with lane_cb
                            target, msg.value(), msg.key(), place, lane_cb, None, last_ts, headers
                        )
                        on_lane, count, end = on_lane + 1, count + 1, offset + 1
                        continue
                    except Exception:
                        pass  # not taken (queue full, or refused): the failover producer tries
                span.pending += 1
                try:
                    if place < 0:
                        produce(target, msg.value(), msg.key(), headers, span, stamp)
                    else:  # a PlacingProducer (see _targets)
                        produce(target, msg.value(), msg.key(), headers, span, stamp, place)  # type: ignore[call-arg]
                except (BufferError, ProduceTimeout):
                    if not self._produce_when_room(target, msg, headers, span, ts_type, ts, place):
                        # Stopping: this and the rest of the batch are not handed, nor committed.
                        span.pending -= 1
                        end = offset  # committing this offset itself is safe (see withdraw)
                        return
                except (KafkaException, ValueError, TypeError) as exc:
                    self._failures.refused(span, msg, target, exc)
                count, end = count + 1, offset + 1
        finally:
            # Also when a consumer error or the producer raises midway: what was handed counts.
            if span is not None:
                close_run(span, last_topic, count, end, on_lane, last_ts, now_ms)

    def _open_span(
        self, batch: list[Message], topic: str, partition: int, offset: int
    ) -> Span | None:
        """The span of a run starting at ``offset`` (None: the partition is not assigned)."""
        tracker = self._ledger.get(topic, partition)
        if tracker is None:
            return None
        span = tracker.open(offset, self._failures.on_outcome)
        span.source = batch
        return span

    def _open_run(
        self, span: Span | None, msg: Message
    ) -> tuple[str, int, bool, str, Headers, Callable[[KafkaError, Message], None] | None]:
        """What a run of messages from one partition shares (the consumer returns a
        partition's messages grouped, so this runs about once a batch per partition): its
        target topic; in preserve mode the target partition (-1: the producer places them)
        and whether that is away from their own number (counted as rerouted); its provenance
        header parts (by format); the lane's delivery callback (None: not on the lane)."""
        topic, partition = msg.topic(), msg.partition()
        assert topic is not None
        assert partition is not None
        targets = self._targets
        target = targets.router.target(topic)
        place = -1
        away = False
        if targets.preserve.get(target):
            place = targets.placement(target, partition)
            away = place < 0
        tag, prefix = "", _NO_PREFIX
        if not self._options.provenance_headers:
            pass
        elif self._provenance.compact:
            tag = self._provenance.compact_prefix(topic, partition)
        else:
            prefix = self._provenance.prefix(topic, partition)
        lane_cb = None
        if span is not None and self._lanes.on:
            if targets.whole(target):
                lane = self._lanes.lane
                assert lane is not None
                lane_cb = lane.follow(span)
            else:
                self._lanes.off(target)
        return target, place, away, tag, prefix, lane_cb

    def _close_run(
        self,
        span: Span,
        topic: str,
        count: int,
        end: int,
        on_lane: int,
        last_ts: int,
        now_ms: float,
    ) -> None:
        """A run of ``span`` is handed: ``count`` messages up to ``end``, ``on_lane`` of them
        on the lane (counted into the span now), the last with timestamp ``last_ts`` (0: none).
        Counters move here, once per run; deliveries are counted from the trackers (see
        ``Reporter.delivered_by_topic``)."""
        counters = self._counters
        consumed = counters.consumed
        consumed[topic] = consumed.get(topic, 0) + count
        if last_ts > 0:
            span.stamp_ms = last_ts
            # Record age (MM2's record-age-ms): the latest consumed record's, per source topic.
            counters.record_age_ms[topic] = now_ms - last_ts
        span.pending += on_lane
        span.lane += on_lane
        span.tracker.close(span, end, count)

    def _produce_when_room(
        self,
        target: str,
        msg: Message,
        headers: Headers | None,
        span: Span,
        ts_type: int,
        ts: int,
        place: int = -1,
    ) -> bool:
        """The producer refused ``msg`` of ``span`` for lack of room: poll until it takes the
        message (True), or stop (False: not handed). A refusal of another kind on a retry (the
        message too large, say) is a failure of the message as at its first attempt (True: its
        outcome is queued)."""
        producer = self._clients.producer
        assert producer is not None
        extra = (place,) if place >= 0 else ()  # a PlacingProducer's partition preference
        failures = self._failures
        while not self._stop_requested and failures.fatal is None:
            producer.poll(0.1)
            failures.handle()
            try:
                produce_consumed(producer, target, msg, headers, span, ts_type, ts, *extra)
                return True
            except (BufferError, ProduceTimeout):
                continue
            except (KafkaException, ValueError, TypeError) as exc:
                failures.refused(span, msg, target, exc)
                return True
        return False

    def _set_paused(self, paused: bool) -> None:
        consumer = self._clients.consumer
        assert consumer is not None
        assignment = consumer.assignment()
        if paused:
            consumer.pause(assignment)
            logger.debug("paused: %d messages uncommitted", self._ledger.window)
        else:
            consumer.resume(assignment)
        self._paused = paused

    def _rewind_paused(self, msg: Message) -> None:
        """A message arrived while paused (a partition assigned since): give it back."""
        if msg.error() is not None:
            self._consumer_error(msg.error(), msg.topic())
            return
        topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
        assert topic is not None
        assert partition is not None
        assert offset is not None
        tp = TopicPartition(topic, partition, offset)
        consumer = self._clients.consumer
        assert consumer is not None
        consumer.pause([TopicPartition(topic, partition)])
        consumer.seek(tp)

    def _consumer_error(self, err: KafkaError | None, topic: str | None = None) -> None:
        """An error the consumer returned instead of a message (see ``consumer_error``)."""
        consumer_error(err, topic, self._options.group, self._targets.subscribed)

    def _shutdown(self, *, failed: bool) -> None:
        consumer, producer = self._clients.consumer, self._clients.producer
        assert consumer is not None
        self._state = "draining"
        if self._paused:
            self._paused = False  # the consumer is closed below; no resume needed
        closed = False
        try:
            if producer is not None:
                deadline = self._clock() + self._options.drain_timeout_s
                while self._ledger.in_flight and self._clock() < deadline and not self._hurry:
                    self._lanes.serve()
                    self._failures.handle()
                self._lanes.give_up()
                if self._ledger.in_flight:
                    # Whatever is not delivered by now is handed back (uncommitted); what comes
                    # back tells which messages of each unfinished span were delivered.
                    closed = True
                    undelivered = producer.close(0)
                    # close() serves the last delivery reports: a final failure among them
                    # stops the commit as one during the run would.
                    self._failures.handle(producer_closed=True)
                    self._failures.handed_back(self._ledger, undelivered)
            self._committer.commit(None, reason="shutdown")
        finally:
            self._clients.closing = True
            try:
                # Before the consumer's close commits (its revocation): what the lane still
                # holds when the drain above was cut short is given up and handed back first.
                self._lanes.close()
            finally:
                try:
                    consumer.close()
                finally:
                    if producer is not None and not closed:
                        self._failures.handed_back(self._ledger, producer.close(0))
        self._state = "failed" if failed or self._failures.fatal is not None else "stopped"
        self._reporter.unregister()
