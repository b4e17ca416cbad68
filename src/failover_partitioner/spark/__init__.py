"""Write Spark DataFrames to Kafka through the failover producer.

``write_to_kafka(df, topic, producer_config=...)`` writes a batch DataFrame;
``KafkaBatchWriter`` does the same for each micro-batch of a streaming query
(``df.writeStream.foreachBatch(writer)``). The columns are those of Spark's own Kafka sink:
``value`` (string or binary, required), ``key`` (string or binary), ``headers``
(``array<struct<key:string,value:binary>>``) and ``topic`` (string, when no ``topic=`` is
given).

Delivery is at least once: each task waits for the final outcome of every row it produced and
fails if any row finally failed, and Spark then runs the task again. See docs/spark.md.

Layout: ``writer`` (the driver: ``write_to_kafka``, ``KafkaBatchWriter``), ``columns`` and
``spec`` (decided on the driver before a job starts), ``executor``, ``factory``, ``cache`` and
``summary`` (what each Spark task runs). Every write goes through ``FailoverProducer``.
"""

from __future__ import annotations

from failover_partitioner.spark.writer import (
    ColumnError,
    KafkaBatchWriter,
    RowError,
    RowsFailedError,
    WriteSummary,
    write_to_kafka,
)

__all__ = [
    "ColumnError",
    "KafkaBatchWriter",
    "RowError",
    "RowsFailedError",
    "WriteSummary",
    "write_to_kafka",
]
