"""Scenario 2 of the comparison harness (bench/compare/spark_jobs.py) kept honest on a small
scale: Spark's Kafka sink and write_to_kafka each write 3,000 rows while brokers 4 and 5 are
paused from a tenth of the rows for at most a few seconds. What the harness reports must add up
(every row read back once, more than once, or counted lost; the per-second series sums to what
the topic holds) and show what the Spark writer's own tests show: write_to_kafka loses nothing.

The sink's jars must be on the session's class path from its start, so this test starts the
harness's own session, and cannot share one started without them (``tests/spark/conftest.py``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark import SparkContext
from pyspark.sql import SparkSession

sys.path.insert(0, str(Path(__file__).parents[2] / "bench"))

from compare.__main__ import spark_contenders
from compare.spark_jobs import session, sink_jars, writers_under_fault
from tests.realkafka.cluster import KafkaCluster
from tests.realkafka.fixtures import unavailable
from tests.realkafka.jars import Unavailable

pytestmark = pytest.mark.slow  # own Spark session, four jobs: 40 s at load average 4, 83 s at 27

ROWS = 3_000
MAX_PAUSE_S = 5.0


@pytest.fixture
def spark_with_sink() -> Iterator[SparkSession]:
    try:
        jars = sink_jars()
    except Unavailable as exc:
        unavailable(str(exc))
    if SparkContext._active_spark_context is not None:
        pytest.skip(
            "a Spark session without the Kafka sink's jars runs in this process already: "
            "run this test before the Spark tests, or alone"
        )
    spark = session(jars)
    try:
        yield spark
    finally:
        spark.stop()


def test_spark_harness_counts_add_up_under_one_fault(
    kafka_cluster: KafkaCluster, spark_with_sink: SparkSession
) -> None:
    writers = [w for w in spark_contenders() if "avail" not in w.name]
    results = writers_under_fault(
        kafka_cluster,
        spark_with_sink,
        writers,
        ROWS,
        max_pause_s=MAX_PAUSE_S,
        faults=(True,),
        warm_up_rows=10_000,  # what a small test needs; the harness's 100,000 cost time here
    )
    by_name = {r.name: r for r in results}
    assert set(by_name) == {"Spark Kafka sink", "write_to_kafka"}
    for r in results:
        assert r.fault, r
        assert r.paused_at_s is not None, r
        assert r.resumed_at_s is not None, r
        # The pause ends with the job or at MAX_PAUSE_S, seen by a sampling step of up to ~1.5 s.
        assert r.resumed_at_s - r.paused_at_s <= MAX_PAUSE_S + 3.0, r
        # Every row is read back once, more than once, or counted lost; nothing else is there.
        assert r.stored == ROWS - r.lost + r.duplicates, r
        assert sum(r.per_second) == r.stored, r
    ours = by_name["write_to_kafka"]
    assert ours.outcome == "succeeded", ours
    assert ours.lost == 0, ours
    assert ours.reported.startswith(f"delivered {ROWS},"), ours.reported
