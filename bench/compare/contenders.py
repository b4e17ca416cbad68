"""Each contender sending the same keyless messages and recording what became of each one.

A message's value starts with its id (10 digits) and is padded to ``value_bytes``; that is how a
delivery report and a consumed record are matched to the message. Every contender runs as its
users run it: its client's defaults except ``acks=all`` (the scenario's premise; the default of
every client here but aiokafka's, which is ``acks=1``).
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaProducer  # type: ignore[import-untyped]
from confluent_kafka import Producer
from tests.realkafka.cluster import KafkaCluster

from failover_partitioner import FailoverProducer
from failover_partitioner.aio import AsyncFailoverProducer

DRAIN_S = 120.0  # after the last send: the Java producer's delivery.timeout.ms


def value(i: int, value_bytes: int) -> bytes:
    return (b"%010d" % i).ljust(value_bytes, b"x")


def ident(raw: bytes | str | None) -> int:
    assert isinstance(raw, bytes)
    return int(raw[:10])


@dataclass(slots=True, kw_only=True)
class Trace:
    """What a contender did: when each message was sent and when its outcome came."""

    sent_s: list[float] = field(default_factory=list)  # by message id, since the start
    acked_s: dict[int, float] = field(default_factory=dict)
    failed: dict[int, tuple[float, str]] = field(default_factory=dict)
    longest_call_s: float = 0.0  # the longest a produce()/send() call held the application
    elapsed_s: float = 0.0

    def ack(self, i: int, at_s: float) -> None:
        self.acked_s[i] = at_s

    def fail(self, i: int, at_s: float, error: str) -> None:
        self.failed[i] = (at_s, error)


@dataclass(frozen=True, slots=True, kw_only=True)
class Load:
    """A steady rate for a while (``count`` None), or ``count`` messages as fast as possible."""

    rate_per_s: float = 0.0
    duration_s: float = 0.0
    count: int | None = None
    value_bytes: int = 100

    @property
    def total(self) -> int:
        return (
            self.count if self.count is not None else math.ceil(self.rate_per_s * self.duration_s)
        )

    def due_s(self, i: int) -> float:
        return 0.0 if self.count is not None else i / self.rate_per_s


class FaultWindow:
    """Pause ``brokers`` from ``start_s`` to ``end_s`` after ``begin()``; ``close()`` undoes it."""

    def __init__(
        self, cluster: KafkaCluster | None, brokers: tuple[int, ...], start_s: float, end_s: float
    ) -> None:
        self._cluster, self._brokers = cluster, brokers
        self.start_s, self.end_s = start_s, end_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._paused: list[int] = []
        self.paused_at_s: float | None = None
        self.resumed_at_s: float | None = None

    def begin(self) -> None:
        if self._cluster is None or not self._brokers:
            return
        t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, args=(t0,), daemon=True)
        self._thread.start()

    def _run(self, t0: float) -> None:
        assert self._cluster is not None
        if self._stop.wait(max(0.0, t0 + self.start_s - time.monotonic())):
            return
        for broker in self._brokers:
            self._cluster.pause(broker)
            self._paused.append(broker)
        self.paused_at_s = time.monotonic() - t0
        self._stop.wait(max(0.0, t0 + self.end_s - time.monotonic()))
        self._resume()
        self.resumed_at_s = time.monotonic() - t0

    def _resume(self) -> None:
        assert self._cluster is not None
        while self._paused:
            self._cluster.resume(self._paused.pop())

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._cluster is not None:
            self._resume()


def _drive_sync(
    client: Producer | FailoverProducer, topic: str, load: Load, window: FaultWindow, trace: Trace
) -> None:
    start = time.monotonic()

    def on_delivery(err: Any, msg: Any) -> None:
        i, at = ident(msg.value()), time.monotonic() - start
        if err is None:
            trace.ack(i, at)
        else:
            trace.fail(i, at, str(err.name() if hasattr(err, "name") else err))

    window.begin()
    pace = load.count is None
    for i in range(load.total):
        if pace:
            ahead = start + load.due_s(i) - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
        if i % 50 == 0:
            client.poll(0)
        payload = value(i, load.value_bytes)
        t = time.monotonic()
        trace.sent_s.append(t - start)
        while True:
            try:
                client.produce(topic, payload, on_delivery=on_delivery)
                break
            except BufferError:  # librdkafka's queue is full: what its users do is poll, retry
                client.poll(0.05)
        trace.longest_call_s = max(trace.longest_call_s, time.monotonic() - t)
    client.flush(DRAIN_S)
    trace.elapsed_s = time.monotonic() - start


def run_confluent(bootstrap: str, topic: str, load: Load, window: FaultWindow) -> Trace:
    trace = Trace()
    client = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    try:
        client.list_topics(topic, timeout=30)  # metadata first, as every contender does
        _drive_sync(client, topic, load, window, trace)
    finally:
        client.purge()
        client.flush(5)
    return trace


def run_failover(bootstrap: str, topic: str, load: Load, window: FaultWindow) -> Trace:
    trace = Trace()
    client = FailoverProducer({"bootstrap.servers": bootstrap, "acks": "all"})
    try:
        client.health(topic)  # its first metadata look, as an application's warm-up would do
        _drive_sync(client, topic, load, window, trace)
    finally:
        client.close(5)
    return trace


async def _drive_async(
    send: Callable[[str, bytes], Any],
    flush: Callable[[], Any],
    topic: str,
    load: Load,
    window: FaultWindow,
    trace: Trace,
) -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    futures: list[asyncio.Future[Any]] = []

    def outcome(i: int) -> Callable[[asyncio.Future[Any]], None]:
        def done(f: asyncio.Future[Any]) -> None:
            at = loop.time() - start
            if f.cancelled():
                trace.fail(i, at, "cancelled")
            elif f.exception() is not None:
                trace.fail(i, at, type(f.exception()).__name__)
            else:
                trace.ack(i, at)

        return done

    window.begin()
    pace = load.count is None
    for i in range(load.total):
        if pace:
            ahead = start + load.due_s(i) - loop.time()
            if ahead > 0:
                await asyncio.sleep(ahead)
        t = loop.time()
        trace.sent_s.append(t - start)
        future = await send(topic, value(i, load.value_bytes))
        trace.longest_call_s = max(trace.longest_call_s, loop.time() - t)
        future.add_done_callback(outcome(i))
        futures.append(future)
    await flush()
    if futures:
        await asyncio.wait(futures, timeout=DRAIN_S)
    await asyncio.sleep(0)  # let the done-callbacks of the last futures run
    trace.elapsed_s = loop.time() - start


async def _async_failover(bootstrap: str, topic: str, load: Load, window: FaultWindow) -> Trace:
    trace = Trace()
    async with AsyncFailoverProducer(bootstrap_servers=bootstrap, acks="all") as producer:
        await producer.refresh(topic)
        await _drive_async(
            producer.send, lambda: producer.flush(DRAIN_S), topic, load, window, trace
        )
    return trace


async def _aiokafka(bootstrap: str, topic: str, load: Load, window: FaultWindow) -> Trace:
    trace = Trace()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        await producer.partitions_for(topic)
        await _drive_async(producer.send, producer.flush, topic, load, window, trace)
    finally:
        await producer.stop()
    return trace


def run_async_failover(bootstrap: str, topic: str, load: Load, window: FaultWindow) -> Trace:
    return asyncio.run(_async_failover(bootstrap, topic, load, window))


def run_aiokafka(bootstrap: str, topic: str, load: Load, window: FaultWindow) -> Trace:
    return asyncio.run(_aiokafka(bootstrap, topic, load, window))
