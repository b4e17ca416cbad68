"""Scenario 2: one Spark job writing rows to Kafka, by Spark's Kafka sink and by ``write_to_kafka``.

Each writer runs the same job (``rows`` rows from 8 Spark partitions, each row's value the
scenario's 100-byte payload) into a fresh topic of the spread assignment, healthy, then with
brokers 4 and 5 paused once a tenth of the rows is in and left paused until the job ends or
``max_pause_s`` has passed. Then the topic is read back: lost rows, duplicates. Before the
measured jobs every writer writes ``WARM_UP_ROWS`` rows once, untimed (``warm_up``).

The session runs ``local[2,4]``: two cores, and up to four attempts of a task, as
``spark.task.maxFailures`` gives on a cluster (plain ``local[2]`` tries a task once).

Spark's sink is ``spark-sql-kafka-0-10`` from Maven Central (``spark-kafka.pom.xml``), its jars
on the session's ``spark.jars``: those Spark does not ship itself. Its producer is the Java
client with Kafka's defaults (acks=all, idempotence, delivery.timeout.ms of 120 s).
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tests.kafka.support import FAULTY, new_topic, wait_for, whole
from tests.realkafka.cluster import KafkaCluster

from compare import java
from compare.mirror import SAMPLE_S, VALUE_BYTES, TopicProgress, count_back

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

HERE = Path(__file__).parent
SPARK_KAFKA_POM = HERE / "spark-kafka.pom.xml"
SPARK_PARTITIONS = 8
WARM_UP_ROWS = 100_000  # enough calls of the write path for the JIT to compile it
_LOG4J = HERE.parents[1] / "tests" / "spark" / "log4j2.properties"


def sink_jars(timeout_s: float = 600.0) -> list[str]:
    """The sink's jars that Spark's own jars folder lacks (a second copy of, say, the Scala
    library under another version would put two on one class path)."""
    import pyspark

    def artifact(jar: Path) -> str:
        return jar.name.rsplit("-", 1)[0]

    shipped = {artifact(p) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    folder = java.fetched(SPARK_KAFKA_POM, timeout_s=timeout_s) / "lib"
    return sorted(str(p) for p in folder.glob("*.jar") if artifact(p) not in shipped)


def session(jars: Sequence[str]) -> SparkSession:
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (
        SparkSession.builder.master("local[2,4]")
        .appName("compare-scenario-2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={_LOG4J.as_uri()}")
        .config("spark.jars", ",".join(jars))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def rows(spark: SparkSession, count: int) -> DataFrame:
    """``count`` rows whose value is ``contenders.value(id, 100)``: id, zero-padded, then x."""
    return spark.range(count, numPartitions=SPARK_PARTITIONS).selectExpr(
        f"rpad(lpad(CAST(id AS STRING), 10, '0'), {VALUE_BYTES}, 'x') AS value"
    )


Writer = Callable[["DataFrame", str, str], str]  # (rows, bootstrap, topic) -> what it reported


@dataclass(frozen=True, slots=True, kw_only=True)
class SparkContender:
    name: str
    note: str
    write: Writer


def spark_sink(options: Mapping[str, str]) -> Writer:
    """``df.write.format("kafka")`` with ``kafka.``-prefixed producer ``options`` beside."""

    def write(df: DataFrame, bootstrap: str, topic: str) -> str:
        writer = df.write.format("kafka").option("kafka.bootstrap.servers", bootstrap)
        for key, setting in options.items():
            writer = writer.option(f"kafka.{key}", setting)
        writer.option("topic", topic).save()
        return "job succeeded"

    return write


def failover_writer(df: DataFrame, bootstrap: str, topic: str) -> str:
    from failover_partitioner.spark import write_to_kafka

    s = write_to_kafka(df, topic, {"bootstrap.servers": bootstrap, "acks": "all"})
    return (
        f"delivered {s.delivered}, rerouted {s.rerouted}, possible duplicates "
        f"{s.possible_duplicates}, failed {s.failed}, tasks {s.tasks}"
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class JobResult:
    """One writer, one job."""

    name: str
    note: str
    fault: bool
    rows: int
    job_s: float
    outcome: str  # "succeeded", or "failed after N s"
    error: str  # the job's exception, first line
    reported: str
    stored: int  # records read back (duplicates included)
    lost: int
    duplicates: int
    paused_at_s: float | None
    resumed_at_s: float | None
    per_second: tuple[int, ...]  # records added to the topic in each second of the job


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    named = [line for line in lines if "Exception" in line or "Error" in line]
    return (named or lines or [type(exc).__name__])[0][:300]


def write_once(
    cluster: KafkaCluster,
    spark: SparkSession,
    contender: SparkContender,
    count: int,
    *,
    fault: bool,
    max_pause_s: float,
    brokers: tuple[int, ...] = FAULTY,
) -> JobResult:
    cluster.heal()
    topic, _ = new_topic(cluster, f"cmp-spark-{uuid.uuid4().hex[:4]}")
    bootstrap = cluster.bootstrap_servers
    progress = TopicProgress(bootstrap, topic)
    df = rows(spark, count)
    samples: list[tuple[float, int]] = []
    paused: list[int] = []
    paused_at = resumed_at = None
    error = ""
    reported = ""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        started = time.monotonic()
        job = pool.submit(contender.write, df, bootstrap, topic)
        try:
            while not job.done():
                now = time.monotonic() - started
                samples.append((now, progress.copied()))
                if fault and paused_at is None and samples[-1][1] >= count // 10:
                    for broker in brokers:
                        cluster.pause(broker)
                        paused.append(broker)
                    paused_at = time.monotonic() - started
                if paused and now >= (paused_at or 0.0) + max_pause_s:
                    while paused:
                        cluster.resume(paused.pop())
                    resumed_at = time.monotonic() - started
                time.sleep(max(0.0, SAMPLE_S - (time.monotonic() - started - now)))
            job_s = time.monotonic() - started
        finally:
            while paused:
                cluster.resume(paused.pop())
            if paused_at is not None and resumed_at is None:
                resumed_at = time.monotonic() - started
        try:
            reported = job.result()
        except Exception as exc:  # the job's failure is the result
            error = _first_line(exc)
    cluster.heal()
    wait_for(lambda: whole(cluster, topic), 120, f"{topic}: every ISR full again")
    samples.append((job_s, progress.copied()))
    copies, foreign = count_back(bootstrap, topic, count)
    per_second = [0] * (int(job_s) + 1)
    previous = 0
    for t, stored in samples:
        per_second[min(int(t), len(per_second) - 1)] += stored - previous
        previous = stored
    return JobResult(
        name=contender.name,
        note=contender.note,
        fault=paused_at is not None,
        rows=count,
        job_s=job_s,
        outcome=f"failed after {job_s:.0f} s" if error else "succeeded",
        error=error,
        reported=reported or "the job raised",
        stored=sum(copies) + foreign,
        lost=sum(1 for n in copies if n == 0),
        duplicates=sum(n - 1 for n in copies if n > 1),
        paused_at_s=paused_at,
        resumed_at_s=resumed_at,
        per_second=tuple(per_second),
    )


def warm_up(
    cluster: KafkaCluster,
    spark: SparkSession,
    contenders: Sequence[SparkContender],
    count: int = WARM_UP_ROWS,
) -> None:
    """Each writer's first job, small and untimed, into a scratch topic of its own.

    A session's first write by a writer pays for what the later ones reuse: the JVM loading
    and compiling the sink and kafka-clients, Spark starting its Python workers for
    ``write_to_kafka``. Measured, the first healthy job took 50.5 s where the same job took
    15 s after; after a warm-up of 10,000 rows per writer still 35.2 s against 10.4 s, after
    one of 100,000 18.1 s against 13.1 s (docs/comparison.md, scenario 2).
    """
    for contender in contenders:
        topic, _ = new_topic(cluster, "cmp-spark-warm")
        contender.write(rows(spark, count), cluster.bootstrap_servers, topic)


def writers_under_fault(
    cluster: KafkaCluster,
    spark: SparkSession,
    contenders: Sequence[SparkContender],
    count: int,
    *,
    max_pause_s: float,
    faults: Sequence[bool] = (False, True),
    warm_up_rows: int = WARM_UP_ROWS,
    progress: Callable[[str], None] = lambda line: None,
) -> list[JobResult]:
    """Scenario 2: each writer's job, healthy, then with brokers 4 and 5 paused mid-job."""
    warm_up(cluster, spark, contenders, warm_up_rows)
    results = []
    for contender in contenders:
        for fault in faults:
            what = (
                f"brokers 4, 5 paused from a tenth of the rows, up to {max_pause_s:g} s"
                if fault
                else "healthy"
            )
            progress(f"  {contender.name}, {what} ...")
            result = write_once(
                cluster, spark, contender, count, fault=fault, max_pause_s=max_pause_s
            )
            progress(
                f"    {result.outcome} in {result.job_s:.1f} s, lost {result.lost}, "
                f"duplicates {result.duplicates}; {result.error or result.reported}"
            )
            results.append(result)
    return results
