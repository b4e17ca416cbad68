"""``Merger.next_batch``: the batch form of ``next()``, with the same rules."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retry_buffer import (
    AsyncMerger,
    AsyncRetryBuffer,
    BufferClosed,
    Entry,
    InvalidArgument,
    Merger,
    RetryBuffer,
)


def test_a_batch_is_source_order_and_stops_at_the_room_left() -> None:
    buf: RetryBuffer[int] = RetryBuffer(max_in_flight=5)
    merger = Merger(buf, range(12))
    first = merger.next_batch(3)
    assert [e.item for e in first] == [0, 1, 2]
    second = merger.next_batch(10)
    assert [e.item for e in second] == [3, 4]  # two slots were left under the limit of 5
    assert merger.next_batch(10) == []
    assert merger.held() == []  # the source was not read past the limit
    assert buf.in_flight == 5
    for e in first + second:
        buf.delivered(e)
    rest = merger.next_batch(10)
    assert [e.item for e in rest] == [5, 6, 7, 8, 9]


def test_due_failures_come_before_fresh_items() -> None:
    buf: RetryBuffer[str] = RetryBuffer(max_in_flight=4)
    merger = Merger(buf, iter("abcdef"))
    a, b = merger.next_batch(2)
    buf.failed(b, "x")
    buf.failed(a, "x")
    again = merger.next_batch(4)
    assert [e.item for e in again] == ["b", "a", "c", "d"]
    assert [e.attempts for e in again] == [2, 2, 1, 1]


def test_items_that_lose_the_room_to_another_admitter_are_held_then_sent_in_order() -> None:
    buf: RetryBuffer[str] = RetryBuffer(max_in_flight=4)
    taken_by_other: list[Entry[str]] = []

    def source() -> Iterator[str]:
        # While the merger reads its batch, another caller admits two messages of its own.
        for item in ("a", "b", "c", "d"):
            if item == "c":
                taken_by_other.append(buf.admit("other-1"))
                taken_by_other.append(buf.admit("other-2"))
            yield item

    merger = Merger(buf, source())
    got = merger.next_batch(4)
    assert [e.item for e in got] == ["a", "b"]
    assert merger.held() == ["c", "d"]
    assert not merger.exhausted
    for e in got + taken_by_other:
        buf.delivered(e)
    rest = merger.next_batch(4)
    assert [e.item for e in rest] == ["c", "d"]
    assert merger.held() == []


def test_a_closed_buffer_raises_and_keeps_what_was_read() -> None:
    buf: RetryBuffer[int] = RetryBuffer(max_in_flight=8)
    merger = Merger(buf, range(5))
    [e0] = merger.next_batch(1)
    assert buf.close() == [e0]
    with pytest.raises(BufferClosed):
        merger.next_batch(3)
    # Nothing read from the source disappears: it is held for the caller to see.
    assert merger.held() in ([], [1], [1, 2], [1, 2, 3])


def test_an_exhausted_source_gives_a_short_batch_then_nothing() -> None:
    buf: RetryBuffer[int] = RetryBuffer(max_in_flight=100)
    merger = Merger(buf, range(3))
    batch = merger.next_batch(10)
    assert [e.item for e in batch] == [0, 1, 2]
    assert merger.exhausted
    assert merger.next_batch(10) == []
    for e in batch:
        buf.delivered(e)
    assert merger.finished


@pytest.mark.parametrize("n", [0, -1, 1.5, True, "3", None])
def test_a_bad_batch_size_names_the_value(n: object) -> None:
    merger = Merger(RetryBuffer[int](), range(3))
    with pytest.raises(InvalidArgument, match=repr(n).replace("(", r"\(").replace(")", r"\)")):
        merger.next_batch(n)  # type: ignore[arg-type]  # the wrong type is the test


@settings(max_examples=150, deadline=None)
@given(
    limit=st.integers(1, 8),
    steps=st.lists(
        st.tuples(st.sampled_from(["batch", "one", "deliver", "fail"]), st.integers(1, 6)),
        max_size=60,
    ),
)
def test_batches_mixed_with_single_takes_lose_and_duplicate_nothing(
    limit: int, steps: list[tuple[str, int]]
) -> None:
    count = 25
    buf: RetryBuffer[int] = RetryBuffer(max_in_flight=limit)
    merger = Merger(buf, range(count))
    out: list[Entry[int]] = []
    delivered: list[int] = []
    for op, k in steps:
        if op == "batch":
            out.extend(merger.next_batch(k))
        elif op == "one":
            entry = merger.next()
            if entry is not None:
                out.append(entry)
        elif out:
            entry = out.pop(k % len(out))
            if op == "deliver":
                buf.delivered(entry)
                delivered.append(entry.item)
            else:
                assert buf.failed(entry, "x")
        assert buf.in_flight <= limit
        assert len(out) <= limit
    # Drain: whatever the steps left, everything ends delivered exactly once.
    for entry in out:
        buf.delivered(entry)
        delivered.append(entry.item)
    while not merger.finished:
        batch = merger.next_batch(3)
        # Room, and failures are due at once: only the call that finds the source ended is empty.
        assert batch or merger.finished
        for entry in batch:
            buf.delivered(entry)
            delivered.append(entry.item)
    assert sorted(delivered) == list(range(count))


def test_the_asyncio_merger_batches_in_the_same_order() -> None:
    async def scenario() -> tuple[list[str], list[str]]:
        buf: AsyncRetryBuffer[str] = AsyncRetryBuffer(max_in_flight=3)
        merger = AsyncMerger(buf, iter("abcde"))
        a, b, c = await merger.next_batch(5)
        buf.failed(b, "x")
        buf.delivered(a)
        buf.delivered(c)
        again = await merger.next_batch(5)
        with pytest.raises(InvalidArgument, match="got 0"):
            await merger.next_batch(0)
        return [e.item for e in (a, b, c)], [e.item for e in again]

    first, again = asyncio.run(scenario())
    assert first == ["a", "b", "c"]
    assert again == ["b", "d", "e"]
