"""The README's Spark example runs against minibroker."""

from __future__ import annotations

from pyspark.sql import SparkSession

from minibroker import Cluster
from tests.readme_blocks import readme_block
from tests.spark.spark_support import read_topic


def test_readme_spark_example_writes_every_row(spark: SparkSession) -> None:
    code = readme_block("A Spark job", "python")
    df = spark.range(2000).selectExpr("id", "CAST(id * 7 AS STRING) AS payload")
    with Cluster(brokers=3, config={"min.insync.replicas": "2"}) as cluster:
        cluster.create_topic("events", partitions=4, replication_factor=3)
        namespace: dict[str, object] = {"df": df, "bootstrap": cluster.bootstrap_servers}
        exec(compile(code, "README.md", "exec"), namespace)
        summary = namespace["summary"]
        assert getattr(summary, "delivered") == 2000  # noqa: B009 - exec'd namespace is untyped
        records = read_topic(cluster.bootstrap_servers, "events")
    assert len(records) == 2000
