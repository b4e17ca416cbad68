"""Issue 8: rows/s of ``write_to_kafka`` against the naive ``foreachPartition`` writer.

The naive writer is what a user writes by hand: a plain confluent-kafka ``Producer`` built in
each partition, ``produce`` + ``poll(0)`` per row, ``flush()`` at the end of the partition. It
never learns whether its rows were delivered. Both write the same cached DataFrame to the same
minibroker cluster (3 brokers, RF=3, acks=all) in the same run, alternating, and the figure is
the ratio of their median rates.
"""

from __future__ import annotations

import functools
import os
import statistics
import sys
import time
from collections.abc import Iterable
from typing import Any

from harness import Figure

ROWS_FULL = 200_000
ROWS_QUICK = 40_000
PARTITIONS = 4  # DataFrame partitions, i.e. Spark tasks per write
TOPIC_PARTITIONS = 12


def naive_partition(rows: Iterable[Any], conf: dict[str, Any], topic: str) -> None:
    """The hand-written writer: one producer per partition, flushed at its end."""
    import confluent_kafka

    producer = confluent_kafka.Producer(conf)
    for row in rows:
        while True:
            try:
                producer.produce(topic, value=row.value)
                break
            except BufferError:  # local queue full: wait for deliveries, as the docs advise
                producer.poll(0.1)
        producer.poll(0)
    producer.flush()


def run(quick: bool) -> list[Figure]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark import cloudpickle
    from pyspark.sql import SparkSession

    from failover_partitioner.spark import write_to_kafka
    from minibroker import Cluster

    # Executors cannot import this file (bench/ is not a package): ship naive_partition by value.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]  # vendored cloudpickle has no annotations
    rows = ROWS_QUICK if quick else ROWS_FULL
    repeats = 2 if quick else 3
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench_spark")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        with Cluster(brokers=3, config={"min.insync.replicas": "2"}) as cluster:
            conf = {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 5}
            data = (
                spark.range(rows, numPartitions=PARTITIONS)
                .selectExpr("CAST(id AS STRING) || repeat('x', 90) AS value")
                .cache()
            )
            data.count()

            def naive_run(topic: str) -> None:
                data.foreachPartition(functools.partial(naive_partition, conf=conf, topic=topic))

            def failover_run(topic: str) -> None:
                summary = write_to_kafka(data, topic, conf)
                if summary.delivered != rows:
                    raise RuntimeError(f"write_to_kafka delivered {summary} of {rows} rows")

            writers = {"naive": naive_run, "failover": failover_run}
            rates: dict[str, list[float]] = {name: [] for name in writers}
            # Round 0 warms up both (Python workers, imports, producers) and is not counted;
            # the order alternates so that neither side always runs on a warmer machine.
            for i in range(repeats + 1):
                order = list(writers) if i % 2 == 0 else list(reversed(writers))
                for name in order:
                    topic = f"{name}-{i}"
                    cluster.create_topic(topic, partitions=TOPIC_PARTITIONS, replication_factor=3)
                    start = time.perf_counter()
                    writers[name](topic)
                    if i > 0:
                        rates[name].append(rows / (time.perf_counter() - start))
            naive_rates, failover_rates = rates["naive"], rates["failover"]
            data.unpersist()
    finally:
        spark.stop()
    failover = statistics.median(failover_rates)
    naive = statistics.median(naive_rates)
    return [
        Figure(
            issue=8,
            name="spark write_to_kafka rows/s vs naive foreachPartition",
            value=failover,
            reference=naive,
            unit="rows/s",
            target=0.9,
            note=(
                f"{rows} rows x {repeats}, local[2], {PARTITIONS} tasks, minibroker 3 brokers "
                f"RF=3 acks=all; runs naive {[round(r) for r in naive_rates]}, "
                f"failover {[round(r) for r in failover_rates]}"
            ),
        )
    ]
