"""Per-message cost of the retry buffer's hot path (issue 5): at most 1 microsecond, median.

The issue's figure is "admit + merge + done": a ``Merger`` admits the next source item and
hands it out (``next()``), and ``delivered()`` counts it out. Each figure is the median over
several runs of (run time / messages) for one message going through admission and its final
outcome, with the buffer's default limit and one message in flight at a time (the uncontended
path a producer takes when nothing fails). The reference is an empty loop making one Python
function call per message; the floor is what admission cannot avoid (one small object with
the entry's hot fields, one clock read); both measured in the same run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial

from harness import Figure, median_time
from retry_buffer import AsyncRetryBuffer, Merger, RetryBuffer

ISSUE = 5
TARGET_US = 1.0
BATCH = 64


def _per_message_us(fn: Callable[[], object], n: int, repeat: int) -> float:
    return median_time(fn, repeat=repeat) / n * 1e6


def _reference(n: int) -> None:
    def call(x: int) -> int:
        return x

    for i in range(n):
        call(i)


class _Bare:
    # An entry's hot fields (what admission sets) and nothing else: no methods, no __init__.
    __slots__ = ("_state", "admitted_at", "attempts", "item", "seq")
    item: int
    seq: int
    attempts: int
    admitted_at: float
    _state: int


def _floor(n: int) -> None:
    # What admission cannot avoid: one small object and one clock read per message.
    clock = time.monotonic
    for i in range(n):
        e = _Bare()
        e.item = i
        e.seq = i
        e.attempts = 1
        e.admitted_at = clock()
        e._state = 0


def _admit_delivered(n: int) -> None:
    buf: RetryBuffer[int] = RetryBuffer()
    admit = buf.admit
    delivered = buf.delivered
    for i in range(n):
        delivered(admit(i))


def _merger_delivered(n: int) -> None:
    buf: RetryBuffer[int] = RetryBuffer()
    take = Merger(buf, range(n)).next
    delivered = buf.delivered
    for _ in range(n):
        entry = take()
        assert entry is not None
        delivered(entry)


def _merger_batch_delivered(n: int) -> None:
    # The same merge for a producer that sends in batches (FailoverProducer.produce_batch,
    # a Spark partition, a consumed batch in a mirror): one lock round per batch.
    buf: RetryBuffer[int] = RetryBuffer()
    take = Merger(buf, range(n)).next_batch
    delivered = buf.delivered
    left = n
    while left:
        batch = take(BATCH)
        assert batch
        for entry in batch:
            delivered(entry)
        left -= len(batch)


def _admit_many_delivered(n: int) -> None:
    buf: RetryBuffer[int] = RetryBuffer()
    admit_many = buf.admit_many
    delivered = buf.delivered
    batch = list(range(BATCH))
    for _ in range(n // BATCH):
        for entry in admit_many(batch):
            delivered(entry)


def _async_try_admit_delivered(n: int) -> None:
    # The asyncio flavour's non-waiting path (try_admit is what an admit that finds room does).
    buf: AsyncRetryBuffer[int] = AsyncRetryBuffer()
    admit = buf.try_admit
    delivered = buf.delivered
    for i in range(n):
        entry = admit(i)
        assert entry is not None
        delivered(entry)


def run(quick: bool) -> list[Figure]:
    n = 20_000 if quick else 200_000
    n -= n % BATCH
    repeat = 3 if quick else 9
    ref = _per_message_us(partial(_reference, n), n, repeat)
    floor = _per_message_us(partial(_floor, n), n, repeat)
    scale = (
        f"reference: empty loop with one call per message; floor (a bare 5-field object + "
        f"clock read): {floor:.3f} us"
    )
    cases = [
        (
            "admit + merge + done (Merger.next + delivered), per message (us)",
            _merger_delivered,
            scale,
        ),
        (
            f"admit + merge + done, batched (Merger.next_batch({BATCH}) + delivered), "
            "per message (us)",
            _merger_batch_delivered,
            "batch merge: one lock round and one clock read per batch",
        ),
        ("admit + delivered, per message (us)", _admit_delivered, scale),
        (
            f"admit_many({BATCH}) + delivered, per message (us)",
            _admit_many_delivered,
            "batch admission: one lock round per batch",
        ),
        (
            "async try_admit + delivered, per message (us)",
            _async_try_admit_delivered,
            "asyncio flavour, no lock",
        ),
    ]
    figures = []
    for name, fn, note in cases:
        value = _per_message_us(partial(fn, n), n, repeat)
        figures.append(
            Figure(
                issue=ISSUE,
                name=f"retry_buffer: {name}",
                value=value,
                reference=ref,
                unit="us",
                target=TARGET_US,
                kind="absolute_max",
                note=note,
            )
        )
    return figures
