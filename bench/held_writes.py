"""FailoverProducer's rate, second by second, while a follower is cut from replication.

``python bench/held_writes.py`` (options: ``--help``). A 5-broker minibroker cluster (RF 3,
min ISR 2, 12 partitions) in a process of its own; one FailoverProducer with default options
produces 100-byte values as fast as it can; after ``--cut-at`` seconds broker 5 stops
replicating (clients still reach it). Until ``replica.lag.time.max.ms`` (``--lag-ms``, 30 s as
in Kafka) drops it from the ISR, the leaders of its partitions hold every acks=all write to them
until ``request.timeout.ms`` (5 s), answer REQUEST_TIMED_OUT, and the producer quarantines those
partitions and sends the messages elsewhere. The timeline shows what that costs: docs/guarantees.md
("What is not guaranteed") quotes it.
"""

from __future__ import annotations

import argparse
import json
import time

from failover_partitioner import FailoverProducer, ProduceTimeout
from harness import MinibrokerProcess

TOPIC = "held"
VALUE = b"x" * 100


def timeline(seconds: int, cut_at: float, lag_ms: int) -> dict[str, object]:
    """Messages accepted in each second, and the producer's counters at the end."""
    config = {"min.insync.replicas": "2", "replica.lag.time.max.ms": str(lag_ms)}
    with MinibrokerProcess(5, config) as cluster:
        cluster.create_topic(TOPIC, 12)
        p = FailoverProducer(
            {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "log_level": 0}
        )
        try:
            p.health(TOPIC)
            per_second = [0] * seconds
            refused = 0
            cut = False
            start = time.monotonic()
            i = 0
            while (now := time.monotonic() - start) < seconds:
                if not cut and now >= cut_at:
                    cluster.call("isolate_broker", 5)
                    cut = True
                try:
                    p.produce(TOPIC, VALUE)
                except ProduceTimeout:
                    refused += 1  # not accepted: counted, and offered again
                    continue
                per_second[min(int(now), seconds - 1)] += 1
                i += 1
                if i % 1000 == 0:
                    p.poll(0)
            left = p.flush(60)
            s = p.statistics()
        finally:
            p.close()
    return {
        "per_second": per_second,
        "refused": refused,
        "left_after_flush": left,
        "quarantines": s.quarantines,
        "retries": s.retries,
        "final_failures": s.final_failures,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=45, help="how long to produce")
    parser.add_argument("--cut-at", type=float, default=5.0, help="when broker 5 is cut off")
    parser.add_argument("--lag-ms", type=int, default=30_000, help="replica.lag.time.max.ms")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    result = timeline(args.seconds, args.cut_at, args.lag_ms)
    if args.json:
        print(json.dumps(result))
        return
    rates = result["per_second"]
    assert isinstance(rates, list)
    print(f"broker 5 cut from replication at {args.cut_at:g} s, lag time {args.lag_ms} ms")
    print("thousand messages accepted per second:", " ".join(f"{r / 1000:.0f}" for r in rates))
    print(", ".join(f"{k} {v}" for k, v in result.items() if k != "per_second"))


if __name__ == "__main__":
    main()
