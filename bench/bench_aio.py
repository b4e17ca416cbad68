"""AsyncFailoverProducer throughput against a raw AIOKafkaProducer, and under the fault.

Issue 6 sets its speed targets for the confluent-kafka producer; the asyncio one is held to
the same shape here:

* AsyncFailoverProducer >= 1.1x a raw ``AIOKafkaProducer`` with its default partitioner
  (issue 20; issue 6 asked 0.8x), same minibroker cluster and workload (100-byte keyless
  values, acks=all);
* with two of five brokers stopped (some partitions under min ISR), >= 0.8x of its own
  fault-free throughput. The producer starts with a healthy view and learns of the fault from
  the brokers' answers during the run.

Throughput is messages per second from the first ``send`` until every future is resolved. Both
sides run alternately, several times, and the medians are compared, so a busy machine slows
both.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from aiokafka import AIOKafkaProducer  # type: ignore[import-untyped,unused-ignore]  # no py.typed

from failover_partitioner import AsyncFailoverProducer
from harness import Figure
from minibroker import Cluster

ISSUE = 6
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


async def _failover_rate(bootstrap: str, n: int, cluster: Cluster | None = None) -> float:
    async with AsyncFailoverProducer(bootstrap_servers=bootstrap) as ap:
        await ap.refresh(TOPIC)
        if cluster is not None:  # the fault starts now: the producer still sees it healthy
            cluster.stop_broker(4)
            cluster.stop_broker(5)
        return await _drive(ap.send, n)


def run(quick: bool) -> list[Figure]:
    n = 20_000 if quick else 100_000
    repeats = 2 if quick else 3
    raw: list[float] = []
    ours: list[float] = []
    with Cluster(brokers=3, config={"min.insync.replicas": "2"}) as cluster:
        cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
        bootstrap = cluster.bootstrap_servers
        asyncio.run(_failover_rate(bootstrap, n // 10))  # warm-up: connections, code paths
        for _ in range(repeats):
            raw.append(asyncio.run(_raw_rate(bootstrap, n)))
            ours.append(asyncio.run(_failover_rate(bootstrap, n)))

    healthy: list[float] = []
    faulty: list[float] = []
    for _ in range(repeats):
        with Cluster(brokers=5, config={"min.insync.replicas": "2"}) as cluster:
            cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
            healthy.append(asyncio.run(_failover_rate(cluster.bootstrap_servers, n)))
            faulty.append(asyncio.run(_failover_rate(cluster.bootstrap_servers, n, cluster)))

    return [
        Figure(
            issue=20,
            name="AsyncFailoverProducer msgs/s vs raw AIOKafkaProducer (minibroker)",
            value=statistics.median(ours),
            reference=statistics.median(raw),
            unit="msgs/s",
            target=1.1,
            note=(
                f"{n} x 100 B keyless, acks=all, 3 brokers RF=3, {PARTITIONS} partitions; runs "
                f"raw {[round(r) for r in raw]}, failover {[round(r) for r in ours]}"
            ),
        ),
        Figure(
            issue=ISSUE,
            name="AsyncFailoverProducer msgs/s, brokers 4+5 stopped vs healthy",
            value=statistics.median(faulty),
            reference=statistics.median(healthy),
            unit="msgs/s",
            target=0.8,
            note=(
                f"{n} x 100 B, 5 brokers RF=3 min ISR 2; the fault starts as the run does; runs "
                f"healthy {[round(r) for r in healthy]}, fault {[round(r) for r in faulty]}"
            ),
        ),
    ]
