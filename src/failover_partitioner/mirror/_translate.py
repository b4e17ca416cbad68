"""``failover-mirror translate``: a source consumer group's offsets, as target offsets.

The shell around ``_offsets``: reads the group's committed offsets on the source, the offset
syncs and the target partitions' provenance headers, and (with ``commit``) commits the result
for the same group on the target. See docs/mirror.md, "Moving consumers".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from failover_partitioner.confluent._shared import kafka_error_of
from failover_partitioner.errors import classify

from ._clients import CHECK_ADDRESS, UNANSWERED, build, unanswered
from ._config import TopicRouter
from ._errors import MirrorError
from ._offsets import PROVENANCE_NONE, FirstUnread, OffsetSync, lower_bounds, provenance_to_read
from ._provenance import provenance_of

__all__ = ["PartitionTranslation", "TranslateError", "translate"]

logger = logging.getLogger(__name__)

# The pause before asking the cluster again after an error that passes (a leader moving).
_ASK_AGAIN_S = 0.5


class TranslateError(MirrorError):
    """The group's offsets cannot be translated or committed (the message says why)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionTranslation:
    """Where the group resumes on one target partition."""

    target_topic: str
    partition: int
    offset: int
    """The group's offset to commit on the target: nothing it has not read lies before it."""
    rereads: int
    """Messages from ``offset`` on that the group had already read on the source."""
    scanned_from: int
    """The lower bound the offset syncs gave (the scan's start)."""


def translate(
    *,
    source_config: Mapping[str, Any],
    target_config: Mapping[str, Any],
    group: str,
    router: TopicRouter,
    offset_syncs_topic: str | None,
    commit: bool = False,
    timeout_s: float = 30.0,
    provenance: str | None = None,
) -> list[PartitionTranslation]:
    """Translate ``group``'s committed offsets on the source (topics ``router`` selects) into
    offsets on the target, and commit them for ``group`` there if ``commit``.

    ``provenance``: the provenance headers the mirror wrote (compact, separate or none), for
    what the offset syncs do not say (see ``_offsets.provenance_to_read``)."""
    committed = _source_offsets(source_config, group, router, timeout_s)
    reader = build(
        "target consumer",
        Consumer,
        {
            **target_config,
            "group.id": group,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": False,
        },
    )
    try:
        syncs = (
            _read_syncs(reader, target_config, offset_syncs_topic, timeout_s)
            if offset_syncs_topic
            else []
        )
        md = _metadata(reader, "target", target_config, timeout_s).topics
        out: list[PartitionTranslation] = []
        for source, offsets in sorted(committed.items()):
            target = router.target(source)
            tmd = md.get(target)
            if tmd is None or tmd.error is not None or not tmd.partitions:
                raise TranslateError(
                    f"group {group!r} consumed source topic {source!r}, but its mirror "
                    f"{target!r} does not exist on the target; mirror it first (or pass the "
                    "mirror's --rename)"
                )
            n = len(tmd.partitions)
            bounds = lower_bounds(syncs, source, offsets, n, target_topic=target)
            fmt, why = provenance_to_read(syncs, target, provenance)
            if why is not None:
                logger.warning(
                    "%s: %s; every message from the offset syncs' bound counts as unread "
                    "(more re-reads; pass the mirror's --provenance-format to read them)",
                    target,
                    why,
                )
            for q in range(n):
                out.append(_scan(reader, source, target, q, bounds[q], offsets, fmt, timeout_s))
        if commit:
            _commit(reader, group, out, timeout_s)
        return out
    finally:
        reader.close()


def _source_offsets(
    config: Mapping[str, Any], group: str, router: TopicRouter, timeout_s: float
) -> dict[str, dict[int, int]]:
    """Per selected source topic the group committed in: next offset per partition (0 where
    it committed none: reading from the start loses nothing)."""
    consumer = build(
        "source consumer", Consumer, {**config, "group.id": group, "enable.auto.commit": False}
    )
    try:
        md = _metadata(consumer, "source", config, timeout_s).topics
        tps = [
            TopicPartition(t, p)
            for t in sorted(md)
            if router.selects(t)
            for p in sorted(md[t].partitions)
        ]
        found = consumer.committed(tps, timeout=timeout_s) if tps else []
    finally:
        consumer.close()
    out: dict[str, dict[int, int]] = {}
    for tp in found:
        if tp.error is not None:
            raise TranslateError(
                f"cannot read group {group!r}'s committed offset of {tp.topic}[{tp.partition}] "
                f"on the source: {tp.error}"
            )
        out.setdefault(tp.topic, {})[tp.partition] = tp.offset
    used = {t: offs for t, offs in out.items() if any(o >= 0 for o in offs.values())}
    if not used:
        raise TranslateError(
            f"consumer group {group!r} has no committed offset on the source for any topic "
            f"matching --include {router.include!r}: an unknown group, or one that never "
            "committed; nothing to translate (check the group name and the source cluster)"
        )
    return {t: {p: max(o, 0) for p, o in offs.items()} for t, offs in used.items()}


def _metadata(
    client: Consumer,
    cluster: str,
    config: Mapping[str, Any],
    timeout_s: float,
    topic: str | None = None,
) -> Any:
    """``cluster``'s metadata (of ``topic`` alone, if given). When no broker answers in
    ``timeout_s`` (a mistyped --source or --target, brokers not running), a TranslateError
    naming the cluster, its address and its flag, rather than librdkafka's words alone."""
    try:
        if topic is None:
            return client.list_topics(timeout=timeout_s)
        return client.list_topics(topic, timeout=timeout_s)
    except KafkaException as exc:
        err = kafka_error_of(exc)
        if err is None or err.code() not in UNANSWERED:
            raise
        servers = config.get("bootstrap.servers")
        told = unanswered(cluster, str(servers), f"--{cluster}", timeout_s, exc)
        raise TranslateError(
            f"{told}: {CHECK_ADDRESS}; translate waits {timeout_s:.0f} s for each cluster. "
            "Nothing was committed"
        ) from exc


def _read_syncs(
    reader: Consumer, config: Mapping[str, Any], topic: str, timeout_s: float
) -> list[OffsetSync]:
    """Every offset sync in ``topic``, up to its current end."""
    md = _metadata(reader, "target", config, timeout_s, topic).topics.get(topic)
    if md is None or md.error is not None:
        logger.warning("no offset syncs topic %r on the target: scanning from the start", topic)
        return []
    out = []
    for p in md.partitions:
        tp = TopicPartition(topic, p)
        for msg in _read(reader, tp, 0, _watermarks(reader, tp, timeout_s), timeout_s):
            sync = OffsetSync.decode(msg.value())
            if sync is not None:
                out.append(sync)
    return out


def _watermarks(reader: Consumer, tp: TopicPartition, timeout_s: float) -> tuple[int, int]:
    """``tp``'s low and high watermarks, asked again while the cluster answers with an error
    that passes (a leader moving: NOT_LEADER_FOR_PARTITION right after a broker comes back),
    for up to ``timeout_s``; else a TranslateError that names the partition and the error."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            left = max(_ASK_AGAIN_S, deadline - time.monotonic())
            low, high = reader.get_watermark_offsets(tp, timeout=left)
            return int(low), int(high)
        except KafkaException as exc:
            err = kafka_error_of(exc)
            passes = err is not None and classify(err.code(), err.name()).retriable
            if not passes or time.monotonic() + _ASK_AGAIN_S > deadline:
                raise TranslateError(
                    f"cannot read the offsets of {tp.topic}[{tp.partition}] on the target: "
                    f"{exc if err is None else err}"
                ) from exc
            logger.info("%s[%d]: %s; asking again", tp.topic, tp.partition, err)
            time.sleep(_ASK_AGAIN_S)


def _read(
    reader: Consumer, tp: TopicPartition, start: int, marks: tuple[int, int], timeout_s: float
) -> list[Any]:
    """The messages of ``tp`` from ``start`` to its high watermark ``marks`` = (low, high),
    as :func:`_watermarks` read them."""
    low, high = marks
    start = max(start, low)
    if start >= high:
        return []
    reader.assign([TopicPartition(tp.topic, tp.partition, start)])
    out: list[Any] = []
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            batch = reader.consume(1000, 0.5)
            for msg in batch:
                if msg.error() is not None:
                    raise TranslateError(f"reading {tp.topic}[{tp.partition}]: {msg.error()}")
                out.append(msg)
            if out and out[-1].offset() >= high - 1:
                return out
            if not batch and time.monotonic() > deadline:
                raise TranslateError(
                    f"reading {tp.topic}[{tp.partition}] from {start} to {high} did not finish "
                    f"within {timeout_s:.0f} s"
                )
    finally:
        reader.unassign()


def _scan(
    reader: Consumer,
    source: str,
    target: str,
    q: int,
    bound: int,
    committed: Mapping[int, int],
    fmt: str,
    timeout_s: float,
) -> PartitionTranslation:
    """Where the group resumes on ``target`` [``q``]: read from ``bound``, only the provenance
    headers of format ``fmt`` (none: every message counts as unread)."""
    first = FirstUnread(source, committed)
    tp = TopicPartition(target, q)
    marks = _watermarks(reader, tp, timeout_s)
    end = marks[1]
    if bound > end:
        # The syncs name positions this partition never had (the topic was recreated, or
        # the syncs are another mirror's): they bound nothing here.
        logger.warning(
            "%s[%d]: the offset syncs' bound %d is past the partition's end %d; scanning from "
            "its start",
            target,
            q,
            bound,
            end,
        )
        bound = 0
    if fmt == PROVENANCE_NONE:
        # Every message counts as unread: the first one there is the answer, and any from
        # there on may be one the group read (the re-reads told are at most that many).
        first_there = min(max(bound, marks[0]), end)
        return PartitionTranslation(
            target_topic=target,
            partition=q,
            offset=first_there,
            rereads=end - first_there,
            scanned_from=bound,
        )
    compact = fmt == "compact"
    for msg in _read(reader, tp, bound, marks, timeout_s):
        first.see(msg.offset(), provenance_of(msg.headers(), compact))
        end = msg.offset() + 1
    return PartitionTranslation(
        target_topic=target,
        partition=q,
        offset=first.result(end),  # never past the end as read
        rereads=first.rereads,
        scanned_from=bound,
    )


def _commit(
    reader: Consumer, group: str, offsets: list[PartitionTranslation], timeout_s: float
) -> None:
    tps = [TopicPartition(t.target_topic, t.partition, t.offset) for t in offsets]
    try:
        result = reader.commit(offsets=tps, asynchronous=False)
    except KafkaException as exc:
        raise TranslateError(
            f"the target refused to commit group {group!r}'s translated offsets: {exc}. If "
            "the group has running consumers on the target, stop them first (a group's offsets "
            "can be set only while it has no members)"
        ) from exc
    bad = [tp for tp in result or [] if tp.error is not None]
    if bad:
        raise TranslateError(
            f"the target refused to commit group {group!r}'s offsets of "
            + ", ".join(f"{tp.topic}[{tp.partition}]: {tp.error}" for tp in bad)
        )
