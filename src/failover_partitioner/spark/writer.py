"""Write Spark DataFrames to Kafka through the failover producer.

``write_to_kafka(df, topic, producer_config=...)`` writes a batch DataFrame;
``KafkaBatchWriter`` does the same for each micro-batch of a streaming query
(``df.writeStream.foreachBatch(writer)``). The columns are those of Spark's own Kafka sink:
``value`` (string or binary, required), ``key`` (string or binary), ``headers``
(``array<struct<key:string,value:binary>>``) and ``topic`` (string, when no ``topic=`` is
given).

Delivery is at least once: each task waits for the final outcome of every row it produced and
fails if any row finally failed, and Spark then runs the task again. See docs/spark.md.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame

from failover_partitioner.errors import ConfigError
from failover_partitioner.spark.columns import ColumnError, plan_rows
from failover_partitioner.spark.executor import RowError, RowsFailedError, write_partition
from failover_partitioner.spark.spec import (
    ProducerSettings,
    WriterSpec,
    check_flush_timeout,
    check_settings,
)
from failover_partitioner.spark.summary import SummaryParam, WriteSummary

__all__ = [
    "ColumnError",
    "KafkaBatchWriter",
    "RowError",
    "RowsFailedError",
    "WriteSummary",
    "write_to_kafka",
]

DEFAULT_FLUSH_TIMEOUT_S = 300.0


def write_to_kafka(
    df: DataFrame,
    topic: str | None = None,
    producer_config: Mapping[str, Any] | None = None,
    *,
    flush_timeout_s: float = DEFAULT_FLUSH_TIMEOUT_S,
    raise_on_failed_rows: bool = True,
    **failover_options: Any,
) -> WriteSummary:
    """Write every row of ``df`` to Kafka and return what happened.

    ``producer_config`` is confluent-kafka's config dict (``bootstrap.servers`` at least);
    ``failover_options`` are :class:`~failover_partitioner.FailoverProducer`'s keyword options.
    Both are checked here, on the driver, before any task starts; so is the schema.

    Each task waits up to ``flush_timeout_s`` at its end for its rows' final outcomes. A task
    with a row that finally failed raises (and Spark retries it) unless
    ``raise_on_failed_rows=False``, in which case such rows are only counted in
    :attr:`WriteSummary.failed`.
    """
    settings = check_settings(producer_config, failover_options)
    return _write(df, topic, settings, check_flush_timeout(flush_timeout_s), raise_on_failed_rows)


class KafkaBatchWriter:
    """A ``foreachBatch`` function that writes each micro-batch with :func:`write_to_kafka`.

    ``query = df.writeStream.foreachBatch(KafkaBatchWriter("events", producer_config=conf))
    .start()``. Settings are checked at construction; each batch's schema when it arrives.
    :attr:`summary` is the running total over the batches written so far. Spark's
    ``foreachBatch`` is at least once: after a failure a batch may be written again.
    """

    def __init__(
        self,
        topic: str | None = None,
        producer_config: Mapping[str, Any] | None = None,
        *,
        flush_timeout_s: float = DEFAULT_FLUSH_TIMEOUT_S,
        raise_on_failed_rows: bool = True,
        **failover_options: Any,
    ) -> None:
        if topic is not None and (not isinstance(topic, str) or not topic):
            raise ConfigError(
                f"topic must be a topic name, or None to use each row's topic column, got {topic!r}"
            )
        self._topic = topic
        self._settings = check_settings(producer_config, failover_options)
        self._flush_timeout_s = check_flush_timeout(flush_timeout_s)
        self._raise_on_failed_rows = raise_on_failed_rows
        self._lock = threading.Lock()
        self._summary = WriteSummary()
        self._batches = 0
        self._last_batch_id: int | None = None

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        written = _write(
            batch_df,
            self._topic,
            self._settings,
            self._flush_timeout_s,
            self._raise_on_failed_rows,
        )
        # Called from Spark's streaming thread; read from any other.
        with self._lock:
            self._summary += written
            self._batches += 1
            self._last_batch_id = batch_id

    @property
    def summary(self) -> WriteSummary:
        """Counts over every batch written so far."""
        with self._lock:
            return self._summary

    @property
    def batches(self) -> int:
        """How many micro-batches were written."""
        with self._lock:
            return self._batches

    @property
    def last_batch_id(self) -> int | None:
        """The id of the last micro-batch written, or None before the first."""
        with self._lock:
            return self._last_batch_id


def _write(
    df: DataFrame,
    topic: str | None,
    settings: ProducerSettings,
    flush_timeout_s: float,
    raise_on_failed_rows: bool,
) -> WriteSummary:
    if df.isStreaming:
        raise ConfigError(
            "write_to_kafka takes a batch DataFrame; for a streaming one use "
            "df.writeStream.foreachBatch(KafkaBatchWriter(...))."
        )
    layout = plan_rows(df.schema, topic=topic)
    spec = WriterSpec(
        topic=topic,
        layout=layout,
        producer_config=settings.producer_config,
        failover_options=settings.failover_options,
        cache_key=settings.cache_key,
        flush_timeout_s=flush_timeout_s,
        raise_on_failed_rows=raise_on_failed_rows,
    )
    try:
        context = df.sparkSession.sparkContext
    except Exception as exc:  # Spark Connect: no SparkContext, no RDDs, no accumulators
        raise ConfigError(
            "write_to_kafka needs classic PySpark (a SparkContext, DataFrame.rdd and "
            f"accumulators); this session cannot provide them: {exc}"
        ) from exc
    counts = context.accumulator(WriteSummary(), SummaryParam())
    rows = df.select(*layout.columns()).rdd
    rows.foreachPartition(functools.partial(write_partition, spec=spec, counts=counts))
    return counts.value
