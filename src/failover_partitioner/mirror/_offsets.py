"""Offset syncs and their translation: moving a consumer group from the source to the target.

Theory of operation
-------------------
An *offset sync* says: "every message of source partition ``(topic, p)`` at offset
``source_offset`` or later is at position ``target_offsets[q]`` or later of each target
partition ``q``". The mirror writes one as it commits: it takes ``source_offset`` as the next
offset it will hand to the producer, then (before handing anything else) asks the target for
its high watermarks. Everything handed afterwards is written past those, wherever the producer
places it, so the statement holds whatever partitions the messages are routed to (MirrorMaker
2's offset syncs map one source offset to one target offset of one partition, which rerouting
would break).

To move a group that committed ``C[p]`` on the source, :func:`lower_bounds` takes, for each
source partition, the latest sync with ``source_offset <= C[p]`` and, per target partition,
the lowest position any of them names: nothing the group has not read sits below it. That
alone may re-read a lot (up to a commit interval's worth per partition, more for an idle one),
so :class:`FirstUnread` then reads each target partition's provenance headers from there and
stops at the first message the group has not read (``mirror.source`` offset ``>= C[p]``): the
translated offset. Messages after it that the group had read are the re-reads, counted. A
message without a provenance header counts as unread (safe: it can only add re-reads).

Only the provenance this mirror wrote may be read: in a chain (A -> B -> C) a message on C also
carries the upstream mirror's ``mirror.source``, which names B's offsets of A's partitions and
would say "read" of messages the group never saw. So each sync records the format the mirror
wrote (``provenance``: compact, separate or none), :func:`provenance_to_read` picks the one
format every sync of the target topic agrees on, and the scan reads that format only, the last
such header by position (the one the last mirror appended). An old sync that does not say, or
syncs that disagree, make it "none": every message counts as unread, from the syncs' bound.

Pure: no clients here (``translate.py`` is the shell).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ._config import PROVENANCE_FORMATS

__all__ = ["PROVENANCE_NONE", "FirstUnread", "OffsetSync", "lower_bounds", "provenance_to_read"]

# What a sync says the mirror wrote: its --provenance-format, or none (--no-provenance-headers).
PROVENANCE_NONE = "none"
_PROVENANCE = (*PROVENANCE_FORMATS, PROVENANCE_NONE)


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetSync:
    """Source messages of ``(source_topic, source_partition)`` at ``source_offset`` or later
    are at ``target_offsets[q]`` or later of each partition ``q`` of ``target_topic``."""

    source_topic: str
    source_partition: int
    source_offset: int
    target_topic: str
    target_offsets: tuple[int, ...]
    provenance: str | None = None
    """The provenance headers the mirror wrote: compact, separate or none (None: an old sync
    that does not say)."""

    def key(self) -> bytes:
        return f"{self.source_topic}/{self.source_partition}".encode()

    def value(self) -> bytes:
        d: dict[str, object] = {
            "source_topic": self.source_topic,
            "source_partition": self.source_partition,
            "source_offset": self.source_offset,
            "target_topic": self.target_topic,
            "target_offsets": list(self.target_offsets),
        }
        if self.provenance is not None:
            d["provenance"] = self.provenance
        return json.dumps(d, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, value: bytes | None) -> OffsetSync | None:
        """The sync in a record's value, or None for anything else (a tombstone, garbage)."""
        if not value:
            return None
        try:
            d = json.loads(value)
            provenance = d.get("provenance")
            return cls(
                source_topic=str(d["source_topic"]),
                source_partition=int(d["source_partition"]),
                source_offset=int(d["source_offset"]),
                target_topic=str(d["target_topic"]),
                target_offsets=tuple(int(o) for o in d["target_offsets"]),
                # Anything else than a known format is as good as not saying.
                provenance=provenance if provenance in _PROVENANCE else None,
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            return None


def lower_bounds(
    syncs: Iterable[OffsetSync],
    source_topic: str,
    committed: Mapping[int, int],
    target_partitions: int,
    *,
    target_topic: str,
) -> tuple[int, ...]:
    """Per partition of ``target_topic``, a position below which no message the group has not
    read sits.

    ``committed``: the group's next offset to read per source partition of ``source_topic``
    (every partition of the topic; 0 for one it never committed). Only syncs into
    ``target_topic`` count: one into another name (a mirror run with another --rename, or a
    second mirror of the same source) gives positions of another topic. A source partition
    without a sync at or below its offset, or a target partition a sync does not name (added
    since), bounds nothing: 0, the scan starts at the beginning.
    """
    best: dict[int, OffsetSync] = {}
    for s in syncs:
        if s.source_topic != source_topic or s.target_topic != target_topic:
            continue
        c = committed.get(s.source_partition)
        if c is None or s.source_offset > c:
            continue
        held = best.get(s.source_partition)
        if held is None or s.source_offset >= held.source_offset:
            best[s.source_partition] = s
    out = []
    for q in range(target_partitions):
        low = None
        for p in committed:
            found = best.get(p)
            at = found.target_offsets[q] if found and q < len(found.target_offsets) else 0
            low = at if low is None else min(low, at)
        out.append(low or 0)
    return tuple(out)


def provenance_to_read(
    syncs: Iterable[OffsetSync], target_topic: str, told: str | None = None
) -> tuple[str, str | None]:
    """The provenance format to read on ``target_topic`` (compact, separate or none), and why
    when it is none for want of knowing (None when it is known).

    ``told``: the format the mirror ran with, as given to ``translate``; it stands for what an
    old sync (or no sync) does not say. Every sync into the topic, and ``told``, must agree:
    else (a mirror re-run with another format, or nothing says) none, every message unread.
    """
    said = {s.provenance or told for s in syncs if s.target_topic == target_topic}
    if told is not None:
        said.add(told)
    if len(said) == 1 and None not in said:
        (one,) = said
        assert one is not None
        return one, None
    if not said or said == {None}:
        why = "no offset sync says which provenance headers the mirror wrote"
    elif None in said:
        why = "old offset syncs do not say which provenance headers the mirror wrote"
    else:
        why = "the mirror wrote " + " and ".join(sorted(f for f in said if f)) + " provenance"
    return PROVENANCE_NONE, why


class FirstUnread:
    """Reads one target partition from its lower bound, in order: where the group resumes.

    Feed each message's position and provenance (``(topic, partition, offset)`` from its
    ``mirror.source`` header, or None) to :meth:`see` until it returns True or the partition's
    end; then ``offset`` is the translated offset (the end if nothing unread was seen) and
    ``rereads`` counts messages from there on that the group had already read.
    """

    __slots__ = ("_committed", "_topic", "offset", "rereads")

    def __init__(self, source_topic: str, committed: Mapping[int, int]) -> None:
        self._topic = source_topic
        self._committed = committed
        self.offset: int | None = None
        self.rereads = 0

    def unread(self, provenance: tuple[str, int, int] | None) -> bool:
        if provenance is None:
            return True  # cannot tell: treat as unread (only adds re-reads)
        topic, partition, offset = provenance
        if topic != self._topic:
            return True
        return offset >= self._committed.get(partition, 0)

    def see(self, position: int, provenance: tuple[str, int, int] | None) -> None:
        """The message at ``position`` of the target partition (positions increase)."""
        if self.offset is None:
            if self.unread(provenance):
                self.offset = position
        elif not self.unread(provenance):
            self.rereads += 1

    def result(self, end: int) -> int:
        """The translated offset, given the partition's end as read."""
        return self.offset if self.offset is not None else end
