"""A minibroker cluster in a child process, for tests whose input may take the process down.

``python -m tests.integration.reliability_broker_child --brokers 3 --topic NAME:PARTITIONS
--config KEY=VALUE`` prints one JSON line ``{"bootstrap": ...}`` once the cluster is up, then
answers commands read from standard input, one JSON line each:

* ``describe TOPIC``: ``[{"partition", "leader", "isr", "high_watermark", "log_end_offset"}]``;
* ``brokers``: ``[{"broker_id", "status"}]``;
* ``quit``: closes the cluster and exits 0.

A crash of the cluster ends the process, which the parent sees as its exit code.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from minibroker import Cluster


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--topic", action="append", default=[], metavar="NAME:PARTITIONS")
    parser.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    config = dict(item.split("=", 1) for item in args.config)
    with Cluster(brokers=args.brokers, config=config) as cluster:
        for spec in args.topic:
            name, partitions = spec.rsplit(":", 1)
            cluster.create_topic(name, partitions=int(partitions), replication_factor=-1)
        print(json.dumps({"bootstrap": cluster.bootstrap_servers}), flush=True)
        for line in sys.stdin:
            command, _, rest = line.strip().partition(" ")
            if command == "describe":
                answer: object = [
                    {
                        "partition": st.partition,
                        "leader": st.leader,
                        "isr": list(st.isr),
                        "high_watermark": st.high_watermark,
                        "log_end_offset": st.log_end_offset,
                    }
                    for st in cluster.describe(rest)
                ]
            elif command == "brokers":
                answer = [{"broker_id": b.broker_id, "status": b.status} for b in cluster.brokers()]
            elif command == "quit":
                return 0
            else:
                answer = {"error": f"unknown command {command!r}"}
            print(json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
