"""write_to_kafka on local[2] against minibroker: every row arrives, a broker failure or not."""

from __future__ import annotations

import concurrent.futures
import pickle
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from pyspark.errors import PythonException
from pyspark.sql import SparkSession

from failover_partitioner.errors import ConfigError
from failover_partitioner.spark import ColumnError, KafkaBatchWriter, WriteSummary, write_to_kafka
from minibroker import Cluster
from tests.spark.spark_support import read_topic

ROWS = 200_000


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with Cluster(brokers=3, config={"min.insync.replicas": "2"}) as c:
        yield c


def conf(cluster: Cluster) -> dict[str, Any]:
    return {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"}


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.02)


def test_200k_rows_every_row_consumed_back(spark: SparkSession, cluster: Cluster) -> None:
    cluster.create_topic("bulk", partitions=12, replication_factor=3)
    df = spark.range(ROWS, numPartitions=8).selectExpr(
        "CAST(id AS STRING) AS value", "CAST(CAST(id % 1000 AS STRING) AS BINARY) AS key"
    )

    summary = write_to_kafka(df, "bulk", conf(cluster))

    assert replace(summary, producers_built=0) == WriteSummary(rows=ROWS, delivered=ROWS, tasks=8)
    records = read_topic(cluster.bootstrap_servers, "bulk")
    assert {r.value for r in records} == {str(i).encode() for i in range(ROWS)}
    assert len(records) == ROWS
    # Keyed rows keep Kafka's partition for their key: one partition per key.
    partitions_by_key: dict[bytes | None, set[int]] = {}
    for r in records:
        partitions_by_key.setdefault(r.key, set()).add(r.partition)
    assert all(len(ps) == 1 for ps in partitions_by_key.values())


def test_every_column_round_trips(spark: SparkSession, cluster: Cluster) -> None:
    for topic in ("left", "right"):
        cluster.create_topic(topic, partitions=3, replication_factor=3)
    df = spark.createDataFrame(
        [
            (b"v1", b"k1", [("trace", b"t1"), ("empty", None)], "left"),
            (b"v2", None, None, "right"),
            (None, b"k3", [], "left"),
            (bytes(range(256)), b"k4", [("bin", bytes(range(256)))], "right"),
        ],
        "value binary, key binary, headers array<struct<key:string,value:binary>>, topic string",
    )

    summary = write_to_kafka(df, producer_config=conf(cluster))

    assert (summary.rows, summary.delivered, summary.failed) == (4, 4, 0)
    got = {
        (r.topic, r.value, r.key, r.headers)
        for topic in ("left", "right")
        for r in read_topic(cluster.bootstrap_servers, topic)
    }
    assert got == {
        ("left", b"v1", b"k1", (("trace", b"t1"), ("empty", None))),
        ("right", b"v2", None, ()),
        ("left", None, b"k3", ()),
        ("right", bytes(range(256)), b"k4", (("bin", bytes(range(256))),)),
    }


def test_workers_reuse_their_producer_across_tasks(spark: SparkSession, cluster: Cluster) -> None:
    cluster.create_topic("reuse", partitions=3, replication_factor=3)
    settings = conf(cluster) | {"client.id": "reuse-test"}
    df = spark.range(800, numPartitions=8).selectExpr("CAST(id AS STRING) AS value")

    first = write_to_kafka(df, "reuse", settings)
    second = write_to_kafka(df, "reuse", settings)

    assert first.tasks == second.tasks == 8
    # Two task slots: a handful of Python workers serve all 16 tasks, each building one
    # producer for this configuration at most and keeping it for its later tasks.
    assert 1 <= first.producers_built + second.producers_built <= 8
    assert second.producers_built < second.tasks


def test_failed_rows_fail_the_task_or_are_counted(spark: SparkSession, cluster: Cluster) -> None:
    # The topic refuses record batches over 1 KiB: MESSAGE_TOO_LARGE, which retrying cannot
    # fix. One record per batch, so only the oversized row fails (not its batch neighbours).
    cluster.create_topic(
        "small", partitions=3, replication_factor=3, config={"max.message.bytes": "1024"}
    )
    settings = conf(cluster) | {"batch.num.messages": 1}
    df = spark.range(50, numPartitions=2).selectExpr(
        "CASE WHEN id = 7 THEN repeat('x', 4096) ELSE CAST(id AS STRING) END AS value"
    )

    with pytest.raises(PythonException, match=r"1 of 25 rows finally failed .*MSG_SIZE_TOO_LARGE"):
        write_to_kafka(df, "small", settings)

    summary = write_to_kafka(df, "small", settings, raise_on_failed_rows=False)
    assert (summary.rows, summary.delivered, summary.failed) == (50, 49, 1)


def test_a_null_topic_fails_the_task_with_its_reason(spark: SparkSession, cluster: Cluster) -> None:
    df = spark.createDataFrame([("v", None)], "value string, topic string")
    with pytest.raises(PythonException, match="null 'topic'"):
        write_to_kafka(df, producer_config=conf(cluster))


@pytest.mark.parametrize(
    ("ddl", "topic", "message"),
    [
        ("payload string", "t", "no 'value' column"),
        ("value int", "t", "column 'value' has type int, expected string or binary"),
        ("value string, key array<int>", "t", "column 'key' has type array<int>"),
        ("value string, headers map<string,binary>", "t", "column 'headers' has type"),
        ("value string", None, "no topic"),
    ],
)
def test_schema_errors_fail_on_the_driver(
    spark: SparkSession, ddl: str, topic: str | None, message: str
) -> None:
    df = spark.createDataFrame([], ddl)
    with pytest.raises(ColumnError, match=message):
        write_to_kafka(df, topic, {"bootstrap.servers": "127.0.0.1:1"})


@pytest.mark.parametrize(
    ("config", "options", "message"),
    [
        ({}, {}, "no 'bootstrap.servers'"),
        ({"bootstrap.servers": "127.0.0.1:1", "acks": "sometimes"}, {}, "acks"),
        ({"bootstrap.servers": "127.0.0.1:1", "no.such.setting": 1}, {}, "no.such.setting"),
        ({"bootstrap.servers": "127.0.0.1:1", "on_delivery": print}, {}, "'on_delivery'"),
        ({"bootstrap.servers": "127.0.0.1:1"}, {"max_in_flight": 0}, "max_in_flight"),
        ({"bootstrap.servers": "127.0.0.1:1"}, {"no_such_option": 1}, "no_such_option"),
        # A registry holds a lock: it cannot travel to executors.
        ({"bootstrap.servers": "127.0.0.1:1"}, {"metrics_registry": CollectorRegistry()}, "pickle"),
        ({"bootstrap.servers": "127.0.0.1:1"}, {"metrics_port": 9000}, "metrics_port"),
    ],
)
def test_bad_settings_fail_on_the_driver(
    spark: SparkSession, config: dict[str, Any], options: dict[str, Any], message: str
) -> None:
    df = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(ConfigError, match=message):
        write_to_kafka(df, "t", config, **options)


def test_a_streaming_dataframe_is_refused_with_the_way_to_write_it(spark: SparkSession) -> None:
    stream = spark.readStream.format("rate").load().selectExpr("CAST(value AS STRING) AS value")
    with pytest.raises(ConfigError, match=r"foreachBatch\(KafkaBatchWriter"):
        write_to_kafka(stream, "t", {"bootstrap.servers": "127.0.0.1:1"})


def test_the_batch_writer_checks_its_settings_when_built() -> None:
    with pytest.raises(ConfigError, match="max_in_flight"):
        KafkaBatchWriter("t", {"bootstrap.servers": "127.0.0.1:1"}, max_in_flight=0)
    with pytest.raises(ConfigError, match="producer_config is required"):
        KafkaBatchWriter("t")


def test_the_documented_names_are_exported() -> None:
    import failover_partitioner.spark as module

    assert sorted(module.__all__) == [
        "ColumnError",
        "KafkaBatchWriter",
        "RowError",
        "RowsFailedError",
        "WriteSummary",
        "write_to_kafka",
    ]
    assert all(hasattr(module, name) for name in module.__all__)


def test_summary_is_small_frozen_and_picklable() -> None:
    summary = WriteSummary(rows=3, delivered=3)
    with pytest.raises(AttributeError):
        summary.rows = 4  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(summary)) == summary


def test_brokers_stopped_mid_job_lose_nothing_and_degraded_partitions_get_nothing(
    spark: SparkSession,
) -> None:
    topic = "failover"
    with Cluster(brokers=5, config={"min.insync.replicas": "2"}) as five:
        five.create_topic(topic, partitions=12, replication_factor=3)
        degraded = [p for p in range(12) if {4, 5} <= set(five.partition_state(topic, p).replicas)]
        assert degraded, "replica placement should give some partitions both brokers 4 and 5"
        df = spark.range(ROWS, numPartitions=8).selectExpr("CAST(id AS STRING) AS value")

        def written() -> int:
            return sum(five.partition_state(topic, p).log_end_offset for p in range(12))

        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            job = pool.submit(write_to_kafka, df, topic, conf(five))
            wait_for(lambda: written() >= ROWS // 4, "a quarter of the rows to be written")
            assert not job.done(), "the job ended before the brokers could be stopped"
            five.stop_broker(4)
            five.stop_broker(5)
            wait_for(
                lambda: all(len(five.partition_state(topic, p).isr) == 1 for p in degraded),
                "the degraded partitions' ISR to shrink to one replica",
            )
            ends_when_degraded = {
                p: five.partition_state(topic, p).log_end_offset for p in degraded
            }
            summary = job.result(timeout=120)

        assert summary.delivered == ROWS
        assert summary.failed == 0
        assert summary.rerouted > 0
        # While degraded (from the ISR shrink to the end of the job) they received nothing.
        assert {p: five.partition_state(topic, p).log_end_offset for p in degraded} == (
            ends_when_degraded
        )
        # Rows acknowledged just before the ISR shrank are in the degraded partitions' logs but
        # above their frozen high watermark (Kafka 3.7+, KIP-966): visible once they recover.
        five.start_broker(4)
        five.start_broker(5)
        wait_for(
            lambda: all(
                len(st.isr) == 3 and st.high_watermark == st.log_end_offset
                for st in five.describe(topic)
            ),
            "every partition to be fully in sync again",
        )
        records = read_topic(five.bootstrap_servers, topic)
        values = [r.value for r in records]
        assert set(values) == {str(i).encode() for i in range(ROWS)}
        assert len(values) - ROWS <= summary.possible_duplicates
