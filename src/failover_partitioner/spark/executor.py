"""What each Spark task runs: produce every row, wait for every outcome, report the counts.

A task succeeds only once every one of its rows has a final outcome. If a row finally failed
(and ``raise_on_failed_rows``), the task raises and Spark runs it again: rows the failed
attempt delivered are delivered twice, which is Spark's at-least-once contract for sinks.

Rows are produced without a delivery callback: a Python call per row on the delivery path
costs as much as the rest of the writer. The task's counts are the differences of the
producer's own statistics before and after it, exact because a Python worker runs one task at
a time and every task ends with nothing in flight (or with its producer thrown away).
"""

from __future__ import annotations

import atexit
import logging
import time
from collections.abc import Iterable, Iterator
from typing import Any

from pyspark.accumulators import Accumulator

from failover_partitioner.errors import FailoverError
from failover_partitioner.spark.cache import ProducerCache
from failover_partitioner.spark.factory import ExecutorProducer, Producer, open_producer
from failover_partitioner.spark.spec import WriterSpec
from failover_partitioner.spark.summary import WriteSummary

_log = logging.getLogger(__name__)

# The producer re-produces failed rows from poll(); polling every so many rows keeps retries
# and librdkafka's delivery reports flowing without paying for a call per row.
_POLL_EVERY_ROWS = 1000

PRODUCERS: ProducerCache[ExecutorProducer] = ProducerCache()
# Best effort only: PySpark's daemon ends forked workers with os._exit, which skips atexit.
# Nothing depends on it, since every task flushes before it reports success.
atexit.register(PRODUCERS.close_all)


class RowsFailedError(FailoverError):
    """Rows of a task finally failed, or had no outcome in time; the task raises so that
    Spark retries it."""


class RowError(FailoverError, ValueError):
    """A row cannot be produced as it is (e.g. its topic is null)."""


def write_partition(
    rows: Iterable[Any], *, spec: WriterSpec, counts: Accumulator[WriteSummary]
) -> None:
    """Write one DataFrame partition (rows as selected by ``RowLayout.select_expressions``)."""
    handle, built = PRODUCERS.get(
        spec.cache_key, lambda: open_producer(spec.producer_config, spec.failover_options)
    )
    producer = handle.producer
    handle.failures.reset()
    before = producer.statistics()
    try:
        produced = _produce_rows(producer, rows, spec)
        _await_outcomes(producer, produced, spec.flush_timeout_s)
    except BaseException:
        # Rows of this attempt may still be in flight; a fresh producer for the retry keeps
        # their late outcomes out of its counts (the cached-producer trap of SPARK-27042).
        PRODUCERS.discard(spec.cache_key)
        raise
    after = producer.statistics()
    summary = WriteSummary(
        rows=produced,
        delivered=after.delivered - before.delivered,
        rerouted=after.rerouted - before.rerouted,
        possible_duplicates=after.possible_duplicates - before.possible_duplicates,
        failed=after.final_failures - before.final_failures,
        tasks=1,
        producers_built=int(built),
    )
    if summary.delivered + summary.failed != produced:
        PRODUCERS.discard(spec.cache_key)
        raise RowsFailedError(
            f"the producer accounted for {summary.delivered + summary.failed} outcomes of "
            f"{produced} rows; something else used this worker's producer. The task fails so "
            "that Spark retries it with a fresh one."
        )
    if summary.failed and spec.raise_on_failed_rows:
        raise RowsFailedError(
            f"{summary.failed} of {produced} rows finally failed (first error: "
            f"{handle.failures.first_error}); the task fails so that Spark retries it, and "
            "rows already delivered by this attempt will be written again. Pass "
            "raise_on_failed_rows=False to count such rows instead."
        )
    if summary.failed:
        _log.warning(
            "%s of %s rows finally failed and are only counted (raise_on_failed_rows=False); "
            "first error: %s",
            summary.failed,
            produced,
            handle.failures.first_error,
        )
    counts.add(summary)


def _produce_rows(producer: Producer, rows: Iterable[Any], spec: WriterSpec) -> int:
    produce = producer.produce
    poll = producer.poll
    produced = 0
    # Lazily, row by row: the partition is never materialised.
    for topic, value, key, headers in _messages(rows, spec):
        produce(topic, value, key, headers)
        produced += 1
        if produced % _POLL_EVERY_ROWS == 0:
            poll(0)
    return produced


def _messages(rows: Iterable[Any], spec: WriterSpec) -> Iterator[tuple[str, Any, Any, Any]]:
    """(topic, value, key, headers) per row, in the types the producer takes.

    Rows are tuples of the columns ``RowLayout.columns()`` selected. PySpark hands binary
    columns over as bytearray, which confluent-kafka refuses; string keys are hashed as their
    UTF-8 bytes.
    """
    layout = spec.layout
    value_binary = layout.value_is_binary
    key_binary = layout.key_is_binary
    fixed_topic = spec.topic
    if fixed_topic is not None and not layout.has_headers and not layout.topic_from_rows:
        # The common shapes (value, or value and key, to one topic) without per-row lookups.
        if not layout.has_key:
            if value_binary:
                return ((fixed_topic, _bytes(v), None, None) for (v,) in rows)
            return ((fixed_topic, v, None, None) for (v,) in rows)
        return (
            (
                fixed_topic,
                _bytes(v) if value_binary else v,
                None if k is None else bytes(k) if key_binary else k.encode(),
                None,
            )
            for v, k in rows
        )
    return _general_messages(rows, spec)


def _general_messages(rows: Iterable[Any], spec: WriterSpec) -> Iterator[tuple[str, Any, Any, Any]]:
    layout = spec.layout
    value_binary = layout.value_is_binary
    key_binary = layout.key_is_binary
    position = 1
    key_at = headers_at = topic_at = -1
    if layout.has_key:
        key_at, position = position, position + 1
    if layout.has_headers:
        headers_at, position = position, position + 1
    if layout.topic_from_rows:
        topic_at = position
    fixed_topic = spec.topic
    for index, row in enumerate(rows):
        topic = fixed_topic if fixed_topic is not None else row[topic_at]
        if topic is None:
            raise RowError(
                f"row {index} of this partition has a null 'topic' and no topic= was given; "
                "fill the column or pass topic=."
            )
        value = row[0]
        if value_binary and value is not None:
            value = bytes(value)
        key = row[key_at] if key_at >= 0 else None
        if key is not None:
            key = bytes(key) if key_binary else key.encode()
        headers = row[headers_at] if headers_at >= 0 else None
        if headers is not None:
            headers = [(hk, None if hv is None else bytes(hv)) for hk, hv in headers]
        yield topic, value, key, headers


def _bytes(value: Any) -> bytes | None:
    return None if value is None else bytes(value)


def _await_outcomes(producer: Producer, produced: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        pending = producer.flush(max(0.0, min(left, 1.0)))
        if pending == 0:
            return
        if left <= 0:
            raise RowsFailedError(
                f"{pending} of {produced} rows had no final outcome after "
                f"flush_timeout_s={timeout_s:g}; the task fails so that Spark retries it. "
                "Raise flush_timeout_s if the cluster needs longer to recover."
            )
