"""Where Ctrl-C lands in a loop of ``FailoverProducer.produce()``, and what the producer does.

``python bench/ctrl_c_in_produce.py`` (options: ``--help``). On librdkafka's mock cluster, a
loop of ``produce()`` with no ``poll`` is cut by ``_thread.interrupt_main()`` (what Ctrl-C does)
from a timer, ``--rounds`` times. For each round it reports whether the message whose
``produce()`` raised KeyboardInterrupt was delivered anyway (the client had taken it: Python
raises a signal's exception as a C call returns) and whether the producer's counters agree with
the delivery callbacks (``produced`` and ``delivered`` equal to the messages delivered).
docs/guarantees.md quotes it.
"""

from __future__ import annotations

import _thread
import argparse
import json
import threading
from typing import Any

from failover_partitioner import FailoverProducer
from failover_partitioner.testing import MockCluster

TOPIC = "interrupted"


def one_round(bootstrap: str, after_s: float) -> dict[str, Any]:
    delivered: set[bytes] = set()

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            delivered.add(msg.value())

    p = FailoverProducer(
        {"bootstrap.servers": bootstrap, "on_delivery": on_delivery}, min_insync_replicas=1
    )
    try:
        p.health(TOPIC)
        timer = threading.Timer(after_s, _thread.interrupt_main)
        timer.start()
        i = 0
        try:
            while True:
                p.produce(TOPIC, b"%d" % i)
                i += 1
        except KeyboardInterrupt:
            pass
        timer.cancel()
        p.flush(30)
        stats = p.statistics()
        return {
            "raised_for_a_delivered_message": b"%d" % i in delivered,
            "counters_agree": stats.produced == stats.delivered == len(delivered),
        }
    finally:
        p.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--after-s", type=float, default=0.01, help="the timer, in seconds")
    args = parser.parse_args()
    with MockCluster(brokers=3) as mock:
        mock.create_topic(TOPIC, 4, 3)
        rounds = [one_round(mock.bootstrap_servers, args.after_s) for _ in range(args.rounds)]
    print(
        json.dumps(
            {
                "rounds": len(rounds),
                "raised_for_a_delivered_message": sum(
                    r["raised_for_a_delivered_message"] for r in rounds
                ),
                "counters_agree": sum(r["counters_agree"] for r in rounds),
            }
        )
    )


if __name__ == "__main__":
    main()
