"""write_to_kafka on local[2] against minibroker: every row arrives, a broker failure or not."""

from __future__ import annotations

import concurrent.futures
import pickle
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
from confluent_kafka import KafkaError
from prometheus_client import CollectorRegistry
from pyspark.accumulators import AccumulatorParam
from pyspark.errors import PythonException
from pyspark.sql import SparkSession

from failover_partitioner import UndeliveredMessage
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


def test_every_task_calls_its_own_copy_of_the_dead_letter_hook(
    spark: SparkSession, cluster: Cluster
) -> None:
    # Each task unpickles its own copy of the hook, and the accumulator it adds to is
    # registered with that task: a reused producer calling the copy of the task that built it
    # would add where the driver never looks.
    cluster.create_topic(
        "dead-letters", partitions=3, replication_factor=3, config={"max.message.bytes": "1024"}
    )
    hook_calls = spark.sparkContext.accumulator(0)

    def dead_letter(message: UndeliveredMessage, err: Any) -> None:
        hook_calls.add(1)

    df = spark.range(80, numPartitions=8).selectExpr(
        "CASE WHEN id % 10 = 7 THEN repeat('x', 4096) ELSE CAST(id AS STRING) END AS value"
    )
    summary = write_to_kafka(
        df,
        "dead-letters",
        conf(cluster) | {"batch.num.messages": 1},
        raise_on_failed_rows=False,
        dead_letter=dead_letter,
    )

    assert summary.producers_built < summary.tasks == 8  # tasks reused producers
    assert (summary.failed, hook_calls.value) == (8, 8)


def test_a_row_over_the_clients_message_max_bytes_fails_finally_like_any_other(
    spark: SparkSession, cluster: Cluster
) -> None:
    # librdkafka refuses the row before taking it (produce raises): neither a raw exception
    # out of the task nor a row missing from the counts.
    cluster.create_topic("client-limit", partitions=3, replication_factor=3)
    settings = conf(cluster) | {"message.max.bytes": 2048}
    df = spark.range(50, numPartitions=2).selectExpr(
        "CASE WHEN id = 7 THEN repeat('x', 4096) ELSE CAST(id AS STRING) END AS value"
    )

    with pytest.raises(
        PythonException,
        match=r"RowsFailedError: row 7 of this partition is too large for the producer: its "
        r"'value' column is 4096 bytes .* message\.max\.bytes is 2048\. Raise",
    ):
        write_to_kafka(df, "client-limit", settings)

    class Collect(AccumulatorParam[tuple[Any, ...]]):  # local: pickled by value to workers
        def zero(self, value: tuple[Any, ...]) -> tuple[Any, ...]:
            return ()

        def addInPlace(self, a: tuple[Any, ...], b: tuple[Any, ...]) -> tuple[Any, ...]:
            return a + b

    seen = spark.sparkContext.accumulator((), Collect())

    def dead_letter(message: UndeliveredMessage, err: Any) -> None:
        seen.add(((type(message).__name__, len(message.value or ""), err.code()),))

    summary = write_to_kafka(
        df, "client-limit", settings, raise_on_failed_rows=False, dead_letter=dead_letter
    )
    assert (summary.rows, summary.delivered, summary.failed) == (50, 49, 1)
    # As the hook gets a row the brokers refused.
    assert seen.value == (("UndeliveredMessage", 4096, KafkaError.MSG_SIZE_TOO_LARGE),)


def test_a_task_past_flush_timeout_s_fails_without_waiting_longer(spark: SparkSession) -> None:
    # Every partition under min ISR: no row can be delivered. The failed task's producer is
    # closed at once, not after close()'s own 30 s flush.
    with Cluster(brokers=3, config={"min.insync.replicas": "2"}) as three:
        three.create_topic("under-min-isr", partitions=3, replication_factor=3)
        three.stop_broker(2)
        three.stop_broker(3)
        wait_for(
            lambda: all(len(st.isr) == 1 for st in three.describe("under-min-isr")),
            "every partition's ISR to shrink to one replica",
        )
        df = spark.range(20, numPartitions=1).selectExpr("CAST(id AS STRING) AS value")

        started = time.monotonic()
        with pytest.raises(
            PythonException,
            match=r"20 of 20 rows had no final outcome after flush_timeout_s=2; closing this "
            r"worker's producer handed back \d+ undelivered row",
        ):
            write_to_kafka(df, "under-min-isr", conf(three), flush_timeout_s=2)
        assert time.monotonic() - started < 2 + 10


@pytest.mark.parametrize(
    ("ddl", "row", "message"),
    [
        ("value string, topic string", ("v", None), "row 0 of this partition has a null 'topic'"),
        (
            "value string, headers array<struct<key:string,value:binary>>",
            ("v", [("k", b"v"), None]),
            r"row 0 of this partition has a null element at index 1 of its 'headers' column; "
            r"filter them out, e\.g\. with filter\(headers, h -> h IS NOT NULL AND h\.key IS NOT",
        ),
        (
            "value string, headers array<struct<key:string,value:binary>>",
            ("v", [(None, b"v")]),
            "row 0 of this partition has a header with a null key at index 0 of its 'headers'",
        ),
    ],
)
def test_a_row_that_cannot_be_produced_fails_the_task_with_its_reason(
    spark: SparkSession, cluster: Cluster, ddl: str, row: tuple[Any, ...], message: str
) -> None:
    df = spark.createDataFrame([row], ddl)
    with pytest.raises(PythonException, match=f"RowError: {message}"):
        write_to_kafka(df, "t" if "topic" not in ddl else None, producer_config=conf(cluster))


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
