"""``make compare``: every contender on one real Kafka cluster; tables, a JSON report, a plot."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from tests.realkafka.cluster import KafkaCluster
from tests.realkafka.jars import ensure_jars

from compare import java, processes, sarama
from compare.contenders import (
    Load,
    run_aiokafka,
    run_async_failover,
    run_confluent,
    run_failover,
)
from compare.mirror import CopyResult, MirrorContender, mirrors_copying
from compare.programs import Program, runner
from compare.report import (
    fault_table,
    mirror_table,
    plot,
    plot_mirrors,
    spark_table,
    throughput_table,
    write_json,
)
from compare.scenario import (
    Contender,
    FaultResult,
    ThroughputResult,
    producers_under_fault,
    throughput,
)
from compare.spark_jobs import (
    WARM_UP_ROWS,
    JobResult,
    SparkContender,
    failover_writer,
    session,
    sink_jars,
    spark_sink,
    writers_under_fault,
)

# The second Java row: KIP-794's knob for leaders that stop draining (0, off, by default). Its
# documentation gives no value; this is one a user would pick to react within about a second.
AVAILABILITY_TIMEOUT_MS = "1000"


def contenders(
    java_program: Program | None, sarama_program: Program | None, log: IO[str]
) -> list[Contender]:
    out = [
        Contender(name="confluent-kafka", run=run_confluent, note="Producer, acks=all"),
        Contender(name="FailoverProducer", run=run_failover, note="defaults, acks=all"),
        Contender(name="AsyncFailoverProducer", run=run_async_failover, note="defaults"),
        Contender(name="aiokafka", run=run_aiokafka, note="AIOKafkaProducer, acks=all"),
    ]
    if java_program is not None:
        out += [
            Contender(
                name="Java producer",
                run=runner(java_program, {}, log),
                note="kafka-clients defaults",
            ),
            Contender(
                name="Java producer (avail. timeout)",
                run=runner(
                    java_program,
                    {"partitioner.availability.timeout.ms": AVAILABILITY_TIMEOUT_MS},
                    log,
                ),
                note=f"partitioner.availability.timeout.ms={AVAILABILITY_TIMEOUT_MS}",
            ),
        ]
    if sarama_program is not None:
        out.append(
            Contender(
                name="Sarama (Go)",
                run=runner(sarama_program, {}, log),
                note="AsyncProducer, Sarama 1.61.1 defaults, WaitForAll, Return.Successes",
            )
        )
    return out


def mirror_contenders(mirrormaker_classpath: str | None) -> list[MirrorContender]:
    out = []
    if mirrormaker_classpath is not None:
        classpath = mirrormaker_classpath
        out.append(
            MirrorContender(
                name="MirrorMaker 2",
                note=f"connect-mirror {processes.mirrormaker_version()} standalone, defaults",
                copy_name=lambda source, tag: f"mm{tag}.{source}",
                start=lambda bootstrap, source, target, folder: processes.start_mirrormaker(
                    classpath, bootstrap, source, target, folder
                ),
                report=processes.mirrormaker_report,
            )
        )
    out.append(
        MirrorContender(
            name="failover-mirror",
            note="defaults",
            copy_name=lambda source, tag: f"fm{tag}.{source}",
            start=processes.start_failover_mirror,
            report=processes.failover_mirror_report,
        )
    )
    return out


def spark_contenders() -> list[SparkContender]:
    return [
        SparkContender(
            name="Spark Kafka sink",
            note="spark-sql-kafka-0-10 4.2.0 on Spark 4.3.0, Kafka producer defaults",
            write=spark_sink({}),
        ),
        SparkContender(
            name="Spark Kafka sink (avail. timeout)",
            note=f"kafka.partitioner.availability.timeout.ms={AVAILABILITY_TIMEOUT_MS}",
            write=spark_sink({"partitioner.availability.timeout.ms": AVAILABILITY_TIMEOUT_MS}),
        ),
        SparkContender(name="write_to_kafka", note="defaults, acks=all", write=failover_writer),
    ]


def build_programs(
    progress: Callable[[str], None],
) -> tuple[dict[str, Program | None], dict[str, str]]:
    """The Java and Sarama producer programs, built (or found built); why any cannot run."""
    built: dict[str, Program | None] = {}
    unbuilt: dict[str, str] = {}
    for name, ensure in (("java", java.ensure_program), ("sarama", sarama.ensure_program)):
        try:
            built[name] = ensure()
        except Exception as exc:  # reported in the JSON report, the others still run
            built[name], unbuilt[name] = None, str(exc)
            progress(f"compare: the {name} contender cannot run: {exc}")
    return built, unbuilt


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="make compare", description=__doc__)
    parser.add_argument(
        "--out", type=Path, help="folder for the report (default: build/compare/<UTC time>)"
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="library and broker logs on the terminal"
    )
    parser.add_argument(
        "--rate", type=float, default=2000.0, help="scenario 1: messages per second"
    )
    parser.add_argument(
        "--duration", type=float, default=60.0, help="scenario 1: seconds of sending"
    )
    parser.add_argument(
        "--fault", type=float, nargs=2, default=(20.0, 40.0), metavar=("START", "END")
    )
    parser.add_argument(
        "--messages", type=int, default=50_000, help="scenario 4: messages per round"
    )
    parser.add_argument("--rounds", type=int, default=3, help="scenario 4: rounds")
    parser.add_argument(
        "--only", default="", help="contenders whose name contains this (comma-separated)"
    )
    parser.add_argument(
        "--mirror-messages", type=int, default=1_000_000, help="scenario 3: messages to copy"
    )
    parser.add_argument(
        "--mirror-pause",
        type=float,
        default=20.0,
        metavar="SECONDS",
        help="scenario 3: how long the target's brokers 4 and 5 stay paused",
    )
    parser.add_argument(
        "--mirror-pause-after",
        type=float,
        default=0.3,
        metavar="FRACTION",
        help="scenario 3: pause once the copy holds this fraction of the messages",
    )
    parser.add_argument(
        "--spark-rows", type=int, default=1_000_000, help="scenario 2: rows the job writes"
    )
    parser.add_argument(
        "--spark-pause",
        type=float,
        default=150.0,
        metavar="SECONDS",
        help="scenario 2: the longest brokers 4 and 5 stay paused (they resume when the job ends)",
    )
    parser.add_argument("--scenarios", default="1,2,3,4", help="which scenarios to run")
    return parser.parse_args(argv)


@dataclass
class Selection:
    """What runs: the contenders of each scenario, and why any cannot (by name)."""

    scenarios: set[str]
    producers: list[Contender]
    mirrors: list[MirrorContender]
    writers: list[SparkContender]
    sink: list[str] | None
    unavailable: dict[str, str]


@dataclass
class Results:
    faults: list[FaultResult] = field(default_factory=list)
    jobs: list[JobResult] = field(default_factory=list)
    copies: list[CopyResult] = field(default_factory=list)
    speeds: list[ThroughputResult] = field(default_factory=list)


def select(args: argparse.Namespace, log: IO[str], progress: Callable[[str], None]) -> Selection:
    """The contenders named by ``--only`` of the scenarios named by ``--scenarios``, built."""
    only = [w.strip().lower() for w in args.only.split(",") if w.strip()]

    def chosen(name: str) -> bool:
        return not only or any(word in name.lower() for word in only)

    scenarios = {s.strip() for s in args.scenarios.split(",")}
    built, unavailable = build_programs(progress)
    mirrormaker: str | None = None
    if "3" in scenarios:
        try:
            mirrormaker = processes.mirrormaker_classpath()
        except Exception as exc:  # reported in the notes, failover-mirror still runs
            unavailable["mirrormaker"] = str(exc)
            progress(f"compare: MirrorMaker 2 cannot run: {exc}")
    sink: list[str] | None = None
    if "2" in scenarios:
        try:
            sink = sink_jars()
        except Exception as exc:  # reported in the notes, write_to_kafka still runs
            unavailable["sink"] = str(exc)
            progress(f"compare: Spark's Kafka sink cannot run: {exc}")
    return Selection(
        scenarios=scenarios,
        producers=[c for c in contenders(built["java"], built["sarama"], log) if chosen(c.name)],
        mirrors=[m for m in mirror_contenders(mirrormaker) if chosen(m.name)],
        writers=[
            w
            for w in spark_contenders()
            if (sink is not None or w.write is failover_writer) and chosen(w.name)
        ],
        sink=sink,
        unavailable=unavailable,
    )


def describe(
    args: argparse.Namespace, sel: Selection, version: str, stamp: str
) -> dict[str, object]:
    """The report's header: the settings of each scenario and who ran."""
    return {
        "kafka": version,
        "started": stamp,
        "load_average_at_start": os.getloadavg(),
        "java_unavailable": sel.unavailable.get("java", ""),
        "sarama_unavailable": sel.unavailable.get("sarama", ""),
        "scenario_1": {"rate_per_s": args.rate, "duration_s": args.duration, "fault_s": args.fault,
                       "paused_brokers": [4, 5], "partitions": 12, "replication_factor": 3,
                       "min_insync_replicas": 2, "value_bytes": 100},
        "scenario_2": {"rows": args.spark_rows, "max_pause_s": args.spark_pause,
                       "paused_brokers": [4, 5], "pause_from": "a tenth of the rows stored",
                       "master": "local[2,4]", "spark_partitions": 8, "value_bytes": 100,
                       "warm_up_rows_per_writer": WARM_UP_ROWS,
                       "sink_unavailable": sel.unavailable.get("sink", ""),
                       "sink_jars": sel.sink or [],
                       "writers": {w.name: w.note for w in sel.writers}},
        "scenario_3": {"messages": args.mirror_messages, "pause_s": args.mirror_pause,
                       "pause_after_fraction": args.mirror_pause_after, "paused_brokers": [4, 5],
                       "source": "same cluster, brokers 1-3", "value_bytes": 100,
                       "mirrormaker_unavailable": sel.unavailable.get("mirrormaker", ""),
                       "mirrors": {m.name: m.note for m in sel.mirrors}},
        "scenario_4": {"messages_per_round": args.messages, "rounds": args.rounds,
                       "value_bytes": 100},
        "contenders": {c.name: c.note for c in sel.producers},
    }  # fmt: skip


def run_scenarios(
    cluster: KafkaCluster,
    args: argparse.Namespace,
    sel: Selection,
    out: Path,
    progress: Callable[[str], None],
) -> Results:
    results = Results()
    if "1" in sel.scenarios:
        progress("scenario 1, producers under a fault:")
        results.faults = producers_under_fault(
            cluster,
            sel.producers,
            Load(rate_per_s=args.rate, duration_s=args.duration),
            fault_start_s=args.fault[0],
            fault_end_s=args.fault[1],
            progress=progress,
        )
    if "2" in sel.scenarios:
        progress("scenario 2, a Spark job writing to Kafka:")
        spark = session(sel.sink or [])
        try:
            results.jobs = writers_under_fault(
                cluster,
                spark,
                sel.writers,
                args.spark_rows,
                max_pause_s=args.spark_pause,
                progress=progress,
            )
        finally:
            spark.stop()
    if "3" in sel.scenarios:
        progress("scenario 3, mirrors copying a topic:")
        results.copies = mirrors_copying(
            cluster,
            sel.mirrors,
            args.mirror_messages,
            out,
            pause_after=args.mirror_pause_after,
            pause_s=args.mirror_pause,
            timeout_s=max(300.0, args.mirror_messages / 1000),
            progress=progress,
        )
    if "4" in sel.scenarios:
        progress("scenario 4, throughput on a healthy cluster:")
        results.speeds = throughput(
            cluster, sel.producers, Load(count=args.messages), rounds=args.rounds, progress=progress
        )
    return results


def print_tables(
    args: argparse.Namespace,
    results: Results,
    out: Path,
    version: str,
    progress: Callable[[str], None],
) -> None:
    """Each scenario's table on the terminal, and its plot beside the report."""
    if results.faults:
        progress("")
        progress(
            f"Scenario 1: {args.rate:g} msg/s for {args.duration:g} s, brokers 4 and 5 paused "
            f"{args.fault[0]:g}-{args.fault[1]:g} s (partitions 5, 8, 9 under min ISR); "
            f"Kafka {version}"
        )
        progress(fault_table(results.faults))
        plot(out / "delivered-per-second.png", results.faults, *args.fault, version=version)
    if results.jobs:
        progress("")
        progress(
            f"Scenario 2: a Spark job (local[2,4], 8 partitions) writing {args.spark_rows:,} "
            f"rows of 100 bytes, healthy, then with brokers 4 and 5 paused from a tenth of the "
            f"rows until the job ended (at most {args.spark_pause:g} s); Kafka {version}"
        )
        progress(spark_table(results.jobs))
    if results.copies:
        progress("")
        progress(
            f"Scenario 3: {args.mirror_messages:,} messages of 100 bytes copied from a topic on "
            f"brokers 1-3 to a renamed copy on the same cluster (12 partitions RF 3), healthy, "
            f"then with brokers 4 and 5 paused {args.mirror_pause:g} s from "
            f"{args.mirror_pause_after:.0%} copied; Kafka {version}"
        )
        progress(mirror_table(results.copies))
        plot_mirrors(
            out / "copied-per-second.png", results.copies, args.mirror_pause, version=version
        )
    if results.speeds:
        progress("")
        progress(
            f"Scenario 4: {args.messages} messages of 100 bytes, acks=all, "
            f"{args.rounds} alternated rounds, healthy cluster"
        )
        progress(throughput_table(results.speeds))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    out: Path = args.out or Path("build") / "compare" / stamp
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "compare.log"
    log = log_path.open("a", buffering=1)
    terminal = sys.stdout

    def progress(line: str) -> None:
        print(line, file=terminal, flush=True)

    if not args.verbose:
        # librdkafka and the JVMs write to file descriptor 2 themselves: send it to the log.
        os.dup2(log.fileno(), 2)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    progress(f"compare: report in {out}; load average " + _load())
    sel = select(args, log, progress)
    jars = ensure_jars()
    meta = describe(args, sel, jars.version, stamp)
    started = time.monotonic()
    with KafkaCluster(5, min_insync_replicas=2, jars=jars) as cluster:
        progress(
            f"compare: Kafka {jars.version}, 5 brokers up in {time.monotonic() - started:.0f} s"
        )
        try:
            results = run_scenarios(cluster, args, sel, out, progress)
        finally:
            brokers = out / "broker-logs"
            brokers.mkdir(exist_ok=True)
            for node in (0, *cluster.broker_ids):
                with contextlib.suppress(OSError):
                    shutil.copy(cluster.node(node).log_path, brokers / f"node-{node}.log")
    meta["load_average_at_end"] = os.getloadavg()
    meta["wall_s"] = time.monotonic() - started
    with contextlib.suppress(OSError):
        meta["uptime"] = subprocess.run(
            ["uptime"], capture_output=True, text=True, check=False
        ).stdout.strip()
    print_tables(args, results, out, jars.version, progress)
    write_json(
        out / "report.json",
        meta,
        producers_under_fault=results.faults,
        spark_jobs=results.jobs,
        mirrors=results.copies,
        throughput=results.speeds,
    )
    plots = [
        str(out / name)
        for name, shown in (
            ("delivered-per-second.png", results.faults),
            ("copied-per-second.png", results.copies),
        )
        if shown
    ]
    progress("")
    progress(f"compare: report {out / 'report.json'}" + "".join(f", plot {p}" for p in plots))
    progress(
        f"compare: logs {log_path} (brokers: {out / 'broker-logs'}); load average now {_load()}"
    )
    return 0


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    raise SystemExit(main())
