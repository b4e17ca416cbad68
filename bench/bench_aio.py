"""AsyncFailoverProducer throughput against a raw AIOKafkaProducer, and under the fault.

Issue 20's targets for the asyncio producer:

* AsyncFailoverProducer >= 1.1x a raw ``AIOKafkaProducer`` with its default partitioner,
  same minibroker cluster and workload (100-byte keyless values, acks=all);
* while two of five brokers are stopped (some partitions under min ISR), >= 0.95x of its own
  rate on a healthy cluster. Two clusters of five brokers run side by side, each in a process
  of its own, and are measured alternately; the first run after the stop, which includes the
  transition (failures, quarantines, elections), is reported beside the figure. One producer
  per cluster, made before the stop and kept through it and every round, as an application's.

Throughput is messages per second from the first ``send`` until every future is resolved. Both
sides run alternately (the one that starts swapping every round), several times, and the
medians are compared, so a busy machine slows both.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from aiokafka import AIOKafkaProducer  # type: ignore[import-untyped,unused-ignore]  # no py.typed

from failover_partitioner import AsyncFailoverProducer
from harness import (
    FaultRuns,
    Figure,
    MinibrokerProcess,
    Twins,
    alternated,
    minibroker_twins,
    per_round,
    runs_under_fault,
)

VALUE = b"x" * 100
TOPIC = "bench-aio"
PARTITIONS = 12


async def _drive(send: Any, n: int) -> float:
    start = time.perf_counter()
    futures = [await send(TOPIC, VALUE) for _ in range(n)]
    results = await asyncio.gather(*futures, return_exceptions=True)
    elapsed = time.perf_counter() - start
    failed = [r for r in results if isinstance(r, BaseException)]
    if failed:
        raise RuntimeError(f"{len(failed)} of {n} messages failed, e.g. {failed[0]!r}")
    return n / elapsed


async def _raw_rate(bootstrap: str, n: int) -> float:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        await producer.partitions_for(TOPIC)
        return await _drive(producer.send, n)
    finally:
        await producer.stop()


async def _failover_rate(bootstrap: str, n: int) -> float:
    async with AsyncFailoverProducer(bootstrap_servers=bootstrap) as ap:
        await ap.refresh(TOPIC)
        return await _drive(ap.send, n)


class _Kept:
    """One AsyncFailoverProducer per cluster for the fault figure, on an event loop of their
    own, made at its first run (the warm-up, before the brokers stop) and kept through the stop
    and every round after, as an application's producer lives through a fault. The loop runs
    only during a run (both producers' background tasks with it). ``close()`` stops them."""

    def __init__(self, n: int) -> None:
        self._n = n
        self._loop = asyncio.new_event_loop()
        self._producers: dict[str, AsyncFailoverProducer] = {}

    def rate(self, bootstrap: str) -> float:
        return self._loop.run_until_complete(self._rate(bootstrap))

    async def _rate(self, bootstrap: str) -> float:
        p = self._producers.get(bootstrap)
        if p is None:
            p = self._producers[bootstrap] = AsyncFailoverProducer(bootstrap_servers=bootstrap)
            await p.start()
            await p.refresh(TOPIC)
        return await _drive(p.send, self._n)

    def close(self) -> None:
        if self._loop.is_closed():
            return  # (closed after the rounds already)
        while self._producers:
            self._loop.run_until_complete(self._producers.popitem()[1].stop(hand_back=False))
        self._loop.close()


def fault_runs(
    n: int,
    repeats: int,
    twins: Twins = minibroker_twins,
) -> FaultRuns:
    """The rounds of the fault figure, on the clusters ``twins`` makes (minibroker's by
    default)."""
    kept = _Kept(n)
    try:
        return runs_under_fault(kept.rate, TOPIC, PARTITIONS, repeats, done=kept.close, twins=twins)
    finally:
        kept.close()


def _fault_figure(n: int, repeats: int) -> Figure:
    """The rate while brokers 4 and 5 of five are stopped, against a healthy twin cluster."""
    runs = fault_runs(n, repeats)
    return Figure(
        issue=20,
        name="AsyncFailoverProducer msgs/s, brokers 4+5 stopped vs healthy",
        value=statistics.median(runs.faulty),
        reference=statistics.median(runs.healthy),
        unit="msgs/s",
        target=0.95,
        note=(
            f"{n} x 100 B, 5 brokers RF=3 min ISR 2, each cluster in its own process; first run "
            f"after the stop (transition included) {runs.transition}; runs healthy "
            f"{[round(r) for r in runs.healthy]}, fault {[round(r) for r in runs.faulty]}; "
            f"{runs.spread()}"
        ),
    )


def run(quick: bool) -> list[Figure]:
    n = 20_000 if quick else 100_000
    repeats = 2 if quick else 5  # rounds stray far on a shared machine: more of them
    with MinibrokerProcess(3, {"min.insync.replicas": "2"}) as cluster:
        cluster.create_topic(TOPIC, PARTITIONS)
        bootstrap = cluster.bootstrap_servers
        asyncio.run(_failover_rate(bootstrap, n // 10))  # warm-up: connections, code paths
        runs = alternated(
            repeats,
            {
                "raw": lambda: asyncio.run(_raw_rate(bootstrap, n)),
                "failover": lambda: asyncio.run(_failover_rate(bootstrap, n)),
            },
        )
    raw, ours = runs["raw"], runs["failover"]

    return [
        Figure(
            issue=20,
            name="AsyncFailoverProducer msgs/s vs raw AIOKafkaProducer (minibroker)",
            value=statistics.median(ours),
            reference=statistics.median(raw),
            unit="msgs/s",
            target=1.1,
            note=(
                f"{n} x 100 B keyless, acks=all, 3 brokers RF=3, {PARTITIONS} partitions, "
                f"minibroker in its own process; runs raw {[round(r) for r in raw]}, "
                f"failover {[round(r) for r in ours]}; {per_round(ours, raw)}"
            ),
        ),
        _fault_figure(n, repeats),
    ]
