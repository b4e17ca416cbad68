"""Figures of the real Kafka cluster (tests/realkafka) for docs/real-kafka.md.

    python bench/kafka_cluster_figures.py [--starts 5] [--cold] [--messages 200000]

- ``--cold``: fetch Kafka's jars with empty caches (a fresh REALKAFKA_CACHE and a fresh Maven
  local repository), as on a clean machine, and time it;
- the time to start a 5-broker cluster (controller + brokers, storage formatted, every broker
  unfenced), ``--starts`` times, median and range;
- the cluster's peak memory: the sum over its six JVMs of their peak resident set (VmHWM) after
  ``--messages`` messages of 100 bytes written with acks=all to 12 partitions (RF 3);
- ``--faults``: what each fault does to one broker (4), as the metadata a client reads shows it:
  seconds until it left every ISR it was in, until it led no partition, until the metadata
  stopped listing it (fenced); and after resume/restart, until every ISR was full again.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from confluent_kafka import Producer  # noqa: E402
from tests.realkafka.cluster import KafkaCluster  # noqa: E402
from tests.realkafka.jars import ensure_jars  # noqa: E402


def peak_rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def cold_fetch_s() -> float:
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as repo:
        os.environ["REALKAFKA_CACHE"] = cache
        os.environ["MAVEN_OPTS"] = f"-Dmaven.repo.local={repo}"
        began = time.monotonic()
        try:
            ensure_jars()
        finally:
            del os.environ["REALKAFKA_CACHE"]
            del os.environ["MAVEN_OPTS"]
        return time.monotonic() - began


def load(cluster: KafkaCluster, messages: int) -> float:
    cluster.create_topic("load", partitions=12, replication_factor=3)
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 5}
    )
    value = b"x" * 100
    began = time.monotonic()
    for _ in range(messages):
        while True:
            try:
                producer.produce("load", value)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush(120)
    return messages / (time.monotonic() - began)


def _until(predicate: Callable[[], bool], began: float, limit_s: float = 120.0) -> float:
    while not predicate():
        if time.monotonic() - began > limit_s:
            return float("nan")
        time.sleep(0.05)
    return time.monotonic() - began


def fault_timings(cluster: KafkaCluster, broker: int = 4) -> list[str]:
    lines = []
    for fault, undo in (("pause", "resume"), ("kill", "restart"), ("stop", "restart")):
        topic = f"faults-{fault}"
        cluster.create_topic(topic, partitions=12, replication_factor=3)
        began = time.monotonic()
        getattr(cluster, fault)(broker)

        def out_of_isrs(t: str = topic) -> bool:
            return all(broker not in v.isr for v in cluster.describe(t) if v.isr)

        def leads_nothing(t: str = topic) -> bool:
            views = cluster.describe(t)
            return bool(views) and all(v.leader != broker for v in views)

        isr_s = _until(out_of_isrs, began)
        leader_s = _until(leads_nothing, began)
        fenced_s = _until(lambda: broker not in cluster.live_brokers(), began)
        began = time.monotonic()
        if undo == "resume":
            cluster.resume(broker)
        else:
            cluster.restart(broker, wait=False)

        def full(t: str = topic) -> bool:
            views = cluster.describe(t)
            return bool(views) and all(set(v.isr) == set(v.replicas) for v in views)

        back_s = _until(full, began)
        lines.append(
            f"{fault:>5} broker {broker}: out of every ISR {isr_s:.1f} s, leads nothing "
            f"{leader_s:.1f} s, unlisted (fenced) {fenced_s:.1f} s; after {undo}: every ISR "
            f"full {back_s:.1f} s"
        )
        cluster.wait_ready()
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--starts", type=int, default=5)
    ap.add_argument("--cold", action="store_true", help="also time a fetch with empty caches")
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--faults", action="store_true", help="also time each fault on broker 4")
    args = ap.parse_args()
    jars = ensure_jars()
    print(f"Kafka {jars.version}, {os.cpu_count()} cores")
    if args.cold:
        print(f"fetch with empty caches: {cold_fetch_s():.1f} s")
    times: list[float] = []
    for i in range(args.starts):
        with KafkaCluster(5, min_insync_replicas=2, jars=jars) as cluster:
            assert cluster.started_s is not None
            times.append(cluster.started_s)
            if i == args.starts - 1:
                rate = load(cluster, args.messages)
                pids = [pid for pid in cluster.pids().values() if pid is not None]
                peak = sum(peak_rss_bytes(pid) for pid in pids)
                each = [peak_rss_bytes(pid) / 2**20 for pid in pids]
                faults = fault_timings(cluster) if args.faults else []
    print(
        f"5-broker start: median {statistics.median(times):.1f} s, "
        f"range {min(times):.1f}-{max(times):.1f} s over {len(times)} starts"
    )
    print(
        f"peak memory after {args.messages:,} messages ({rate:,.0f} msg/s): "
        f"{peak / 2**20:,.0f} MiB over {len(each)} JVMs "
        f"({', '.join(f'{m:.0f}' for m in each)} MiB)"
    )
    for line in faults:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
