"""FailoverProducer throughput against a raw confluent-kafka Producer, and partition choice cost.

Issue 20's targets, for the healthy path (a forward to the raw client while the topic is whole),
default options (strategy sticky; round_robin measured beside it), on librdkafka's mock and on
minibroker:

* one-at-a-time ``produce()`` without per-message callbacks >= 0.95x a raw Producer with
  ``on_delivery`` in its config;
* with a per-message ``on_delivery`` on both sides: >= 0.85x;
* ``produce_batch`` >= 1.0x the raw Producer's per-message loop;
* while two of five brokers are stopped (some partitions under min ISR), >= 0.95x of its own
  rate on a healthy cluster (the two clusters measured alternately, after the transition; one
  producer per cluster, made before the stop and kept through it and every round, as an
  application's lives through a fault);
  measured with the default strategy (``sticky``) and with ``round_robin``. Beside each, in
  the figure's note, a raw Producer placing keyless messages as the producer does (left to
  the client while the topic is whole, over the usable partitions while not), on the same
  two clusters in the same rounds: what the fault costs the cluster and the client alone;
  and for ``round_robin``, what one partition per message costs a raw Producer on the
  healthy cluster.

Issue 6's earlier targets, kept where issue 20 sets none:

* without per-message callbacks, FailoverProducer >= 0.8x a raw Producer configured with a
  delivery callback (``on_delivery`` in its config), same cluster and workload (100-byte
  values, acks=all), on librdkafka's mock cluster and on minibroker;
* with a per-message ``on_delivery`` on both sides: >= 0.6x (aim 0.8x);
* choosing a partition: <= 0.5 microseconds per message, median.

Throughput is messages per second from the first ``produce`` to ``flush`` returning 0, with
``poll(0)`` every 1000 messages (and, in one row, after every message, as confluent-kafka's
examples do). Both sides run alternately, several times, and the median of
each is compared, so a busy machine slows both.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import Producer

from failover_partitioner import FailoverProducer, PartitionMetadata, TopicMetadata, TopicView
from failover_partitioner.choose import (
    STICKY_MESSAGES_DEFAULT,
    ChoiceOptions,
    PartitionChooser,
)
from failover_partitioner.metadata.confluent import ConfluentMetadataSource
from failover_partitioner.testing import MockCluster
from harness import (
    FAULT_CONFIG,
    FaultRuns,
    Figure,
    MinibrokerProcess,
    Twins,
    alternated,
    minibroker_twins,
    per_round,
    runs_under_fault,
)

ISSUE = 6
HEALTHY_PATH_ISSUE = 20
VALUE = b"x" * 100
TOPIC = "bench"
PARTITIONS = 12


def _noop(err: Any, msg: Any) -> None:
    pass


def _drive(
    produce: Callable[..., None],
    poll: Callable[[float], Any],
    n: int,
    on_delivery: Callable[[Any, Any], None] | None = None,
    poll_every: int = 1000,
) -> None:
    # Two plain loops: a call with ``**kwargs`` costs a Python function (FailoverProducer's
    # produce) noticeably more than a C one, which would skew the comparison.
    if on_delivery is None:
        for i in range(n):
            try:
                produce(TOPIC, VALUE)
            except BufferError:  # only the raw client raises it; FailoverProducer waits
                _wait_for_queue(produce, poll, None)
            if i % poll_every == 0:
                poll(0)
    else:
        for i in range(n):
            try:
                produce(TOPIC, VALUE, on_delivery=on_delivery)
            except BufferError:
                _wait_for_queue(produce, poll, on_delivery)
            if i % poll_every == 0:
                poll(0)


def _wait_for_queue(
    produce: Callable[..., None],
    poll: Callable[[float], Any],
    on_delivery: Callable[[Any, Any], None] | None,
) -> None:
    while True:
        poll(0.005)
        try:
            if on_delivery is None:
                produce(TOPIC, VALUE)
            else:
                produce(TOPIC, VALUE, on_delivery=on_delivery)
            return
        except BufferError:
            continue


class _Rate:
    """Messages per second of wall time, and per second of this process's CPU time (all
    threads: the benchmark loop, librdkafka's threads, the mock cluster's when it is in-process).
    The CPU figure barely moves when other processes load the machine."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._wall = time.perf_counter()
        self._cpu = time.process_time()

    def stop(self) -> tuple[float, float]:
        wall = time.perf_counter() - self._wall
        cpu = time.process_time() - self._cpu
        return self.n / wall, self.n / cpu if cpu > 0 else float("nan")


def _timed(
    n: int, drive: Callable[[], None], flush: Callable[[float], int], who: str
) -> tuple[float, float]:
    """Rates (wall, CPU) of ``drive()`` producing n messages, until ``flush`` ends them all."""
    rate = _Rate(n)
    drive()
    left = flush(60)
    result = rate.stop()
    assert left == 0, f"{who} left {left} messages"
    return result


def _raw_rate(
    bootstrap: str, n: int, per_message: bool, poll_every: int = 1000
) -> tuple[float, float]:
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "acks": "all", "log_level": 0}
    if not per_message:
        conf["on_delivery"] = _noop
    p = Producer(conf)
    p.list_topics(TOPIC, timeout=10)
    cb = _noop if per_message else None
    return _timed(n, lambda: _drive(p.produce, p.poll, n, cb, poll_every), p.flush, "raw producer")


def _failover_rate(
    bootstrap: str,
    n: int,
    per_message: bool,
    *,
    keyed: bool = False,
    poll_every: int = 1000,
    **options: Any,
) -> tuple[float, float]:
    p = _failover_producer(bootstrap, **options)
    try:
        return _run_failover(p, n, per_message, keyed, poll_every)
    finally:
        p.close()


def _failover_producer(bootstrap: str, **options: Any) -> FailoverProducer:
    p = FailoverProducer(
        {"bootstrap.servers": bootstrap, "acks": "all", "log_level": 0},
        min_insync_replicas=options.pop("min_insync_replicas", None),
        **options,
    )
    p.health(TOPIC)
    return p


def _run_failover(
    p: FailoverProducer, n: int, per_message: bool, keyed: bool, poll_every: int = 1000
) -> tuple[float, float]:
    cb = _noop if per_message else None
    if keyed:
        return _timed(n, lambda: _drive_keyed(p.produce, p.poll, n, cb), p.flush, "keyed")
    return _timed(
        n, lambda: _drive(p.produce, p.poll, n, cb, poll_every), p.flush, "FailoverProducer"
    )


class _Kept:
    """One FailoverProducer per cluster for the fault figures, made at its first run (the
    warm-up, before the brokers stop) and kept through the stop and every round after, as an
    application's producer lives through a fault: what it learnt then (quarantines, their
    back-offs) is part of what the rounds measure. ``close()`` closes them."""

    def __init__(self, n: int, keyed: bool, **options: Any) -> None:
        self._n = n
        self._keyed = keyed
        self._options = options
        self._producers: dict[str, FailoverProducer] = {}

    def rate(self, bootstrap: str) -> float:
        p = self._producers.get(bootstrap)
        if p is None:
            p = self._producers[bootstrap] = _failover_producer(bootstrap, **self._options)
        return _run_failover(p, self._n, self._keyed, self._keyed)[0]

    def close(self) -> None:
        while self._producers:
            self._producers.popitem()[1].close()


_KEYS = [b"key-%d" % i for i in range(1000)]


def _drive_keyed(
    produce: Callable[..., None],
    poll: Callable[[float], Any],
    n: int,
    on_delivery: Callable[[Any, Any], None] | None,
) -> None:
    """``_drive``'s loop with 1,000 keys in turn (FailoverProducer waits at a full queue)."""
    keys = _KEYS
    for i in range(n):
        produce(TOPIC, VALUE, keys[i % 1000], on_delivery=on_delivery)
        if i % 1000 == 0:
            poll(0)


def _compare(
    bootstrap: str, n: int, repeat: int, per_message: bool, **options: Any
) -> tuple[float, float, str]:
    """Median wall-time rates of FailoverProducer and raw, run alternately (the order
    swapped every round), and a note with the CPU-time comparison. ``options``: the
    producer's, and ``poll_every`` (both loops call ``poll(0)`` every so many messages)."""
    every = options.pop("poll_every", 1000)
    _raw_rate(bootstrap, n // 4, per_message)  # warm-up: connections, topic metadata
    runs = alternated(
        repeat,
        {
            "raw": lambda: _raw_rate(bootstrap, n, per_message, every),
            "ours": lambda: _failover_rate(
                bootstrap, n, per_message, poll_every=every, **dict(options)
            ),
        },
    )
    raw, ours = runs["raw"], runs["ours"]
    cpu_ours = statistics.median(r[1] for r in ours)
    cpu_raw = statistics.median(r[1] for r in raw)
    rounds = per_round([r[0] for r in ours], [r[0] for r in raw])
    note = (
        f"per CPU-second of this process: {cpu_ours:.0f} vs {cpu_raw:.0f} msg "
        f"(ratio {cpu_ours / cpu_raw:.2f}); {rounds}"
    )
    return statistics.median(r[0] for r in ours), statistics.median(r[0] for r in raw), note


BATCH = 1000


def _batches(n: int) -> list[list[dict[str, Any]]]:
    """n value-only message dicts in lists of BATCH (built before the clock starts: a caller
    of produce_batch has its messages at hand)."""
    return [[{"value": VALUE} for _ in range(min(BATCH, n - i))] for i in range(0, n, BATCH)]


def _drive_batches(
    produce_batch: Callable[[str, list[dict[str, Any]]], Any],
    poll: Callable[[float], Any],
    batches: list[list[dict[str, Any]]],
) -> None:
    for batch in batches:
        produce_batch(TOPIC, batch)
        poll(0)


def _raw_batch_rate(bootstrap: str, n: int) -> tuple[float, float]:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "log_level": 0})
    p.list_topics(TOPIC, timeout=10)
    batches = _batches(n)

    def produce_batch(topic: str, batch: list[dict[str, Any]]) -> None:
        # What a careful raw caller does: take back what the queue refused, wait, resend.
        while True:
            if p.produce_batch(topic, batch, on_delivery=_noop) == len(batch):
                return
            batch = [m for m in batch if m.pop("_error", None) is not None]
            p.poll(0.005)

    return _timed(
        n, lambda: _drive_batches(produce_batch, p.poll, batches), p.flush, "raw producer"
    )


def _failover_batch_rate(
    bootstrap: str, n: int, on_delivery: Callable[[Any, Any], None] | None = None, **options: Any
) -> tuple[float, float]:
    p = FailoverProducer(
        {"bootstrap.servers": bootstrap, "acks": "all", "log_level": 0},
        min_insync_replicas=2,
        **options,
    )
    try:
        p.health(TOPIC)
        batches = _batches(n)

        def produce_batch(topic: str, batch: list[dict[str, Any]]) -> None:
            p.produce_batch(topic, batch, on_delivery)

        return _timed(
            n, lambda: _drive_batches(produce_batch, p.poll, batches), p.flush, "FailoverProducer"
        )
    finally:
        p.close()


def _batch_figures(bootstrap: str, n: int, repeat: int, cluster: str) -> list[Figure]:
    """FailoverProducer.produce_batch against a raw Producer's per-message loop and against
    the raw Producer's own produce_batch, all measured alternately in one run."""
    ours: dict[str, list[float]] = {"round_robin": [], "sticky": []}
    loop: list[float] = []
    batch: list[float] = []
    # With a per-message callback: produce_batch(on_delivery=cb) against the raw Producer's
    # produce(on_delivery=cb) loop, the same callback on both sides.
    ours_cb: list[float] = []
    loop_cb: list[float] = []
    _raw_rate(bootstrap, n // 4, False)  # warm-up
    for _ in range(repeat):
        loop.append(_raw_rate(bootstrap, n, False)[0])
        batch.append(_raw_batch_rate(bootstrap, n)[0])
        for strategy, rates in ours.items():
            rates.append(_failover_batch_rate(bootstrap, n, strategy=strategy)[0])
        loop_cb.append(_raw_rate(bootstrap, n, True)[0])
        ours_cb.append(_failover_batch_rate(bootstrap, n, _noop, strategy="sticky")[0])
    figures = [
        Figure(
            issue=HEALTHY_PATH_ISSUE,
            name=f"{cluster}: produce_batch(sticky, on_delivery) vs raw per-message on_delivery, "
            "msg/s",
            value=statistics.median(ours_cb),
            reference=statistics.median(loop_cb),
            unit="msg/s",
            target=1.0,
            note=f"batches of {BATCH} value-only dicts, one callback for every message (called "
            "once per message on both sides); reference: a raw Producer's produce(on_delivery=cb) "
            "loop",
        )
    ]
    for strategy, rates in ours.items():
        for name, reference, what, issue, target in (
            (
                "raw per-message produce",
                loop,
                "a raw Producer's produce() loop, on_delivery in its config",
                HEALTHY_PATH_ISSUE,
                1.0,
            ),
            (
                "raw produce_batch",
                batch,
                "the raw Producer's own produce_batch, same batches",
                ISSUE,
                0.8,
            ),
        ):
            figures.append(
                Figure(
                    issue=issue,
                    name=f"{cluster}: FailoverProducer.produce_batch({strategy}) vs {name}, msg/s",
                    value=statistics.median(rates),
                    reference=statistics.median(reference),
                    unit="msg/s",
                    target=target,
                    note=f"batches of {BATCH} value-only dicts, no per-message callback; "
                    f"reference: {what}",
                )
            )
    return figures


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
        import minibroker  # noqa: F401  # only to know it is there
    except ImportError:
        return []
    figures = []
    cluster = MinibrokerProcess(5, FAULT_CONFIG)
    try:
        cluster.create_topic(TOPIC, PARTITIONS)
        for name, per_message, options, target in _HEALTHY_FIGURES:
            ours, raw, cpu = _compare(cluster.bootstrap_servers, n, repeat, per_message, **options)
            figures.append(
                Figure(
                    issue=HEALTHY_PATH_ISSUE,
                    name=f"minibroker: {name}, msg/s",
                    value=ours,
                    reference=raw,
                    unit="msg/s",
                    target=target,
                    note=cpu + "; minibroker runs in its own process",
                )
            )
        figures.extend(_batch_figures(cluster.bootstrap_servers, n, repeat, "minibroker"))
        rotation_cost = _raw_round_robin_ratio(cluster.bootstrap_servers, n, repeat)
    finally:
        cluster.close()
    for strategy, keyed in (("sticky", False), ("round_robin", False), ("sticky", True)):
        runs = fault_runs(n, repeat, strategy, keyed)
        note = f"first run after the stop (transition included): {runs.transition}; {runs.spread()}"
        placing = (
            "keyed messages as this one does (left to the client while whole, each key where "
            "this one's chooser puts it while not, a per-message callback)"
            if keyed
            else "keyless messages as this one does (left to the client while whole, over the "
            "usable partitions while not)"
        )
        note += (
            f"; a raw Producer placing {placing}, same rounds: "
            f"{runs.reference_ratio():.2f}x of its healthy rate "
            f"({per_round(runs.reference_faulty, runs.reference_healthy)}); this producer "
            "on the faulty cluster vs that raw Producer there: "
            f"{statistics.median(runs.faulty) / statistics.median(runs.reference_faulty):.2f}x"
            f" ({per_round(runs.faulty, runs.reference_faulty)})"
        )
        if keyed:
            note += (
                "; 1,000 keys in turn, a per-message callback in both runs; the keys of the "
                "partitions out of use go elsewhere by rendezvous hashing"
            )
        elif strategy == "round_robin":
            note += (
                "; while degraded, keyless messages go round robin over the usable partitions, "
                "one partition per message; a raw Producer doing that on the healthy cluster "
                f"runs at {rotation_cost:.2f}x of its own keyless (sticky) rate"
            )
        what = f"FailoverProducer({strategy}){', keyed, per-message on_delivery' if keyed else ''}"
        figures.append(
            Figure(
                issue=HEALTHY_PATH_ISSUE,
                name=f"minibroker: {what} with brokers 4,5 down vs healthy",
                value=statistics.median(runs.faulty),
                reference=statistics.median(runs.healthy),
                unit="msg/s",
                target=0.95,
                note=note,
            )
        )
    return figures


def fault_runs(
    n: int,
    repeat: int,
    strategy: str,
    keyed: bool,
    twins: Twins = minibroker_twins,
) -> FaultRuns:
    """A fault figure's rounds: a producer kept through the stop (``_Kept``), and beside it the
    raw client placing as this producer does (what the fault costs without it); on the
    clusters ``twins`` makes (minibroker's by default)."""
    kept = _Kept(n, keyed, strategy=strategy)
    try:
        return runs_under_fault(
            kept.rate,
            TOPIC,
            PARTITIONS,
            repeat,
            functools.partial(_raw_keyed_as_placed, n=n)
            if keyed
            else functools.partial(_raw_as_placed, n=n, strategy=strategy),
            done=kept.close,
            twins=twins,
        )
    finally:
        kept.close()  # (again, if the rounds failed: a second close does nothing)


def _raw_placed_rate(bootstrap: str, n: int, order: Sequence[int] | None) -> float:
    """A raw Producer's rate giving message ``i`` the partition ``order[i % len(order)]``;
    ``order`` None: none given (``_raw_rate``: the client's sticky partitioner places them)."""
    if order is None:
        return _raw_rate(bootstrap, n, False)[0]
    p = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "log_level": 0, "on_delivery": _noop}
    )
    p.list_topics(TOPIC, timeout=10)
    return _raw_loop_rate(p, n, [None] * len(order), order, None)


def _raw_loop_rate(
    p: Producer,
    n: int,
    keys: Sequence[bytes | None],
    parts: Sequence[int],
    on_delivery: Callable[[Any, Any], None] | None,
) -> float:
    """``p``'s rate giving message ``i`` the key ``keys[j]`` and the partition ``parts[j]``
    (``j = i % len(parts)``; -1: the client places it), waiting at a full queue, ``poll(0)``
    every 1,000: ``_drive``'s loops, no frame between, a callback passed by keyword as they
    pass it (a keyword costs a C call more than a positional argument: against a positional
    reference, the keyed row's raw Producer ran at 1.06 million msg/s instead of 0.91, and
    the producer read 0.63x of it instead of about 0.87x)."""
    raw, poll, size = p.produce, p.poll, len(parts)

    def run() -> None:
        for i in range(n):
            j = i % size
            while True:
                try:
                    if on_delivery is None:
                        raw(TOPIC, VALUE, keys[j], parts[j])
                    else:
                        raw(TOPIC, VALUE, keys[j], parts[j], on_delivery=on_delivery)
                    break
                except BufferError:
                    poll(0.005)
            if i % 1000 == 0:
                poll(0)

    return _timed(n, run, p.flush, "raw producer")[0]


def _current_view(client: Producer) -> TopicView:
    """TOPIC's view as the producer would build it now from ``client``'s metadata (the
    library's own source and rule for a usable partition), min ISR FAULT_CONFIG's."""
    answer = ConfluentMetadataSource(client, None).partitions(TOPIC, 10.0)
    md = TopicMetadata(
        topic=TOPIC,
        partitions=answer.partitions,
        min_insync_replicas=int(FAULT_CONFIG["min.insync.replicas"]),
    )
    return TopicView.build(md)


def _raw_as_placed(bootstrap: str, *, n: int, strategy: str) -> float:
    """A raw Producer placing keyless messages as FailoverProducer does with ``strategy``:
    left to the client while every partition is usable, else over the usable ones,
    ``sticky_messages`` to each in turn (sticky) or one each (round robin).
    The fault figures' reference: what the fault costs the cluster and the client alone."""
    view = _current_view(Producer({"bootstrap.servers": bootstrap, "log_level": 0}))
    order: list[int] | None = None
    if not view.whole:
        repeat = STICKY_MESSAGES_DEFAULT if strategy == "sticky" else 1
        order = [p for p in view.usable for _ in range(repeat)]
    return _raw_placed_rate(bootstrap, n, order)


def _raw_keyed_as_placed(bootstrap: str, *, n: int) -> float:
    """A raw Producer (murmur2 partitioner, a per-message callback) placing the keyed row's
    messages as FailoverProducer does: left to the client while every partition is usable,
    else each key where the producer's chooser puts it (its home while usable, else by
    rendezvous), worked out before the clock starts. The keyed fault figure's reference: what
    the fault costs the cluster and the client alone."""
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "log_level": 0,
            "partitioner": "murmur2_random",
        }
    )
    view = _current_view(p)
    if view.whole:
        parts = [-1] * len(_KEYS)
    else:
        keyed = PartitionChooser(view, ChoiceOptions()).keyed
        parts = [keyed(k) for k in _KEYS]
    return _raw_loop_rate(p, n, _KEYS, parts, _noop)


def _raw_round_robin_ratio(bootstrap: str, n: int, repeat: int) -> float:
    """A raw Producer giving each message the next partition in turn, against one leaving
    keyless messages to librdkafka (sticky), each made for its round as ``_raw_rate``'s is,
    medians of alternated rounds: what round robin itself costs, the fault figure's reading
    aid (on minibroker, mostly the broker's work per batch: each partition's batches are
    smaller)."""
    runs = alternated(
        repeat,
        {
            "sticky": lambda: _raw_placed_rate(bootstrap, n, None),
            "in turn": lambda: _raw_placed_rate(bootstrap, n, range(PARTITIONS)),
        },
    )
    return statistics.median(runs["in turn"]) / statistics.median(runs["sticky"])


# One-at-a-time produce() against the raw Producer: (name, per-message callback, options, target).
_HEALTHY_FIGURES: tuple[tuple[str, bool, dict[str, Any], float], ...] = (
    ("FailoverProducer(sticky, the default) vs raw", False, {}, 0.95),
    # While the topic is whole both strategies leave keyless messages to librdkafka (the same
    # code path as the row above): the two rows' spread within one run is the bench's own noise.
    ("FailoverProducer(round_robin) vs raw", False, {"strategy": "round_robin"}, 0.95),
    ("per-message on_delivery, FailoverProducer vs raw", True, {}, 0.85),
    # The loop of confluent-kafka's own examples (and of the README): poll(0) after each
    # produce(). The issue's one-at-a-time target, in the calling pattern most code has.
    ("poll(0) after every produce(), FailoverProducer vs raw", False, {"poll_every": 1}, 0.95),
)


def run(quick: bool) -> list[Figure]:
    # A run of 50,000 messages lasts about 0.1 s here, short enough for a burst of load from
    # elsewhere to swing one side by 30%: longer runs, and more of them, steady the medians.
    n = 150_000 if quick else 400_000
    repeat = 5 if quick else 7
    figures: list[Figure] = []
    with MockCluster(brokers=3) as mock:
        mock.create_topic(TOPIC, PARTITIONS, 3)
        bs = mock.bootstrap_servers
        for name, per_message, options, target in _HEALTHY_FIGURES:
            ours, raw, cpu = _compare(bs, n, repeat, per_message, min_insync_replicas=2, **options)
            figures.append(
                Figure(
                    issue=HEALTHY_PATH_ISSUE,
                    name=f"mock: {name}, msg/s",
                    value=ours,
                    reference=raw,
                    unit="msg/s",
                    target=target,
                    note=cpu,
                )
            )
        figures.extend(_batch_figures(bs, n, repeat, "mock"))
    figures.extend(_minibroker_figures(n, repeat))
    us, ref = _choice_us(repeat)
    figures.append(
        Figure(
            issue=ISSUE,
            name="partition choice (keyless, default strategy), median",
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
