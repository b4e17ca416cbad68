"""failover-mirror throughput (issue 7) against a bare consume-produce loop.

The reference is the loop a user would write with confluent-kafka: consume a batch, produce
each message (key, value, headers, timestamp) with a plain Producer, poll, and every
``WINDOW`` messages flush and commit synchronously. It checks no delivery outcome, so it is
the cheapest possible at-least-once-ish loop. The mirror runs with its defaults (provenance
headers on, the fast lane on, max in flight ``WINDOW``, so the same duplicate exposure)
through the failover producer, with per-partition commit tracking.

Both copy the same backlog of ``N`` 100-byte messages (6 partitions, half keyed) from a source
cluster to a target cluster, one after the other in the same run, each with its own consumer
group. Time runs from the first consumed message (group joins are not counted) until the
commit that covers the last message returns (every message is delivered by then). Done on two
pairs of clusters: librdkafka's mock (C; the client-side cost alone) and minibroker (each
cluster in a process of its own, RF=3, acks=all). Both loops run with the garbage-collector
settings ``failover-mirror`` uses (``tune_gc()``). Further figures: the mirror without
provenance headers (it then writes what the bare loop writes), without the fast lane (a
delivery report per message), with Python's default GC settings, and against the bare loop
made to learn each message's outcome (a delivery callback) and to add the same provenance
header (not the issue's reference: it shows what the mirror costs beyond what any
mirror that commits only delivered messages, with provenance, must pay).
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from confluent_kafka import Consumer, Message, Producer, TopicPartition

from failover_partitioner.mirror import (
    HEADER_SOURCE,
    Mirror,
    MirrorOptions,
    MirrorStatus,
    tune_gc,
)
from failover_partitioner.producer import FailoverProducer
from failover_partitioner.testing import MockCluster
from harness import Figure, MinibrokerProcess

ISSUE = 7
TOPIC = "bench"
PARTITIONS = 6
WINDOW = 10_000
# A run that consumes nothing for this long has stalled: fail it instead of hanging.
STALL_S = 60.0
VALUE = b"v" * 100


def _fill(bootstrap: str, count: int) -> int:
    """Write ``count`` messages to the source; return how many it holds.

    librdkafka's mock cluster keeps a bounded log per partition and drops the oldest segments
    of a partition that outgrows it (a skewed one can, with half the messages keyed): then
    fewer than ``count`` can be read back, and a run waiting for all of them would stall."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    for i in range(count):
        key = b"k%d" % (i % 1000) if i % 2 else None
        while True:
            try:
                producer.produce(TOPIC, VALUE, key)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("could not fill the source")
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-fill-probe"})
    try:
        held = 0
        for p in range(PARTITIONS):
            low, high = probe.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)
            held += high - low
    finally:
        probe.close()
    return held


class _FirstMessageClock:
    """Wraps a consumer; remembers when the first message came back and when the latest
    commit returned (the mirror's last one ends the run, as the bare loop's does)."""

    def __init__(self, consumer: Consumer) -> None:
        self._consumer = consumer
        self.first: float | None = None
        self.last_commit: float | None = None

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        out = self._consumer.consume(num_messages, timeout)
        if out and self.first is None:
            self.first = time.perf_counter()
        return out

    def commit(self, *args: Any, **kwargs: Any) -> Any:
        out = self._consumer.commit(*args, **kwargs)
        self.last_commit = time.perf_counter()
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._consumer, name)


def _bare_loop(
    source: str,
    target: str,
    count: int,
    group: str,
    *,
    provenance: bool = False,
    outcomes: bool = False,
) -> float:
    """The reference loop. ``provenance``: add the mirror's provenance header (so that it
    writes what the mirror writes). ``outcomes``: also learn each message's outcome (a delivery
    callback that counts failures): with both, the least a mirror that commits only what was
    delivered, with provenance, must pay on top."""
    failed: list[Any] = []
    consumer = Consumer(
        {
            "bootstrap.servers": source,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    conf: dict[str, Any] = {
        "bootstrap.servers": target,
        "acks": "all",
        "queue.buffering.max.messages": 1_000_000,
    }
    if outcomes:

        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                failed.append(err)

        conf["on_delivery"] = on_delivery
    producer = Producer(conf)
    consumer.subscribe([TOPIC])
    produce, poll = producer.produce, producer.poll
    done = since_commit = 0
    start: float | None = None
    last_progress = time.monotonic()
    while done < count:
        batch = consumer.consume(500, 0.1)
        if not batch:
            if time.monotonic() - last_progress > STALL_S:
                consumer.close()
                raise RuntimeError(
                    f"bare loop {group!r}: nothing consumed for {STALL_S:.0f} s after {done} of "
                    f"{count} messages (the group got no assignment or the source stalled)"
                )
            continue
        last_progress = time.monotonic()
        if start is None:
            start = time.perf_counter()
        for m in batch:
            headers = m.headers()
            if provenance:
                headers = [
                    *(headers or ()),
                    (HEADER_SOURCE, f"bench/{m.partition()}/{m.offset()}"),
                ]
            try:
                produce(TOPIC, m.value(), m.key(), headers=headers, timestamp=m.timestamp()[1])
            except BufferError:
                poll(0.01)
                produce(TOPIC, m.value(), m.key(), headers=headers, timestamp=m.timestamp()[1])
        poll(0)
        done += len(batch)
        since_commit += len(batch)
        if since_commit >= WINDOW or done >= count:
            producer.flush()
            consumer.commit(asynchronous=False)
            since_commit = 0
    elapsed = time.perf_counter() - (start or time.perf_counter())
    consumer.close()
    producer.flush()
    if failed:
        raise RuntimeError(f"bare loop {group!r}: {len(failed)} messages failed, e.g. {failed[0]}")
    return count / elapsed


def _mirror(
    source: str,
    target: str,
    count: int,
    group: str,
    producer_options: dict[str, Any],
    *,
    provenance: bool = True,
    fast_lane: bool = True,
) -> float:
    clocks: list[_FirstMessageClock] = []
    finished: list[float] = []

    def consumer(conf: dict[str, str]) -> Any:
        clock = _FirstMessageClock(Consumer(conf))
        clocks.append(clock)
        return clock

    def producer(conf: dict[str, str]) -> Any:
        return FailoverProducer(conf, max_in_flight=WINDOW + 1024, **producer_options)

    options = MirrorOptions(
        source_bootstrap=source,
        target_bootstrap=target,
        group_id=group,
        # The run ends at the commit that covers the last message (see on_status): status only
        # has to notice it, so it need not come often (the CLI default is 10 s).
        status_interval_s=0.1,
        max_in_flight=WINDOW,
        provenance_headers=provenance,
        fast_lane=fast_lane,
    )
    mirror = Mirror(
        options, consumer_factory=consumer, producer_factory=producer, lane_factory=Producer
    )

    progress = [0, time.monotonic()]  # delivered count, when it last moved
    stalled: list[str] = []

    def on_status(status: MirrorStatus) -> None:
        if not finished and status.delivered >= count and status.uncommitted == 0:
            # Everything is delivered and committed: the run ended with the commit that made
            # it so, not when this status came (the mirror may have waited in a poll since).
            finished.append(clocks[0].last_commit or time.perf_counter())
            mirror.stop()
        elif status.delivered != progress[0]:
            progress[:] = [status.delivered, time.monotonic()]
        elif time.monotonic() - progress[1] > STALL_S and not stalled:
            stalled.append(f"nothing delivered for {STALL_S:.0f} s at {status.delivered}/{count}")
            mirror.stop()

    mirror.run(on_status=on_status)
    first = clocks[0].first
    if not finished or first is None:
        raise RuntimeError(f"the mirror {group!r} did not finish: {stalled or 'stopped early'}")
    return count / (finished[0] - first)


@contextmanager
def _mock_pair() -> Iterator[tuple[str, str, dict[str, Any]]]:
    with MockCluster(brokers=3) as src, MockCluster(brokers=3) as dst:
        src.create_topic(TOPIC, PARTITIONS, 3)
        dst.create_topic(TOPIC, PARTITIONS, 3)
        # The mock has no DescribeConfigs: min ISR is given.
        yield src.bootstrap_servers, dst.bootstrap_servers, {"min_insync_replicas": 2}


@contextmanager
def _minibroker_pair() -> Iterator[tuple[str, str, dict[str, Any]]]:
    config = {"min.insync.replicas": "2"}
    # Each cluster in a process of its own, as real brokers are: in this process the brokers'
    # Python would compete for the GIL with the mirror's, and not with the bare loop's.
    with MinibrokerProcess(3, config) as src, MinibrokerProcess(3, config) as dst:
        src.create_topic(TOPIC, PARTITIONS)
        dst.create_topic(TOPIC, PARTITIONS)
        yield src.bootstrap_servers, dst.bootstrap_servers, {}


@contextmanager
def _gc_settings(tuned: bool) -> Iterator[None]:
    """``tune_gc()`` (as ``failover-mirror`` runs) for the block, then the previous settings."""
    if not tuned:
        yield
        return
    threshold = gc.get_threshold()
    tune_gc()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


def _compare(
    pair: Callable[[], Any], count: int, rounds: int
) -> tuple[dict[str, list[float]], int]:
    """Rates of each variant, and how many messages each run copied."""
    rates: dict[str, list[float]] = {
        "bare": [],
        "bare-provenance": [],
        "bare-outcomes": [],
        "mirror": [],
        "mirror-no-headers": [],
        "mirror-no-lane": [],
        "bare-default-gc": [],
        "mirror-default-gc": [],
    }
    with pair() as (source, target, producer_options):
        count = _fill(source, count)
        # Not timed: the first read of the backlog and the first writes to the target are the
        # slowest (connections, broker caches); no measured run should pay for them.
        _bare_loop(source, target, count, "warm-up")
        for r in range(rounds):
            runs: list[tuple[str, Callable[[str], float]]] = [
                ("bare", lambda g: _bare_loop(source, target, count, g)),
                (
                    "bare-provenance",
                    lambda g: _bare_loop(source, target, count, g, provenance=True),
                ),
                (
                    "bare-outcomes",
                    lambda g: _bare_loop(source, target, count, g, provenance=True, outcomes=True),
                ),
                ("mirror", lambda g: _mirror(source, target, count, g, producer_options)),
                (
                    "mirror-no-headers",
                    lambda g: _mirror(source, target, count, g, producer_options, provenance=False),
                ),
                (
                    "mirror-no-lane",
                    lambda g: _mirror(source, target, count, g, producer_options, fast_lane=False),
                ),
            ]
            # Alternate the order so neither side always runs on a warmer cluster.
            if r % 2:
                runs.reverse()
            with _gc_settings(tuned=True):
                for name, measure in runs:
                    rates[name].append(measure(f"{name}-{r}"))
            with _gc_settings(tuned=False):
                for name, measure in runs:
                    if name in ("bare", "mirror"):
                        rates[f"{name}-default-gc"].append(measure(f"{name}-default-gc-{r}"))
    return rates, count


def run(quick: bool) -> list[Figure]:
    figures = []
    for name, pair, count in (
        ("librdkafka mock", _mock_pair, 50_000 if quick else 200_000),
        ("minibroker", _minibroker_pair, 30_000 if quick else 100_000),
    ):
        rates, count = _compare(pair, count, 1 if quick else 3)
        for variant, label, reference, against in (
            ("mirror", "mirror", "bare", "bare loop"),
            # The same records written by both (the provenance header costs the client what it
            # costs the bare loop): these two compare the rest of the work.
            ("mirror-no-headers", "mirror --no-provenance-headers", "bare", "bare loop"),
            ("mirror", "mirror", "bare-provenance", "bare loop + provenance header"),
            ("mirror-no-lane", "mirror --no-fast-lane", "bare", "bare loop"),
            ("mirror-default-gc", "mirror, default GC settings", "bare-default-gc", "bare loop"),
            # Not the issue's reference: what the mirror costs beyond the price of learning
            # each outcome and carrying provenance, which any mirror committing only what was
            # delivered pays.
            ("mirror", "mirror", "bare-outcomes", "bare loop + outcomes + provenance"),
        ):
            gc_note = "Python's default GC" if "default-gc" in variant else "tune_gc() for both"
            figures.append(
                Figure(
                    issue=ISSUE,
                    name=f"{label} msg/s vs {against} ({name})",
                    value=statistics.median(rates[variant]),
                    reference=statistics.median(rates[reference]),
                    unit="msg/s",
                    target=0.8,
                    note=f"{count} x 100 B, {PARTITIONS} partitions, window {WINDOW}, "
                    f"{gc_note}; {variant} {[round(r) for r in rates[variant]]}, "
                    f"{reference} {[round(r) for r in rates[reference]]}",
                )
            )
    return figures


if __name__ == "__main__":
    for figure in run(quick=True):
        print(figure)
