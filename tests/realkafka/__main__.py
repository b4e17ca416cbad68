"""``make kafka``: a real Apache Kafka cluster on 127.0.0.1 until Ctrl-C.

    python -m tests.realkafka [--brokers 5] [--min-insync-replicas 2] [--keep] [--json]

Prints the bootstrap servers, the controller's and every broker's process id and the folder of
their logs, then waits. Faults by hand: ``kill -STOP <pid>`` / ``kill -CONT <pid>`` (pause,
resume), ``kill -9 <pid>`` (crash). Ctrl-C (or SIGTERM) stops every process by its id.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from types import FrameType

from tests.realkafka.cluster import CONTROLLER_ID, KafkaCluster
from tests.realkafka.jars import Unavailable


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make kafka", description=__doc__.split("\n\n")[0])
    parser.add_argument("--brokers", type=int, default=5, help="broker processes (default 5)")
    parser.add_argument(
        "--min-insync-replicas",
        type=int,
        default=2,
        help="cluster-wide min.insync.replicas, on brokers and controller (default 2)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep data and logs after stopping (default: removed)"
    )
    parser.add_argument("--json", action="store_true", help="print the details as one JSON line")
    args = parser.parse_args(argv)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    cluster = KafkaCluster(
        args.brokers, min_insync_replicas=args.min_insync_replicas, keep_files=args.keep
    )
    try:
        print(f"starting {args.brokers} brokers and a controller ...", file=sys.stderr)
        cluster.start()
    except Unavailable as exc:
        print(f"make kafka: {exc}", file=sys.stderr)
        return 2
    try:
        pids = cluster.pids()
        if args.json:
            details = {
                "bootstrap_servers": cluster.bootstrap_servers,
                "version": cluster.version,
                "controller_pid": pids[CONTROLLER_ID],
                "broker_pids": {str(b): pids[b] for b in cluster.broker_ids},
                "folder": str(cluster.folder),
            }
            print(json.dumps(details), flush=True)
        else:
            print(f"Apache Kafka {cluster.version}, ready in {cluster.started_s:.1f} s")
            print(f"bootstrap servers: {cluster.bootstrap_servers}")
            print(f"controller 0: pid {pids[CONTROLLER_ID]}")
            for b in cluster.broker_ids:
                print(f"broker {b}: pid {pids[b]}  {cluster.address(b)}")
            print(f"logs: {cluster.folder}/*/node.log")
            print("Ctrl-C stops every process.", flush=True)
        while not stop.wait(1.0):
            pass
    finally:
        cluster.close()
        print("stopped", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
