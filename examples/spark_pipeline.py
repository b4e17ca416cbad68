"""A Spark batch job and a streaming job writing to Kafka through the failover producer.

    python examples/spark_pipeline.py

Starts an embedded 3-broker cluster (minibroker) and a local Spark session, writes a batch
DataFrame of orders to one topic, then streams a rate source into another for a few
micro-batches, and prints what each wrote. Against a real cluster, pass its
``bootstrap.servers`` instead and create the topics with your usual tools.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

from pyspark.sql import SparkSession

from failover_partitioner.spark import KafkaBatchWriter, WriteSummary, write_to_kafka
from minibroker import Cluster


def batch_job(
    spark: SparkSession, bootstrap: str, topic: str, *, rows: int = 10_000
) -> WriteSummary:
    """Orders keyed by customer: a customer's orders share a partition while it is healthy."""
    orders = spark.range(rows).selectExpr(
        "CAST(id % 100 AS STRING) AS key",
        "to_json(named_struct('order', id, 'amount', id % 97)) AS value",
    )
    return write_to_kafka(orders, topic, {"bootstrap.servers": bootstrap, "acks": "all"})


def streaming_job(
    spark: SparkSession, bootstrap: str, topic: str, *, batches: int = 3, timeout_s: float = 60
) -> WriteSummary:
    """Stream a rate source to Kafka until ``batches`` micro-batches are written."""
    writer = KafkaBatchWriter(topic, {"bootstrap.servers": bootstrap, "acks": "all"})
    events = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 2000)
        .option("numPartitions", 2)
        .load()
        .selectExpr("CAST(value AS STRING) AS value")
    )
    with tempfile.TemporaryDirectory() as checkpoint:
        query = (
            events.writeStream.foreachBatch(writer)
            .trigger(processingTime="500 milliseconds")
            .option("checkpointLocation", checkpoint)
            .start()
        )
        try:
            deadline = time.monotonic() + timeout_s
            while writer.batches < batches:
                if query.exception() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"streaming query stalled: {query.exception()}")
                time.sleep(0.1)
        finally:
            query.stop()
    return writer.summary


def main() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers need this package too
    with Cluster(brokers=3, config={"min.insync.replicas": "2"}) as cluster:
        for topic in ("orders", "events"):
            cluster.create_topic(topic, partitions=6, replication_factor=3)
        spark = (
            SparkSession.builder.master("local[2]")
            .appName("failover-partitioner example")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        try:
            print("batch:    ", batch_job(spark, cluster.bootstrap_servers, "orders"))
            print("streaming:", streaming_job(spark, cluster.bootstrap_servers, "events"))
        finally:
            spark.stop()


if __name__ == "__main__":
    main()
