"""Failure handling: failed deliveries, dead letters, the fatal failure, handed-back messages.

Delivery callbacks run inside ``producer.poll`` on the mirror's thread; they only queue
failures here (:meth:`Failures.on_outcome`), and :meth:`Failures.handle` acts on them outside
any callback (nothing blocking may run inside one: librdkafka would re-enter). A message that
finally fails stops the mirror: the other in-flight messages are finished, every partition is
committed up to (not past) its first undelivered message, and ``run`` raises
:class:`MessageFailedError`. With a dead-letter topic the message goes there instead.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message

from failover_partitioner._message import DeliveryReport
from failover_partitioner.errors import ProduceTimeout

from ._clients import Clients, create_time, describe
from ._commits import CommitLedger, Span
from ._config import MirrorOptions, TopicRouter
from ._errors import MessageFailedError
from ._provenance import HEADER_ERROR, Provenance, span_messages
from ._report import Counters

__all__ = ["Failure", "Failures"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class Failure:
    """A message of ``span`` (consumed as ``source``) that ``target_topic`` did not take."""

    span: Span
    source: Message
    target_topic: str
    error: str
    dead_letter_attempt: bool = False


class Failures:
    """The queue of failures not acted on yet, and the first that stopped the mirror
    (``fatal``)."""

    def __init__(
        self,
        options: MirrorOptions,
        router: TopicRouter,
        clients: Clients,
        counters: Counters,
        provenance: Provenance,
    ) -> None:
        self._options = options
        self._router = router
        self._clients = clients
        self._counters = counters
        self._provenance = provenance
        self.queue: deque[Failure] = deque()
        # Per span with failures: the offsets already matched to a failure report.
        self._claimed: dict[Span, set[int]] = {}
        self.fatal: Failure | None = None

    def refused(self, span: Span, msg: Message, target: str, exc: Exception) -> None:
        """The producer refused ``msg`` of ``span`` outright (not for lack of room)."""
        self.queue.append(Failure(span=span, source=msg, target_topic=target, error=str(exc)))

    def on_outcome(self, span: Span, err: KafkaError | None, report: DeliveryReport) -> None:
        """A span's message delivered after a retry, or failed finally (a first-attempt
        delivery only counts the span down: ``Span.delivered``)."""
        tracker = span.tracker
        if tracker.dropped:
            span.delivered()  # counted as an abandoned message back
        elif err is None:
            if report.attempts() > 1:
                rerouted = self._counters.rerouted
                rerouted[tracker.topic] = rerouted.get(tracker.topic, 0) + 1
            span.delivered()
        else:
            self.queue.append(
                Failure(
                    span=span,
                    source=self._source_of(span, report),
                    target_topic=self._router.target(tracker.topic),
                    error=describe(err),
                )
            )

    def _source_of(self, span: Span, report: DeliveryReport) -> Message:
        """The consumed message a failure report of ``span`` is about (see
        ``Provenance.match``); each message is matched once."""
        if len(self._claimed) > 64:
            # Spans whose messages all have an outcome need no matching any more.
            self._claimed = {s: c for s, c in self._claimed.items() if s.pending}
        claimed = self._claimed.setdefault(span, set())
        found = self._provenance.match(
            [span], report.headers(), report.value(), report.key(), claimed
        )
        if found is not None:
            msg = found[1]
        else:
            # Nothing to tell it by: the earliest unmatched message, so the commit stops there.
            # (An open span's run includes the message being produced: never empty here.)
            unmatched = [m for m in span_messages(span) if m.offset() not in claimed]
            msg = unmatched[0] if unmatched else next(span_messages(span))
        claimed.add(msg.offset())  # type: ignore[arg-type]  # consumed: has one
        return msg

    def _on_dead_letter(
        self, failure: Failure, err: KafkaError | None, report: DeliveryReport
    ) -> None:
        span = failure.span
        tracker = span.tracker
        if tracker.dropped:
            span.delivered()  # counted as an abandoned message back
            return
        if err is None:
            topic = tracker.topic
            dead = self._counters.dead_lettered
            dead[topic] = dead.get(topic, 0) + 1
            span.delivered()
        else:
            self.queue.append(
                Failure(
                    span=span,
                    source=failure.source,
                    target_topic=failure.target_topic,
                    error=f"{failure.error}; the dead-letter topic refused it too: {describe(err)}",
                    dead_letter_attempt=True,
                )
            )

    def handle(self, *, producer_closed: bool = False) -> None:
        """Act on queued failures, outside any delivery callback.

        ``producer_closed``: the failures were reported while the producer closed, too late
        for the dead-letter topic. Such a message is handed back instead (not committed; the
        next run mirrors it again and sets it aside if it fails again); without a dead-letter
        topic it fails the run as during it."""
        dead_letter = self._options.dead_letter_topic
        while self.queue:
            failure = self.queue.popleft()
            span = failure.span
            tracker = span.tracker
            if tracker.dropped:
                # Revoked meanwhile: not committed here, the partition's new owner retries it.
                span.delivered()  # counted as an abandoned message back
                continue
            offset = failure.source.offset()
            assert offset is not None
            if dead_letter is not None and not failure.dead_letter_attempt:
                if producer_closed:
                    tracker.handed_back(span, [offset])
                else:
                    self._send_to_dead_letter(dead_letter, failure)
                continue
            tracker.failed_in(span, offset)
            span.delivered()  # its outcome: failed, so the span stops commits there
            topic = tracker.topic
            failed = self._counters.failed
            failed[topic] = failed.get(topic, 0) + 1
            if self.fatal is None:
                self.fatal = failure
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

    def _send_to_dead_letter(self, topic: str, failure: Failure) -> None:
        producer = self._clients.producer
        assert producer is not None
        src = failure.source
        offset = src.offset()
        tracker = failure.span.tracker
        # Provenance always: the dead-letter topic is read to find the source message.
        headers = self._provenance.headers_for(
            src, tracker.topic, tracker.partition, provenance=True
        )
        headers.append((HEADER_ERROR, failure.error.encode()))
        ts_type, ts = src.timestamp()
        try:
            producer.produce(
                topic,
                src.value(),
                src.key(),
                headers,
                partial(self._on_dead_letter, failure),
                create_time(ts_type, ts),
            )
        except (BufferError, ProduceTimeout, KafkaException, ValueError, TypeError) as exc:
            self.queue.append(
                Failure(
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

    def fatal_error(self, failure: Failure) -> MessageFailedError:
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
        more = sum(self._counters.failed.values()) - 1
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

    def handed_back(self, ledger: CommitLedger, undelivered: Sequence[Any]) -> None:
        """Mark where each unfinished span's commit stops, from the messages the producer
        returned undelivered (every other message of the span had its outcome)."""
        if not undelivered:
            return
        logger.warning(
            "%d messages were not delivered by shutdown; their offsets are not committed, so "
            "they are mirrored again after a restart",
            len(undelivered),
        )
        spans = [s for t in ledger for s in t.unfinished()]
        back: dict[Span, list[int]] = {s: [] for s in spans}
        for m in undelivered:
            found = self._provenance.match(
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
