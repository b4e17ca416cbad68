"""How long messages wait when a leader crashes, before the controller fences it.

``python bench/crashed_leader.py`` (options: ``--help``). A 5-broker minibroker cluster (RF 3,
min ISR 2, 12 partitions) in a process of its own, with Kafka's default
``broker.session.timeout.ms`` (9 s): a crashed broker stays the leader of its partitions in the
metadata that long. A FailoverProducer and a plain confluent-kafka Producer (the reference, in
the same run) each send ``--rate`` keyless 100-byte messages a second, taking turns; after
``--crash-at`` seconds broker 1 stops (its listener closed, its connections dropped: a crash),
and it starts again ``--down-s`` seconds later. For each producer: how many messages waited
more than a second for their delivery report, the longest wait, and any not delivered.
``--aio``: an AsyncFailoverProducer alone, the same way. docs/guarantees.md ("Routing around
partitions under min ISR") quotes it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from confluent_kafka import Producer

from failover_partitioner import FailoverProducer
from harness import MinibrokerProcess

TOPIC = "crashed"
VALUE = b"x" * 100
CRASHED = 1


class Waits:
    """Each message's wait from produce() to its delivery report."""

    def __init__(self) -> None:
        self.sent = 0
        self.waits: list[float] = []
        self.failed = 0

    def callback(self) -> Any:
        sent_at = time.monotonic()
        self.sent += 1

        def on_delivery(err: Any, _msg: Any) -> None:
            if err is None:
                self.waits.append(time.monotonic() - sent_at)
            else:
                self.failed += 1

        return on_delivery

    def summary(self) -> dict[str, object]:
        return {
            "sent": self.sent,
            "delivered": len(self.waits),
            "failed": self.failed,
            "waited_over_1s": sum(w > 1.0 for w in self.waits),
            "longest_s": round(max(self.waits, default=0.0), 3),
        }


# Kafka's default session timeout: a crashed broker stays a leader in the metadata that long.
CONFIG = {"min.insync.replicas": "2", "broker.session.timeout.ms": "9000"}


class Crash:
    """Broker :data:`CRASHED` stopped at ``crash_at`` s and started ``down_s`` later; ``pace``
    says how long to wait before message ``i`` (``rate`` a second), doing what is due first."""

    def __init__(
        self, cluster: MinibrokerProcess, rate: float, crash_at: float, down_s: float
    ) -> None:
        self._cluster = cluster
        self._rate = rate
        self._crash_at = crash_at
        self._restart_at = crash_at + down_s
        self._crashed = self._restarted = False
        self.start = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def pace(self, i: int) -> float:
        now = self.elapsed()
        if not self._crashed and now >= self._crash_at:
            self._cluster.stop_broker(CRASHED)
            self._crashed = True
        if self._crashed and not self._restarted and now >= self._restart_at:
            self.restart()
        return self.start + i / self._rate - time.monotonic()

    def restart(self) -> None:
        if not self._restarted:
            self._cluster.call("start_broker", CRASHED)
            self._restarted = True


def run(rate: float, seconds: float, crash_at: float, down_s: float) -> dict[str, object]:
    with MinibrokerProcess(5, CONFIG) as cluster:
        cluster.create_topic(TOPIC, 12)
        conf = {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "log_level": 0}
        failover = FailoverProducer(dict(conf))
        plain = Producer(dict(conf))
        sides = {"failover": Waits(), "plain": Waits()}
        try:
            failover.health(TOPIC)
            crash = Crash(cluster, rate, crash_at, down_s)
            i = 0
            while crash.elapsed() < seconds:
                ahead = crash.pace(i)
                if ahead > 0:
                    time.sleep(ahead)
                failover.produce(TOPIC, VALUE, on_delivery=sides["failover"].callback())
                plain.produce(TOPIC, VALUE, on_delivery=sides["plain"].callback())
                i += 1
                if i % 10 == 0:
                    failover.poll(0)
                    plain.poll(0)
            crash.restart()
            failover.flush(60)
            plain.flush(60)
        finally:
            left = failover.close()
        return {
            "rate_per_s": rate,
            "crash_at_s": crash_at,
            "down_s": down_s,
            **{name: w.summary() for name, w in sides.items()},
            "failover_returned_on_close": len(left),
        }


def _reporting(on_delivery: Any) -> Any:
    """A future's done-callback that reports its outcome as a delivery callback would."""

    def done(future: asyncio.Future[Any]) -> None:
        on_delivery(future.exception(), None)

    return done


def run_aio(rate: float, seconds: float, crash_at: float, down_s: float) -> dict[str, object]:
    from failover_partitioner.aio import AsyncFailoverProducer

    with MinibrokerProcess(5, CONFIG) as cluster:
        cluster.create_topic(TOPIC, 12)
        waits = Waits()

        async def produce() -> int:
            p = AsyncFailoverProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
            await p.start()
            try:
                crash = Crash(cluster, rate, crash_at, down_s)
                i = 0
                while crash.elapsed() < seconds:
                    ahead = crash.pace(i)
                    if ahead > 0:
                        await asyncio.sleep(ahead)
                    on_delivery = waits.callback()
                    future = await p.send(TOPIC, VALUE)
                    future.add_done_callback(_reporting(on_delivery))
                    i += 1
                crash.restart()
                await p.flush(60)
            finally:
                left = await p.stop()
            return len(left)

        returned = asyncio.run(produce())
    return {
        "rate_per_s": rate,
        "crash_at_s": crash_at,
        "down_s": down_s,
        "asyncio": waits.summary(),
        "returned_on_stop": returned,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=1000.0, help="messages a second, each")
    parser.add_argument("--seconds", type=float, default=16.0, help="how long to produce")
    parser.add_argument("--crash-at", type=float, default=3.0, help="when broker 1 stops")
    parser.add_argument("--down-s", type=float, default=11.0, help="how long it stays down")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--aio", action="store_true", help="an AsyncFailoverProducer alone")
    args = parser.parse_args()
    measure = run_aio if args.aio else run
    for _ in range(args.rounds):
        print(json.dumps(measure(args.rate, args.seconds, args.crash_at, args.down_s)), flush=True)


if __name__ == "__main__":
    main()
