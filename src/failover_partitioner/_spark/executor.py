"""What each Spark task runs: produce every row, wait for every outcome, report the counts.

A task succeeds only once every one of its rows has a final outcome. If a row finally failed
(and ``raise_on_failed_rows``), the task raises and Spark runs it again: rows the failed
attempt delivered are delivered twice, which is Spark's at-least-once contract for sinks.
"""

from __future__ import annotations

import atexit
import logging
import time
from collections.abc import Iterable
from typing import Any

from pyspark.accumulators import Accumulator

from failover_partitioner._message import DeliveryReport
from failover_partitioner._spark.cache import ProducerCache
from failover_partitioner._spark.factory import Producer, build_producer
from failover_partitioner._spark.spec import WriterSpec
from failover_partitioner._spark.summary import WriteSummary
from failover_partitioner.errors import FailoverError

_log = logging.getLogger(__name__)

# Delivery reports run inside poll(); polling every so many rows keeps them flowing without
# paying for a call per row.
_POLL_EVERY_ROWS = 1000

PRODUCERS: ProducerCache[Producer] = ProducerCache()
# Best effort only: PySpark's daemon ends forked workers with os._exit, which skips atexit.
# Nothing depends on it, since every task flushes before it reports success.
atexit.register(PRODUCERS.close_all)


class RowsFailedError(FailoverError):
    """Rows of a task finally failed; the task raises so that Spark retries it."""


class RowError(FailoverError, ValueError):
    """A row cannot be produced as it is (e.g. its topic is null)."""


class Tally:
    """Final outcomes of one task's rows, fed by the delivery callback (once per row)."""

    __slots__ = ("delivered", "failed", "first_error", "possible_duplicates")

    def __init__(self) -> None:
        self.delivered = 0
        self.failed = 0
        self.possible_duplicates = 0
        self.first_error: str | None = None

    def on_delivery(self, err: Any, msg: DeliveryReport) -> None:
        if msg.possibly_duplicated():
            self.possible_duplicates += 1
        if err is None:
            self.delivered += 1
            return
        self.failed += 1
        if self.first_error is None:
            self.first_error = str(err)

    @property
    def done(self) -> int:
        return self.delivered + self.failed


def write_partition(
    rows: Iterable[Any], *, spec: WriterSpec, counts: Accumulator[WriteSummary]
) -> None:
    """Write one DataFrame partition (rows as selected by ``RowLayout.select_expressions``)."""
    producer, built = PRODUCERS.get(
        spec.cache_key, lambda: build_producer(spec.producer_config, spec.failover_options)
    )
    # The worker runs one task at a time and every task ends flushed, so the producer's
    # counters move only for this task's rows.
    rerouted_before = producer.statistics().rerouted
    tally = Tally()
    try:
        produced = _produce_rows(producer, rows, spec, tally)
        _await_outcomes(producer, tally, produced, spec.flush_timeout_s)
    except BaseException:
        # Messages of this attempt may still be in flight; a fresh producer for the retry keeps
        # their late reports out of its tally (the cached-producer trap of SPARK-27042).
        PRODUCERS.discard(spec.cache_key)
        raise
    summary = WriteSummary(
        rows=produced,
        delivered=tally.delivered,
        rerouted=producer.statistics().rerouted - rerouted_before,
        possible_duplicates=tally.possible_duplicates,
        failed=tally.failed,
        tasks=1,
        producers_built=int(built),
    )
    if tally.failed and spec.raise_on_failed_rows:
        raise RowsFailedError(
            f"{tally.failed} of {produced} rows finally failed (first error: {tally.first_error}); "
            "the task fails so that Spark retries it, and rows already delivered by this attempt "
            "will be written again. Pass raise_on_failed_rows=False to count such rows instead."
        )
    counts.add(summary)


def _produce_rows(producer: Producer, rows: Iterable[Any], spec: WriterSpec, tally: Tally) -> int:
    layout = spec.layout
    value_binary = layout.value_is_binary
    key_binary = layout.key_is_binary
    fixed_topic = spec.topic
    produce = producer.produce
    poll = producer.poll
    on_delivery = tally.on_delivery
    produced = 0
    # Rows arrive as tuples in RowLayout order; iterate lazily, never materialise the partition.
    for value, key, headers, row_topic in rows:
        topic = fixed_topic or row_topic
        if topic is None:
            raise RowError(
                f"row {produced} of this partition has a null 'topic' and no topic= was given; "
                "fill the column or pass topic=."
            )
        if value_binary and value is not None:
            value = bytes(value)
        if key_binary and key is not None:
            key = bytes(key)
        if headers is not None:
            headers = [(hk, None if hv is None else bytes(hv)) for hk, hv in headers]
        produce(topic, value=value, key=key, headers=headers, on_delivery=on_delivery)
        produced += 1
        if produced % _POLL_EVERY_ROWS == 0:
            poll(0)
    return produced


def _await_outcomes(producer: Producer, tally: Tally, produced: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while tally.done < produced:
        left = deadline - time.monotonic()
        if left <= 0:
            raise RowsFailedError(
                f"{produced - tally.done} of {produced} rows had no final outcome after "
                f"flush_timeout_s={timeout_s:g}; the task fails so that Spark retries it. "
                "Raise flush_timeout_s if the cluster needs longer to recover."
            )
        producer.flush(min(left, 1.0))
