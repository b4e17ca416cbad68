"""Total outage: every partition refuses writes for 30 s; producers push back, memory stays put.

3 brokers, 6 partitions, RF=3, min.insync.replicas=2. After a warm-up, every broker is isolated:
each partition's ISR shrinks to its leader alone, so every acks=all write is refused
(NOT_ENOUGH_REPLICAS) and no partition is usable. For 30 s a ``FailoverProducer`` (on a thread)
and an ``AsyncFailoverProducer`` (on a loop in another thread) keep offering 1 KiB messages.

* ``produce``/``send`` apply backpressure: once ``max_in_flight`` messages are in, each call waits
  ``produce_timeout_s`` and raises ``ProduceTimeout`` carrying the message it did not accept.
* In-flight peaks exactly at the limit, never above; nothing is delivered during the outage.
* The process's resident memory (``/proc/self/statm``) grows by less than ``RSS_BOUND_BYTES``
  from the start of the outage to its end, while the producers are offered far more than that.
* After the brokers heal, every accepted message is delivered and read back; no refused message
  is ever written.

``OUTAGE_SECONDS`` changes the length of the outage (default 30).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from failover_partitioner import FailoverProducer, ProducerStatistics, ProduceTimeout
from failover_partitioner.aio import AsyncFailoverProducer
from minibroker import Cluster
from tests.integration.reliability_support import full_isr, read_topic, rss_bytes, wait_for

pytestmark = pytest.mark.chaos

TOPIC = "outage"
PARTITIONS = 6
CONFIG = {
    "min.insync.replicas": "2",
    "replica.lag.time.max.ms": "500",
    "broker.session.timeout.ms": "1000",
}
LIMIT = 2000
PRODUCE_TIMEOUT_S = 0.1
VALUE_BYTES = 1024
OUTAGE_S = float(os.environ.get("OUTAGE_SECONDS", "30"))
WARM_UP_RATE_PER_S = 1000.0
# At the limit 2 producers x 2000 x 1 KiB values are in flight, a few MiB with their bookkeeping;
# the rest is allocator and client noise. Without backpressure each producer would take its
# offered load instead: even at the warm-up pace (1000/s) that is 2 x 30 MiB in 30 s, past it.
RSS_BOUND_BYTES = 48 * 2**20


def value(prefix: bytes, i: int) -> bytes:
    head = b"%s-%08d-" % (prefix, i)
    return head + b"x" * (VALUE_BYTES - len(head))


@dataclass
class Side:
    """What one producer was offered, accepted and refused, and what it looked like meanwhile."""

    name: str
    accepted: list[bytes] = field(default_factory=list)
    refused: list[bytes] = field(default_factory=list)
    waits_s: list[float] = field(default_factory=list)
    wrong_refusals: list[str] = field(default_factory=list)
    peak_in_flight: int = 0
    """The most messages accepted and not yet ended, counted here (accepted, less what the
    producer's exact counters say was delivered or failed)."""
    statistics: Callable[[], ProducerStatistics] | None = None
    """Read the producer's counters from another thread (set once it runs)."""
    left: int = -1
    stats: ProducerStatistics | None = None
    undelivered: list[Any] = field(default_factory=list)
    error: BaseException | None = None

    def sample(self, stats: ProducerStatistics) -> None:
        """Only an admission raises in-flight: its peak is among these samples. The
        producer's own in_flight is not used: FailoverProducer reads it from len(client),
        which also counts reports waiting for poll (an upper bound)."""
        ended = stats.delivered + stats.final_failures + stats.returned_on_close
        self.peak_in_flight = max(self.peak_in_flight, len(self.accepted) - ended)

    def refusal(self, exc: ProduceTimeout, offered: bytes, waited_s: float) -> None:
        self.refused.append(offered)
        self.waits_s.append(waited_s)
        if exc.message.value != offered or exc.limit != LIMIT:
            self.wrong_refusals.append(f"{exc.message.value!r:.40} limit {exc.limit}")


class Phases:
    """The main thread's clock for both producers: warm-up, outage, then stop."""

    def __init__(self) -> None:
        self.outage = threading.Event()
        self.done = threading.Event()


def run_sync(bootstrap: str, phases: Phases, side: Side) -> None:
    p = FailoverProducer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5},
        max_in_flight=LIMIT,
        produce_timeout_s=PRODUCE_TIMEOUT_S,
    )
    side.statistics = p.statistics
    try:
        # Learn min.insync.replicas before the first produce: its first lookup otherwise gets
        # at most a second and may fall back to assuming 1 on a busy machine.
        assert p.health(TOPIC, timeout=10).min_insync_replicas == 2
        start = time.monotonic()
        i = 0
        while not phases.done.is_set():
            if not phases.outage.is_set():
                ahead = start + i / WARM_UP_RATE_PER_S - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
            offered = value(b"s", i)
            i += 1
            t0 = time.monotonic()
            try:
                p.produce(TOPIC, offered)
            except ProduceTimeout as exc:
                side.refusal(exc, offered, time.monotonic() - t0)
                continue
            side.accepted.append(offered)
            p.poll(0)
            side.sample(p.statistics())
        side.left = p.flush(90)
        side.stats = p.statistics()
    except BaseException as exc:
        side.error = exc
    finally:
        side.undelivered = p.close(10)


def run_async(bootstrap: str, phases: Phases, side: Side) -> None:
    async def main() -> None:
        ap = AsyncFailoverProducer(
            bootstrap_servers=bootstrap,
            linger_ms=5,
            max_in_flight=LIMIT,
            produce_timeout_s=PRODUCE_TIMEOUT_S,
        )
        await ap.start()
        loop = asyncio.get_running_loop()

        async def snapshot() -> ProducerStatistics:
            return ap.statistics()

        side.statistics = lambda: asyncio.run_coroutine_threadsafe(snapshot(), loop).result(10)
        assert (await ap.refresh(TOPIC, timeout=10)).min_insync_replicas == 2
        futures: list[asyncio.Future[Any]] = []
        try:
            start = time.monotonic()
            i = 0
            while not phases.done.is_set():
                if not phases.outage.is_set():
                    ahead = start + i / WARM_UP_RATE_PER_S - time.monotonic()
                    await asyncio.sleep(max(0.0, ahead))
                offered = value(b"a", i)
                i += 1
                t0 = time.monotonic()
                try:
                    futures.append(await ap.send(TOPIC, offered))
                except ProduceTimeout as exc:
                    side.refusal(exc, offered, time.monotonic() - t0)
                    continue
                side.accepted.append(offered)
                side.sample(ap.statistics())
            side.left = await ap.flush(90)
            side.stats = ap.statistics()
            results = await asyncio.gather(*futures, return_exceptions=True)
            errors = [r for r in results if isinstance(r, BaseException)]
            assert errors == [], errors[:5]
        finally:
            side.undelivered = await ap.stop(10)

    try:
        asyncio.run(main())
    except BaseException as exc:
        side.error = exc


def delivered(side: Side) -> int:
    assert side.statistics is not None
    return side.statistics().delivered


def unavailable(cluster: Cluster) -> bool:
    return all(len(st.isr) < 2 for st in cluster.describe(TOPIC))


def test_a_total_outage_applies_backpressure_bounds_memory_and_loses_nothing() -> None:
    phases = Phases()
    sides = {"sync": Side("sync"), "async": Side("async")}
    with Cluster(brokers=3, config=CONFIG) as cluster:
        cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
        bootstrap = cluster.bootstrap_servers
        threads = [
            threading.Thread(target=run_sync, args=(bootstrap, phases, sides["sync"])),
            threading.Thread(target=run_async, args=(bootstrap, phases, sides["async"])),
        ]
        try:
            for t in threads:
                t.start()
            wait_for(
                lambda: all(len(s.accepted) > 2000 for s in sides.values()),
                30,
                "both producers to warm up",
                lambda: {n: (len(s.accepted), s.error) for n, s in sides.items()},
            )

            for broker in cluster.broker_ids:
                cluster.isolate_broker(broker)
            wait_for(lambda: unavailable(cluster), 10, "every partition to fall under min ISR")
            phases.outage.set()
            began = time.monotonic()
            rss_at_start = rss_bytes()
            rss_peak = rss_at_start
            # Writes answered just before the ISR shrank may still come back; after that,
            # nothing can be delivered.
            time.sleep(1.0)
            delivered_early = {n: delivered(s) for n, s in sides.items()}
            accepted_early = {n: len(s.accepted) for n, s in sides.items()}
            while time.monotonic() - began < OUTAGE_S:
                time.sleep(0.2)
                rss_peak = max(rss_peak, rss_bytes())
                assert all(s.error is None for s in sides.values()), sides
            assert unavailable(cluster), "the outage ended early"
            rss_at_end = rss_bytes()
            outage_s = time.monotonic() - began
            delivered_late = {n: delivered(s) for n, s in sides.items()}
            accepted_late = {n: len(s.accepted) for n, s in sides.items()}

            for broker in cluster.broker_ids:
                cluster.heal_broker(broker)
            wait_for(lambda: full_isr(cluster, [TOPIC]), 30, "the ISRs to be full again")
            healed = time.monotonic()
            # Producing goes on after the heal: the backlog drains and new messages flow.
            wait_for(
                lambda: all(len(s.accepted) > accepted_late[n] + 1000 for n, s in sides.items()),
                30,
                "both producers to accept new messages after the heal",
            )
            recovered_s = time.monotonic() - healed
        finally:
            phases.done.set()
            for t in threads:
                t.join(120)
        records = read_topic(cluster, TOPIC)

    figures = []
    counts = Counter(r.value for r in records)
    for name, side in sides.items():
        assert side.error is None, (name, side.error)
        assert side.stats is not None
        # Backpressure: at the limit every call waited its timeout, then refused the message.
        assert side.refused, f"{name}: nothing was refused during a {outage_s:.0f} s outage"
        assert min(side.waits_s) >= PRODUCE_TIMEOUT_S * 0.9, (name, min(side.waits_s))
        assert side.wrong_refusals == [], side.wrong_refusals[:3]
        assert side.peak_in_flight == LIMIT, (name, side.peak_in_flight)
        # A refusal happens only at the limit, so the outage took no more than it had room for.
        assert accepted_late[name] - accepted_early[name] <= LIMIT
        assert delivered_late[name] == delivered_early[name], "delivered during the outage"
        # Everything accepted was delivered and is in the topic; nothing refused ever is.
        assert side.left == 0
        assert side.undelivered == []
        assert side.stats.final_failures == 0
        assert side.stats.delivered == len(side.accepted)
        missing = set(side.accepted) - set(counts)
        assert not missing, f"{name}: {len(missing)} accepted messages lost"
        written_refused = set(side.refused) & set(counts)
        assert not written_refused, f"{name}: refused messages were written"
        duplicates = sum(counts[v] - 1 for v in side.accepted)
        assert duplicates <= side.stats.ambiguous_failures
        waits = sorted(side.waits_s)
        figures.append(
            f"{name}: accepted {len(side.accepted)}, refused {len(side.refused)} after waiting "
            f"{waits[0]:.2f} s min, {waits[len(waits) // 2]:.2f} s median, {waits[-1]:.2f} s max; "
            f"peak in flight "
            f"{side.peak_in_flight}/{LIMIT}, duplicates {duplicates}"
        )
    assert {r.value for r in records} == {v for s in sides.values() for v in s.accepted}
    growth = rss_at_end - rss_at_start
    offered = sum(len(s.refused) for s in sides.values()) * VALUE_BYTES
    print(
        f"outage {outage_s:.1f} s, every partition under min ISR; "
        + "; ".join(figures)
        + f"; RSS {rss_at_start / 2**20:.1f} MiB at the start, peak "
        f"{rss_peak / 2**20:.1f} MiB, growth {growth / 2**20:.1f} MiB "
        f"(bound {RSS_BOUND_BYTES / 2**20:.0f} MiB; refused {offered / 2**20:.1f} MiB); "
        f"{recovered_s:.1f} s from heal to 1000 new messages accepted by each; lost 0"
    )
    assert rss_peak - rss_at_start < RSS_BOUND_BYTES
