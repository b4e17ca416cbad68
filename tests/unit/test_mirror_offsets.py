"""Offset syncs and translation (``mirror._offsets``): a moved group never misses a message.

A model of the mirror: source partitions hand messages to any target partition (rerouting
puts a source partition's messages on several), in-flight messages land in any order, and
offset syncs are taken as the mirror takes them (the next offset to hand, then the target's
ends). Whatever the interleaving and the group's committed offsets, reading each target
partition from its translated offset reads every message the group had not read, and the
re-reads are exactly those counted.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from failover_partitioner.mirror._offsets import (
    FirstUnread,
    OffsetSync,
    lower_bounds,
    provenance_to_read,
)
from failover_partitioner.mirror._provenance import provenance_of

pytestmark = pytest.mark.unit

TOPIC = "orders"


def test_a_sync_round_trips_and_garbage_is_not_a_sync() -> None:
    sync = OffsetSync(
        source_topic=TOPIC,
        source_partition=3,
        source_offset=120,
        target_topic="copy.orders",
        target_offsets=(10, 0, 7),
    )
    assert OffsetSync.decode(sync.value()) == sync
    assert sync.key() == b"orders/3"
    for bad in (None, b"", b"{", b'{"source_topic": "x"}', b"[1,2]"):
        assert OffsetSync.decode(bad) is None
    said = OffsetSync(
        source_topic=TOPIC,
        source_partition=0,
        source_offset=1,
        target_topic=TOPIC,
        target_offsets=(1,),
        provenance="separate",
    )
    assert OffsetSync.decode(said.value()) == said
    # A sync written before syncs said the format decodes, saying nothing (None).
    old = b'{"source_topic":"o","source_partition":0,"source_offset":1,"target_topic":"o",'
    assert OffsetSync.decode(old + b'"target_offsets":[1]}') == OffsetSync(
        source_topic="o", source_partition=0, source_offset=1, target_topic="o", target_offsets=(1,)
    )
    odd = OffsetSync.decode(old + b'"target_offsets":[1],"provenance":"gzip"}')
    assert odd is not None
    assert odd.provenance is None


def _said(provenance: str | None, target: str = TOPIC) -> OffsetSync:
    return OffsetSync(
        source_topic=TOPIC,
        source_partition=0,
        source_offset=0,
        target_topic=target,
        target_offsets=(0,),
        provenance=provenance,
    )


@pytest.mark.parametrize(
    ("said", "told", "read"),
    [
        (["separate", "separate"], None, "separate"),
        (["none"], None, "none"),
        (["compact"], "compact", "compact"),
        ([None], "separate", "separate"),  # old syncs: as the command line says
        ([None], None, "none"),  # old syncs, nothing told: safe
        ([], None, "none"),  # no syncs, nothing told: safe
        ([], "compact", "compact"),
        (["compact", "separate"], None, "none"),  # re-run with another format
        (["compact", None], None, "none"),
        (["compact"], "separate", "none"),  # the syncs and the command line disagree
    ],
)
def test_the_provenance_read_is_the_one_every_sync_and_the_command_line_agree_on(
    said: list[str | None], told: str | None, read: str
) -> None:
    syncs = [_said(p) for p in said] + [_said("separate", "elsewhere")]
    fmt, why = provenance_to_read(syncs, TOPIC, told)
    assert fmt == read
    assert (why is None) == (read != "none" or said == ["none"])


def test_in_a_chain_the_last_mirrors_header_is_read_not_an_upstream_one() -> None:
    # A -> B wrote compact (B's offsets of A), B -> C separate (C's mirror's own, appended).
    headers = [
        ("mirror.source", b"orders/0/5"),
        ("mirror.source.topic", b"orders"),
        ("mirror.source.partition", b"0"),
        ("mirror.source.offset", b"65"),
    ]
    assert provenance_of(headers, compact=False) == ("orders", 0, 65)
    # Both hops compact: the last by position is the last mirror's.
    chained = [("mirror.source", b"orders/0/5"), ("mirror.source", b"orders/0/65")]
    assert provenance_of(chained, compact=True) == ("orders", 0, 65)


def test_lower_bounds_take_the_latest_usable_sync_and_the_lowest_over_source_partitions() -> None:
    def sync(p: int, at: int, ends: tuple[int, ...]) -> OffsetSync:
        return OffsetSync(
            source_topic=TOPIC,
            source_partition=p,
            source_offset=at,
            target_topic=TOPIC,
            target_offsets=ends,
        )

    syncs = [sync(0, 10, (5, 5)), sync(0, 20, (9, 8)), sync(0, 30, (12, 12)), sync(1, 4, (7, 3))]
    # Partition 0 read to 25: the sync at 20 (the one at 30 would skip 25..29).
    assert lower_bounds(syncs, TOPIC, {0: 25, 1: 4}, 2, target_topic=TOPIC) == (7, 3)
    # No usable sync for a partition: from the start.
    assert lower_bounds(syncs, TOPIC, {0: 25, 1: 3}, 2, target_topic=TOPIC) == (0, 0)
    # A target partition added after the syncs: from its start.
    assert lower_bounds(syncs, TOPIC, {0: 30}, 3, target_topic=TOPIC) == (12, 12, 0)
    # Other topics' syncs do not count.
    assert lower_bounds(syncs, "other", {0: 30}, 2, target_topic=TOPIC) == (0, 0)


def test_syncs_into_another_target_topic_bound_nothing() -> None:
    # The same source partition mirrored under two names (a second mirror, or a re-run with
    # another --rename): positions of backup.orders say nothing of orders.
    def sync(at: int, target: str, end: int) -> OffsetSync:
        return OffsetSync(
            source_topic=TOPIC,
            source_partition=0,
            source_offset=at,
            target_topic=target,
            target_offsets=(end,),
        )

    syncs = [sync(10, TOPIC, 10), sync(40, "backup.orders", 540)]
    assert lower_bounds(syncs, TOPIC, {0: 50}, 1, target_topic=TOPIC) == (10,)
    assert lower_bounds(syncs, TOPIC, {0: 50}, 1, target_topic="backup.orders") == (540,)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_a_translated_group_reads_everything_it_had_not_read(data: st.DataObject) -> None:
    sources = data.draw(st.integers(1, 3), label="source partitions")
    targets = data.draw(st.integers(1, 4), label="target partitions")
    logs: list[list[tuple[int, int]]] = [[] for _ in range(targets)]  # (source p, offset)
    handed = [0] * sources
    in_flight: list[tuple[int, int, int]] = []  # (target q, source p, offset)
    syncs: list[OffsetSync] = []
    for _ in range(data.draw(st.integers(0, 60), label="steps")):
        step = data.draw(st.sampled_from(["hand", "hand", "land", "land", "sync"]))
        if step == "hand":
            p = data.draw(st.integers(0, sources - 1))
            q = data.draw(st.integers(0, targets - 1))  # anywhere: preserved or rerouted
            in_flight.append((q, p, handed[p]))
            handed[p] += 1
        elif step == "land" and in_flight:
            i = data.draw(st.integers(0, len(in_flight) - 1))  # in any order
            q, p, offset = in_flight.pop(i)
            logs[q].append((p, offset))
        elif step == "sync":
            ends = tuple(len(log) for log in logs)
            syncs.extend(
                OffsetSync(
                    source_topic=TOPIC,
                    source_partition=p,
                    source_offset=handed[p],
                    target_topic=TOPIC,
                    target_offsets=ends,
                )
                for p in range(sources)
            )
    committed = {
        p: data.draw(st.integers(0, handed[p]), label=f"group offset {p}") for p in range(sources)
    }

    def translate() -> list[tuple[int, int]]:
        bounds = lower_bounds(syncs, TOPIC, committed, targets, target_topic=TOPIC)
        out = []
        for q in range(targets):
            first = FirstUnread(TOPIC, committed)
            for position in range(bounds[q], len(logs[q])):
                p, offset = logs[q][position]
                first.see(position, (TOPIC, p, offset))
            out.append((first.result(max(len(logs[q]), bounds[q])), first.rereads))
        return out

    # Translated now, while messages may still be in flight; they land afterwards.
    now = translate()
    ended_at = [len(log) for log in logs]
    while in_flight:
        q, p, offset = in_flight.pop(data.draw(st.integers(0, len(in_flight) - 1)))
        logs[q].append((p, offset))
    unread = {(p, o) for p in range(sources) for o in range(committed[p], handed[p])}
    read = {m for q in range(targets) for m in logs[q][now[q][0] :]}
    assert unread <= read, "the moved group would miss a message"
    # The re-reads counted are those among what was on the target at translation time.
    for q in range(targets):
        start, rereads = now[q]
        seen = logs[q][start : ended_at[q]]
        assert rereads == sum(1 for p, o in seen if o < committed[p])


def test_a_message_without_provenance_counts_as_unread() -> None:
    first = FirstUnread(TOPIC, {0: 10})
    first.see(0, (TOPIC, 0, 3))  # read already
    first.see(1, None)  # cannot tell: the group resumes here
    first.see(2, (TOPIC, 0, 4))
    assert first.result(3) == 1
    assert first.rereads == 1
