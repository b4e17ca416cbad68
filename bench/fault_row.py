"""One of bench_failover's fault figures alone: a FailoverProducer kept through the stop of
brokers 4 and 5 of five, against its rate on a healthy twin cluster, and a raw Producer placing
as it does beside it (bench_failover's code and clusters, fewer rows: about a minute).

``python bench/fault_row.py sticky|round_robin|keyed [--rounds N] [--messages N]``. With
``PYTHONPATH`` pointing at another checkout's ``src``, the same row measures that code.
"""

from __future__ import annotations

import argparse
import statistics

import bench_failover as bf


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("row", choices=["sticky", "round_robin", "keyed"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--messages", type=int, default=400_000)
    args = parser.parse_args()
    keyed = args.row == "keyed"
    strategy = "sticky" if keyed else args.row
    runs = bf.fault_runs(args.messages, args.rounds, strategy, keyed)
    faulty, healthy = statistics.median(runs.faulty), statistics.median(runs.healthy)
    print(f"{args.row}: first run after the stop {runs.transition}")
    print(f"  faulty / healthy {faulty / healthy:.3f} ({runs.spread()})")
    print(f"  a raw Producer placing as it does: {runs.reference_ratio():.3f} of its healthy rate")
    raw_faulty = statistics.median(runs.reference_faulty)
    print(f"  this producer / that raw Producer, faulty: {faulty / raw_faulty:.3f}")


if __name__ == "__main__":
    main()
