"""Provenance headers: where on the source a mirrored message came from.

The mirror adds them (``mirror.source`` = ``topic/partition/offset``, or the three
``mirror.source.*`` headers) so that a copy can be traced to its source, ``failover-mirror
translate`` can tell how far a group read, and a message the producer gives back (a failure
report, or one handed back at close) can be matched to the consumed message it stands for.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from confluent_kafka import Message

from ._commits import Span
from ._config import MirrorOptions

__all__ = [
    "HEADER_ERROR",
    "HEADER_SOURCE",
    "HEADER_SOURCE_OFFSET",
    "HEADER_SOURCE_PARTITION",
    "HEADER_SOURCE_TOPIC",
    "Headers",
    "Provenance",
    "provenance_of",
    "span_messages",
]

HEADER_SOURCE = "mirror.source"
HEADER_SOURCE_TOPIC = "mirror.source.topic"
HEADER_SOURCE_PARTITION = "mirror.source.partition"
HEADER_SOURCE_OFFSET = "mirror.source.offset"
HEADER_ERROR = "mirror.error"

Headers = list[tuple[str, str | bytes | None]]


class Provenance:
    """The provenance headers of the mirror's messages (per-partition parts made once), and
    the matching of a message given back to the consumed message it stands for."""

    __slots__ = ("_compact_prefixes", "_options", "_prefixes", "compact")

    def __init__(self, options: MirrorOptions) -> None:
        self._options = options
        self.compact = options.provenance_format == "compact"
        self._prefixes: dict[tuple[str, int], Headers] = {}
        self._compact_prefixes: dict[tuple[str, int], str] = {}

    def headers_for(
        self, msg: Message, topic: str, partition: int, *, provenance: bool = False
    ) -> Headers:
        """A consumed message's headers as the mirror sends them: provenance added if on (or
        if ``provenance``)."""
        headers: Headers = list(msg.headers() or [])  # type: ignore[arg-type]  # list form
        if provenance or self._options.provenance_headers:
            offset = msg.offset()
            assert offset is not None
            headers += self.of(topic, partition, offset)
        return headers

    def prefix(self, topic: str, partition: int) -> Headers:
        prefix = self._prefixes.get((topic, partition))
        if prefix is None:
            prefix = [
                (HEADER_SOURCE_TOPIC, topic.encode()),
                (HEADER_SOURCE_PARTITION, b"%d" % partition),
            ]
            self._prefixes[(topic, partition)] = prefix
        return prefix

    def compact_prefix(self, topic: str, partition: int) -> str:
        prefix = self._compact_prefixes.get((topic, partition))
        if prefix is None:
            prefix = self._compact_prefixes[(topic, partition)] = f"{topic}/{partition}/"
        return prefix

    def of(self, topic: str, partition: int, offset: int) -> Headers:
        """The provenance headers of the message at ``offset`` of ``topic`` [``partition``]."""
        if self.compact:
            return [(HEADER_SOURCE, f"{self.compact_prefix(topic, partition)}{offset}")]
        return [*self.prefix(topic, partition), (HEADER_SOURCE_OFFSET, b"%d" % offset)]

    def match(
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
        wanted = provenance_of(headers, self.compact) if self._options.provenance_headers else None
        same: tuple[Span, Message] | None = None
        for span in spans:
            where = (span.tracker.topic, span.tracker.partition)
            for msg in span_messages(span):
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


def span_messages(span: Span) -> Iterator[Message]:
    """The consumed messages of ``span``, from the batch it was handed from.

    A closed span's are its offsets ``first`` to ``end``. An open one (a failure the producer
    reports inside ``produce()``, before the mirror closes the span) has no end yet: its run,
    the batch's consecutive messages of its partition from ``first`` on, of which those
    handed so far are a prefix (the mirror opens a new span wherever the partition changes).
    """
    tracker = span.tracker
    topic, partition, first = tracker.topic, tracker.partition, span.first
    end = span.end
    is_open = span.open
    started = False
    for msg in span.source or ():
        if msg.error() is not None:
            continue  # an error event is not handed, and does not end a run
        offset = msg.offset()
        if offset is None:
            continue
        if msg.partition() != partition or msg.topic() != topic:
            if started and is_open:
                return  # the run ended: what follows is another span's
            continue
        if first <= offset and (is_open or offset < end):
            started = True
            yield msg


def provenance_of(
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
