"""FailoverProducer throughput against a raw confluent-kafka Producer, and partition choice cost.

Issue 6's speed targets:

* without per-message callbacks, FailoverProducer >= 0.8x a raw Producer configured with a
  delivery callback (``on_delivery`` in its config), same cluster and workload (100-byte
  values, acks=all), on librdkafka's mock cluster and on minibroker;
* with a per-message ``on_delivery`` on both sides: >= 0.6x (aim 0.8x);
* choosing a partition: <= 0.5 microseconds per message, median;
* during the fault of must-show 1 (two of five brokers stopped), >= 0.8x of its own
  fault-free throughput.

Throughput is messages per second from the first ``produce`` to ``flush`` returning 0, with
``poll(0)`` every 1000 messages. Both sides run alternately, several times, and the median of
each is compared, so a busy machine slows both.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Producer

from failover_partitioner import FailoverProducer, PartitionMetadata, TopicMetadata, TopicView
from failover_partitioner.choose import ChoiceOptions, PartitionChooser
from failover_partitioner.testing import MockCluster
from harness import Figure

ISSUE = 6
VALUE = b"x" * 100
TOPIC = "bench"
PARTITIONS = 12


def _noop(err: Any, msg: Any) -> None:
    pass


def _drive(produce: Callable[..., None], poll: Callable[[float], Any], n: int, **kw: Any) -> None:
    for i in range(n):
        while True:
            try:
                produce(TOPIC, VALUE, **kw)
                break
            except BufferError:  # only the raw client raises it; the failover one waits
                poll(0.005)
        if i % 1000 == 0:
            poll(0)


def _raw_rate(bootstrap: str, n: int, per_message: bool) -> float:
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "acks": "all", "log_level": 0}
    if not per_message:
        conf["on_delivery"] = _noop
    p = Producer(conf)
    p.list_topics(TOPIC, timeout=10)
    start = time.perf_counter()
    if per_message:
        _drive(p.produce, p.poll, n, on_delivery=_noop)
    else:
        _drive(p.produce, p.poll, n)
    left = p.flush(60)
    elapsed = time.perf_counter() - start
    assert left == 0, f"raw producer left {left} messages"
    return n / elapsed


def _failover_rate(bootstrap: str, n: int, per_message: bool, **options: Any) -> float:
    p = FailoverProducer(
        {"bootstrap.servers": bootstrap, "acks": "all", "log_level": 0},
        min_insync_replicas=options.pop("min_insync_replicas", None),
        **options,
    )
    try:
        p.health(TOPIC)
        start = time.perf_counter()
        if per_message:
            _drive(p.produce, p.poll, n, on_delivery=_noop)
        else:
            _drive(p.produce, p.poll, n)
        left = p.flush(60)
        elapsed = time.perf_counter() - start
        assert left == 0, f"FailoverProducer left {left} messages"
        return n / elapsed
    finally:
        p.close()


def _compare(
    bootstrap: str, n: int, repeat: int, per_message: bool, **options: Any
) -> tuple[float, float]:
    raw: list[float] = []
    ours: list[float] = []
    _raw_rate(bootstrap, n // 4, per_message)  # warm-up: connections, topic metadata
    for _ in range(repeat):
        raw.append(_raw_rate(bootstrap, n, per_message))
        ours.append(_failover_rate(bootstrap, n, per_message, **dict(options)))
    return statistics.median(ours), statistics.median(raw)


def _choice_us(repeat: int) -> tuple[float, float]:
    md = TopicMetadata(
        topic=TOPIC,
        partitions=tuple(
            PartitionMetadata(partition=p, leader=1 + p % 5, replicas=(1, 2, 3), isr=(1, 2, 3))
            for p in range(PARTITIONS)
        ),
        min_insync_replicas=2,
    )
    chooser = PartitionChooser(TopicView.build(md, frozenset({3})), ChoiceOptions())
    n = 200_000
    next_keyless = chooser.next_keyless

    def choose() -> None:
        for _ in range(n):
            next_keyless()

    def empty() -> None:
        def f(x: int) -> int:
            return x

        for _ in range(n):
            f(0)

    samples, refs = [], []
    for _ in range(repeat):
        t = time.perf_counter()
        choose()
        samples.append((time.perf_counter() - t) / n * 1e6)
        t = time.perf_counter()
        empty()
        refs.append((time.perf_counter() - t) / n * 1e6)
    return statistics.median(samples), statistics.median(refs)


def _keyed_choice_us(repeat: int) -> float:
    md = TopicMetadata(
        topic=TOPIC,
        partitions=tuple(
            PartitionMetadata(partition=p, leader=1, replicas=(1, 2, 3), isr=(1, 2, 3))
            for p in range(PARTITIONS)
        ),
        min_insync_replicas=2,
    )
    chooser = PartitionChooser(TopicView.build(md), ChoiceOptions())
    keys = [b"customer-%d" % i for i in range(1000)]
    keyed = chooser.keyed
    samples = []
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(100):
            for k in keys:
                keyed(k)
        samples.append((time.perf_counter() - t) / 100_000 * 1e6)
    return statistics.median(samples)


def _minibroker_figures(n: int, repeat: int) -> list[Figure]:
    try:
        from minibroker import Cluster
    except ImportError:
        return []
    config = {
        "min.insync.replicas": "2",
        "replica.lag.time.max.ms": "300",
        "broker.session.timeout.ms": "300",
    }
    figures = []
    with Cluster(brokers=5, config=config) as cluster:
        cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
        ours, raw = _compare(cluster.bootstrap_servers, n, repeat, per_message=False)
        figures.append(
            Figure(
                issue=ISSUE,
                name="minibroker: FailoverProducer vs raw (conf on_delivery), msg/s",
                value=ours,
                reference=raw,
                unit="msg/s",
                target=0.8,
            )
        )
    with Cluster(brokers=5, config=config) as cluster:
        cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
        healthy = [_failover_rate(cluster.bootstrap_servers, n, False) for _ in range(repeat)]
        cluster.stop_broker(4)
        cluster.stop_broker(5)
        # The first run after the stop includes the transition (failures, quarantine, rerouting).
        faulty = [_failover_rate(cluster.bootstrap_servers, n, False) for _ in range(repeat)]
        figures.append(
            Figure(
                issue=ISSUE,
                name="minibroker: FailoverProducer with brokers 4,5 down vs healthy",
                value=statistics.median(faulty),
                reference=statistics.median(healthy),
                unit="msg/s",
                target=0.8,
                note=f"first faulty run (transition included): {faulty[0]:.0f} msg/s",
            )
        )
    return figures


def run(quick: bool) -> list[Figure]:
    n = 50_000 if quick else 200_000
    repeat = 3 if quick else 5
    figures: list[Figure] = []
    with MockCluster(brokers=3) as mock:
        mock.create_topic(TOPIC, PARTITIONS, 3)
        bs = mock.bootstrap_servers
        ours, raw = _compare(bs, n, repeat, per_message=False, min_insync_replicas=2)
        figures.append(
            Figure(
                issue=ISSUE,
                name="mock: FailoverProducer vs raw (conf on_delivery), msg/s",
                value=ours,
                reference=raw,
                unit="msg/s",
                target=0.8,
                note="round_robin (default); raw uses librdkafka's sticky partitioner",
            )
        )
        ours, raw = _compare(
            bs, n, repeat, per_message=False, min_insync_replicas=2, strategy="sticky"
        )
        figures.append(
            Figure(
                issue=ISSUE,
                name="mock: FailoverProducer(strategy=sticky) vs raw, msg/s",
                value=ours,
                reference=raw,
                unit="msg/s",
                target=0.8,
            )
        )
        ours, raw = _compare(bs, n, repeat, per_message=True, min_insync_replicas=2)
        figures.append(
            Figure(
                issue=ISSUE,
                name="mock: per-message on_delivery, FailoverProducer vs raw, msg/s",
                value=ours,
                reference=raw,
                unit="msg/s",
                target=0.6,
                note="aim 0.8x",
            )
        )
    figures.extend(_minibroker_figures(n, repeat))
    us, ref = _choice_us(repeat)
    figures.append(
        Figure(
            issue=ISSUE,
            name="partition choice (keyless round robin), median",
            value=us,
            reference=ref,
            unit="us",
            target=0.5,
            kind="absolute_max",
            note="reference: one empty Python function call",
        )
    )
    keyed = _keyed_choice_us(repeat)
    figures.append(
        Figure(
            issue=ISSUE,
            name="partition choice (keyed, murmur2), median",
            value=keyed,
            reference=ref,
            unit="us",
            target=0.5,
            kind="absolute_max",
        )
    )
    return figures
