"""The fast lane: a second producer client for the common case, every target partition usable.

The failover producer learns each message's outcome from a delivery report: confluent-kafka
builds a ``Message`` and calls into Python once per message, which is most of what a mirror
spends per message beyond consuming and producing. Nothing needs routing around while every
partition of the target topic is usable, so the mirror then sends on this client instead:

* it reports failures only (``delivery.report.only.error``), through one callback per span;
* librdkafka's partitioner places the messages, murmur2 for keys (``partitioner=
  murmur2_random``), as the failover producer itself lets it while a topic is whole;
* deliveries are learned in bulk: once the client holds no message, every message sent on it
  without a failure report was delivered (:meth:`FastLane.settle`). The mirror settles before
  it needs the outcomes (its window is full, a commit is due, a partition is revoked, it stops),
  which is what a consume-produce loop that commits after ``flush()`` does;
* at shutdown what the lane still holds after the drain is purged, handed back uncommitted and
  reported, and the client is closed (:meth:`LaneControl.close`).

A failure comes back with the message's topic, partition, key and value (not its headers): the
mirror finds the consumed message by key and value within the span, and sends it again through
the failover producer, which routes it around the partition that refused it.

:class:`FastLane` is the plumbing; :class:`LaneControl` decides when the lane is on and what
its outcomes mean for the mirror. No threads: the mirror calls both from its own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message

from failover_partitioner._config import client_settings, companion_conf
from failover_partitioner.confluent._shared import PURGE_FOR_S, purge_until_empty
from failover_partitioner.errors import ProduceTimeout, classify

from ._clients import (
    Clients,
    LaneProducer,
    build,
    describe,
    produce_consumed,
)
from ._commits import Span
from ._config import MirrorOptions
from ._failures import Failures
from ._provenance import Headers, Provenance, span_messages
from ._report import Counters
from ._targets import LANE_RETRY_S, Targets

__all__ = ["FastLane", "LaneControl", "LaneFailure", "WhenRoom", "lane_config"]

logger = logging.getLogger(__name__)

LaneFailure = tuple[Span, KafkaError, Message]

# Send a message the producer had no room for once it has (target, message, headers, its
# span, timestamp type, timestamp, preferred partition or -1); True: handed (or refused, its
# failure queued), False: the mirror stops first.
WhenRoom = Callable[[str, Message, "Headers | None", Span, int, int, int], bool]


# The longest the mirror may wait for the lane to settle: a message the lane holds longer is
# failed by the client and sent again through the failover producer.
LANE_TIMEOUT_MS = 30_000


def lane_config(producer_config: Mapping[str, str]) -> dict[str, Any]:
    """The lane client's settings: the failover producer's client settings (its defaults for
    timeouts and retries included), failures reported only, keys placed by murmur2, and a
    delivery timeout of at most ``LANE_TIMEOUT_MS``."""
    conf = companion_conf(client_settings(producer_config).client_conf, "lane")
    conf["delivery.report.only.error"] = True
    conf["partitioner"] = "murmur2_random"
    timeout_ms = LANE_TIMEOUT_MS
    for alias in ("message.timeout.ms", "delivery.timeout.ms"):
        given = conf.pop(alias, None)
        if given is not None:
            try:
                ms = int(float(str(given)))
            except ValueError:
                continue  # the failover producer's client refuses it, naming it
            if 0 < ms < timeout_ms:
                timeout_ms = ms
    conf["message.timeout.ms"] = timeout_ms
    return conf


class FastLane:
    """Messages sent on the lane client since the last settle, by span, and their failures.

    ``produce`` is the client's own (confluent-kafka's positional order: topic, value, key,
    partition, on_delivery, callback, timestamp, headers); the callback for a span's messages
    comes from :meth:`follow`. Each span counts its lane messages in ``span.lane``.
    """

    __slots__ = ("_client", "_clock", "closed", "failed", "produce", "spans")

    def __init__(self, client: Any, clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self._clock = clock
        self.produce: Callable[..., None] = client.produce
        self.spans: list[Span] = []
        self.failed: list[LaneFailure] = []
        self.closed = False

    def follow(self, span: Span) -> Callable[[KafkaError, Message], None]:
        """The delivery callback for ``span``'s messages on the lane (failures only)."""
        self.spans.append(span)
        return partial(self._failed_one, span)

    def _failed_one(self, span: Span, err: KafkaError, msg: Message) -> None:
        self.failed.append((span, err, msg))

    def settle(self, timeout: float, between: Callable[[], object] | None = None) -> bool:
        """Serve the client's reports until it holds nothing (True), or ``timeout`` passes
        (False). ``between`` runs every 50 ms meanwhile (the mirror polls its producer)."""
        deadline = self._clock() + timeout
        while True:
            left = max(0.0, deadline - self._clock())
            if self._client.flush(min(0.05, left)) == 0:
                return True
            if between is not None:
                between()
            if left <= 0:
                return False

    def take(self) -> tuple[list[Span], list[LaneFailure]]:
        """The spans sent since the last take and the failures reported for them; call only
        once the lane is settled, when every other message of those spans is delivered."""
        spans, failed = self.spans, self.failed
        self.spans, self.failed = [], []
        return spans, failed

    def take_back(self) -> None:
        """Take back the messages the client has not sent yet: each gets a failure report
        (``_PURGE_QUEUE``, never written) when the lane is next settled; those in flight keep
        theirs."""
        self._client.purge(in_queue=True, in_flight=False, blocking=True)

    def purge(self, timeout: float) -> bool:
        """Give up on what the client holds: every such message gets a failure report
        (``_PURGE_QUEUE``, or ``_PURGE_INFLIGHT`` for one that may still have been written),
        served here. True once the client holds nothing; False if it still does after
        ``timeout``: the messages without a report then have no known outcome.

        Repeated as the failover producer's close() repeats its own (``purge_until_empty``)."""

        def purge() -> None:
            self._client.purge(in_queue=True, in_flight=True, blocking=True)

        return purge_until_empty(purge, self.settle, timeout, self._clock)

    def close(self) -> None:
        """Close the client: its threads and connections end. Call it only once the client
        holds no message: confluent-kafka's close() first flushes without a time limit."""
        if self.closed:
            return
        self.closed = True
        close = getattr(self._client, "close", None)
        if close is not None:  # a factory's client without close() ends with its last reference
            close()


class LaneControl:
    """When the mirror sends on the fast lane, and what the lane's outcomes mean.

    The lane takes messages only while ``on``: off from the moment a target topic is not
    whole until every target topic is again and the failover producer has nothing out. Its
    deliveries are counted when it is settled; its failures are sent again through the
    failover producer (``when_room`` waits for room in it; ``stopping`` ends waits)."""

    def __init__(
        self,
        options: MirrorOptions,
        clients: Clients,
        targets: Targets,
        failures: Failures,
        counters: Counters,
        provenance: Provenance,
        *,
        clock: Callable[[], float],
        when_room: WhenRoom,
        stopping: Callable[[], bool],
    ) -> None:
        self._options = options
        self._clients = clients
        self._targets = targets
        self._failures = failures
        self._counters = counters
        self._provenance = provenance
        self._clock = clock
        self._when_room = when_room
        self._stopping = stopping
        self.lane: FastLane | None = None
        self.on = False
        self._retry_at = 0.0
        self._leaving = False  # the lane's client could not reach a leader (_client_error)
        self._unreported = False  # its purge at shutdown left messages without a report

    def start(self, factory: Callable[[dict[str, Any]], Any] | None) -> None:
        """Build the lane's client, if there is a factory and the producer is the failover
        producer (the lane needs its view of topic health)."""
        if factory is None or not isinstance(self._clients.producer, LaneProducer):
            return
        conf = lane_config(self._options.producer_config)
        conf["error_cb"] = self._client_error
        self.lane = FastLane(build("fast lane producer", factory, conf), self._clock)
        self.on = True

    def _client_error(self, err: KafkaError) -> None:
        """The lane client's error_cb (called while it is settled). The failover producer takes
        it as its own client's: a broker the lane could not connect to has the partitions it
        leads quarantined. The lane's messages for them would wait in its queue until the
        controller moves their leadership (its session timeout, 9 s by default) or they time
        out: the lane then takes back what it has not sent and goes off (``_between``)."""
        logger.debug("fast lane producer: %s", describe(err))
        if self._clients.lane_producer().report_client_error(err):
            self._leaving = True

    def _between(self) -> None:
        """Run every 50 ms while the lane is settled: the producer's reports are served, and
        after ``_client_error`` took partitions out of use, the lane takes back its unsent
        messages (sent again through the failover producer once it is settled) and is off
        until every target topic is whole again."""
        producer = self._clients.producer
        assert producer is not None
        producer.poll(0)
        lane = self.lane
        if self._leaving and lane is not None:
            self._leaving = False
            if self.on:
                self._turn_off("the fast lane could not reach a leader: its unsent messages go")
            lane.take_back()

    def retry(self) -> None:
        """The lane is off: look again whether it can come back on, at most every
        ``LANE_RETRY_S``."""
        if not self.on and self._clock() >= self._retry_at:
            self._try_on()

    def off(self, target: str) -> None:
        """``target`` needs routing around: the lane's messages settle first (so that a key's
        earlier messages land before its later ones take the failover producer), then every
        message takes the failover producer until all target topics are whole again."""
        self._turn_off(f"target topic {target!r} has a partition not usable: every message goes")
        self.settle()

    def _turn_off(self, why: str) -> None:
        """No message takes the lane until every target topic is whole again (``_try_on``)."""
        logger.info("%s through the failover producer until all target topics are whole again", why)
        self.on = False
        self._retry_at = self._clock() + LANE_RETRY_S

    def _try_on(self) -> None:
        """Back to the lane once every target topic is whole and the failover producer has
        delivered what it holds (a key's earlier messages land first)."""
        self._retry_at = self._clock() + LANE_RETRY_S
        producer = self._clients.lane_producer()
        if not all(producer.whole(t) for t in self._targets.seen):
            return
        if producer.flush(LANE_RETRY_S) == 0:
            self._failures.handle()
            self.on = True
            self._leaving = False  # told while off: nothing of the lane's to take back
            logger.info("every target topic is whole: the fast lane is on again")

    def settle(self) -> None:
        """Wait until the lane holds no message, then count its deliveries and send its
        failures again through the failover producer. Bounded by the lane client's
        message.timeout.ms (every message has an outcome by then); a stop request leaves the
        rest to the shutdown."""
        lane = self.lane
        if lane is None or not lane.spans:
            return
        while not lane.settle(1.0, self._between):
            if self._stopping():
                return
        self._outcomes(resend=True)

    def _outcomes(self, *, resend: bool) -> int:
        """The lane is settled: every message it took without a failure report was delivered.
        Failures are sent again (``resend``), or handed back (the mirror is stopping). Returns
        how many failed in partitions still assigned."""
        lane = self.lane
        assert lane is not None
        spans, failed = lane.take()
        by_span: dict[Span, list[LaneFailure]] = {}
        for failure in failed:
            by_span.setdefault(failure[0], []).append(failure)
        undelivered = 0
        for span in spans:
            fails = by_span.get(span, [])
            delivered = span.lane - len(fails)
            span.lane = 0
            if fails:
                if not span.tracker.dropped:
                    undelivered += len(fails)
                self._failed(span, fails, resend=resend)
            span.delivered_many(delivered)
        return undelivered

    def _failed(self, span: Span, fails: list[LaneFailure], *, resend: bool) -> None:
        """Send the span's messages the lane failed to deliver again through the failover
        producer, found by key and value (the lane's reports carry no headers). Equal messages
        cannot be told apart: all of them go again (duplicates, never a loss)."""
        tracker = span.tracker
        if tracker.dropped:
            span.delivered_many(len(fails))  # counted back as abandoned
            return
        target = self._targets.router.target(tracker.topic)
        producer = self._clients.lane_producer()
        unsent: dict[tuple[object, object], list[Message]] = {}
        for m in span_messages(span):
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
                dups = self._counters.possible_duplicates
                dups[tracker.topic] = dups.get(tracker.topic, 0) + twice
            moved = err.code() != KafkaError._PURGE_QUEUE  # else taken back, not refused
            for m in again:
                self._resend(span, m, target, moved)
        if handed_back:
            tracker.handed_back(span, handed_back)

    def _resend(self, span: Span, msg: Message, target: str, moved: bool) -> None:
        """Send ``msg`` of ``span`` again through the failover producer (it failed on the
        lane, or was taken back from it: not ``moved``); its outcome comes to the span as any
        other. In preserve mode it keeps its partition number while that is usable; counted
        as rerouted when placed away from it, or in key mode when the lane's attempt failed."""
        producer = self._clients.producer
        assert producer is not None
        tracker = span.tracker
        headers = self._provenance.headers_for(msg, tracker.topic, tracker.partition)
        ts_type, ts = msg.timestamp()
        place = self._targets.placement(target, tracker.partition)
        if place < 0 and (moved or self._targets.preserve.get(target)):
            rerouted = self._counters.rerouted
            rerouted[tracker.topic] = rerouted.get(tracker.topic, 0) + 1
        extra = (place,) if place >= 0 else ()  # a PlacingProducer's partition preference
        try:
            produce_consumed(producer, target, msg, headers, span, ts_type, ts, *extra)
        except (BufferError, ProduceTimeout):
            if not self._when_room(target, msg, headers, span, ts_type, ts, place):
                # Stopping before the producer took it: not delivered, so never committed.
                tracker.handed_back(span, [msg.offset()])  # type: ignore[list-item]
                span.delivered()
        except (KafkaException, ValueError, TypeError) as exc:
            self._failures.refused(span, msg, target, exc)

    def give_up(self) -> None:
        """Shutting down, not settled in time: what the lane still holds is given up (purged)
        and handed back, not committed; the reports tell which messages those are, and they are
        reported as the failover producer's undelivered messages are."""
        lane = self.lane
        if lane is None or not lane.spans:
            return  # every message the lane took has its outcome: it holds none
        self.on = False
        if not lane.purge(PURGE_FOR_S):
            self._unsettled()
            return
        undelivered = self._outcomes(resend=False)
        if undelivered:
            logger.warning(
                "%d messages on the fast lane were not delivered by shutdown; their offsets are "
                "not committed, so they are mirrored again after a restart",
                undelivered,
            )

    def _unsettled(self) -> None:
        """The purge left messages in the client without a report: a message without one
        cannot be counted delivered, and which of a span's messages have none cannot be told,
        so every span with messages on the lane commits up to its first offset at most."""
        lane = self.lane
        assert lane is not None
        self._unreported = True
        spans, _ = lane.take()
        held = 0
        for span in spans:
            if span.lane and not span.tracker.dropped:
                span.tracker.handed_back(span, [span.first])
                held += span.lane
            span.lane = 0  # still in flight: nothing told their outcome
        logger.error(
            "the fast lane's client still held messages without a delivery report %.0f s after "
            "its purge; they may or may not have been delivered, and none of the %d messages it "
            "took since it last settled is committed",
            PURGE_FOR_S,
            held,
        )

    def close(self) -> None:
        """Shutting down: give up what the lane still holds (``give_up``; something is left
        when the drain was cut short by an exception), then close its client. A client that
        kept messages without a report past the purge is left to be freed with the mirror:
        confluent-kafka's close() would wait for them without a time limit."""
        lane = self.lane
        if lane is None or lane.closed:
            return
        self.on = False
        self.give_up()
        if not self._unreported:
            lane.close()

    def serve(self) -> None:
        """Serve outcomes for up to 50 ms: the lane's (settling it) and the producer's."""
        producer = self._clients.producer
        assert producer is not None
        lane = self.lane
        if lane is not None and lane.spans:
            if lane.settle(0.05, self._between):
                self._outcomes(resend=True)
            elif not self.on:
                # Taken back (_between): settled before any message takes the other client.
                self.settle()
            producer.poll(0)
        else:
            producer.poll(0.05)
