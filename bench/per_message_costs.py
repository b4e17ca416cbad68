"""Where FailoverProducer's time per message goes, against a raw confluent-kafka Producer.

``python bench/per_message_costs.py`` (options: ``--help``). On librdkafka's mock cluster, in one
process, both producers stay open and take turns: each turn produces a chunk of 100-byte values
one ``produce()`` at a time, lets the deliveries arrive, then ``flush()``-es, and the main
thread's CPU time of the two phases is noted per message: *produce* (the calls) and *serve*
(what the client does for the chunk's deliveries in the application's thread: reports, the
callbacks, freeing the messages). Four workloads: the two of bench_failover's healthy rows,
no per-message callback (the raw Producer with ``on_delivery`` in its config) and a per-message
``on_delivery`` on both sides; and the same two with one header a message (a W3C
``traceparent``), whose headers FailoverProducer keeps while the client holds the message (a
failure report has no headers, and a retry needs them).

Chunks are short and alternate many times, so that the machine's speed, which moves by tens of
percent from one second to the next on a shared 2-core machine, falls on both sides alike; the
medians of the phases show which part of the path a difference comes from. It complements
``bench_failover`` (whole runs of 400,000 messages), whose ratios are the issue's figures.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Producer

from failover_partitioner import FailoverProducer
from failover_partitioner.testing import MockCluster
from harness import alternated

TOPIC = "costs"
VALUE = b"x" * 100
HEADERS = [("traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")]


def _noop(err: Any, msg: Any) -> None:
    pass


def _turn(
    producer: Any,
    n: int,
    on_delivery: Callable[[Any, Any], None] | None,
    headers: list[tuple[str, bytes]] | None = None,
) -> tuple[float, float]:
    """Microseconds of the main thread's CPU per message: producing n, then serving them."""
    produce = producer.produce
    start = time.thread_time()
    if headers is not None and on_delivery is not None:
        for _ in range(n):
            produce(TOPIC, VALUE, headers=headers, on_delivery=on_delivery)
    elif headers is not None:
        for _ in range(n):
            produce(TOPIC, VALUE, headers=headers)
    elif on_delivery is None:
        for _ in range(n):
            produce(TOPIC, VALUE)
    else:
        for _ in range(n):
            produce(TOPIC, VALUE, on_delivery=on_delivery)
    produced = time.thread_time()
    time.sleep(0.05)  # the deliveries arrive meanwhile: serving them is all flush() does
    left = producer.flush(30)
    served = time.thread_time()
    assert left == 0, f"{left} messages left"
    return (produced - start) / n * 1e6, (served - produced) / n * 1e6


def costs(
    bootstrap: str,
    n: int,
    rounds: int,
    per_message: bool,
    headers: list[tuple[str, bytes]] | None = None,
) -> dict[str, list[float]]:
    """Medians (produce, serve, total) in microseconds per message, raw and FailoverProducer."""
    conf = {"bootstrap.servers": bootstrap, "acks": "all", "log_level": 0}
    raw = Producer(conf if per_message else {**conf, "on_delivery": _noop})
    raw.list_topics(TOPIC, timeout=10)
    ours = FailoverProducer(conf, min_insync_replicas=2)
    try:
        ours.health(TOPIC)
        cb = _noop if per_message else None
        sides = {"raw": raw, "FailoverProducer": ours}
        for producer in sides.values():  # warm-up: connections, the healthy path opening
            for _ in range(3):
                _turn(producer, n, cb, headers)
        times = alternated(
            rounds,
            {name: functools.partial(_turn, side, n, cb, headers) for name, side in sides.items()},
        )
    finally:
        ours.close()
    return {
        name: [
            statistics.median(p for p, _ in pairs),
            statistics.median(s for _, s in pairs),
            statistics.median(p + s for p, s in pairs),
        ]
        for name, pairs in times.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20_000, help="messages per turn")
    parser.add_argument("--rounds", type=int, default=41, help="turns of each producer")
    args = parser.parse_args()
    with MockCluster(brokers=3) as mock:
        mock.create_topic(TOPIC, 12, 3)
        print("main thread's CPU per message, microseconds (medians of the turns)")
        print(
            f"{'workload':<28}{'producer':<18}{'produce':>9}{'serve':>9}{'total':>9}{'raw/ours':>10}"
        )
        for workload, per_message, headers in (
            ("no per-message callback", False, None),
            ("per-message on_delivery", True, None),
            ("a header, no callback", False, HEADERS),
            ("a header, on_delivery", True, HEADERS),
        ):
            medians = costs(
                mock.bootstrap_servers, args.messages, args.rounds, per_message, headers
            )
            raw_total = medians["raw"][2]
            for name, (produce, serve, total) in medians.items():
                ratio = f"{raw_total / total:10.3f}" if name != "raw" else ""
                print(f"{workload:<28}{name:<18}{produce:9.3f}{serve:9.3f}{total:9.3f}{ratio}")


if __name__ == "__main__":
    main()
