"""AsyncFailoverProducer used against its event loop: from another loop, or after its loop
ended. A call from the wrong loop is refused before anything is accepted; a loop that ended
with the producer running loses nothing silently: it is logged, and a later stop(), from any
loop, hands back every message.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest

from failover_partitioner import (
    FailoverError,
    MetadataUnavailable,
    ProducerClosed,
    UndeliveredMessage,
)
from failover_partitioner.aio import AsyncFailoverProducer
from failover_partitioner.aio._metadata import AioMetadataSource
from minibroker import Cluster
from tests.integration.aio_support import outage_cluster

T = TypeVar("T")


@pytest.fixture(scope="module")
def healthy() -> Iterator[Cluster]:
    with Cluster(brokers=3, config={"min.insync.replicas": "2"}) as cluster:
        cluster.create_topic("h", partitions=3, replication_factor=3)
        yield cluster


@pytest.fixture
def outage() -> Iterator[Cluster]:
    """Every partition of topic ``o`` below min ISR (``outage_cluster``)."""
    with outage_cluster() as cluster:
        yield cluster


@pytest.fixture
def dead_loop_collected() -> Iterator[None]:
    """What a closed loop leaves is collected within the test, under its warning filters: the
    connections of a closed loop can only be closed by the garbage collector, which warns
    (asyncio's transports, aiokafka's connections)."""
    yield
    collect_all()


def collect_all() -> None:
    """Collect until nothing more is found: an object whose finalizer ran is freed at the next
    collection, and what is left for a later test warns there (an unclosed socket of a closed
    loop failed a later test's run once)."""
    for _ in range(10):
        if not gc.collect():
            return


def test_calls_from_another_event_loop_are_refused_before_anything_is_accepted(
    healthy: Cluster,
) -> None:
    """The producer runs on a loop in a thread; send, send_and_wait, flush, refresh and stop
    called on another loop raise FailoverError naming the remedy, and nothing is sent."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def on_its_loop(coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(30)

    ap = AsyncFailoverProducer(bootstrap_servers=healthy.bootstrap_servers)
    try:
        on_its_loop(ap.start())
        on_its_loop(ap.refresh("h"))

        async def elsewhere() -> list[str]:
            errors = []
            for call in (
                ap.send("h", b"x"),
                ap.send_and_wait("h", b"y"),
                ap.flush(1),
                ap.refresh("h"),
                ap.stop(1),
            ):
                with pytest.raises(FailoverError, match="run_coroutine_threadsafe") as info:
                    await call
                errors.append(str(info.value))
            return errors

        errors = asyncio.run(elsewhere())
        assert [e.split("()")[0] for e in errors] == [
            "send",
            "send_and_wait",
            "flush",
            "refresh",
            "stop",
        ]
        assert "running" in repr(ap)  # the stop() from elsewhere changed nothing
        assert ap.statistics().produced == 0
        assert on_its_loop(ap.send_and_wait("h", b"z")).topic == "h"
        assert on_its_loop(ap.stop(5)) == []
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("ending", ["asyncio.run returns", "ctrl-c while stopping"])
def test_stop_after_the_event_loop_ended_hands_back_every_message(
    outage: Cluster, ending: str, caplog: pytest.LogCaptureFixture, dead_loop_collected: None
) -> None:
    """The loop ends with messages in flight (the partitions are below min ISR): asyncio.run
    returns without stop(), which is logged at ERROR with the count; or a Ctrl-C leaves
    run_until_complete while stop() flushes, and the loop is closed. A later stop(), on a new
    loop, hands back every accepted message at once, and again the same list."""
    ap = AsyncFailoverProducer(bootstrap_servers=outage.bootstrap_servers)
    futures: list[asyncio.Future[Any]] = []

    async def produce() -> None:
        await ap.start()
        futures.extend([await ap.send("o", b"%d" % i) for i in range(20)])
        await asyncio.sleep(0.3)
        if ending == "ctrl-c while stopping":
            asyncio.get_running_loop().call_later(0.3, _interrupt)
            await ap.stop()

    with caplog.at_level(logging.ERROR, logger="failover_partitioner"):
        if ending == "asyncio.run returns":
            asyncio.run(produce())
            assert "with 20 accepted message(s) without an outcome" in caplog.text
        else:
            loop = asyncio.new_event_loop()
            with pytest.raises(KeyboardInterrupt):
                loop.run_until_complete(produce())
            loop.close()
    assert not any(f.done() for f in futures)

    with pytest.raises(FailoverError, match="event loop is closed"):
        asyncio.run(ap.send("o", b"late"))
    start = time.monotonic()
    left = asyncio.run(ap.stop())
    assert time.monotonic() - start < 1.0
    assert sorted(m.value for m in left) == sorted(b"%d" % i for i in range(20))  # type: ignore[type-var]  # bytes here
    assert "stopped" in repr(ap)
    assert asyncio.run(ap.stop()) == left
    assert ap.statistics().returned_on_close == 20
    for f in futures:  # resolved where it could be: the list is their outcome
        assert not f.done() or isinstance(f.exception(), ProducerClosed)


@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_dead_loop_stop_of_an_async_with_block_gives_the_messages_to_the_hook(
    outage: Cluster, dead_loop_collected: None
) -> None:
    """stop(hand_back=False) once the loop is closed: the dead-letter hook gets each."""
    dead: list[UndeliveredMessage] = []
    ap = AsyncFailoverProducer(
        bootstrap_servers=outage.bootstrap_servers, dead_letter=lambda m, exc: dead.append(m)
    )

    async def produce() -> None:
        await ap.start()
        for i in range(5):
            await ap.send("o", b"%d" % i)

    asyncio.run(produce())
    assert asyncio.run(ap.stop(hand_back=False)) == []
    assert sorted(m.value for m in dead) == [b"%d" % i for i in range(5)]  # type: ignore[type-var]  # bytes here


@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_an_unclosed_producer_collected_with_messages_logs_them_at_error(
    outage: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    """Its ResourceWarning is hidden by default: the count of messages without an outcome
    is logged at ERROR when it is garbage-collected."""

    async def produce() -> None:
        ap = AsyncFailoverProducer(bootstrap_servers=outage.bootstrap_servers)
        await ap.start()
        for i in range(7):
            await ap.send("o", b"%d" % i)

    asyncio.run(produce())
    with caplog.at_level(logging.ERROR, logger="failover_partitioner"):
        gc.collect()
    assert "was garbage-collected without stop() with 7 accepted message(s)" in caplog.text
    caplog.clear()  # its records may hold what the producer held
    collect_all()  # here, under this test's warning filters


def test_the_metadata_task_ends_when_cancelled_as_its_request_fails() -> None:
    """asyncio.run, ending with the producer running, cancels every task at once: aiokafka's
    connections close, failing the metadata request, in the same loop turn as the refresher's
    task is cancelled. The cancel must not be lost (asyncio.wait_for before Python 3.12 drops
    it, CPython issue 86296): the task would run on, and asyncio.run wait for it forever."""

    class Broker:
        nodeId = 1

    class Client:
        class cluster:  # aiokafka's attribute
            @staticmethod
            def brokers() -> list[Broker]:
                return [Broker()]

        def __init__(self) -> None:
            self.pending: list[asyncio.Future[Any]] = []

        async def send(self, node: Any, request: Any, *, group: Any) -> Any:
            self.pending.append(asyncio.get_running_loop().create_future())
            return await self.pending[-1]

    async def run() -> bool:
        client = Client()
        source = AioMetadataSource(client)

        async def refresh() -> None:
            while True:
                with contextlib.suppress(MetadataUnavailable):
                    await source.partitions("t", 5.0)

        task = asyncio.create_task(refresh())
        await wait_until(lambda: bool(client.pending))
        client.pending[-1].set_exception(ConnectionError("the connection closed"))
        task.cancel()
        done, _ = await asyncio.wait((task,), timeout=1.0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return bool(done)

    assert asyncio.run(run())


async def wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 5
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.001)


def _interrupt() -> None:
    raise KeyboardInterrupt
