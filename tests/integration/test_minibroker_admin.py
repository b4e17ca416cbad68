"""Admin operations from each client: create, describe configs, alter min ISR, delete."""

from __future__ import annotations

import asyncio
import gc
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from aiokafka.admin import (  # type: ignore[import-untyped,unused-ignore]  # no py.typed
    AIOKafkaAdminClient,
    NewTopic,
)
from aiokafka.admin.config_resource import (  # type: ignore[import-untyped,unused-ignore]
    ConfigResource as AioConfigResource,
)
from aiokafka.admin.config_resource import (  # type: ignore[import-untyped,unused-ignore]
    ConfigResourceType as AioResourceType,
)
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # the stubs lag the package
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # the stubs lag the package
    NewTopic as CkNewTopic,
)

from minibroker import Cluster

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.admin import ConfigResource as KpConfigResource
    from kafka.admin import ConfigResourceType as KpResourceType
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KpNewTopic

pytestmark = [
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    # kafka-python 3.0 leaks the socket of a connect still in progress when a client closes
    pytest.mark.filterwarnings("ignore:unclosed <socket.socket:ResourceWarning"),
]


@pytest.fixture(autouse=True)
def _reap_kafka_python_sockets() -> Iterator[None]:
    """kafka-python 3.0 drops a socket whose connect is still in progress when the client
    closes (``kafka.net.inet.sock_connect`` never closes it); collect those here, quietly,
    instead of letting the ResourceWarning surface in whatever test runs next."""
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with Cluster(
        brokers=3,
        config={"min.insync.replicas": "2", "broker.session.timeout.ms": "200"},
    ) as running:
        yield running


def wait_for(predicate: Callable[[], bool], timeout_s: float = 5) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_confluent_admin_round_trip(cluster: Cluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    created = admin.create_topics(
        [CkNewTopic("ck-admin", 6, 3, config={"retention.ms": "60000"})], operation_timeout=10
    )
    created["ck-admin"].result(10)
    assert len(admin.list_topics(timeout=10).topics["ck-admin"].partitions) == 6

    duplicate = admin.create_topics([CkNewTopic("ck-admin", 1, 1)])["ck-admin"]
    with pytest.raises(KafkaException) as refused:
        duplicate.result(10)
    assert refused.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS

    topic = ConfigResource(ResourceType.TOPIC, "ck-admin")
    configs = admin.describe_configs([topic])[topic].result(10)
    assert configs["min.insync.replicas"].value == "2"
    # Kafka 4.1+ (eligible leader replicas) keeps it as a cluster-level dynamic default.
    assert configs["min.insync.replicas"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    assert configs["retention.ms"].value == "60000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    broker = ConfigResource(ResourceType.BROKER, "1")
    broker_configs = admin.describe_configs([broker])[broker].result(10)
    assert broker_configs["min.insync.replicas"].value == "2"

    change = ConfigResource(
        ResourceType.TOPIC,
        "ck-admin",
        incremental_configs=[
            ConfigEntry("min.insync.replicas", "3", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([change])[change].result(10)
    assert cluster.partition_state("ck-admin", 0).min_insync_replicas == 3
    configs = admin.describe_configs([topic])[topic].result(10)
    assert configs["min.insync.replicas"].value == "3"

    # the new minimum bites at once: with one broker down every partition refuses acks=all
    cluster.stop_broker(3)
    try:
        assert wait_for(lambda: len(cluster.partition_state("ck-admin", 0).isr) == 2)
        errors: list[KafkaError | None] = []
        producer = Producer(
            {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "retries": 0}
        )
        producer.produce(
            "ck-admin", b"x", partition=0, on_delivery=lambda err, _msg: errors.append(err)
        )
        producer.flush(10)
        assert [e.code() if e else None for e in errors] == [KafkaError.NOT_ENOUGH_REPLICAS]
    finally:
        cluster.start_broker(3)

    admin.delete_topics(["ck-admin"], operation_timeout=10)["ck-admin"].result(10)
    assert "ck-admin" not in cluster.topics()


def test_aiokafka_admin_round_trip(cluster: Cluster) -> None:
    async def scenario() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
        await admin.start()
        try:
            await admin.create_topics([NewTopic("aio-admin", 3, 3)])
            assert "aio-admin" in await admin.list_topics()
            resource = AioConfigResource(AioResourceType.TOPIC, "aio-admin")
            described = await admin.describe_configs([resource])
            entries = {e[0]: e[1] for e in described[0].resources[0][4]}
            assert entries["min.insync.replicas"] == "2"
            await admin.alter_configs(
                [
                    AioConfigResource(
                        AioResourceType.TOPIC, "aio-admin", {"min.insync.replicas": "1"}
                    )
                ]
            )
            assert cluster.partition_state("aio-admin", 1).min_insync_replicas == 1
            await admin.delete_topics(["aio-admin"])
            assert "aio-admin" not in await admin.list_topics()
        finally:
            await admin.close()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_kafka_python_admin_round_trip(cluster: Cluster) -> None:
    admin: Any = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        admin.create_topics([KpNewTopic("kp-admin", 2, 3, topic_configs={"retention.ms": "1000"})])
        assert "kp-admin" in admin.list_topics()
        resource = KpConfigResource(KpResourceType.TOPIC, "kp-admin")
        # the default 'modified' filter keeps only the topic's own override
        modified = admin.describe_configs([resource])
        assert set(modified["topic"]["kp-admin"]) == {"retention.ms"}
        everything = admin.describe_configs([resource], config_filter="all")
        assert everything["topic"]["kp-admin"]["min.insync.replicas"]["value"] == "2"
        admin.alter_configs(
            [KpConfigResource(KpResourceType.TOPIC, "kp-admin", {"min.insync.replicas": "3"})],
            incremental=True,
        )
        assert cluster.partition_state("kp-admin", 0).min_insync_replicas == 3
        admin.delete_topics(["kp-admin"])
        assert "kp-admin" not in cluster.topics()
    finally:
        admin.close()


def test_a_partition_count_above_the_cap_is_refused(cluster: Cluster) -> None:
    # aiokafka, because librdkafka refuses more than 100,000 partitions itself, before sending.
    async def scenario() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
        await admin.start()
        try:
            answer: Any = await admin.create_topics([NewTopic("aio-huge", 100_001, 1)])
            [(name, code, message)] = answer.topic_errors
            assert (name, code) == ("aio-huge", 37)  # INVALID_PARTITIONS
            assert "100001 partitions" in message
        finally:
            await admin.close()

    asyncio.run(asyncio.wait_for(scenario(), 30))
    assert "aio-huge" not in cluster.topics()


def test_admin_clients_delete_an_empty_group_and_refuse_a_live_one(cluster: Cluster) -> None:
    cluster.create_topic("deleted-groups", partitions=1, replication_factor=3)
    settings = {"bootstrap.servers": cluster.bootstrap_servers, "enable.auto.commit": False}
    live = Consumer({**settings, "group.id": "dg-live"})
    try:
        live.subscribe(["deleted-groups"])
        assert wait_for(lambda: bool(live.poll(0.1) or live.assignment()), timeout_s=15)
        for group in ("dg-empty", "dg-empty-kp"):
            committer = Consumer({**settings, "group.id": group})
            committer.commit(offsets=[TopicPartition("deleted-groups", 0, 1)], asynchronous=False)
            committer.close()

        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        futures = admin.delete_consumer_groups(
            ["dg-empty", "dg-live", "dg-missing"], request_timeout=10
        )
        futures["dg-empty"].result(10)
        codes = {}
        for group in ("dg-live", "dg-missing"):
            with pytest.raises(KafkaException) as refused:
                futures[group].result(10)
            codes[group] = refused.value.args[0].code()
        assert codes == {
            "dg-live": KafkaError.NON_EMPTY_GROUP,
            "dg-missing": KafkaError.GROUP_ID_NOT_FOUND,
        }
        listed = {g.group_id for g in admin.list_consumer_groups().result(10).valid}
        assert "dg-empty" not in listed
        assert "dg-live" in listed

        kp_admin: Any = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
        try:
            assert kp_admin.delete_groups(["dg-empty-kp", "dg-live"]) == {
                "dg-empty-kp": "OK",
                "dg-live": "NonEmptyGroupError",
            }
        finally:
            kp_admin.close()
    finally:
        live.close()
