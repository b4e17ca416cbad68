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
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any

import confluent_kafka
from pyspark.accumulators import Accumulator

from failover_partitioner._message import not_accepted
from failover_partitioner.confluent._shared import kafka_error_of
from failover_partitioner.errors import FailoverError
from failover_partitioner.spark.cache import ProducerCache
from failover_partitioner.spark.factory import ExecutorProducer, Producer, open_producer
from failover_partitioner.spark.spec import WriterSpec
from failover_partitioner.spark.summary import WriteSummary

_log = logging.getLogger(__name__)

# The producer re-produces failed rows from poll(); polling every so many rows keeps retries
# and librdkafka's delivery reports flowing without paying for a call per row.
_POLL_EVERY_ROWS = 1000
# librdkafka's default message.max.bytes, the limit it refuses a record over.
_CLIENT_MESSAGE_MAX_BYTES = 1_000_000

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
    # This task's own copy of the hook, not the one the producer was built with.
    handle.failures.start_task(spec.failover_options.get("dead_letter"))
    before = producer.statistics()
    try:
        produced, refused = _produce_rows(handle, rows, spec)
        pending = _await_outcomes(producer, spec.flush_timeout_s)
    except BaseException as exc:
        # Rows of this attempt may still be in flight; a fresh producer for the retry keeps
        # their late outcomes out of its counts (the cached-producer trap of SPARK-27042).
        left = _abandon(spec.cache_key, handle)
        if left and sys.version_info >= (3, 11):
            exc.add_note(f"when the task failed, {left}")
        raise
    rows_read = produced + refused
    if pending:
        left = _abandon(spec.cache_key, handle)
        raise RowsFailedError(
            f"{pending} of {rows_read} rows had no final outcome after "
            f"flush_timeout_s={spec.flush_timeout_s:g}"
            f"{f'; {left}' if left else ''}. The task fails so that Spark retries it, "
            "which writes every row of the task again. Raise flush_timeout_s if the cluster "
            "needs longer to recover."
        )
    after = producer.statistics()
    summary = WriteSummary(
        rows=rows_read,
        delivered=after.delivered - before.delivered,
        rerouted=after.rerouted - before.rerouted,
        possible_duplicates=after.possible_duplicates - before.possible_duplicates,
        failed=after.final_failures - before.final_failures + refused,
        tasks=1,
        producers_built=int(built),
    )
    if summary.delivered + summary.failed != rows_read:
        _abandon(spec.cache_key, handle)
        raise RowsFailedError(
            f"the producer accounted for {summary.delivered + summary.failed - refused} "
            f"outcomes of {produced} rows; something else used this worker's producer. The "
            "task fails so that Spark retries it with a fresh one."
        )
    if summary.failed and spec.raise_on_failed_rows:
        raise RowsFailedError(
            f"{summary.failed} of {rows_read} rows finally failed (first error: "
            f"{handle.failures.first_error}); the task fails so that Spark retries it, and "
            "rows already delivered by this attempt will be written again. Pass "
            "raise_on_failed_rows=False to count such rows instead."
        )
    if summary.failed:
        _log.warning(
            "%s of %s rows finally failed and are only counted (raise_on_failed_rows=False); "
            "first error: %s",
            summary.failed,
            rows_read,
            handle.failures.first_error,
        )
    counts.add(summary)


def _produce_rows(
    handle: ExecutorProducer, rows: Iterable[Any], spec: WriterSpec
) -> tuple[int, int]:
    """Produce every row: (rows the producer took, rows the client refused as too large)."""
    producer = handle.producer
    produce = producer.produce
    poll = producer.poll
    produced = refused = 0
    # Lazily, row by row: the partition is never materialised.
    for topic, value, key, headers in _messages(rows, spec):
        try:
            produce(topic, value, key, headers)
        except confluent_kafka.KafkaException as exc:
            err = kafka_error_of(exc)
            if err is None or err.code() != confluent_kafka.KafkaError.MSG_SIZE_TOO_LARGE:
                raise
            # librdkafka refuses a record over its message.max.bytes before taking it, and
            # the producer leaves such a refusal (the caller's to fix) to its caller. For the
            # writer it is a final failure, as the brokers' refusal of a record is.
            _refuse_too_large(handle, spec, err, produced + refused, topic, value, key, headers)
            refused += 1
            continue
        produced += 1
        if produced % _POLL_EVERY_ROWS == 0:
            poll(0)
    return produced, refused


def _refuse_too_large(
    handle: ExecutorProducer,
    spec: WriterSpec,
    err: confluent_kafka.KafkaError,
    index: int,
    topic: str,
    value: Any,
    key: Any,
    headers: Any,
) -> None:
    """Row ``index`` of the partition is over the client's message.max.bytes: raise, or (with
    ``raise_on_failed_rows=False``) let it fail finally, counted and given to the hook."""
    sizes = {
        "value": _size(value),
        "key": _size(key),
        "headers": sum(_size(k) + _size(v) for k, v in headers or ()),
    }
    column = max(sizes, key=lambda c: sizes[c])
    limit = spec.producer_config.get("message.max.bytes", _CLIENT_MESSAGE_MAX_BYTES)
    why = (
        f"row {index} of this partition is too large for the producer: its {column!r} column "
        f"is {sizes[column]} bytes (value {sizes['value']}, key {sizes['key']}, headers "
        f"{sizes['headers']} bytes, plus the record's framing) and message.max.bytes is "
        f"{limit}. Raise 'message.max.bytes' in producer_config and the topic's "
        "max.message.bytes to fit it, or filter such rows out"
    )
    handle.failures.refused(
        not_accepted(topic, value, key, headers, None, err),
        err,
        why,
    )
    if spec.raise_on_failed_rows:
        raise RowsFailedError(
            f"{why}. The task fails so that Spark retries it (each attempt fails the same "
            "way); pass raise_on_failed_rows=False to count such rows instead."
        )


def _size(part: Any) -> int:
    if part is None:
        return 0
    return len(part.encode()) if isinstance(part, str) else len(part)


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
            headers = _header_pairs(headers, index)
        yield topic, value, key, headers


def _header_pairs(headers: Iterable[Any], index: int) -> list[tuple[str, bytes | None]]:
    """Row ``index``'s headers as (name, value) pairs; Spark's array may hold nulls, which
    Kafka's headers cannot."""
    pairs = []
    for position, header in enumerate(headers):
        if header is None or header[0] is None:
            what = "a null element" if header is None else "a header with a null key"
            raise RowError(
                f"row {index} of this partition has {what} at index {position} of its "
                "'headers' column; filter them out, e.g. with "
                "filter(headers, h -> h IS NOT NULL AND h.key IS NOT NULL)."
            )
        name, value = header
        pairs.append((name, None if value is None else bytes(value)))
    return pairs


def _bytes(value: Any) -> bytes | None:
    return None if value is None else bytes(value)


def _await_outcomes(producer: Producer, timeout_s: float) -> int:
    """Wait up to ``timeout_s`` for every row's final outcome; how many still have none."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        pending = producer.flush(max(0.0, min(left, 1.0)))
        if pending == 0 or left <= 0:
            return pending


def _abandon(key: str, handle: ExecutorProducer) -> str:
    """Forget this worker's producer after a failed task and close it at once; what it still
    held, told for the task's error ("" when nothing).

    Not close()'s default 30 s flush: the task fails whatever comes, and Spark's retry writes
    every row of it again, so waiting would only delay the retry (by 30 s while no partition
    can take the rows).
    """
    PRODUCERS.take(key)
    try:
        left = handle.close(0)
    except Exception:
        _log.exception("closing the producer of a failed task failed")
        return "closing this worker's producer failed (see the executor's log)"
    unsure = handle.producer.statistics().in_flight
    if not left and not unsure:
        return ""
    possibly = sum(m.possibly_delivered for m in left)
    told = (
        f"closing this worker's producer handed back {len(left)} undelivered row(s) "
        f"({possibly} possibly delivered)"
    )
    if unsure:
        told += f" and left {unsure} whose delivery is unknown"
    _log.warning("%s; the retry of the task writes them again", told)
    return told
