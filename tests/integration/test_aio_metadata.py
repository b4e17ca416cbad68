"""The asyncio metadata source on minibroker, with aiokafka's client: min ISR while a broker is
down.

A stopped broker stays in the metadata until the controller fences it (Kafka's
``broker.session.timeout.ms``, 9 s; 30 s here, so the tests do not race it), and in aiokafka's
broker list. A lookup must still be answered, soon, by the brokers that are up.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from aiokafka.client import AIOKafkaClient  # type: ignore[import-untyped,unused-ignore]
from aiokafka.protocol.admin import (  # type: ignore[import-untyped,unused-ignore]
    DescribeConfigsRequest,
)

from failover_partitioner.aio._metadata import AioMetadataRefresher, AioMetadataSource
from failover_partitioner.metadata import MinIsr
from minibroker import Cluster

TIMEOUT_S = 5.0
LOOKUPS = 20


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    config = {"broker.session.timeout.ms": "30000", "min.insync.replicas": "2"}
    with Cluster(brokers=3, config=config) as c:
        c.create_topic("orders", partitions=6, replication_factor=3)
        c.create_topic(
            "payments", partitions=6, replication_factor=3, config={"min.insync.replicas": 3}
        )
        yield c


class TopicRefused:
    """aiokafka's client for a user without DESCRIBE_CONFIGS on topics: the cluster answers
    TOPIC_AUTHORIZATION_FAILED for them (minibroker has no ACLs). Everything else is real."""

    def __init__(self, client: Any) -> None:
        self._client = client

    @property
    def cluster(self) -> Any:
        return self._client.cluster

    async def send(self, node_id: Any, request: Any, *, group: Any) -> Any:
        response = await self._client.send(node_id, request, group=group)
        if not isinstance(request, DescribeConfigsRequest):
            return response
        resources = [(29, "refused", *r[2:]) if r[2] == 2 else r for r in response.resources]
        return type(response)(response.throttle_time_ms, resources)


async def timed_lookups(source: AioMetadataSource, topic: str) -> list[tuple[Any, float]]:
    out: list[tuple[Any, float]] = []
    for _ in range(LOOKUPS):
        start = time.monotonic()
        try:
            answer: Any = await source.min_insync_replicas(topic, TIMEOUT_S)
        except Exception as exc:  # counted, not raised: the test reports how many failed
            answer = exc
        out.append((answer, time.monotonic() - start))
    return out


def test_the_brokers_default_is_read_from_a_broker_that_is_up(cluster: Cluster) -> None:
    async def run() -> list[tuple[Any, float]]:
        client = AIOKafkaClient(bootstrap_servers=cluster.bootstrap_servers)
        await client.bootstrap()
        try:
            source = AioMetadataSource(TopicRefused(client))
            expected = MinIsr(value=2, source="broker-default")
            assert await source.min_insync_replicas("orders", TIMEOUT_S) == expected
            cluster.stop_broker(min(b.nodeId for b in client.cluster.brokers()))
            before = await timed_lookups(source, "orders")  # from aiokafka's broker list
            await source.partitions("orders", TIMEOUT_S)  # the refresher's fetch
            return before + await timed_lookups(source, "orders")  # leaders first
        finally:
            await client.close()

    results = asyncio.run(run())
    answers = [answer for answer, _ in results]
    assert answers == [MinIsr(value=2, source="broker-default")] * (2 * LOOKUPS)
    assert max(took_s for _, took_s in results) < TIMEOUT_S / 2


def test_min_isr_is_read_while_the_controller_is_down(cluster: Cluster) -> None:
    async def run() -> tuple[list[int], float]:
        client = AIOKafkaClient(bootstrap_servers=cluster.bootstrap_servers)
        await client.bootstrap()
        refresher = AioMetadataRefresher(AioMetadataSource(client), lambda md: None)
        try:
            await refresher.fetch_now("payments", TIMEOUT_S)
            cluster.stop_broker(cluster.controller_id)
            start = time.monotonic()
            values = [(await refresher.fetch_now("payments", TIMEOUT_S)).min_insync_replicas]
            values += [(await refresher.fetch_now("orders", TIMEOUT_S)).min_insync_replicas]
            return values, time.monotonic() - start
        finally:
            await refresher.close()
            await client.close()

    values, took_s = asyncio.run(run())
    assert values == [3, 2]
    assert took_s < TIMEOUT_S / 2
