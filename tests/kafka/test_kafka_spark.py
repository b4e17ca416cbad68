"""The Spark writer on real Apache Kafka (must-show 5): 200,000 rows from ``local[2]`` into a topic
of 12 partitions (RF 3, min ISR 2); brokers 4 and 5 paused once a tenth of the rows is in.
Nothing is lost and rows meant for the degraded partitions were rerouted."""

from __future__ import annotations

import concurrent.futures
from typing import Any

from pyspark.sql import SparkSession

from failover_partitioner.spark import write_to_kafka
from tests.kafka.support import (
    FAULTY,
    degraded,
    high_watermarks,
    new_topic,
    read_back,
    wait_for,
    whole,
)
from tests.realkafka.cluster import KafkaCluster

ROWS = 200_000


def stored(bootstrap: str, topic: str) -> int:
    """Records below the high watermarks (what a consumer could read now)."""
    return sum(high_watermarks(bootstrap, topic).values())


def test_brokers_paused_mid_job_lose_nothing_and_rows_are_rerouted(
    spark: SparkSession, kafka_cluster: KafkaCluster
) -> None:
    topic, bad = new_topic(kafka_cluster, "spark")
    conf: dict[str, Any] = {"bootstrap.servers": kafka_cluster.bootstrap_servers, "acks": "all"}
    df = spark.range(ROWS, numPartitions=8).selectExpr("CAST(id AS STRING) AS value")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        job = pool.submit(write_to_kafka, df, topic, conf)
        wait_for(
            lambda: job.done() or stored(kafka_cluster.bootstrap_servers, topic) >= ROWS // 10,
            120,
            "a tenth of the rows to be written",
        )
        assert not job.done(), "the job ended before the brokers could be paused"
        for broker in FAULTY:
            kafka_cluster.pause(broker)
        summary = job.result(timeout=300)
    assert degraded(kafka_cluster, topic) == bad
    assert summary.delivered == ROWS
    assert summary.failed == 0
    assert summary.rerouted > 0
    kafka_cluster.heal()
    wait_for(lambda: whole(kafka_cluster, topic), 90, "the ISRs to recover")
    values = {m.value() for m in read_back(kafka_cluster.bootstrap_servers, topic)}
    missing = {str(i).encode() for i in range(ROWS)} - values
    assert not missing, f"{len(missing)} rows not consumed back, e.g. {sorted(missing)[:5]}"
