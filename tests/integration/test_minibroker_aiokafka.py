"""aiokafka 0.14 against minibroker, with the cluster on the test's own event loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest
from aiokafka import (  # type: ignore[import-untyped,unused-ignore]  # no py.typed
    AIOKafkaConsumer,
    AIOKafkaProducer,
    ConsumerRebalanceListener,
    ConsumerRecord,
    TopicPartition,
)
from aiokafka.errors import (  # type: ignore[import-untyped,unused-ignore]  # no py.typed
    TransactionalIdAuthorizationFailed,
)

from minibroker import AsyncCluster, MinibrokerError


def run(test: Callable[[AsyncCluster], Awaitable[None]]) -> None:
    async def main() -> None:
        async with AsyncCluster(brokers=3, config={"min.insync.replicas": "2"}) as cluster:
            await asyncio.wait_for(test(cluster), 60)

    asyncio.run(main())


async def produce(cluster: AsyncCluster, topic: str, count: int, **config: object) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap_servers, **config)
    await producer.start()
    try:
        batch = [await producer.send(topic, f"m{i}".encode()) for i in range(count)]
        await producer.flush()
        if config.get("acks") != 0:
            for sent in batch:
                assert (await sent).offset >= 0
    finally:
        await producer.stop()


async def drain(
    consumers: list[AIOKafkaConsumer], until: Callable[[list[ConsumerRecord[bytes, bytes]]], bool]
) -> list[ConsumerRecord[bytes, bytes]]:
    got: list[ConsumerRecord[bytes, bytes]] = []
    deadline = time.monotonic() + 30
    while not until(got) and time.monotonic() < deadline:
        for consumer in consumers:
            batches = await consumer.getmany(timeout_ms=50)
            for records in batches.values():
                got.extend(records)
    return got


def group_consumer(cluster: AsyncCluster, topic: str, group: str) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        topic,
        bootstrap_servers=cluster.bootstrap_servers,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        heartbeat_interval_ms=100,
        session_timeout_ms=6000,
    )


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_produce_with_each_acks_setting(acks: int | str) -> None:
    async def scenario(cluster: AsyncCluster) -> None:
        cluster.create_topic("t", partitions=3, replication_factor=3)
        await produce(cluster, "t", 200, acks=acks)
        consumer = AIOKafkaConsumer(
            bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest"
        )
        await consumer.start()
        try:
            consumer.assign([TopicPartition("t", p) for p in range(3)])
            got = await drain([consumer], lambda g: len(g) >= 200)
        finally:
            await consumer.stop()
        assert sorted(r.value or b"" for r in got) == sorted(f"m{i}".encode() for i in range(200))

    run(scenario)


def test_idempotent_producer() -> None:
    async def scenario(cluster: AsyncCluster) -> None:
        cluster.create_topic("idem", partitions=2, replication_factor=3)
        await produce(cluster, "idem", 300, enable_idempotence=True)
        assert sum(cluster.partition_state("idem", p).high_watermark for p in (0, 1)) == 300

    run(scenario)


def test_group_rebalances_and_a_restarted_member_resumes() -> None:
    async def scenario(cluster: AsyncCluster) -> None:
        cluster.create_topic("g", partitions=4, replication_factor=3)
        await produce(cluster, "g", 100, acks="all")
        first = group_consumer(cluster, "g", "team")
        second = group_consumer(cluster, "g", "team")
        await first.start()
        await second.start()
        got = await drain(
            [first, second],
            lambda g: len(g) >= 100 and len(first.assignment()) == len(second.assignment()) == 2,
        )
        assert len(first.assignment()) == len(second.assignment()) == 2
        assert sorted(r.value or b"" for r in got) == sorted(f"m{i}".encode() for i in range(100))
        await first.commit()
        await second.commit()
        await second.stop()
        await drain([first], lambda _: len(first.assignment()) == 4)
        assert len(first.assignment()) == 4
        await first.stop()

        await produce(cluster, "g", 20, acks="all")
        restarted = group_consumer(cluster, "g", "team")
        await restarted.start()
        try:
            rest = await drain([restarted], lambda g: len(g) >= 20)
            await asyncio.sleep(0.2)
            rest += await drain([restarted], lambda _: True)
        finally:
            await restarted.stop()
        # only the 20 new messages: everything before was committed
        assert len(rest) == 20

    run(scenario)


def test_a_group_rides_through_its_coordinator_crashing_and_returning() -> None:
    # The group moves when the controller fences its crashed coordinator and stays where it
    # went when the broker returns (Kafka moves groups with __consumer_offsets leadership only);
    # the member is neither expired nor rebalanced, and nothing is delivered twice.
    async def scenario(cluster: AsyncCluster) -> None:
        cluster.create_topic("ride", partitions=3, replication_factor=3)
        await produce(cluster, "ride", 60, acks="all")
        assignments: list[int] = []

        class Count(ConsumerRebalanceListener):  # type: ignore[misc]  # untyped base
            async def on_partitions_revoked(self, revoked: object) -> None:
                pass

            async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
                assignments.append(len(assigned))

        consumer = AIOKafkaConsumer(
            bootstrap_servers=cluster.bootstrap_servers,
            group_id="riders",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            heartbeat_interval_ms=100,
            session_timeout_ms=6000,
        )
        consumer.subscribe(["ride"], listener=Count())
        await consumer.start()
        try:
            got = await drain([consumer], lambda g: len(g) >= 60)
            await consumer.commit()
            crashed = cluster.group_coordinator("riders")
            cluster.stop_broker(crashed)
            got += await drain([consumer], _for(1.5))  # fenced after 300 ms, moved
            await cluster.start_broker(crashed)
            got += await drain([consumer], _for(8))  # longer than the session timeout
            await produce(cluster, "ride", 60, acks="all")
            got += await drain([consumer], lambda g: len(g) >= 60)
            await consumer.commit()
            assert cluster.group_coordinator("riders") not in (crashed, -1)
        finally:
            await consumer.stop()
        assert assignments == [3]
        assert sorted(r.value or b"" for r in got) == sorted(
            f"m{i}".encode() for i in range(60) for _ in range(2)
        )

    run(scenario)


def _for(seconds: float) -> Callable[[list[ConsumerRecord[bytes, bytes]]], bool]:
    deadline = time.monotonic() + seconds
    return lambda _: time.monotonic() >= deadline


def test_transactional_producer_fails_at_once_naming_the_cause() -> None:
    async def scenario(cluster: AsyncCluster) -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=cluster.bootstrap_servers, transactional_id="tx-refused"
        )
        started = time.monotonic()
        try:
            with pytest.raises(TransactionalIdAuthorizationFailed):
                await producer.start()
        finally:
            await producer.stop()
        assert time.monotonic() - started < 5

    run(scenario)


def test_async_cluster_refuses_calls_from_another_thread() -> None:
    async def scenario(cluster: AsyncCluster) -> None:
        errors: list[BaseException] = []

        def elsewhere() -> None:
            try:
                cluster.create_topic("x", 1, 1)
            except MinibrokerError as exc:
                errors.append(exc)

        await asyncio.to_thread(elsewhere)
        assert len(errors) == 1
        assert "event loop it runs on" in str(errors[0])
        assert cluster.topics() == []

    run(scenario)
