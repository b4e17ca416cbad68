"""The confluent metadata source on minibroker: min ISR and racks while a broker is down.

A stopped broker stays in the metadata until the controller fences it (Kafka's
``broker.session.timeout.ms``, 9 s; 30 s here, so the tests do not race it), and the admin
client keeps sending a topic's DescribeConfigs, and DescribeCluster, to the broker it last knew
as controller. A lookup must still be answered, soon, by the brokers that are up.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # the stubs lag the package
    AdminClient,
    ConfigResource,
)

from failover_partitioner.metadata import MinIsr
from failover_partitioner.metadata.confluent import ConfluentMetadataSource, admin_config
from minibroker import Cluster

TIMEOUT_S = 5.0
RACKS = {1: "a", 2: "b", 3: "c"}


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    config = {"broker.session.timeout.ms": "30000", "min.insync.replicas": "2"}
    racks = {b: {"broker.rack": rack} for b, rack in RACKS.items()}
    with Cluster(brokers=3, config=config, broker_config=racks) as c:
        c.create_topic("orders", partitions=6, replication_factor=3)
        c.create_topic(
            "payments", partitions=6, replication_factor=3, config={"min.insync.replicas": 3}
        )
        yield c


@pytest.fixture
def producer(cluster: Cluster) -> Iterator[Producer]:
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    yield p
    p.flush(1)


class TopicRefused:
    """An AdminClient for a user without DESCRIBE_CONFIGS on topics: the cluster answers
    TOPIC_AUTHORIZATION_FAILED for them (minibroker has no ACLs). Everything else is real."""

    def __init__(self, admin: Any) -> None:
        self._admin = admin

    def describe_configs(self, resources: list[Any], **kwargs: Any) -> dict[Any, Future[Any]]:
        is_topic = [r.restype == ConfigResource.Type.TOPIC for r in resources]
        futures = {} if all(is_topic) else dict(self._admin.describe_configs(resources, **kwargs))
        for resource, topic in zip(resources, is_topic, strict=True):
            if topic:
                refused: Future[Any] = Future()
                refused.set_exception(
                    KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
                )
                futures[resource] = refused
        return futures


class NoTopicRightsSource(ConfluentMetadataSource):
    def __init__(self, client: Any, conf: dict[str, Any]) -> None:
        super().__init__(client, conf)
        self._refusing = TopicRefused(AdminClient(conf))

    def _admin_client(self) -> Any:
        return self._refusing


def timed_lookup(source: ConfluentMetadataSource, topic: str) -> tuple[MinIsr | None, float]:
    start = time.monotonic()
    answer = source.min_insync_replicas(topic, TIMEOUT_S)
    return answer, time.monotonic() - start


def test_min_isr_is_read_while_the_controller_the_admin_client_knows_is_down(
    cluster: Cluster, producer: Producer
) -> None:
    conf = admin_config({"bootstrap.servers": cluster.bootstrap_servers})
    source = ConfluentMetadataSource(producer, conf)
    assert source.min_insync_replicas("orders", TIMEOUT_S) == MinIsr(value=2, source="broker")
    source.partitions("payments", TIMEOUT_S)  # the refresher's fetch: it names brokers to ask
    cluster.stop_broker(cluster.controller_id)
    answer, took_s = timed_lookup(source, "payments")
    assert answer == MinIsr(value=3, source="topic")
    assert took_s < TIMEOUT_S / 2
    # No partitions answer for "orders" yet: the brokers of the one for "payments" are asked.
    answer, took_s = timed_lookup(source, "orders")
    assert answer == MinIsr(value=2, source="broker")
    assert took_s < TIMEOUT_S / 2


def test_the_brokers_default_is_read_from_a_broker_that_is_up(
    cluster: Cluster, producer: Producer
) -> None:
    conf = admin_config({"bootstrap.servers": cluster.bootstrap_servers})
    assert conf is not None
    source = NoTopicRightsSource(producer, conf)
    assert source.min_insync_replicas("orders", TIMEOUT_S) == MinIsr(
        value=2, source="broker-default"
    )
    source.partitions("orders", TIMEOUT_S)  # the refresher's fetch
    cluster.stop_broker(min(cluster.broker_ids))  # the first broker the metadata lists
    answer, took_s = timed_lookup(source, "orders")
    assert answer == MinIsr(value=2, source="broker-default")
    assert took_s < TIMEOUT_S / 2


def test_racks_a_failed_lookup_missed_are_known_within_seconds(
    cluster: Cluster, producer: Producer
) -> None:
    """Until a rack lookup succeeds no leader has a rack, and client_rack prefers nothing."""
    conf = admin_config({"bootstrap.servers": cluster.bootstrap_servers})
    source = ConfluentMetadataSource(producer, conf, want_racks=True, racks_refresh_s=300.0)
    source.min_insync_replicas("orders", TIMEOUT_S)  # a first fetch: the admin client is made
    cluster.stop_broker(cluster.controller_id)
    first = source.partitions("orders", 1.0)  # DescribeCluster waits for the stopped broker
    assert {p.leader_rack for p in first.partitions} == {None}
    deadline = time.monotonic() + 10.0  # the refresher's fast fetches, 0.5 s apart
    while True:
        parts = source.partitions("orders", TIMEOUT_S).partitions
        if all(p.leader_rack for p in parts) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert [p.leader_rack for p in parts] == [RACKS[p.leader] for p in parts]
