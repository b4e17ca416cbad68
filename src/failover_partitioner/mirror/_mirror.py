"""The mirror loop: consume from the source, produce through the failover producer, commit.

Theory of operation
-------------------
One thread does everything, so every piece of state has one writer:

* ``consume`` hands each message to the producer and records its offset in the partition's
  :class:`~._commits.PartitionTracker`. Delivery callbacks run inside ``producer.poll`` on the
  same thread; they only update trackers (delivered counts derive from them) and queue
  failures. Nothing blocking (poll, flush, produce, commit) ever runs inside a delivery
  callback: librdkafka would re-enter.
* While every partition of a target topic is usable, messages take the fast lane instead
  (``_lane``): a second client that reports failures only; its deliveries are counted when it
  holds nothing any more (settled), before anything needs them, and its failures are sent
  again through the failover producer.
* Commits store, per partition, the first offset not finally delivered (``_commits``), so a
  crash at any moment re-mirrors at most the uncommitted window and loses nothing.
* The window (messages consumed and not committed) is bounded by ``max_in_flight``: the loop
  asks the consumer for no more than the room left and pauses the assignment when there is none,
  still calling ``consume`` so the group does not evict it (``max.poll.interval.ms``).
* Rebalance callbacks run inside ``consume``: a revoked partition's in-flight messages are
  finished (or, past ``drain_timeout_s``, abandoned) and its delivered prefix committed before
  the partition goes to another member, as MirrorMaker does since KAFKA-4521.
* Before a source topic is consumed, and at each topic refresh, its target topic is created,
  grown and configured like it (``_topics``), and its placement decided once (``preserve``:
  source partition p to target p while usable; see ``_decide_placement``).
* Each commit may record an offset sync (``_offsets``): the next offset to hand per source
  partition, then the target's ends, read with nothing handed in between.
* A message that finally fails stops the mirror: the other in-flight messages are finished,
  every partition is committed up to (not past) its first undelivered message, and ``run``
  raises :class:`MessageFailedError`. With a dead-letter topic the message goes there instead.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from confluent_kafka import (
    TIMESTAMP_NOT_AVAILABLE,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from prometheus_client.registry import CollectorRegistry

from failover_partitioner._config import client_settings
from failover_partitioner._message import DeliveryReport
from failover_partitioner.errors import ConfigError, FailoverError, ProduceTimeout, classify
from failover_partitioner.health import TopicView

from ._commits import CommitLedger, Span
from ._config import MirrorOptions
from ._errors import MessageFailedError, MirrorConfigError, MirrorError
from ._lane import FastLane, LaneFailure, lane_config
from ._offsets import OffsetSync
from ._status import MetricsSnapshot, MirrorCollector, MirrorStatus, PartitionStatus
from ._topics import (
    EXCLUDED_CONFIGS,
    PendingEnds,
    TopicSync,
    TopicSyncError,
    admin_config,
    exclusion_pattern,
)

__all__ = [
    "HEADER_SOURCE",
    "HEADER_SOURCE_OFFSET",
    "HEADER_SOURCE_PARTITION",
    "HEADER_SOURCE_TOPIC",
    "ConsumerLike",
    "Mirror",
    "ProducerLike",
]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

HEADER_SOURCE = "mirror.source"
HEADER_SOURCE_TOPIC = "mirror.source.topic"
HEADER_SOURCE_PARTITION = "mirror.source.partition"
HEADER_SOURCE_OFFSET = "mirror.source.offset"
HEADER_ERROR = "mirror.error"

Headers = list[tuple[str, str | bytes | None]]
DeliveryCallback = Callable[[Any, DeliveryReport], None]
RebalanceCallback = Callable[[Any, list[TopicPartition]], None]


class ConsumerLike(Protocol):
    """The part of ``confluent_kafka.Consumer`` the mirror uses."""

    def subscribe(
        self,
        topics: list[str],
        on_assign: RebalanceCallback | None = ...,
        on_revoke: RebalanceCallback | None = ...,
        on_lost: RebalanceCallback | None = ...,
    ) -> None: ...
    def unsubscribe(self) -> None: ...
    def consume(self, num_messages: int = ..., timeout: float = ...) -> list[Message]: ...
    def assignment(self) -> list[TopicPartition]: ...
    def pause(self, partitions: list[TopicPartition]) -> None: ...
    def resume(self, partitions: list[TopicPartition]) -> None: ...
    def seek(self, partition: TopicPartition) -> None: ...
    def commit(
        self, *, offsets: list[TopicPartition], asynchronous: Literal[False]
    ) -> list[TopicPartition]: ...
    def committed(
        self, partitions: list[TopicPartition], timeout: float = ...
    ) -> list[TopicPartition]: ...
    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float = ..., cached: bool = ...
    ) -> tuple[int, int]: ...
    def list_topics(self, topic: str | None = ..., timeout: float = ...) -> Any: ...
    def close(self) -> None: ...


class ProducerLike(Protocol):
    """The part of :class:`~failover_partitioner.FailoverProducer` the mirror uses.

    ``on_delivery(err, report)`` fires exactly once per message with its final outcome;
    ``produce`` may raise ``BufferError`` or :class:`~failover_partitioner.ProduceTimeout`
    when it has no room, without accepting the message.
    """

    def produce(
        self,
        topic: str,
        value: bytes | str | None = ...,
        key: bytes | str | None = ...,
        headers: Any = ...,
        on_delivery: DeliveryCallback | None = ...,
        timestamp: int | None = ...,
    ) -> None: ...
    def poll(self, timeout: float = ...) -> int: ...
    def close(self, timeout: float | None = ...) -> Sequence[object]: ...


@runtime_checkable
class LaneProducer(ProducerLike, Protocol):
    """What the fast lane needs of the producer besides (see ``_lane.py``): the failover
    producer's view of a topic's health, and a way to tell it of a failure seen elsewhere."""

    def whole(self, topic: str) -> bool: ...
    def health(self, topic: str, timeout: float | None = ...) -> object: ...
    def report_failure(self, topic: str, partition: int, err: KafkaError) -> None: ...
    def flush(self, timeout: float | None = ...) -> int: ...


@runtime_checkable
class PlacingProducer(ProducerLike, Protocol):
    """What ``--partitioning preserve`` needs of the producer: whether a partition is usable
    now, and a preferred partition for a message's first attempt (the failover producer's)."""

    def usable(self, topic: str, partition: int) -> bool: ...
    def health(self, topic: str, timeout: float | None = ...) -> TopicView: ...
    def produce(
        self,
        topic: str,
        value: bytes | str | None = ...,
        key: bytes | str | None = ...,
        headers: Any = ...,
        on_delivery: DeliveryCallback | None = ...,
        timestamp: int | None = ...,
        partition: int | None = ...,
    ) -> None: ...


ConsumerFactory = Callable[[dict[str, str]], ConsumerLike]
ProducerFactory = Callable[[dict[str, str]], ProducerLike]
LaneFactory = Callable[[dict[str, Any]], Any]
AdminFactory = Callable[[dict[str, Any]], Any]

# Answers to the topic sync's admin requests that trying again will not change.
_REFUSED = frozenset(
    {
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.SASL_AUTHENTICATION_FAILED,
    }
)

# How long a shutdown or revocation waits for the target's high watermarks for its last
# offset sync (skipped when they do not come: translation then reads a little more).
_FINAL_SYNC_WAIT_S = 2.0

# While a target topic is not whole, the fast lane is off; this often it looks again.
_LANE_RETRY_S = 1.0


@dataclass(frozen=True, slots=True, kw_only=True)
class _Failure:
    span: Span
    source: Message
    target_topic: str
    error: str
    dead_letter_attempt: bool = False


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
        self._router = options.router()
        self._registry = metrics_registry
        self._consumer_factory = consumer_factory or _default_consumer
        self._producer_factory = producer_factory or partial(
            _default_producer, max_in_flight=options.max_in_flight, registry=metrics_registry
        )
        if lane_factory is None and producer_factory is None:
            lane_factory = _default_lane
        if admin_factory is None and producer_factory is None and consumer_factory is None:
            admin_factory = _default_admin
        self._lane_factory = lane_factory if options.fast_lane else None
        self._admin_factory = admin_factory
        self._topic_sync: TopicSync | None = None
        self._next_config_sync = 0.0
        # Source topic -> partition count, as the last successful topic sync saw them.
        self._synced_shape: dict[str, int] = {}
        # Target topic -> True while its messages keep their source partition number.
        self._preserve: dict[str, bool] = {}
        self._short_warned: set[str] = set()
        self._refresh_at: dict[str, float] = {}
        # Offset syncs (see _offsets): the next offset last recorded per source partition.
        self._synced: dict[tuple[str, int], int] = {}
        self._next_offset_sync = 0.0
        # The target's high watermarks, asked at one sync time and used at the next (or at a
        # shutdown's, waited for): the commit path never waits on the target for them.
        self._pending_ends: PendingEnds | None = None
        # Off when the target refused the offset-syncs topic (warned once at start).
        self._offset_syncs_on = options.offset_syncs_topic is not None
        self._lane: FastLane | None = None
        # The lane takes messages only while on: off from the moment a target topic is not
        # whole until every target topic is again and the failover producer has nothing out.
        self._lane_on = False
        self._lane_retry_at = 0.0
        self._targets: set[str] = set()
        self._clock = clock
        # Wall-clock time only to compare with record timestamps (latency and age).
        self._wall_clock = wall_clock
        self._ledger = CommitLedger(lambda: wall_clock() * 1000.0)
        self._record_age_ms: dict[str, float] = {}
        self._failures: deque[_Failure] = deque()
        # Per span with failures: the offsets already matched to a failure report.
        self._claimed: dict[Span, set[int]] = {}
        self._fatal: _Failure | None = None
        self._stop_requested = False
        self._hurry = False
        self._closing = False
        self._started = False
        self._state = "starting"
        self._paused = False
        self._subscribed: tuple[str, ...] | None = None
        self._consumer: ConsumerLike | None = None
        self._producer: ProducerLike | None = None
        self._provenance_prefixes: dict[tuple[str, int], Headers] = {}
        self._compact_prefixes: dict[tuple[str, int], str] = {}
        # Counters: plain ints and dicts on the hot path, published to metrics now and then.
        self._consumed: dict[str, int] = {}
        self._rerouted: dict[str, int] = {}
        self._possible_duplicates: dict[str, int] = {}
        self._dead_lettered: dict[str, int] = {}
        self._failed: dict[str, int] = {}
        self._commit_every = max(1, options.max_in_flight // 4)
        self._commits = 0
        self._commit_failures = 0
        self._started_at = clock()
        self._rate_mark = (self._started_at, 0)
        self._collector = MirrorCollector()
        if metrics_registry is not None:
            metrics_registry.register(self._collector)

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
        self._consumer = _build("source consumer", self._consumer_factory, opts.consumer_config)
        try:
            self._producer = _build("target producer", self._producer_factory, opts.producer_config)
            self._start_lane()
            self._start_topic_sync()
        except BaseException:
            self._consumer.close()
            if self._producer is not None:
                self._producer.close(0)
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
        self._shutdown(failed=self._fatal is not None)
        if self._fatal is not None:
            raise self._fatal_error(self._fatal)
        status = self.status()
        if on_status is not None and opts.status_interval_s > 0:
            on_status(status)
        return status

    def status(self) -> MirrorStatus:
        """The current status (call from the thread running ``run``, e.g. in ``on_status``)."""
        now = self._clock()
        mark_t, mark_delivered = self._rate_mark
        delivered = sum(self._delivered_by_topic().values())
        rate = (delivered - mark_delivered) / (now - mark_t) if now > mark_t else 0.0
        partitions = self._partition_statuses()
        # A partial sum would read as "caught up" too early: unknown if any partition is.
        lags = [p.lag for p in partitions]
        known = [lag for lag in lags if lag is not None]
        state = "paused" if self._paused and self._state == "running" else self._state
        return MirrorStatus(
            state=state,
            elapsed_s=now - self._started_at,
            consumed=sum(self._consumed.values()),
            delivered=delivered,
            rerouted=sum(self._rerouted.values()),
            possible_duplicates=sum(self._possible_duplicates.values()),
            dead_lettered=sum(self._dead_lettered.values()),
            failed=sum(self._failed.values()),
            in_flight=self._ledger.in_flight,
            uncommitted=self._ledger.window,
            lag=sum(known) if known and len(known) == len(lags) else None,
            delivered_per_s=rate,
            commits=self._commits,
            partitions=partitions,
            replication_latency_ms=tuple(sorted(self._ledger.latency_ms.items())),
            record_age_ms=tuple(sorted(self._record_age_ms.items())),
        )

    def _delivered_by_topic(self) -> dict[str, int]:
        """Delivered messages per source topic, derived rather than counted per delivery: what
        was consumed and is neither in flight, abandoned, failed nor dead-lettered."""
        unfinished = self._ledger.unfinished_by_topic()
        failed, dead = self._failed, self._dead_lettered
        return {
            topic: n - unfinished.get(topic, 0) - failed.get(topic, 0) - dead.get(topic, 0)
            for topic, n in self._consumed.items()
        }

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
        while not self._stop_requested and self._fatal is None:
            now = clock()
            if now >= next_refresh:
                self._refresh_topics()
                # Until some topic matches, look again soon.
                refresh_s = opts.topic_refresh_interval_s
                next_refresh = now + (refresh_s if self._subscribed else min(1.0, refresh_s))
            self._step()
            now = clock()
            if now >= next_commit:
                self._settle_lane()
                self._commit(None, reason="periodic")
                next_commit = now + opts.commit_interval_s
            if now >= next_publish:
                self._publish()
                next_publish = now + 1.0
            if now >= next_status and on_status is not None:
                status = self.status()
                on_status(status)
                self._rate_mark = (now, status.delivered)
                next_status = now + opts.status_interval_s

    def _step(self) -> None:
        consumer, producer = self._consumer, self._producer
        assert consumer is not None
        assert producer is not None
        producer.poll(0)
        if self._failures:
            self._handle_failures()
            if self._fatal is not None:
                return
        opts = self._options
        window, in_flight = self._ledger.counts()
        lane = self._lane
        if lane is not None:
            if lane.spans and opts.max_in_flight - window < opts.poll_batch:
                # The next batch would not fit: learn the lane's deliveries (until then its
                # messages count as in flight), as a loop that commits after flush() does.
                self._settle_lane()
                window, in_flight = self._ledger.counts()
            elif not self._lane_on and self._clock() >= self._lane_retry_at:
                self._lane_try_on()
        if window - in_flight >= self._commit_every:
            # Delivered, uncommitted messages fill a quarter of the window: a commit frees it
            # (no round trip when their prefix is still blocked by an in-flight message).
            self._commit(None, reason="window")
            window, in_flight = self._ledger.counts()
        room = opts.max_in_flight - window
        if self._paused and room >= opts.max_in_flight // 4 + 1:
            self._set_paused(False)
        elif not self._paused and room <= 0:
            self._set_paused(True)
        if self._paused or self._subscribed is None:
            # Still call consume: it serves rebalance callbacks and keeps the group membership.
            for msg in consumer.consume(1, 0.05 if self._paused else 0.2):
                self._rewind_paused(msg)
            if self._paused:
                producer.poll(0.02)
            return
        timeout = 0.05 if in_flight else 0.2
        batch = consumer.consume(min(room, opts.poll_batch), timeout)
        if batch:
            self._hand_batch(batch)
        elif window > in_flight or (lane is not None and lane.spans):
            # Caught up with the source: commit what is delivered now rather than at the next
            # interval (a restart then repeats nothing; no round trip if nothing advanced).
            self._settle_lane()
            producer.poll(0)
            self._commit(None, reason="idle")

    def _hand_batch(self, batch: list[Message]) -> None:
        producer = self._producer
        assert producer is not None
        # The hot path: locals only, and per-partition values looked up once per run of
        # messages from the same partition (the consumer returns them grouped). Each run is a
        # Span: one delivery callback shared by its messages, which the failover producer
        # counts down without a report per message. Counters move once per run; deliveries
        # are counted from the trackers (see _delivered_by_topic).
        produce = producer.produce
        lane = self._lane
        lane_produce = lane.produce if lane is not None else None
        lane_cb: Callable[[KafkaError, Message], None] | None = None
        get_tracker = self._ledger.get
        provenance = self._options.provenance_headers
        compact = self._options.provenance_format == "compact"
        on_outcome = self._on_outcome
        consumed = self._consumed
        last_topic = ""
        last_partition = -1
        span: Span | None = None
        count = 0
        end = 0
        target = ""
        prefix: Headers = []
        tag = ""
        source_header = HEADER_SOURCE
        no_timestamp = TIMESTAMP_NOT_AVAILABLE
        # Messages of the open span sent on the lane, counted into it when it closes.
        on_lane = 0
        # Preserve mode: the target partition of the open span's messages (-1: the producer
        # places them), and whether that is away from their own number (counted as rerouted).
        preserving = self._preserve
        place = -1
        away = False
        rerouted = self._rerouted
        # Record age (MM2's record-age-ms): the latest consumed record's, per source topic.
        ages = self._record_age_ms
        now_ms = self._wall_clock() * 1000.0
        last_ts = 0
        try:
            for msg in batch:
                err = msg.error()
                if err is not None:
                    self._consumer_error(err)
                    continue
                topic = msg.topic()
                partition = msg.partition()
                offset = msg.offset()
                assert topic is not None
                assert partition is not None
                assert offset is not None
                if partition != last_partition or topic != last_topic:
                    if span is not None:
                        consumed[last_topic] = consumed.get(last_topic, 0) + count
                        if last_ts > 0:
                            span.stamp_ms = last_ts
                            ages[last_topic] = now_ms - last_ts
                        span.pending += on_lane
                        span.lane += on_lane
                        on_lane = 0
                        span.tracker.close(span, end, count)
                        span = None
                    last_topic, last_partition = topic, partition
                    tracker = get_tracker(topic, partition)
                    if tracker is not None:
                        span = tracker.open(offset, on_outcome)
                        span.source = batch
                        count = 0
                    target = self._router.target(topic)
                    place = -1
                    away = False
                    if preserving.get(target):
                        place = self._placement(target, partition)
                        away = place < 0
                    if not provenance:
                        pass
                    elif compact:
                        tag = self._compact_prefix(topic, partition)
                    else:
                        prefix = self._provenance_prefix(topic, partition)
                    lane_cb = None
                    if span is not None and self._lane_on:
                        if self._whole(target):
                            assert lane is not None
                            lane_cb = lane.follow(span)
                        else:
                            self._lane_off(target)
                if span is None:
                    continue  # revoked while the batch was out; the new owner reads it again
                # A consumed message's headers are always a list of pairs, never the dict form.
                headers: Headers | None = msg.headers()  # type: ignore[assignment]
                if not provenance:
                    pass
                elif compact:
                    # One new list per message. The consumed message's list is left as it is: the
                    # client may hand the same list out again (failure reports read it).
                    # A str value: the client writes it as UTF-8, and an f-string is the cheapest
                    # way to make it (bytes formatting costs about twice as much).
                    if headers:
                        headers = [*headers, (source_header, f"{tag}{offset}")]
                    else:
                        headers = [(source_header, f"{tag}{offset}")]
                else:
                    if headers:
                        headers = [*headers, *prefix, (HEADER_SOURCE_OFFSET, b"%d" % offset)]
                    else:
                        headers = [*prefix, (HEADER_SOURCE_OFFSET, b"%d" % offset)]
                ts_type, ts = msg.timestamp()
                last_ts = ts if ts_type != no_timestamp else 0
                if away:
                    rerouted[topic] = rerouted.get(topic, 0) + 1
                if lane_cb is not None:
                    try:
                        lane_produce(  # type: ignore[misc]  # set with lane_cb
                            target,
                            msg.value(),
                            msg.key(),
                            place,  # -1: the client's partitioner places it
                            lane_cb,
                            None,
                            ts if ts_type != no_timestamp else 0,
                            headers,
                        )
                    except Exception:
                        pass  # not taken (queue full, or refused): the failover producer tries
                    else:
                        on_lane += 1
                        count += 1
                        end = offset + 1
                        continue
                span.pending += 1
                try:
                    if place < 0:
                        produce(
                            target,
                            msg.value(),
                            msg.key(),
                            headers,
                            span,
                            ts if ts_type != no_timestamp else None,
                        )
                    else:
                        produce(  # type: ignore[call-arg]  # a PlacingProducer (see _placement)
                            target,
                            msg.value(),
                            msg.key(),
                            headers,
                            span,
                            ts if ts_type != no_timestamp else None,
                            place,
                        )
                except (BufferError, ProduceTimeout):
                    if not self._produce_when_room(target, msg, headers, span, ts_type, ts, place):
                        # Stopping: not accepted, and the rest of the batch is not handed, nor
                        # committed. Committing this offset itself is safe (see withdraw).
                        span.pending -= 1
                        end = offset
                        return
                except (KafkaException, ValueError, TypeError) as exc:
                    self._failures.append(
                        _Failure(span=span, source=msg, target_topic=target, error=str(exc))
                    )
                count += 1
                end = offset + 1
        finally:
            # Also when a consumer error or the producer raises midway: what was handed counts.
            if span is not None:
                consumed[last_topic] = consumed.get(last_topic, 0) + count
                if last_ts > 0:
                    span.stamp_ms = last_ts
                    ages[last_topic] = now_ms - last_ts
                span.pending += on_lane
                span.lane += on_lane
                span.tracker.close(span, end, count)

    def _produce_when_room(
        self,
        target: str,
        msg: Message,
        headers: Headers | None,
        callback: DeliveryCallback | Span,
        ts_type: int,
        ts: int,
        place: int = -1,
    ) -> bool:
        """The producer refused for lack of room: poll until it takes the message, or stop."""
        producer = self._producer
        assert producer is not None
        extra = (place,) if place >= 0 else ()  # a PlacingProducer's partition preference
        while not self._stop_requested and self._fatal is None:
            producer.poll(0.1)
            self._handle_failures()
            try:
                producer.produce(
                    target,
                    msg.value(),
                    msg.key(),
                    headers,
                    callback,
                    ts if ts_type != TIMESTAMP_NOT_AVAILABLE else None,
                    *extra,
                )
                return True
            except (BufferError, ProduceTimeout):
                continue
        return False

    # -- target topics and placement (see _topics.py) ---------------------------------------

    def _start_topic_sync(self) -> None:
        opts = self._options
        if opts.partitioning == "preserve" and not isinstance(self._producer, PlacingProducer):
            raise MirrorConfigError(
                "--partitioning preserve needs the failover producer (a producer with usable() "
                "and a partition preference); this Mirror was given another producer"
            )
        factory = self._admin_factory
        if factory is None:
            return
        target_conf = client_settings(opts.producer_config).client_conf
        self._topic_sync = TopicSync(
            _build("source admin client", factory, admin_config(opts.consumer_config)),
            _build("target admin client", factory, admin_config(target_conf)),
            manage=opts.sync_topics,
            replication_factor=opts.topic_replication_factor,
            extra_configs=opts.topic_configs,
            excluded=exclusion_pattern((*EXCLUDED_CONFIGS, *opts.config_exclude)),
        )
        if opts.offset_syncs_topic is not None:
            # One partition, compacted, as MirrorMaker 2's offset-syncs topic.
            try:
                self._topic_sync.ensure(
                    opts.offset_syncs_topic, partitions=1, configs={"cleanup.policy": "compact"}
                )
            except TopicSyncError as exc:
                cause = exc.__cause__
                err = cause.args[0] if isinstance(cause, KafkaException) and cause.args else None
                if not isinstance(err, KafkaError) or err.code() not in _REFUSED:
                    raise
                # As MirrorMaker 2: syncs only help translation, so a principal without the
                # right to make their topic mirrors without them (told once, here).
                self._offset_syncs_on = False
                logger.warning(
                    "offset syncs are off: the target refused to create topic %r (%s). "
                    "Mirroring goes on; 'failover-mirror translate' then reads each target "
                    "partition from its start. Create the topic (one partition, "
                    "cleanup.policy=compact) or grant CREATE on it, or pass --no-offset-syncs",
                    opts.offset_syncs_topic,
                    _describe(err),
                )

    def _sync_topics(self, topics: Sequence[str], source_md: Any) -> bool:
        """Bring the target topics of ``topics`` in line with their sources (create, grow, and
        every ``config_sync_interval_s`` configs), then decide each one's placement. False
        when a cluster could not be read: the caller keeps its subscription as it is."""
        sync = self._topic_sync
        now = self._clock()
        configs = now >= self._next_config_sync
        # What the source looks like (topics and partition counts): while it stays as the last
        # sync saw it and configs are not due, there is nothing to do, and the loop asks
        # neither cluster anything (a request to a hung broker would hold it).
        shape = (
            {t: len(md.partitions) for t in topics if (md := source_md.topics.get(t))}
            if sync is not None
            else {}
        )
        if sync is not None and topics and (configs or shape != self._synced_shape):
            try:
                sync.sync(
                    [(t, self._router.target(t)) for t in topics],
                    configs=configs,
                    source_topics=source_md.topics,
                )
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if isinstance(err, KafkaError) and err.code() in _REFUSED:
                    raise TopicSyncError(
                        f"cannot read or change topics to keep the target in step with the "
                        f"source: {_describe(err)}. The source principal needs DESCRIBE_CONFIGS "
                        "on the mirrored topics, the target's CREATE, ALTER and DESCRIBE_CONFIGS; "
                        "or pass --no-sync-topics and manage target topics yourself"
                    ) from exc
                logger.warning(
                    "cannot sync target topics (%s); keeping the current subscription", exc
                )
                return False
            if configs:
                self._next_config_sync = now + self._options.config_sync_interval_s
            self._synced_shape = shape
            for target in sync.changed:
                self._refresh_target(target)
        for topic in topics:
            self._decide_placement(topic, source_md.topics.get(topic))
        return True

    def _refresh_target(self, target: str) -> None:
        """A target topic was created or grew: the producer learns its partitions now, so
        that preserve mode does not route the new partitions' messages elsewhere meanwhile."""
        refresh = getattr(self._producer, "refresh", None)
        if refresh is None or target not in self._targets:
            return  # metadata is fetched when the topic is first produced to
        try:
            refresh(target)
        except (FailoverError, KafkaException) as exc:
            logger.debug("cannot refresh target topic %r now: %s", target, exc)

    def _decide_placement(self, topic: str, source_md: Any) -> None:
        """Whether ``topic``'s messages keep their partition number on the target (one place
        for the rule; see MirrorOptions.partitioning)."""
        mode = self._options.partitioning
        target = self._router.target(topic)
        if mode == "key" or not isinstance(self._producer, PlacingProducer):
            self._preserve[target] = False
            return
        known = self._topic_sync.partitions.get(target) if self._topic_sync else None
        source_partitions = len(source_md.partitions) if source_md is not None else 0
        if known is not None and known < source_partitions:
            detail = (
                f"target topic {target!r} has {known} partitions and its source {topic!r} has "
                f"{source_partitions}"
            )
            remedy = (
                f"add partitions to the target (kafka-topics.sh --alter --topic {target} "
                f"--partitions {source_partitions}), let the mirror do it (without "
                "--no-sync-topics), or pass --partitioning key"
            )
            if mode == "preserve":
                raise TopicSyncError(
                    f"{detail}: --partitioning preserve cannot keep source partitions "
                    f"{known}..{source_partitions - 1} on their numbers, and will not fold them "
                    f"onto others; {remedy}"
                )
            if target not in self._short_warned:
                self._short_warned.add(target)
                logger.warning(
                    "%s: its messages are placed by key, not by source partition; %s",
                    detail,
                    remedy,
                )
            self._preserve[target] = False
            return
        self._preserve[target] = True

    def _placement(self, target: str, partition: int) -> int:
        """The target partition for messages of source ``partition`` now: the same number
        while that partition is usable (preserve mode), else -1 (the producer places them)."""
        if not self._preserve.get(target):
            return -1
        producer: PlacingProducer = self._producer  # type: ignore[assignment]  # see _decide
        if target not in self._targets and isinstance(producer, LaneProducer):
            self._whole(target)  # fetches the topic's metadata once
        elif target not in self._targets:
            self._targets.add(target)
            try:
                producer.health(target)
            except (FailoverError, KafkaException) as exc:
                logger.debug("no metadata for target topic %r yet: %s", target, exc)
        if producer.usable(target, partition):
            return partition
        sync = self._topic_sync
        if sync is not None and partition < sync.partitions.get(target, 0):
            try:
                seen = producer.health(target).num_partitions
            except (FailoverError, KafkaException):
                return -1
            if partition < seen:
                return -1  # a partition the producer knows, and not usable: degraded
            # The target has this partition (the sync made or saw it) but the producer's view
            # predates it: look again, at most every _LANE_RETRY_S, rather than route the new
            # partition's messages elsewhere until the next periodic refresh.
            now = self._clock()
            if now >= self._refresh_at.get(target, 0.0):
                self._refresh_at[target] = now + _LANE_RETRY_S
                self._refresh_target(target)
                if producer.usable(target, partition):
                    return partition
        return -1

    # -- the fast lane (see _lane.py) -------------------------------------------------------

    def _start_lane(self) -> None:
        factory = self._lane_factory
        if factory is None or not isinstance(self._producer, LaneProducer):
            return
        self._lane = FastLane(
            _build("fast lane producer", factory, lane_config(self._options.producer_config)),
            self._clock,
        )
        self._lane_on = True

    def _lane_producer(self) -> LaneProducer:
        producer = self._producer
        assert producer is not None
        return producer  # type: ignore[return-value]  # checked in _start_lane

    def _whole(self, target: str) -> bool:
        """Whether every partition of ``target`` is usable (the lane may take its messages)."""
        producer = self._lane_producer()
        if target not in self._targets:
            self._targets.add(target)  # _lane_try_on looks at every target seen
            if not producer.whole(target):
                # Not produced to yet: fetch its metadata now, so the lane takes it at once.
                try:
                    producer.health(target)
                except (FailoverError, KafkaException) as exc:
                    logger.debug("no metadata for target topic %r yet: %s", target, exc)
                    return False
        return producer.whole(target)

    def _lane_off(self, target: str) -> None:
        """``target`` needs routing around: the lane's messages settle first (so that a key's
        earlier messages land before its later ones take the failover producer), then every
        message takes the failover producer until all target topics are whole again."""
        logger.info(
            "target topic %r has a partition not usable: every message goes through the "
            "failover producer until all target topics are whole again",
            target,
        )
        self._lane_on = False
        self._lane_retry_at = self._clock() + _LANE_RETRY_S
        self._settle_lane()

    def _lane_try_on(self) -> None:
        """Back to the lane once every target topic is whole and the failover producer has
        delivered what it holds (a key's earlier messages land first)."""
        self._lane_retry_at = self._clock() + _LANE_RETRY_S
        producer = self._lane_producer()
        if not all(producer.whole(t) for t in self._targets):
            return
        if producer.flush(_LANE_RETRY_S) == 0:
            self._handle_failures()
            self._lane_on = True
            logger.info("every target topic is whole: the fast lane is on again")

    def _settle_lane(self) -> None:
        """Wait until the lane holds no message, then count its deliveries and send its
        failures again through the failover producer. Bounded by the lane client's
        message.timeout.ms (every message has an outcome by then); a stop request leaves the
        rest to the shutdown."""
        lane = self._lane
        if lane is None or not lane.spans:
            return
        producer = self._producer
        assert producer is not None
        while not lane.settle(1.0, partial(producer.poll, 0)):
            if self._stop_requested:
                return
        self._lane_outcomes(resend=True)

    def _lane_outcomes(self, *, resend: bool) -> None:
        """The lane is settled: every message it took without a failure report was delivered.
        Failures are sent again (``resend``), or handed back (the mirror is stopping)."""
        lane = self._lane
        assert lane is not None
        spans, failed = lane.take()
        by_span: dict[Span, list[LaneFailure]] = {}
        for failure in failed:
            by_span.setdefault(failure[0], []).append(failure)
        for span in spans:
            fails = by_span.get(span, [])
            delivered = span.lane - len(fails)
            span.lane = 0
            if fails:
                self._lane_failed(span, fails, resend=resend)
            span.delivered_many(delivered)

    def _lane_failed(self, span: Span, fails: list[LaneFailure], *, resend: bool) -> None:
        """Send the span's messages the lane failed to deliver again through the failover
        producer, found by key and value (the lane's reports carry no headers). Equal messages
        cannot be told apart: all of them go again (duplicates, never a loss)."""
        tracker = span.tracker
        if tracker.dropped:
            span.delivered_many(len(fails))  # counted back as abandoned
            return
        target = self._router.target(tracker.topic)
        producer = self._lane_producer()
        unsent: dict[tuple[object, object], list[Message]] = {}
        for m in _span_messages(span):
            unsent.setdefault((m.key(), m.value()), []).append(m)
        sent: set[tuple[object, object]] = set()
        handed_back: list[int] = []
        for _, err, report in fails:
            partition = report.partition()
            if resend and partition is not None and partition >= 0:
                producer.report_failure(target, partition, err)
            what = (report.key(), report.value())
            again = unsent.pop(what, None)
            if again is None and what not in sent:
                # No message of the span has this key and value: send all not yet sent again.
                again = [m for ms in unsent.values() for m in ms]
                unsent.clear()
            sent.add(what)
            if not again:
                span.delivered()  # an equal message was sent again for it already
                continue
            if not resend:
                handed_back.extend(m.offset() for m in again)  # type: ignore[misc]
                continue
            span.pending += len(again) - 1  # one takes the failed message's place
            # Copies that may land twice: the others of equal messages, and the failed one if
            # its attempt may have been written.
            twice = len(again) - 1 + classify(err.code(), err.name()).possibly_persisted
            if twice:
                dups = self._possible_duplicates
                dups[tracker.topic] = dups.get(tracker.topic, 0) + twice
            for m in again:
                self._resend(span, m, target)
        if handed_back:
            tracker.handed_back(span, handed_back)

    def _resend(self, span: Span, msg: Message, target: str) -> None:
        """Send ``msg`` of ``span`` again through the failover producer (it failed on the
        lane); its outcome comes to the span as any other."""
        producer = self._producer
        assert producer is not None
        tracker = span.tracker
        headers = self._headers_for(msg, tracker.topic, tracker.partition)
        ts_type, ts = msg.timestamp()
        self._rerouted[tracker.topic] = self._rerouted.get(tracker.topic, 0) + 1
        try:
            producer.produce(
                target,
                msg.value(),
                msg.key(),
                headers,
                span,
                ts if ts_type != TIMESTAMP_NOT_AVAILABLE else None,
            )
        except (BufferError, ProduceTimeout):
            if not self._produce_when_room(target, msg, headers, span, ts_type, ts):
                # Stopping before the producer took it: not delivered, so never committed.
                tracker.handed_back(span, [msg.offset()])  # type: ignore[list-item]
                span.delivered()
        except (KafkaException, ValueError, TypeError) as exc:
            self._failures.append(
                _Failure(span=span, source=msg, target_topic=target, error=str(exc))
            )

    def _headers_for(
        self, msg: Message, topic: str, partition: int, *, provenance: bool = False
    ) -> Headers:
        """A consumed message's headers as the mirror sends them: provenance added if on (or
        if ``provenance``)."""
        headers: Headers = list(msg.headers() or [])  # type: ignore[arg-type]  # list form
        if provenance or self._options.provenance_headers:
            offset = msg.offset()
            assert offset is not None
            headers += self._provenance(topic, partition, offset)
        return headers

    def _provenance_prefix(self, topic: str, partition: int) -> Headers:
        prefix = self._provenance_prefixes.get((topic, partition))
        if prefix is None:
            prefix = [
                (HEADER_SOURCE_TOPIC, topic.encode()),
                (HEADER_SOURCE_PARTITION, b"%d" % partition),
            ]
            self._provenance_prefixes[(topic, partition)] = prefix
        return prefix

    def _compact_prefix(self, topic: str, partition: int) -> str:
        prefix = self._compact_prefixes.get((topic, partition))
        if prefix is None:
            prefix = self._compact_prefixes[(topic, partition)] = f"{topic}/{partition}/"
        return prefix

    def _provenance(self, topic: str, partition: int, offset: int) -> Headers:
        """The provenance headers of the message at ``offset`` of ``topic`` [``partition``]."""
        if self._options.provenance_format == "compact":
            return [(HEADER_SOURCE, f"{self._compact_prefix(topic, partition)}{offset}")]
        return [*self._provenance_prefix(topic, partition), (HEADER_SOURCE_OFFSET, b"%d" % offset)]

    # -- delivery outcomes (inside producer.poll: update state only) ---------------------

    def _on_outcome(self, span: Span, err: KafkaError | None, report: DeliveryReport) -> None:
        """A span's message delivered after a retry, or failed finally (a first-attempt
        delivery only counts the span down: ``Span.delivered``)."""
        tracker = span.tracker
        if tracker.dropped:
            span.delivered()  # counted as an abandoned message back
        elif err is None:
            if report.attempts() > 1:
                self._rerouted[tracker.topic] = self._rerouted.get(tracker.topic, 0) + 1
            span.delivered()
        else:
            self._failures.append(
                _Failure(
                    span=span,
                    source=self._source_of(span, report),
                    target_topic=self._router.target(tracker.topic),
                    error=_describe(err),
                )
            )

    def _source_of(self, span: Span, report: DeliveryReport) -> Message:
        """The consumed message a failure report of ``span`` is about (see ``_match``); each
        message is matched once."""
        if len(self._claimed) > 64:
            # Spans whose messages all have an outcome need no matching any more.
            self._claimed = {s: c for s, c in self._claimed.items() if s.pending}
        claimed = self._claimed.setdefault(span, set())
        found = self._match([span], report.headers(), report.value(), report.key(), claimed)
        if found is not None:
            msg = found[1]
        else:
            # Nothing to tell it by: the earliest unmatched message, so the commit stops there.
            unmatched = [m for m in _span_messages(span) if m.offset() not in claimed]
            msg = unmatched[0] if unmatched else next(_span_messages(span))
        claimed.add(msg.offset())  # type: ignore[arg-type]  # consumed: has one
        return msg

    def _match(
        self,
        spans: Sequence[Span],
        headers: Sequence[tuple[str, Any]] | None,
        value: object,
        key: object,
        claimed: set[int] | frozenset[int] = frozenset(),
    ) -> tuple[Span, Message] | None:
        """The span and consumed message that a message the producer gives back (a failure
        report, or one handed back at close) stands for.

        By the mirror's provenance headers when they are on (the last of each name is the
        mirror's own); else the earliest message of those spans with the same key and value:
        when equal messages could be told apart only by offset, that picks the earliest, so a
        commit stops at or before the one meant, never after it. ``claimed``: offsets already
        matched, skipped."""
        opts = self._options
        wanted = (
            _provenance_of(headers, opts.provenance_format == "compact")
            if opts.provenance_headers
            else None
        )
        same: tuple[Span, Message] | None = None
        for span in spans:
            where = (span.tracker.topic, span.tracker.partition)
            for msg in _span_messages(span):
                offset = msg.offset()
                if offset in claimed:
                    continue
                if wanted is not None and wanted == (*where, offset):
                    return span, msg
                if same is None and msg.value() == value and msg.key() == key:
                    if wanted is None:
                        return span, msg
                    same = (span, msg)
        return same

    def _on_dead_letter(
        self, failure: _Failure, err: KafkaError | None, report: DeliveryReport
    ) -> None:
        span = failure.span
        tracker = span.tracker
        if tracker.dropped:
            span.delivered()  # counted as an abandoned message back
            return
        if err is None:
            topic = tracker.topic
            self._dead_lettered[topic] = self._dead_lettered.get(topic, 0) + 1
            span.delivered()
        else:
            self._failures.append(
                _Failure(
                    span=span,
                    source=failure.source,
                    target_topic=failure.target_topic,
                    error=f"{failure.error}; the dead-letter topic refused it too: "
                    f"{_describe(err)}",
                    dead_letter_attempt=True,
                )
            )

    def _handle_failures(self) -> None:
        """Act on queued failures, outside any delivery callback."""
        dead_letter = self._options.dead_letter_topic
        while self._failures:
            failure = self._failures.popleft()
            span = failure.span
            tracker = span.tracker
            if tracker.dropped:
                # Revoked meanwhile: not committed here, the partition's new owner retries it.
                span.delivered()  # counted as an abandoned message back
                continue
            if dead_letter is not None and not failure.dead_letter_attempt:
                self._send_to_dead_letter(dead_letter, failure)
                continue
            offset = failure.source.offset()
            assert offset is not None
            tracker.failed_in(span, offset)
            span.delivered()  # its outcome: failed, so the span stops commits there
            topic = tracker.topic
            self._failed[topic] = self._failed.get(topic, 0) + 1
            if self._fatal is None:
                self._fatal = failure
                logger.error(
                    "%s[%d]@%d could not be delivered to %r: %s; stopping",
                    topic,
                    tracker.partition,
                    offset,
                    failure.target_topic,
                    failure.error,
                )
            else:
                # Often the same cause (one refused batch fails all its messages): one line
                # for the first, the count in the final error.
                logger.debug(
                    "%s[%d]@%d failed too: %s", topic, tracker.partition, offset, failure.error
                )

    def _send_to_dead_letter(self, topic: str, failure: _Failure) -> None:
        producer = self._producer
        assert producer is not None
        src = failure.source
        offset = src.offset()
        tracker = failure.span.tracker
        # Provenance always: the dead-letter topic is read to find the source message.
        headers = self._headers_for(src, tracker.topic, tracker.partition, provenance=True)
        headers.append((HEADER_ERROR, failure.error.encode()))
        ts_type, ts = src.timestamp()
        try:
            producer.produce(
                topic,
                src.value(),
                src.key(),
                headers,
                partial(self._on_dead_letter, failure),
                ts if ts_type != TIMESTAMP_NOT_AVAILABLE else None,
            )
        except (BufferError, ProduceTimeout, KafkaException, ValueError, TypeError) as exc:
            self._failures.append(
                _Failure(
                    span=failure.span,
                    source=src,
                    target_topic=failure.target_topic,
                    error=f"{failure.error}; the dead-letter topic refused it too: {exc}",
                    dead_letter_attempt=True,
                )
            )
            return
        logger.warning(
            "%s[%d]@%d could not be delivered to %r (%s); sent to dead-letter topic %r",
            failure.span.tracker.topic,
            failure.span.tracker.partition,
            offset,
            failure.target_topic,
            failure.error,
            topic,
        )

    def _fatal_error(self, failure: _Failure) -> MessageFailedError:
        tracker = failure.span.tracker
        offset = failure.source.offset()
        assert offset is not None
        size = len(failure.source.value() or b"") + len(failure.source.key() or b"")
        committed = tracker.committed_offset
        if committed == offset:
            where = (
                f"committed offset {offset} for {tracker.topic}[{tracker.partition}], so a "
                "restart resumes with this message"
            )
        else:
            where = (
                f"the committed offset of {tracker.topic}[{tracker.partition}] stays at "
                f"{committed if committed is not None else 'its previous value'} (not past "
                "this message), so a restart resumes at or before it"
            )
        more = sum(self._failed.values()) - 1
        others = f" {more:,} more messages failed meanwhile." if more > 0 else ""
        return MessageFailedError(
            f"source message {tracker.topic}[{tracker.partition}]@{offset} ({size:,} bytes of "
            f"key and value) could not be delivered to target topic {failure.target_topic!r}: "
            f"{failure.error}.{others} Stopped and {where}. Fix the cause (for a message too "
            "large: raise the target topic's max.message.bytes, and keep the producer's "
            "batch.size below it so that one large message does not fail a whole batch), or "
            "pass --dead-letter-topic to set such messages aside",
            topic=tracker.topic,
            partition=tracker.partition,
            offset=offset,
            target_topic=failure.target_topic,
            error=failure.error,
        )

    # -- consumer side -------------------------------------------------------------------

    def _refresh_topics(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        try:
            metadata = consumer.list_topics(timeout=10)
        except KafkaException as exc:
            logger.warning("cannot list source topics (%s); keeping the current subscription", exc)
            return
        topics = tuple(sorted(t for t in metadata.topics if self._router.selects(t)))
        for topic in topics:
            self._router.target(topic)  # an illegal renamed name fails here, before consuming
        if self._options.source_servers == self._options.target_servers:
            # One cluster: a topic the mirror writes is not mirrored again (copy.t would
            # become copy.copy.t, and so on), as MirrorMaker 2 skips its remote topics.
            written = {self._router.target(t) for t in topics}
            topics = tuple(t for t in topics if t not in written)
        if not self._sync_topics(topics, metadata):
            return
        if topics == (self._subscribed or ()):
            if not topics and self._subscribed is None:
                logger.debug("no source topic matches --include %r yet", self._options.include)
            return
        if topics:
            logger.info("subscribing to %d source topics: %s", len(topics), ", ".join(topics))
            consumer.subscribe(
                list(topics),
                on_assign=self._on_assign,
                on_revoke=self._on_revoke,
                on_lost=self._on_lost,
            )
            self._subscribed = topics
        else:
            logger.warning("no source topic matches any more; unsubscribing")
            consumer.unsubscribe()
            self._subscribed = None

    def _on_assign(self, consumer: object, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self._ledger.assign(tp.topic, tp.partition)
        logger.info("assigned %s", _names(partitions))
        if not partitions:
            return
        # The group's committed offsets: the lag is known at once, and commits that would
        # not move them are skipped.
        assert self._consumer is not None
        try:
            committed = self._consumer.committed(
                [TopicPartition(tp.topic, tp.partition) for tp in partitions], timeout=10
            )
        except KafkaException as exc:
            logger.warning("cannot read the committed offsets of %s: %s", _names(partitions), exc)
            return
        for tp in committed:
            tracker = self._ledger.get(tp.topic, tp.partition)
            if tracker is not None and tp.error is None and tp.offset >= 0:
                tracker.committed(tp.offset)

    def _on_revoke(self, consumer: object, partitions: list[TopicPartition]) -> None:
        tps = [(tp.topic, tp.partition) for tp in partitions]
        if not self._closing:
            self._finish(tps, self._clock() + self._options.drain_timeout_s)
        self._commit(tps, reason="revocation")
        abandoned = 0
        for topic, partition in tps:
            tracker = self._ledger.drop(topic, partition)
            if tracker is not None:
                abandoned += tracker.in_flight
        if abandoned:
            logger.warning(
                "revoked %s with %d messages still in flight; their offsets are not committed, "
                "the next owner mirrors them again",
                _names(partitions),
                abandoned,
            )
        else:
            logger.info("revoked %s", _names(partitions))

    def _on_lost(self, consumer: object, partitions: list[TopicPartition]) -> None:
        # The group moved on without us: committing now would be refused; the next owner
        # re-reads from the group's committed offsets.
        logger.warning("lost %s (session expired); not committing them", _names(partitions))
        for tp in partitions:
            self._ledger.drop(tp.topic, tp.partition)

    def _finish(self, tps: Sequence[tuple[str, int]], deadline: float) -> None:
        """Poll the producer until the given partitions have nothing in flight, or deadline."""
        producer = self._producer
        assert producer is not None
        while self._clock() < deadline and not self._hurry:
            pending = 0
            for topic, partition in tps:
                tracker = self._ledger.get(topic, partition)
                if tracker is not None:
                    pending += tracker.in_flight
            if not pending:
                return
            self._wait_a_little()
            self._handle_failures()

    def _wait_a_little(self) -> None:
        """Serve outcomes for up to 50 ms: the lane's (settling it) and the producer's."""
        producer = self._producer
        assert producer is not None
        lane = self._lane
        if lane is not None and lane.spans:
            if lane.settle(0.05, partial(producer.poll, 0)):
                self._lane_outcomes(resend=True)
            producer.poll(0)
        else:
            producer.poll(0.05)

    def _set_paused(self, paused: bool) -> None:
        consumer = self._consumer
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
            self._consumer_error(msg.error())
            return
        topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
        assert topic is not None
        assert partition is not None
        assert offset is not None
        tp = TopicPartition(topic, partition, offset)
        consumer = self._consumer
        assert consumer is not None
        consumer.pause([TopicPartition(topic, partition)])
        consumer.seek(tp)

    def _consumer_error(self, err: KafkaError | None) -> None:
        if err is None:
            return
        if err.fatal():
            raise MirrorError(f"the source consumer failed: {_describe(err)}")
        if err.code() == KafkaError._PARTITION_EOF:
            return
        logger.warning("source consumer: %s", _describe(err))

    # -- commits -------------------------------------------------------------------------

    def _commit(self, partitions: Sequence[tuple[str, int]] | None, *, reason: str) -> None:
        consumer = self._consumer
        assert consumer is not None
        offsets = self._ledger.to_commit(partitions)
        if not offsets:
            return
        try:
            result = consumer.commit(
                offsets=[TopicPartition(t, p, o) for t, p, o in offsets], asynchronous=False
            )
        except KafkaException as exc:
            # A rebalance in progress refuses commits; the offsets stay uncommitted and are
            # committed on revocation or by the next periodic commit.
            self._commit_failures += 1
            logger.warning("%s commit of %d partitions refused: %s", reason, len(offsets), exc)
            return
        done = []
        for tp in result:
            if tp.error is None:
                done.append((tp.topic, tp.partition, tp.offset))
            else:
                self._commit_failures += 1
                logger.warning(
                    "%s commit of %s[%d] refused: %s", reason, tp.topic, tp.partition, tp.error
                )
        self._ledger.committed(done)
        if done:
            self._commits += 1
            logger.debug("%s commit: %s", reason, done)
            now = self._clock()
            if reason in ("shutdown", "revocation"):
                self._write_offset_syncs(wait_s=_FINAL_SYNC_WAIT_S)
            elif now >= self._next_offset_sync:
                self._next_offset_sync = now + self._options.commit_interval_s
                self._write_offset_syncs(wait_s=0.0)

    def _write_offset_syncs(self, *, wait_s: float) -> None:
        """Record, per source partition, that what is handed from now on lands past target
        positions (see _offsets). Those are high watermarks asked for earlier (at the last
        sync time), so the commit path does not wait on the target: whatever is handed after
        the answer came lands past them. Waits up to ``wait_s`` for an answer (at shutdown
        and revocation, where nothing is handed any more and the last sync matters most)."""
        sync, topic = self._topic_sync, self._options.offset_syncs_topic
        producer = self._producer
        if sync is None or topic is None or producer is None or not self._offset_syncs_on:
            return
        pending = self._pending_ends
        if pending is None:
            pending = self._pending_ends = self._ask_ends(sync)
        if not pending.wait(wait_s):
            return  # asked; written at a later sync time, once answered
        self._pending_ends = self._ask_ends(sync) if wait_s == 0 else None
        try:
            ends = pending.result()
        except KafkaException as exc:
            logger.debug("no offset sync this time: cannot read the target's ends: %s", exc)
            return
        for tracker in self._ledger:
            at = tracker.next_offset
            source, partition = tracker.topic, tracker.partition
            target = self._router.target(source)
            if at is None or self._synced.get((source, partition)) == at or target not in ends:
                continue
            record = OffsetSync(
                source_topic=source,
                source_partition=partition,
                source_offset=at,
                target_topic=target,
                target_offsets=ends[target],
            )
            try:
                producer.produce(topic, record.value(), record.key(), None, _on_sync_delivery)
            except (BufferError, ProduceTimeout, KafkaException) as exc:
                logger.debug("offset sync for %s[%d] not written: %s", source, partition, exc)
                continue
            self._synced[(source, partition)] = at

    def _ask_ends(self, sync: TopicSync) -> PendingEnds:
        return sync.ask_ends({self._router.target(t.topic) for t in self._ledger})

    # -- shutdown ------------------------------------------------------------------------

    def _shutdown(self, *, failed: bool) -> None:
        consumer, producer = self._consumer, self._producer
        assert consumer is not None
        self._state = "draining"
        if self._paused:
            self._paused = False  # the consumer is closed below; no resume needed
        closed = False
        try:
            if producer is not None:
                deadline = self._clock() + self._options.drain_timeout_s
                while self._ledger.in_flight and self._clock() < deadline and not self._hurry:
                    self._wait_a_little()
                    self._handle_failures()
                lane = self._lane
                if lane is not None and lane.spans:
                    # Not settled in time: what the lane still holds is given up and handed
                    # back (not committed); the reports tell which messages those are.
                    lane.purge()
                    self._lane_outcomes(resend=False)
                if self._ledger.in_flight:
                    # Whatever is not delivered by now is handed back (uncommitted); what comes
                    # back tells which messages of each unfinished span were delivered.
                    closed = True
                    self._handed_back(producer.close(0))
            self._commit(None, reason="shutdown")
        finally:
            self._closing = True
            try:
                consumer.close()
            finally:
                if producer is not None and not closed:
                    self._handed_back(producer.close(0))
        self._state = "failed" if failed or self._fatal is not None else "stopped"
        if self._registry is not None:
            # A finished mirror leaves the registry, so the next one (a restart in the same
            # process) can register the same metric names.
            self._registry.unregister(self._collector)

    def _handed_back(self, undelivered: Sequence[Any]) -> None:
        """Mark where each unfinished span's commit stops, from the messages the producer
        returned undelivered (every other message of the span had its outcome)."""
        if not undelivered:
            return
        logger.warning(
            "%d messages were not delivered by shutdown; their offsets are not committed, so "
            "they are mirrored again after a restart",
            len(undelivered),
        )
        spans = [s for t in self._ledger for s in t.unfinished()]
        back: dict[Span, list[int]] = {s: [] for s in spans}
        for m in undelivered:
            found = self._match(
                spans,
                getattr(m, "headers", None),
                getattr(m, "value", None),
                getattr(m, "key", None),
            )
            if found is not None:
                back[found[0]].append(found[1].offset())  # type: ignore[arg-type]
        for span, offsets in back.items():
            if offsets or not span.settled:
                # A span none of whose messages could be told commits up to its first offset
                # (unless the lane's purge told which of its messages were not delivered).
                span.tracker.handed_back(span, offsets if offsets else [span.first])

    # -- reporting -----------------------------------------------------------------------

    def _partition_statuses(self) -> tuple[PartitionStatus, ...]:
        consumer = self._consumer
        out = []
        for tracker in sorted(self._ledger, key=lambda t: (t.topic, t.partition)):
            high: int | None = None
            if consumer is not None and not self._closing:
                try:
                    _, hw = consumer.get_watermark_offsets(
                        TopicPartition(tracker.topic, tracker.partition), cached=True
                    )
                    high = hw if hw >= 0 else None
                except KafkaException:
                    high = None
            base = tracker.committed_offset
            lag = None
            if high is not None and base is not None:
                lag = max(0, high - base)
            out.append(
                PartitionStatus(
                    topic=tracker.topic,
                    partition=tracker.partition,
                    committed_offset=tracker.committed_offset,
                    high_watermark=high,
                    lag=lag,
                    in_flight=tracker.in_flight,
                    failed_offset=tracker.failed_offset,
                )
            )
        return tuple(out)

    def _publish(self) -> None:
        if self._registry is None:
            return
        self._collector.snapshot = MetricsSnapshot(
            consumed=tuple(self._consumed.items()),
            delivered=tuple(self._delivered_by_topic().items()),
            rerouted=tuple(self._rerouted.items()),
            possible_duplicates=tuple(self._possible_duplicates.items()),
            dead_lettered=tuple(self._dead_lettered.items()),
            failed=tuple(self._failed.items()),
            commits=self._commits,
            commit_failures=self._commit_failures,
            in_flight=self._ledger.in_flight,
            uncommitted=self._ledger.window,
            paused=self._paused,
            partitions=self._partition_statuses(),
            replication_latency_ms=tuple(sorted(self._ledger.latency_ms.items())),
            record_age_ms=tuple(sorted(self._record_age_ms.items())),
        )


def _build(what: str, factory: Callable[[dict[str, Any]], _T], conf: Mapping[str, Any]) -> _T:
    """Build a client; a setting it rejects is a configuration error, named as such."""
    try:
        return factory(dict(conf))
    except KafkaException as exc:
        err = exc.args[0] if exc.args else None
        if isinstance(err, KafkaError) and err.code() == KafkaError._INVALID_ARG:
            raise MirrorConfigError(f"{what} config: {err.str()}") from exc
        raise
    except ConfigError as exc:
        raise MirrorConfigError(f"{what} config: {exc}") from exc


def _span_messages(span: Span) -> Iterator[Message]:
    """The consumed messages of ``span``, from the batch it was handed from."""
    tracker = span.tracker
    for msg in span.source or ():
        offset = msg.offset()
        if (
            offset is not None
            and span.first <= offset < span.end
            and msg.error() is None
            and msg.partition() == tracker.partition
            and msg.topic() == tracker.topic
        ):
            yield msg


def _provenance_of(
    headers: Sequence[tuple[str, Any]] | None, compact: bool = True
) -> tuple[str, int, int] | None:
    """(source topic, partition, offset) from the mirror's provenance headers in the given
    format (``mirror.source``, or the three ``mirror.source.*``), if there."""
    found: dict[str, Any] = {}
    for name, value in headers or ():
        found[name] = value  # the last of each: the mirror's own
    try:
        if compact:
            value = found[HEADER_SOURCE]
            text = value.decode() if isinstance(value, bytes) else str(value)
            # A topic name has no "/": the last two fields are the partition and the offset.
            topic, partition, offset = text.rsplit("/", 2)
            return topic, int(partition), int(offset)
        topic = found[HEADER_SOURCE_TOPIC]
        text = topic.decode() if isinstance(topic, bytes) else str(topic)
        return text, int(found[HEADER_SOURCE_PARTITION]), int(found[HEADER_SOURCE_OFFSET])
    except (KeyError, TypeError, ValueError, UnicodeDecodeError):
        return None


def _on_sync_delivery(err: KafkaError | None, report: object) -> None:
    if err is not None:
        # Only a hint for translation (which stays correct without it): logged, not fatal.
        logger.warning("an offset sync was not written: %s", _describe(err))


def _describe(err: KafkaError) -> str:
    return f"{err.name()} ({err.str()})"


def _names(partitions: Sequence[TopicPartition]) -> str:
    if not partitions:
        return "no partitions"
    return ", ".join(f"{tp.topic}[{tp.partition}]" for tp in partitions)


def _default_consumer(conf: dict[str, str]) -> ConsumerLike:
    from confluent_kafka import Consumer

    consumer: ConsumerLike = Consumer(conf)
    return consumer


def _default_admin(conf: dict[str, Any]) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient(conf)


def _default_lane(conf: dict[str, Any]) -> Any:
    from confluent_kafka import Producer

    return Producer(conf)


def _default_producer(
    conf: dict[str, str], *, max_in_flight: int, registry: CollectorRegistry | None
) -> ProducerLike:
    from failover_partitioner.producer import FailoverProducer

    # The mirror's own bound keeps the producer below max_in_flight; the slack covers
    # dead-letter copies and messages of revoked partitions still out.
    producer: ProducerLike = FailoverProducer(
        conf, max_in_flight=max_in_flight + 1024, metrics_registry=registry
    )
    return producer
