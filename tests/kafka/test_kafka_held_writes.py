"""A follower that stops copying but stays in the ISR, on real Apache Kafka: writes are held.

Broker 4 follows three partitions and leads none. Hung (SIGSTOP), it stays in their ISRs until
``replica.lag.time.max.ms`` (25 s here; 30 s is Kafka's default) and registered until
``broker.session.timeout.ms`` (40 s here), so for 25 s their leaders append every acks=all
write and hold it until the request's timeout, then answer REQUEST_TIMED_OUT (7), while the
metadata shows the partitions whole. A leader answers one request per connection at a time, so
every request the producer sent it meanwhile, for any partition, waits behind the held ones.
Both producers send one request per broker at a time (librdkafka's default is a million, under
which deliveries stalled for about 10 s here, until librdkafka's own timeout ended the requests
queued behind the held ones: 26,700 retries in 16 s against 1,600-1,800 with one at a time).
The producer keeps each held partition out of use until its ISR changes, so a few seconds after
the pause every second delivers the offered rate. Released after a back-off instead, the held
partitions took new writes and stalled the connections again until the ISR shrank (about 150
messages a second delivered between 15 and 24 s after the pause, against 1,950 offered).

The asyncio producer goes through the same fault on the same cluster (a topic of its own): the
same strikes, the same rate in the window, everything read back.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from failover_partitioner import FailoverProducer, ProducerStatistics
from failover_partitioner.aio import AsyncFailoverProducer
from failover_partitioner.health import TopicView
from tests.integration.test_held_writes_minibroker import strikes
from tests.kafka.support import copies, read_back, wait_for, whole
from tests.realkafka.cluster import KafkaCluster
from tests.realkafka.jars import KafkaJars

HUNG = 4
LAG_S = 25.0
REQUEST_TIMEOUT_MS = 2000
RATE_PER_S = 2_000
HELD_PHASE_S = 7.0  # seconds after the pause: the held writes answered, the partitions struck
WINDOW = (7.0, 24.0)  # seconds after the pause: the held requests answered, the ISR still full
# Broker 4 follows partitions 0-2 and leads none; partitions 3-7 do not involve it.
ASSIGNMENT = [
    [1, 2, 4],
    [2, 3, 4],
    [3, 1, 4],
    [1, 2, 3],
    [2, 3, 1],
    [3, 1, 2],
    [1, 3, 2],
    [2, 1, 3],
]
HELD = {0, 1, 2}


@pytest.fixture(scope="module")
def cluster(kafka_jars: KafkaJars) -> Iterator[KafkaCluster]:
    """4 brokers that keep a hung follower in the ISR for LAG_S, shared by both producers."""
    with KafkaCluster(
        4,
        jars=kafka_jars,
        min_insync_replicas=2,
        config={"replica.lag.time.max.ms": str(int(LAG_S * 1000))},
        controller_config={"broker.session.timeout.ms": "40000"},
    ) as c:
        yield c


@pytest.fixture
def topic(cluster: KafkaCluster) -> str:
    cluster.heal()
    name = f"held-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(name, assignment=ASSIGNMENT)
    return name


def check_held_phase(struck: Counter[object], view: TopicView) -> None:
    """HELD_PHASE_S after the pause. Held writes time out after 2 s; a back-off of 0.2 s,
    doubling, would have released and struck each held partition about three times by now."""
    assert struck.keys() & HELD, struck
    assert all(struck[q] <= 2 for q in HELD), struck
    assert HELD & set(view.quarantined), view


def check_window(cluster: KafkaCluster, topic: str, delivered: list[float], paused: float) -> None:
    """While the ISR still holds the hung follower, the rest of the topic takes the load: each
    second of the window delivers at least half the offered rate (a backlog delivered in a
    burst after a stall does not make up for it)."""
    views = cluster.describe(topic)
    assert all(len(v.isr) == 3 for v in views), f"an ISR shrank too soon: {views}"
    begin, end = paused + WINDOW[0], paused + WINDOW[1]
    per_second = Counter(int(t - begin) for t in delivered if begin <= t < end)
    slow = {
        WINDOW[0] + s: per_second[s]
        for s in range(int(WINDOW[1] - WINDOW[0]))
        if per_second[s] < RATE_PER_S / 2
    }
    assert not slow, f"seconds after the pause with under half the offered rate delivered: {slow}"


def check_read_back(
    cluster: KafkaCluster, topic: str, sent: int, stats: ProducerStatistics
) -> None:
    assert (stats.delivered, stats.final_failures) == (sent, 0)
    cluster.heal()
    wait_for(lambda: whole(cluster, topic), 90, "every ISR full again")
    records = read_back(cluster.bootstrap_servers, topic, len(ASSIGNMENT))
    assert {m.value() for m in records} == {b"m-%d" % i for i in range(sent)}
    elsewhere, alongside, _ = copies(records)
    assert elsewhere <= stats.ambiguous_failures, (elsewhere, alongside, stats)


def produce_until(
    p: FailoverProducer, topic: str, until: float, sent: int, on_delivery: Callable[..., None]
) -> int:
    """Keyless messages ``m-N`` at RATE_PER_S until ``time.monotonic()`` passes ``until``;
    the count sent in all."""
    start = time.monotonic()
    first = sent
    while (now := time.monotonic()) < until:
        ahead = (sent - first) / RATE_PER_S - (now - start)
        if ahead > 0:
            time.sleep(ahead)
        for _ in range(50):
            p.produce(topic, b"m-%d" % sent, on_delivery=on_delivery)
            sent += 1
        p.poll(0)
    return sent


def test_partitions_holding_writes_stay_out_until_the_isr_drops_the_hung_follower(
    cluster: KafkaCluster, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="failover_partitioner.core.engine")
    p = FailoverProducer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "acks": "all",
            "request.timeout.ms": REQUEST_TIMEOUT_MS,
        },
        quarantine_backoff_s=0.2,
        metadata_fast_refresh_s=0.2,
    )
    delivered: list[float] = []

    def on_delivery(err: object, _: object) -> None:
        if err is None:
            delivered.append(time.monotonic())

    try:
        wait_for(lambda: p.health(topic).min_insync_replicas == 2, 20, "min ISR read from Kafka")
        sent = produce_until(p, topic, time.monotonic() + 1.0, 0, on_delivery)
        cluster.pause(HUNG)
        paused = time.monotonic()
        sent = produce_until(p, topic, paused + HELD_PHASE_S, sent, on_delivery)
        check_held_phase(strikes(caplog), p.health(topic))
        sent = produce_until(p, topic, paused + WINDOW[1], sent, on_delivery)
        check_window(cluster, topic, delivered, paused)

        # The ISR drops broker 4 (2 left, the minimum): the partitions take writes again.
        wait_for(
            lambda: set(p.health(topic).usable) >= HELD,
            LAG_S,
            "the partitions broker 4 followed to be used again",
            lambda: (p.health(topic), cluster.describe(topic)),
        )
        sent = produce_until(p, topic, time.monotonic() + 1.0, sent, on_delivery)
        assert p.flush(60) == 0
        stats = p.statistics()
    finally:
        assert p.close() == []
    check_read_back(cluster, topic, sent, stats)


async def send_until(
    p: AsyncFailoverProducer, topic: str, until: float, sent: int, delivered: list[float]
) -> int:
    """``produce_until`` with ``send``: each delivery's time goes to ``delivered``."""

    def done(future: asyncio.Future[Any]) -> None:
        if not future.cancelled() and future.exception() is None:
            delivered.append(time.monotonic())

    start = time.monotonic()
    first = sent
    while (now := time.monotonic()) < until:
        await asyncio.sleep(max(0.0, (sent - first) / RATE_PER_S - (now - start)))
        for _ in range(50):
            (await p.send(topic, b"m-%d" % sent)).add_done_callback(done)
            sent += 1
    return sent


async def until_true(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}"
        await asyncio.sleep(0.05)


def test_the_asyncio_producer_keeps_partitions_holding_writes_out_alike(
    cluster: KafkaCluster, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="failover_partitioner.core.engine")
    delivered: list[float] = []

    async def scenario() -> tuple[int, ProducerStatistics]:
        async with AsyncFailoverProducer(
            bootstrap_servers=cluster.bootstrap_servers,
            request_timeout_ms=REQUEST_TIMEOUT_MS,
            quarantine_backoff_s=0.2,
            metadata_fast_refresh_s=0.2,
        ) as p:
            await p.refresh(topic)
            await until_true(
                lambda: p.health(topic).min_insync_replicas == 2, 20, "min ISR read from Kafka"
            )
            sent = await send_until(p, topic, time.monotonic() + 1.0, 0, delivered)
            cluster.pause(HUNG)
            paused = time.monotonic()
            sent = await send_until(p, topic, paused + HELD_PHASE_S, sent, delivered)
            check_held_phase(strikes(caplog), p.health(topic))
            sent = await send_until(p, topic, paused + WINDOW[1], sent, delivered)
            check_window(cluster, topic, delivered, paused)

            await until_true(
                lambda: set(p.health(topic).usable) >= HELD,
                LAG_S,
                "the partitions broker 4 followed to be used again",
            )
            sent = await send_until(p, topic, time.monotonic() + 1.0, sent, delivered)
            assert await p.flush(60) == 0
            return sent, p.statistics()

    sent, stats = asyncio.run(scenario())
    check_read_back(cluster, topic, sent, stats)
