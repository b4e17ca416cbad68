"""One of bench_failover's fault figures alone: a FailoverProducer kept through the stop of
brokers 4 and 5 of five, against its rate on a healthy twin cluster, and a raw Producer placing
as it does beside it (bench_failover's code and clusters, fewer rows: about a minute).

``python bench/fault_row.py sticky|round_robin|keyed|aio [--rounds N] [--messages N] [--kafka]``
(``aio``: bench_aio's AsyncFailoverProducer row, which has no raw reference).
``--kafka``: the twin clusters are real Apache Kafka (tests/realkafka: five brokers and a
controller each, twelve JVMs in all; a SIGTERM stops brokers 4 and 5, a controlled shutdown)
instead of minibroker's. With ``PYTHONPATH`` pointing at another checkout's ``src``, the same
row measures that code.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path

import bench_aio
import bench_failover as bf
from harness import FAULT_CONFIG, FaultCluster, FaultRuns, minibroker_twins

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.realkafka.cluster import KafkaCluster


class _KafkaTwin:
    """A real Kafka cluster as ``runs_under_fault`` uses one (harness.FaultCluster)."""

    def __init__(self, cluster: KafkaCluster) -> None:
        self._cluster = cluster
        self._topics: list[str] = []

    @property
    def bootstrap_servers(self) -> str:
        return self._cluster.bootstrap_servers

    def create_topic(self, name: str, partitions: int) -> None:
        self._cluster.create_topic(name, partitions=partitions, replication_factor=3)
        self._topics.append(name)

    def stop_broker(self, broker_id: int) -> None:
        """A controlled shutdown, then wait until the metadata shows the broker in no ISR."""
        self._cluster.stop(broker_id)
        self._cluster.wait_for(
            lambda: all(
                broker_id not in v.isr for t in self._topics for v in self._cluster.describe(t)
            ),
            timeout_s=60,
            what=f"broker {broker_id} to leave every ISR",
        )


@contextlib.contextmanager
def kafka_twins() -> Iterator[tuple[FaultCluster, FaultCluster]]:
    min_isr = int(FAULT_CONFIG["min.insync.replicas"])
    with (
        KafkaCluster(5, min_insync_replicas=min_isr) as healthy,
        KafkaCluster(5, min_insync_replicas=min_isr) as faulty,
    ):
        yield _KafkaTwin(healthy), _KafkaTwin(faulty)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("row", choices=["sticky", "round_robin", "keyed", "aio"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--messages", type=int, default=None, help="400,000 (aio: 100,000)")
    parser.add_argument("--kafka", action="store_true", help="real Apache Kafka clusters")
    args = parser.parse_args()
    twins = kafka_twins if args.kafka else minibroker_twins
    runs: FaultRuns
    if args.row == "aio":
        runs = bench_aio.fault_runs(args.messages or 100_000, args.rounds, twins)
    else:
        keyed = args.row == "keyed"
        strategy = "sticky" if keyed else args.row
        runs = bf.fault_runs(args.messages or 400_000, args.rounds, strategy, keyed, twins)
    faulty, healthy = statistics.median(runs.faulty), statistics.median(runs.healthy)
    print(f"{args.row}: first run after the stop {runs.transition}")
    print(f"  faulty / healthy {faulty / healthy:.3f} ({runs.spread()})")
    print(f"  rates: healthy {[round(r) for r in runs.healthy]}")
    print(f"         faulty {[round(r) for r in runs.faulty]}")
    if runs.reference_faulty:  # (the asyncio row has none)
        print(
            f"  a raw Producer placing as it does: {runs.reference_ratio():.3f} of its healthy rate"
        )
        raw_faulty = statistics.median(runs.reference_faulty)
        print(f"  this producer / that raw Producer, faulty: {faulty / raw_faulty:.3f}")


if __name__ == "__main__":
    main()
