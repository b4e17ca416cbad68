"""AsyncFailoverProducer under the faults of the seed talk, on a 5-broker minibroker cluster.

12 partitions, RF=3, min.insync.replicas=2, keyless messages at a steady rate. Mid-run either
brokers 4 and 5 stop (partitions holding both drop to one in-sync replica) or a leader is
isolated (its partitions' ISR shrinks to itself). Every message must be consumed back, the
only duplicates must be messages counted as possibly duplicated, and no ``send`` may wait a
second. A plain AIOKafkaProducer on a degraded partition is shown to fail there, so the fault
is known to bite.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from aiokafka import (  # type: ignore[import-untyped,unused-ignore]  # no py.typed
    AIOKafkaConsumer,
    AIOKafkaProducer,
    TopicPartition,
)
from aiokafka import errors as ak  # type: ignore[import-untyped,unused-ignore]

from failover_partitioner import ProducerStatistics
from failover_partitioner.aio import AsyncFailoverProducer
from minibroker import Cluster

TOPIC = "orders"
PARTITIONS = 12
MESSAGES = 50_000
RATE_PER_S = 3_000.0
ID_HEADER = "failover-id"


@pytest.fixture
def cluster() -> Any:
    with Cluster(brokers=5, config={"min.insync.replicas": "2"}) as c:
        c.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
        yield c


def degraded(cluster: Cluster) -> frozenset[int]:
    """Partitions the cluster cannot take acks=all writes on: ISR below 2 or no leader."""
    out = set()
    for p in range(PARTITIONS):
        st = cluster.partition_state(TOPIC, p)
        if st.leader < 0 or len(st.isr) < 2:
            out.add(p)
    return frozenset(out)


async def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.05)


def recovered(cluster: Cluster) -> bool:
    for p in range(PARTITIONS):
        st = cluster.partition_state(TOPIC, p)
        if len(st.isr) < 3 or st.high_watermark < st.log_end_offset:
            return False
    return True


async def consume_all(bootstrap: str) -> list[tuple[bytes, bytes]]:
    """Every (value, message id) in the topic, up to the end offsets at the time of the call."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        end = await consumer.end_offsets(tps)
        out: list[tuple[bytes, bytes]] = []
        deadline = time.monotonic() + 60
        pending = set(tps)
        while pending and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500, max_records=20_000)
            for records in batches.values():
                out.extend((r.value, dict(r.headers)[ID_HEADER]) for r in records)
            for tp in list(pending):
                if await consumer.position(tp) >= end[tp]:
                    pending.discard(tp)
        assert not pending, f"could not read partitions {sorted(pending)} to their end"
        return out
    finally:
        await consumer.stop()


async def plain_producer_fails_on(bootstrap: str, partition: int) -> BaseException | None:
    """What a stock aiokafka producer gets on a degraded partition (None: delivered)."""
    plain = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", request_timeout_ms=2000)
    await plain.start()
    try:
        await plain.send_and_wait(TOPIC, b"plain", partition=partition)
    except Exception as exc:
        return exc
    finally:
        await plain.stop()
    return None


@dataclass
class Outcome:
    stats: ProducerStatistics
    max_send_wait_s: float
    results: list[Any]
    degraded: frozenset[int]
    known_at: int  # index of the first message sent after the producer saw the fault
    plain_error: BaseException | None
    consumed: list[tuple[bytes, bytes]]


async def scenario(
    cluster: Cluster, inject: Callable[[], None], heal: Callable[[], None]
) -> Outcome:
    bootstrap = cluster.bootstrap_servers
    futures: list[asyncio.Future[Any]] = []
    max_wait = 0.0
    known_at = -1
    seen: frozenset[int] = frozenset()
    plain: asyncio.Task[BaseException | None] | None = None
    async with AsyncFailoverProducer(
        bootstrap_servers=bootstrap, message_id_header=ID_HEADER
    ) as ap:
        # The first send to a topic waits for its metadata; fetch it before the clock runs.
        await ap.refresh(TOPIC)
        start = time.monotonic()
        for i in range(MESSAGES):
            ahead = start + i / RATE_PER_S - time.monotonic()
            if ahead > 0:
                await asyncio.sleep(ahead)
            elif i % 100 == 0:
                await asyncio.sleep(0)  # behind schedule: still let the I/O run
            if i == MESSAGES // 3:
                inject()
            if i > MESSAGES // 3 and plain is None:
                seen = degraded(cluster)
                if seen:
                    plain = asyncio.create_task(plain_producer_fails_on(bootstrap, min(seen)))
            if plain is not None and known_at < 0 and seen <= set(ap.health(TOPIC).unavailable):
                known_at = i
            t0 = time.monotonic()
            futures.append(await ap.send(TOPIC, b"m-%d" % i))
            max_wait = max(max_wait, time.monotonic() - t0)
        assert await ap.flush(60) == 0
        results = await asyncio.gather(*futures, return_exceptions=True)
        stats = ap.statistics()
    assert plain is not None, "the fault never showed in the cluster's partition states"
    plain_error = await plain
    heal()
    await wait_for(lambda: recovered(cluster), 30, "the cluster to recover")
    return Outcome(
        stats=stats,
        max_send_wait_s=max_wait,
        results=results,
        degraded=seen,
        known_at=known_at,
        plain_error=plain_error,
        consumed=await consume_all(bootstrap),
    )


def check(outcome: Outcome) -> None:
    errors = [r for r in outcome.results if isinstance(r, BaseException)]
    assert errors == []
    stats = outcome.stats
    assert (stats.produced, stats.delivered, stats.final_failures) == (MESSAGES, MESSAGES, 0)
    assert stats.retries > 0, "the fault never made a message go round again"
    assert stats.quarantines > 0

    values = Counter(v for v, _ in outcome.consumed)
    assert set(values) == {b"m-%d" % i for i in range(MESSAGES)}
    duplicates = sum(n - 1 for n in values.values())
    assert duplicates <= stats.ambiguous_failures
    duplicated = sum(1 for n in values.values() if n > 1)
    assert duplicated <= stats.possible_duplicates
    # A duplicate is the same message produced again (same id), never a second message.
    ids: dict[bytes, set[bytes]] = {}
    for value, message_id in outcome.consumed:
        ids.setdefault(value, set()).add(message_id)
    assert all(len(s) == 1 for s in ids.values())

    assert outcome.max_send_wait_s < 1.0
    # Once the producer saw the fault, nothing new went to the degraded partitions.
    assert outcome.known_at >= 0
    late = {md.partition for md in outcome.results[outcome.known_at :]}
    assert not late & outcome.degraded
    # ...where a stock producer fails: the fault bites.
    assert isinstance(
        outcome.plain_error,
        (ak.NotEnoughReplicasError, ak.NotEnoughReplicasAfterAppendError, ak.KafkaTimeoutError),
    ), outcome.plain_error


def test_brokers_4_and_5_stop_mid_run_and_nothing_is_lost(cluster: Cluster) -> None:
    def inject() -> None:
        cluster.stop_broker(4)
        cluster.stop_broker(5)

    def heal() -> None:
        cluster.start_broker(4)
        cluster.start_broker(5)

    outcome = asyncio.run(scenario(cluster, inject, heal))
    check(outcome)
    assert outcome.degraded  # partitions with replicas on both 4 and 5


def test_an_isolated_leader_is_routed_around_and_nothing_is_lost(cluster: Cluster) -> None:
    led_by_1 = {p for p in range(PARTITIONS) if cluster.partition_state(TOPIC, p).leader == 1}
    outcome = asyncio.run(
        scenario(cluster, lambda: cluster.isolate_broker(1), lambda: cluster.heal_broker(1))
    )
    check(outcome)
    assert outcome.degraded <= led_by_1


def test_a_refused_write_is_rerouted_within_a_second_by_quarantine_alone(
    cluster: Cluster,
) -> None:
    """The producer is told min ISR is 1, so metadata never marks a partition unusable: only
    the brokers' NOT_ENOUGH_REPLICAS answers (quarantine) can steer it."""
    cluster.stop_broker(4)
    cluster.stop_broker(5)

    async def run() -> tuple[list[Any], list[float], ProducerStatistics, frozenset[int]]:
        await wait_for(lambda: len(degraded(cluster)) > 0, 10, "the controller to see it")
        bad = degraded(cluster)
        async with AsyncFailoverProducer(
            bootstrap_servers=cluster.bootstrap_servers,
            min_insync_replicas=1,
            message_id_header=ID_HEADER,
            strategy="round_robin",  # every partition, the refusing ones too, soon gets one
        ) as ap:
            latencies: list[float] = []

            async def one(i: int) -> Any:
                t0 = time.monotonic()
                md = await ap.send_and_wait(TOPIC, b"q-%d" % i)
                latencies.append(time.monotonic() - t0)
                return md

            results: list[Any] = []
            for chunk in range(20):
                results += await asyncio.gather(*(one(chunk * 50 + i) for i in range(50)))
            return results, latencies, ap.statistics(), bad

    results, latencies, stats, bad = asyncio.run(run())
    assert stats.delivered == 1000
    assert stats.quarantines >= 1  # only failed writes took partitions out of use
    assert stats.retries >= 1
    assert {md.partition for md in results}.isdisjoint(bad)
    assert max(latencies) < 1.0
