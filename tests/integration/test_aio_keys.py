"""Keyed messages through AsyncFailoverProducer keep Kafka's placement while it is safe.

While healthy every key lands where Kafka's default partitioner (murmur2, as aiokafka's own
DefaultPartitioner computes it) puts it. While brokers 4 and 5 are down only the keys whose
partition is degraded move, each to one stable place; after recovery they all return.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from aiokafka.partitioner import (  # type: ignore[import-untyped,unused-ignore]  # no py.typed
    DefaultPartitioner,
)
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # the stubs lag the package
    AdminClient,
    NewPartitions,
)

from failover_partitioner.aio import AsyncFailoverProducer
from minibroker import Cluster

TOPIC = "accounts"
PARTITIONS = 12
KEYS = [b"account-%d" % i for i in range(400)]
ALL = list(range(PARTITIONS))
HOME = {key: DefaultPartitioner()(key, ALL, ALL) for key in KEYS}


async def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.05)


async def place_all(ap: AsyncFailoverProducer, tag: bytes) -> dict[bytes, int]:
    futures = [await ap.send(TOPIC, tag, key=key) for key in KEYS]
    results: list[Any] = await asyncio.gather(*futures)
    return {key: md.partition for key, md in zip(KEYS, results, strict=True)}


def test_keys_stay_home_while_healthy_only_degraded_ones_move_and_they_return() -> None:
    with Cluster(brokers=5, config={"min.insync.replicas": "2"}) as cluster:
        cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)

        def degraded() -> set[int]:
            return {p for p in ALL if len(cluster.partition_state(TOPIC, p).isr) < 2}

        async def run() -> None:
            async with AsyncFailoverProducer(
                bootstrap_servers=cluster.bootstrap_servers,
                metadata_refresh_s=0.5,
                quarantine_backoff_s=0.2,
            ) as ap:
                healthy = await place_all(ap, b"healthy")
                assert healthy == HOME

                cluster.stop_broker(4)
                cluster.stop_broker(5)
                await wait_for(lambda: bool(degraded()), 10, "the controller to see the fault")
                bad = degraded()
                await wait_for(
                    lambda: set(ap.health(TOPIC).unavailable) == bad,
                    10,
                    "the producer's view to show the fault",
                )
                # Keyless traffic first: whatever the client still routed by the old leaders
                # fails, is quarantined and released; only then is the placement measured.
                warm = [await ap.send(TOPIC, b"warm-up") for _ in range(300)]
                await asyncio.gather(*warm)
                await wait_for(
                    lambda: set(ap.health(TOPIC).unavailable) == bad,
                    10,
                    "quarantines other than the fault's to end",
                )
                during = await place_all(ap, b"during")
                again = await place_all(ap, b"during-again")
                moved = {k for k in KEYS if during[k] != HOME[k]}
                assert moved == {k for k in KEYS if HOME[k] in bad}
                assert moved  # the fault hit some keys' partitions
                assert not set(during.values()) & bad
                assert again == during  # a moved key has one stable place

                cluster.start_broker(4)
                cluster.start_broker(5)
                await wait_for(
                    lambda: not degraded() and not ap.health(TOPIC).unavailable,
                    20,
                    "recovery to show in the producer's view",
                )
                after = await place_all(ap, b"after")
                assert after == HOME
                assert ap.statistics().final_failures == 0

        asyncio.run(run())


def test_partitions_added_take_their_keys_once_refreshed_with_none_struck() -> None:
    """The producer's own metadata fetch sees new partitions before aiokafka's cache does; a
    batch for one was refused by aiokafka ("Unrecognized partition") and the partition struck:
    9 of 9 new ones quarantined and most keys moved away from their new homes."""
    grown = list(range(2 * PARTITIONS))

    async def run(cluster: Cluster) -> None:
        async with AsyncFailoverProducer(bootstrap_servers=cluster.bootstrap_servers) as ap:
            assert await place_all(ap, b"before") == HOME
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
            admin.create_partitions([NewPartitions(TOPIC, 2 * PARTITIONS)])[TOPIC].result(10)
            assert (await ap.refresh(TOPIC)).num_partitions == 2 * PARTITIONS
            placed = await place_all(ap, b"after")
            assert placed == {key: DefaultPartitioner()(key, grown, grown) for key in KEYS}
            stats = ap.statistics()
            assert (stats.quarantines, stats.rerouted) == (0, 0)

    with Cluster(brokers=3, config={"min.insync.replicas": "2"}) as cluster:
        cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
        asyncio.run(run(cluster))
