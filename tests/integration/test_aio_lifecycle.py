"""AsyncFailoverProducer's contract on minibroker: outcomes, final errors, limits, stop, cancel.

Nothing is dropped silently: every accepted message ends delivered, with a final error on its
future, or in the list ``stop()`` returns.
"""

from __future__ import annotations

import asyncio
import functools
import signal
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from aiokafka import (  # type: ignore[import-untyped,unused-ignore]  # no py.typed
    AIOKafkaConsumer,
    TopicPartition,
)
from aiokafka import errors as ak  # type: ignore[import-untyped,unused-ignore]
from prometheus_client import CollectorRegistry

from failover_partitioner import (
    FailoverError,
    ProducerClosed,
    ProduceTimeout,
    UndeliveredMessage,
)
from failover_partitioner._murmur2 import partition_for_key
from failover_partitioner.aio import AsyncFailoverProducer
from minibroker import Cluster
from tests.integration.aio_support import outage_cluster


@pytest.fixture(scope="module")
def healthy() -> Iterator[Cluster]:
    config = {"min.insync.replicas": "2", "auto.create.topics.enable": "false"}
    with Cluster(brokers=3, config=config) as cluster:
        yield cluster


@pytest.fixture
def outage() -> Iterator[Cluster]:
    """Every partition of topic ``o`` below min ISR (``outage_cluster``)."""
    with outage_cluster() as cluster:
        yield cluster


async def wait_for(condition: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def consume(bootstrap: str, topic: str, partitions: int) -> list[Any]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        end = await consumer.end_offsets(tps)
        records: list[Any] = []
        deadline = time.monotonic() + 20
        pending = {tp for tp in tps if end[tp] > 0}
        while pending and time.monotonic() < deadline:
            for batch in (await consumer.getmany(timeout_ms=200)).values():
                records.extend(batch)
            for tp in list(pending):
                if await consumer.position(tp) >= end[tp]:
                    pending.discard(tp)
        return records
    finally:
        await consumer.stop()


def test_send_and_wait_gives_the_final_metadata_and_the_message_reads_back(
    healthy: Cluster,
) -> None:
    healthy.create_topic("basic", partitions=4, replication_factor=3)

    async def run() -> tuple[Any, list[Any]]:
        async with AsyncFailoverProducer(bootstrap_servers=healthy.bootstrap_servers) as ap:
            md = await ap.send_and_wait(
                "basic", b"value", key=b"k", headers={"h": b"1"}, timestamp_ms=1_700_000_000_000
            )
            assert await ap.stop() == []
        return md, await consume(healthy.bootstrap_servers, "basic", 4)

    md, records = asyncio.run(run())
    [record] = records
    assert (record.partition, record.offset) == (md.partition, md.offset)
    assert (record.key, record.value, list(record.headers)) == (b"k", b"value", [("h", b"1")])
    assert record.timestamp == md.timestamp == 1_700_000_000_000


def test_a_message_too_large_for_the_topic_fails_alone_and_once(healthy: Cluster) -> None:
    """The broker refuses the whole batch it sits in; the batch is split, the small messages
    are delivered and only the large one fails, finally, without looping."""
    healthy.create_topic(
        "small", partitions=2, replication_factor=3, config={"max.message.bytes": "3000"}
    )
    dead: list[tuple[UndeliveredMessage, BaseException]] = []

    async def run() -> tuple[list[Any], Any]:
        async with AsyncFailoverProducer(
            bootstrap_servers=healthy.bootstrap_servers,
            dead_letter=lambda m, e: dead.append((m, e)),
        ) as ap:
            futures = [await ap.send("small", b"s-%03d" % i + b"." * 100) for i in range(60)]
            futures.insert(30, await ap.send("small", b"L" * 5000))
            results = await asyncio.gather(*futures, return_exceptions=True)
            assert await ap.flush(5) == 0
            return results, ap.statistics()

    results, stats = asyncio.run(run())
    big = results.pop(30)
    assert isinstance(big, ak.MessageSizeTooLargeError)
    assert not [r for r in results if isinstance(r, BaseException)]
    assert stats.final_failures == 1
    assert stats.delivered == 60
    [(message, error)] = dead
    assert message.value == b"L" * 5000
    assert isinstance(error, ak.MessageSizeTooLargeError)
    assert message.attempts <= 2  # in its batch, then alone: never looped


def test_a_message_over_max_request_size_is_refused_at_send_and_not_accepted(
    healthy: Cluster,
) -> None:
    """As aiokafka's send does: a message whose one-record batch would be larger than
    max_request_size raises MessageSizeTooLargeError from send(), naming the size and the
    limit, and is not accepted; one at it is accepted and delivered, with or without a key
    or headers (aiokafka's estimate: 86 bytes more than a value without key or headers)."""
    healthy.create_topic("sized", partitions=1, replication_factor=3)

    async def run() -> tuple[list[str], list[Any], Any]:
        async with AsyncFailoverProducer(
            bootstrap_servers=healthy.bootstrap_servers, max_request_size=2000
        ) as ap:
            refused = []
            cases: list[tuple[bytes | None, bytes, list[tuple[str, bytes | str | None]] | None]]
            cases = [
                (None, b"v" * 1915, None),  # 1915 + 86 = 2001
                (b"k" * 8, b"v" * 1907, None),
                (None, b"v" * 1800, [("h", b"x" * 150)]),
            ]
            for key, value, headers in cases:
                with pytest.raises(ak.MessageSizeTooLargeError) as info:
                    await ap.send("sized", value, key, headers=headers)
                refused.append(str(info.value))
            futures = [
                await ap.send("sized", b"v" * 1914),
                await ap.send("sized", b"v" * 1906, b"k" * 8),
                await ap.send("sized", b"v" * 1800, headers=[("h", b"x" * 100)]),
            ]
            return refused, await asyncio.gather(*futures), ap.statistics()

    refused, delivered, stats = asyncio.run(run())
    assert all("max_request_size=2000" in r and "not accepted" in r for r in refused)
    assert "2001 bytes" in refused[0]
    assert [md.offset for md in delivered] == [0, 1, 2]
    assert (stats.produced, stats.delivered) == (3, 3)


@pytest.mark.parametrize("window", [0.0, 1.5])
def test_a_topic_the_cluster_does_not_have_fails_after_its_window(
    healthy: Cluster, window: float
) -> None:
    """Waited for ``topic_propagation_max_s``, then failed saying why; a send after the window
    fails at once."""

    async def run() -> tuple[BaseException, float, float]:
        async with AsyncFailoverProducer(
            bootstrap_servers=healthy.bootstrap_servers,
            produce_timeout_s=2.0,
            topic_propagation_max_s=window,
            metadata_fast_refresh_s=0.2,
        ) as ap:
            start = time.monotonic()
            with pytest.raises(ak.UnknownTopicOrPartitionError) as info:
                await ap.send_and_wait("no-such-topic", b"x")
            took = time.monotonic() - start
            with pytest.raises(ak.UnknownTopicOrPartitionError):
                await ap.send_and_wait("no-such-topic", b"y")
            stats = ap.statistics()
            assert (stats.final_failures, stats.in_flight) == (2, 0)
            return info.value, took, time.monotonic() - start - took

    error, took, then = asyncio.run(run())
    assert "'no-such-topic' does not exist" in str(error)
    assert "topic_propagation_max_s" in str(error)
    assert window <= took < window + 2.0
    assert then < 0.5


def test_a_topic_created_while_its_messages_wait_takes_them(healthy: Cluster) -> None:
    """Messages for a topic the cluster does not list yet (as when a broker has not heard of a
    new topic) wait for it and are delivered once it is created, keyed ones home."""

    async def run() -> list[Any]:
        async with AsyncFailoverProducer(
            bootstrap_servers=healthy.bootstrap_servers, metadata_fast_refresh_s=0.2
        ) as ap:
            keys = [None if i % 2 else b"k%d" % i for i in range(40)]
            futures = [await ap.send("late", b"v%d" % i, key=k) for i, k in enumerate(keys)]
            await asyncio.sleep(0.5)
            assert not any(f.done() for f in futures)
            assert ap.statistics().failed_buffer_depth == 40
            await asyncio.to_thread(healthy.create_topic, "late", 4, 3)
            done = await asyncio.wait_for(asyncio.gather(*futures), 15)
            assert ap.statistics().delivered == 40
            return list(zip(keys, done, strict=True))

    for key, md in asyncio.run(run()):
        if key is not None:
            assert md.partition == partition_for_key(key, 4)


def test_misuse_is_refused_before_anything_is_accepted(healthy: Cluster) -> None:
    healthy.create_topic("misuse", partitions=1, replication_factor=3)

    async def run() -> None:
        ap = AsyncFailoverProducer(bootstrap_servers=healthy.bootstrap_servers)
        with pytest.raises(FailoverError, match="start"):
            await ap.send("misuse", b"x")
        await ap.start()
        with pytest.raises(TypeError, match="value"):
            await ap.send("misuse", 42)
        with pytest.raises(TypeError, match="headers"):
            await ap.send("misuse", b"x", headers=[("h", b"1", b"2")])  # type: ignore[list-item]  # the misuse under test
        with pytest.raises(FailoverError, match="already"):
            await ap.start()
        assert ap.statistics().produced == 0
        assert await ap.stop() == []
        with pytest.raises(ProducerClosed):
            await ap.send("misuse", b"x")

    asyncio.run(run())


def test_total_outage_applies_backpressure_then_delivers_everything(outage: Cluster) -> None:
    async def run() -> None:
        async with AsyncFailoverProducer(
            bootstrap_servers=outage.bootstrap_servers, max_in_flight=5, produce_timeout_s=0.3
        ) as ap:
            futures = [await ap.send("o", b"%d" % i) for i in range(5)]
            assert ap.health("o").usable == ()
            start = time.monotonic()
            with pytest.raises(ProduceTimeout) as info:
                await ap.send("o", b"5")
            waited = time.monotonic() - start
            assert 0.3 <= waited < 1.5
            assert info.value.message.value == b"5"
            assert (ap.statistics().produced, len(ap)) == (5, 5)

            outage.start_broker(3)
            done = await asyncio.wait_for(asyncio.gather(*futures), 30)
            assert all(md.topic == "o" and md.offset >= 0 for md in done)
            assert ap.statistics().delivered == 5
        values = {r.value for r in await consume(outage.bootstrap_servers, "o", 3)}
        assert values == {b"%d" % i for i in range(5)}

    asyncio.run(run())


def test_stop_hands_back_what_could_not_be_delivered(outage: Cluster) -> None:
    async def run() -> None:
        ap = AsyncFailoverProducer(bootstrap_servers=outage.bootstrap_servers)
        await ap.start()
        futures = [await ap.send("o", b"%d" % i, key=b"k%d" % i) for i in range(3)]
        left = await ap.stop(timeout=0.3)
        assert [(m.value, m.key, m.topic) for m in left] == [
            (b"%d" % i, b"k%d" % i, "o") for i in range(3)
        ]
        assert not any(m.possibly_delivered for m in left)  # never written anywhere
        for f in futures:
            with pytest.raises(ProducerClosed):
                f.result()
        assert await ap.stop() == left
        assert ap.statistics().returned_on_close == 3
        with pytest.raises(ProducerClosed):
            await ap.send("o", b"late")

    asyncio.run(run())


def test_leaving_an_async_with_block_gives_what_is_left_to_the_dead_letter_hook(
    outage: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nobody can take stop()'s list when an async with block ends (stop(hand_back=False)):
    the dead-letter hook gets each message left, with its future's ProducerClosed."""
    # stop()'s 30 s flush, shortened: the partitions have no leader meanwhile.
    monkeypatch.setattr(
        AsyncFailoverProducer, "stop", functools.partialmethod(AsyncFailoverProducer.stop, 0.3)
    )
    dead: list[tuple[bytes, type[BaseException]]] = []

    async def run() -> list[asyncio.Future[Any]]:
        async with AsyncFailoverProducer(
            bootstrap_servers=outage.bootstrap_servers,
            dead_letter=lambda m, exc: dead.append((m.value, type(exc))),
        ) as ap:
            futures = [await ap.send("o", b"%d" % i) for i in range(3)]
        assert await ap.stop() == []  # already stopped: nothing handed back
        assert ap.statistics().returned_on_close == 3
        return futures

    futures = asyncio.run(run())
    assert sorted(dead) == [(b"%d" % i, ProducerClosed) for i in range(3)]
    for f in futures:
        with pytest.raises(ProducerClosed):
            f.result()


@pytest.mark.parametrize("ending", ["async-with", "stop"])
def test_a_second_ctrl_c_while_the_producer_stops_still_reports_what_is_left(
    outage: Cluster, ending: str
) -> None:
    """asyncio.run's first Ctrl-C cancels the main task, which then stops the producer (a
    flush of up to 30 s: the partitions are below min ISR); a second one ends asyncio.run,
    which cancels the stopping task. What is left still reaches the dead-letter hook (an
    async with block's end), or the list a later stop() returns (a stop() call)."""
    dead: list[tuple[bytes, type[BaseException]]] = []
    futures: list[asyncio.Future[Any]] = []
    ap = AsyncFailoverProducer(
        bootstrap_servers=outage.bootstrap_servers,
        dead_letter=lambda m, exc: dead.append((m.value, type(exc))),
    )

    async def produce() -> None:
        loop = asyncio.get_running_loop()
        futures.extend([await ap.send("o", b"%d" % i) for i in range(3)])
        loop.call_later(0.1, signal.raise_signal, signal.SIGINT)
        loop.call_later(1.0, signal.raise_signal, signal.SIGINT)
        await asyncio.sleep(30)

    async def run() -> None:
        if ending == "async-with":
            async with ap:
                await produce()
        else:
            await ap.start()
            try:
                await produce()
            finally:
                await ap.stop()

    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        asyncio.run(run())
    assert time.monotonic() - start < 10
    expected = [b"%d" % i for i in range(3)]
    if ending == "async-with":
        assert sorted(dead) == [(value, ProducerClosed) for value in expected]
        assert asyncio.run(ap.stop()) == []
    else:
        assert dead == []
        assert sorted(str(m.value) for m in asyncio.run(ap.stop())) == [str(v) for v in expected]
    for f in futures:
        with pytest.raises(ProducerClosed):
            f.result()


def test_cancelling_the_wait_does_not_cancel_the_delivery(healthy: Cluster) -> None:
    healthy.create_topic("cancel", partitions=2, replication_factor=3)

    async def run() -> list[Any]:
        async with AsyncFailoverProducer(bootstrap_servers=healthy.bootstrap_servers) as ap:
            await ap.refresh("cancel")
            task = asyncio.create_task(ap.send_and_wait("cancel", b"kept"))
            await wait_for(lambda: ap.statistics().produced == 1, 5)
            assert not task.done()  # replication is slowed: the delivery is still ahead
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert await ap.flush(10) == 0
            assert ap.statistics().delivered == 1
        return await consume(healthy.bootstrap_servers, "cancel", 2)

    for broker in (1, 2, 3):
        healthy.slow_broker(broker, 500)
    try:
        records = asyncio.run(run())
    finally:
        for broker in (1, 2, 3):
            healthy.slow_broker(broker, 0)
    assert [r.value for r in records] == [b"kept"]


def test_cancelling_a_send_waiting_for_room_leaves_the_message_with_the_caller(
    outage: Cluster,
) -> None:
    async def run() -> None:
        async with AsyncFailoverProducer(
            bootstrap_servers=outage.bootstrap_servers, max_in_flight=1, produce_timeout_s=30
        ) as ap:
            first = await ap.send("o", b"first")
            waiting = asyncio.create_task(ap.send("o", b"second"))
            await asyncio.sleep(0.2)
            assert not waiting.done()
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            assert ap.statistics().produced == 1  # "second" was never accepted
            outage.start_broker(3)
            assert (await asyncio.wait_for(first, 30)).topic == "o"

    asyncio.run(run())


def test_metrics_count_what_happened(healthy: Cluster) -> None:
    healthy.create_topic("metrics", partitions=3, replication_factor=3)
    registry = CollectorRegistry()

    async def run() -> None:
        async with AsyncFailoverProducer(
            bootstrap_servers=healthy.bootstrap_servers,
            client_id="aio-metrics",
            metrics_registry=registry,
        ) as ap:
            assert ap.metrics_registry is registry
            for i in range(20):
                await ap.send("metrics", b"%d" % i)
            assert await ap.flush(10) == 0
            labels = {"producer": "aio-metrics"}
            assert registry.get_sample_value("failover_produced_total", labels) == 20
            assert registry.get_sample_value("failover_delivered_total", labels) == 20
            healthy_now = registry.get_sample_value(
                "failover_partitions", {**labels, "topic": "metrics", "state": "healthy"}
            )
            assert healthy_now == 3

    asyncio.run(run())
    # Stopped producers leave the registry.
    assert registry.get_sample_value("failover_produced_total", {"producer": "aio-metrics"}) is None


def test_stop_while_start_runs_waits_for_it_then_stops(healthy: Cluster) -> None:
    """A second start() meanwhile is refused; stop() waits for the start, then stops it all:
    nothing keeps running that no call could stop."""

    async def run() -> None:
        ap = AsyncFailoverProducer(bootstrap_servers=healthy.bootstrap_servers)
        starting = asyncio.create_task(ap.start())
        await asyncio.sleep(0)  # start() is connecting
        assert "starting" in repr(ap)
        with pytest.raises(FailoverError, match="already"):
            await ap.start()
        assert await ap.stop() == []
        await starting
        assert "stopped" in repr(ap)
        with pytest.raises(ProducerClosed):
            await ap.send("misuse", b"x")
        assert asyncio.all_tasks() == {asyncio.current_task()}

    asyncio.run(run())


def test_a_start_that_fails_after_connecting_stops_what_it_started(healthy: Cluster) -> None:
    """start() fails at its last step (the metrics exporter's port is taken): the client, its
    connections and the background tasks are stopped before the error goes on, and the
    producer is stopped."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        async def run() -> None:
            ap = AsyncFailoverProducer(
                bootstrap_servers=healthy.bootstrap_servers,
                metrics_port=port,
                metrics_addr="127.0.0.1",
            )
            with pytest.raises(OSError, match="in use"):
                await ap.start()
            assert asyncio.all_tasks() == {asyncio.current_task()}
            assert "stopped" in repr(ap)
            assert await ap.stop() == []
            with pytest.raises(FailoverError, match="create a new one"):
                await ap.start()
            with pytest.raises(ProducerClosed):
                await ap.send("misuse", b"x")

        asyncio.run(run())


def test_a_stop_cancelled_inside_an_async_with_block_leaves_its_list_to_the_dead_letter_hook(
    outage: Cluster,
) -> None:
    """The block calls stop() itself, and is cancelled while it flushes (a first Ctrl-C): its
    caller gone, nobody can take that stop's list; the block's end (stop(hand_back=False),
    joining it) gives each message to the dead-letter hook, once."""
    dead: list[tuple[bytes, type[BaseException]]] = []
    futures: list[asyncio.Future[Any]] = []
    ap = AsyncFailoverProducer(
        bootstrap_servers=outage.bootstrap_servers,
        dead_letter=lambda m, exc: dead.append((m.value, type(exc))),
    )

    async def body() -> None:
        async with ap:
            futures.extend([await ap.send("o", b"%d" % i) for i in range(3)])
            await ap.stop(1.0)

    async def run() -> None:
        task = asyncio.create_task(body())
        await wait_for(lambda: "stopping" in repr(ap), 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await ap.stop() == []  # given to the hook: nothing is left to hand back

    asyncio.run(run())
    assert sorted(dead) == [(b"%d" % i, ProducerClosed) for i in range(3)]
    assert ap.statistics().returned_on_close == 3
    for f in futures:
        with pytest.raises(ProducerClosed):
            f.result()


def test_senders_waiting_for_room_are_refused_once_stop_begins(outage: Cluster) -> None:
    """stop() ends admission at once: senders waiting at max_in_flight raise ProducerClosed
    with their message not accepted, even when room comes during the stop's flush (here the
    missing broker returns and the messages in flight are delivered)."""

    async def run() -> None:
        ap = AsyncFailoverProducer(
            bootstrap_servers=outage.bootstrap_servers, max_in_flight=2, produce_timeout_s=30
        )
        await ap.start()
        await ap.refresh("o")
        accepted = [await ap.send("o", b"in-%d" % i) for i in range(2)]
        waiting = [asyncio.create_task(ap.send("o", b"wait-%d" % i)) for i in range(4)]
        await asyncio.sleep(0.3)
        assert not any(t.done() for t in waiting)
        stopping = asyncio.create_task(ap.stop(10.0))
        await asyncio.sleep(0)  # stop() has begun
        await asyncio.to_thread(outage.start_broker, 3)
        refused = await asyncio.gather(*waiting, return_exceptions=True)
        assert all(isinstance(r, ProducerClosed) for r in refused), refused
        assert all("not accepted" in str(r) for r in refused)
        assert await stopping == []
        assert all(f.result().topic == "o" for f in accepted)
        stats = ap.statistics()
        assert (stats.produced, stats.delivered, stats.returned_on_close) == (2, 2, 0)

    asyncio.run(run())


def test_messages_stop_hands_back_count_only_the_attempts_that_reached_aiokafka(
    healthy: Cluster,
) -> None:
    """A stop cut short while a partition holds a write: the message aiokafka held is
    delivered; those waiting behind it in its lane, never handed to aiokafka, come back with
    no attempt and not possibly delivered."""
    healthy.create_topic("held", partitions=1, replication_factor=3)

    async def run() -> tuple[Any, list[UndeliveredMessage]]:
        ap = AsyncFailoverProducer(bootstrap_servers=healthy.bootstrap_servers)
        await ap.start()
        await ap.refresh("held")
        first = await ap.send("held", b"first")
        await wait_for(lambda: ap.statistics().produced == 1, 5)
        await asyncio.sleep(0.1)  # its lane handed it to aiokafka, which waits for the answer
        for i in range(5):
            await ap.send("held", b"behind-%d" % i)
        left = await ap.stop(0.1)
        return first.result(), left

    for broker in (1, 2, 3):
        healthy.slow_broker(broker, 1000)
    try:
        md, left = asyncio.run(run())
    finally:
        for broker in (1, 2, 3):
            healthy.slow_broker(broker, 0)
    assert md.offset == 0
    assert [(m.value, m.attempts, m.possibly_delivered) for m in left] == [
        (b"behind-%d" % i, 0, False) for i in range(5)
    ]


def test_a_ctrl_c_in_the_dead_letter_hook_leaves_no_message_of_its_batch_without_an_outcome(
    outage: Cluster,
) -> None:
    """A KeyboardInterrupt raised while the dead_letter hook runs (a Ctrl-C lands there) goes
    on to the loop's runner, after every message of the failed batch got its final outcome
    and its hook call: none is left pending, or handed back by stop() instead."""
    calls: list[Any] = []

    def hook(message: UndeliveredMessage, exc: BaseException) -> None:
        calls.append(message.value)
        if len(calls) == 1:
            raise KeyboardInterrupt

    # The producer believes min ISR 2 (the cluster says 3, one broker down): every batch is
    # refused with NOT_ENOUGH_REPLICAS, and max_attempts=1 makes that final.
    ap = AsyncFailoverProducer(
        bootstrap_servers=outage.bootstrap_servers,
        min_insync_replicas=2,
        max_attempts=1,
        dead_letter=hook,
    )
    futures: list[asyncio.Future[Any]] = []

    async def produce() -> None:
        await ap.start()
        await ap.refresh("o")
        futures.extend([await ap.send("o", b"%d" % i) for i in range(10)])
        await asyncio.gather(*futures, return_exceptions=True)

    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(KeyboardInterrupt):
            loop.run_until_complete(produce())
        loop.run_until_complete(wait_for(lambda: all(f.done() for f in futures), 10))
        assert len(ap) == 0
        assert loop.run_until_complete(ap.stop(1.0)) == []
    finally:
        loop.close()
    assert sorted(calls) == sorted(b"%d" % i for i in range(10))
    assert all(isinstance(f.exception(), ak.NotEnoughReplicasError) for f in futures)
    assert ap.statistics().final_failures == 10
