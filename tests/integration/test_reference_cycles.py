"""A message leaves no reference cycle behind, delivered or finally failed: what the producers
make for it is freed by reference counting as soon as its outcome is reported, not by Python's
cyclic garbage collector, whose collections would otherwise walk every message in flight
(AsyncFailoverProducer sent 1.17x as fast once a message and its retry-buffer entry no longer
referred to each other) and keep whatever a cycle holds until then (a mirror's span: its
consumed messages).

Each test runs the producer with the collector off, drops its own references, then asks the
collector what it finds unreachable (``gc.DEBUG_SAVEALL`` keeps it to look at)."""

from __future__ import annotations

import asyncio
import gc
import warnings
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import pytest

from failover_partitioner import DeliveryGroup, DeliveryReport
from failover_partitioner.aio import AsyncFailoverProducer
from failover_partitioner.testing import MockCluster
from minibroker import Cluster
from retry_buffer import Entry
from tests.integration.mock_support import mock_producer, mock_with_topic

TOPIC = "cycles"
PARTITIONS = 6
NOT_ENOUGH_REPLICAS = 19
TOPIC_AUTHORIZATION_FAILED = 29


def collect() -> None:
    """``gc.collect()``, a socket a client left to the collector (aiokafka's, to a stopped
    broker) freed without its ResourceWarning: not this module's subject, and it would warn
    against whichever test the collector ran in."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


@contextmanager
def cyclic_garbage() -> Iterator[list[object]]:
    """What the collector finds unreachable, at the end of the block, of what the block left."""
    collect()
    gc.disable()
    found: list[object] = []
    try:
        yield found
    finally:
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            collect()
            found.extend(gc.garbage)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ResourceWarning)  # (see collect)
                gc.garbage.clear()
        finally:
            gc.set_debug(0)
            gc.enable()


def kinds(objects: list[object], *types: type) -> Counter[str]:
    """How many of ``objects`` are of each of ``types`` (subclasses counted as their base)."""
    counts: Counter[str] = Counter()
    for obj in objects:
        for t in types:
            if isinstance(obj, t):
                counts[t.__qualname__] += 1
    return counts


class Tally(DeliveryGroup):
    __slots__ = ("at_once", "reported")

    def __init__(self) -> None:
        super().__init__()
        self.at_once = 0
        self.reported = 0

    def delivered(self) -> None:
        self.at_once += 1

    def __call__(self, err: Any, report: DeliveryReport) -> None:
        assert err is None
        self.reported += 1


@pytest.fixture
def mock() -> Iterator[MockCluster]:
    with mock_with_topic(TOPIC, PARTITIONS) as cluster:
        yield cluster


def test_a_delivery_group_and_its_report_are_freed_with_their_last_message(
    mock: MockCluster,
) -> None:
    p = mock_producer(mock, ready=TOPIC)
    try:
        with cyclic_garbage() as garbage:
            group = Tally()
            for i in range(2000):
                # Half with headers: they go with partial(_GroupReport.keeping, ...).
                headers = [("offset", b"%d" % i)] if i % 2 else None
                p.produce(TOPIC, b"m%d" % i, None, headers, group, None)
            assert p.flush(30) == 0
            assert group.at_once + group.reported == 2000
            del group
        assert kinds(garbage, Tally, DeliveryReport) == Counter()
    finally:
        p.close()


def test_a_retried_record_and_its_entry_are_freed_when_it_is_delivered(
    mock: MockCluster,
) -> None:
    p = mock_producer(mock, ready=TOPIC)
    try:
        bad = {v.partition: v.leader for v in p.health(TOPIC).partitions}[0]
        delivered = [0]

        def count(err: Any, report: DeliveryReport) -> None:
            assert err is None
            delivered[0] += 1

        with cyclic_garbage() as garbage:
            with mock.failing_produce(bad, NOT_ENOUGH_REPLICAS):
                for i in range(1000):
                    # Headers: a failed message is rebuilt as a record with an entry. Each
                    # prefers a partition in turn, so that some meet the failing leader.
                    p.produce(
                        TOPIC,
                        b"m%d" % i,
                        headers=[("i", b"%d" % i)],
                        on_delivery=count,
                        partition=i % PARTITIONS,
                    )
                assert p.flush(30) == 0
            assert delivered[0] == 1000
            assert p.statistics().retries > 0
        assert kinds(garbage, DeliveryReport, Entry) == Counter()
    finally:
        p.close()


def test_a_finally_failed_record_and_its_entry_are_freed_once_reported(
    mock: MockCluster,
) -> None:
    p = mock_producer(mock, ready=TOPIC)
    try:
        leaders = {v.leader for v in p.health(TOPIC).partitions}
        failed = [0]

        def count(err: Any, report: DeliveryReport) -> None:
            assert err is not None
            assert err.code() == TOPIC_AUTHORIZATION_FAILED
            failed[0] += 1

        with cyclic_garbage() as garbage, ExitStack() as refusing:
            for broker in leaders:
                refusing.enter_context(mock.failing_produce(broker, TOPIC_AUTHORIZATION_FAILED))
            for i in range(300):
                p.produce(TOPIC, b"m%d" % i, headers=[("i", b"%d" % i)], on_delivery=count)
            assert p.flush(30) == 0
            assert failed[0] == 300
            assert p.statistics().final_failures == 300
        assert kinds(garbage, DeliveryReport, Entry) == Counter()
    finally:
        p.close()


def test_an_async_message_and_its_entry_are_freed_when_it_is_delivered() -> None:
    from failover_partitioner.aio._lanes import Message

    with Cluster(brokers=3, config={"min.insync.replicas": "2"}) as cluster:
        cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)

        async def run() -> list[object]:
            async with AsyncFailoverProducer(bootstrap_servers=cluster.bootstrap_servers) as ap:
                await ap.refresh(TOPIC)
                with cyclic_garbage() as garbage:
                    futures = [await ap.send(TOPIC, b"m%d" % i) for i in range(2000)]
                    results = await asyncio.gather(*futures)
                    assert len(results) == 2000
                    del futures, results
            return garbage

        garbage = asyncio.run(run())
    assert kinds(garbage, Message, Entry) == Counter()


def test_a_finally_failed_async_message_and_its_entry_are_freed_once_reported() -> None:
    from failover_partitioner.aio._lanes import Message

    with Cluster(brokers=3, config={"min.insync.replicas": "2"}) as cluster:
        cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)

        async def run() -> list[object]:
            async with AsyncFailoverProducer(
                bootstrap_servers=cluster.bootstrap_servers, delivery_timeout_s=0.5
            ) as ap:
                await ap.refresh(TOPIC)
                for broker in (2, 3):
                    cluster.stop_broker(broker)
                with cyclic_garbage() as garbage:
                    # Under min ISR everywhere: each waits for a usable partition, in vain.
                    futures = [await ap.send(TOPIC, b"m%d" % i) for i in range(200)]
                    results = await asyncio.gather(*futures, return_exceptions=True)
                    assert all(isinstance(r, Exception) for r in results)
                    assert ap.statistics().final_failures == 200
                    del futures, results
            return garbage

        garbage = asyncio.run(run())
    collect()  # the sockets to the stopped brokers
    assert kinds(garbage, Message, Entry) == Counter()
