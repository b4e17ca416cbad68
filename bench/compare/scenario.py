"""The scenarios: every contender through the same steps on one cluster, one after the other.

Contenders run in turn, not at once: on two cores, running them together would measure how they
share the CPU. Each gets a fresh topic (``tests/kafka/support.py:spread``: with brokers 4 and 5
paused, exactly partitions 5, 8 and 9 fall below min ISR 2) and the same fault window, timed from
its own first message; the cluster is healed and the topic read back before the next one starts.
"""

from __future__ import annotations

import functools
import itertools
import logging
import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tests.kafka.support import FAULTY, new_topic, read_back, wait_for, whole
from tests.realkafka.cluster import KafkaCluster

from compare.contenders import FaultWindow, Load, Trace, ident

log = logging.getLogger(__name__)

Runner = Callable[[str, str, Load, FaultWindow], Trace]


@dataclass(frozen=True, slots=True, kw_only=True)
class Contender:
    name: str
    run: Runner
    note: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultResult:
    """Scenario 1, one contender."""

    name: str
    note: str
    sent: int
    delivered: int  # reported delivered
    failed: int  # reported failed for good
    unresolved: int  # no outcome by the end of the drain
    consumed: int  # distinct messages read back
    lost: int  # sent, never read back
    duplicates: int  # records read back beyond the first copy
    longest_call_s: float
    longest_gap_s: float  # longest time without any delivery, first send to last send
    p50_ms: float
    p99_ms: float
    max_latency_s: float
    delivered_per_s: float  # over the sending time
    during_fault_per_s: float  # deliveries per second inside the fault window
    per_second: tuple[int, ...]  # deliveries in each second since the start
    errors: tuple[tuple[str, int], ...]
    paused_at_s: float | None
    resumed_at_s: float | None


def _quantile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summarize(
    contender: Contender,
    trace: Trace,
    records: Sequence[bytes],
    load: Load,
    window: FaultWindow,
) -> FaultResult:
    sent = len(trace.sent_s)
    copies = Counter(ident(v) for v in records)
    mine = {i for i in copies if i < sent}
    latencies = [at - trace.sent_s[i] for i, at in trace.acked_s.items()]
    acks = sorted(trace.acked_s.values())
    last_send = trace.sent_s[-1] if trace.sent_s else 0.0
    marks = [0.0, *(a for a in acks if a <= last_send), last_send]
    seconds = int(max([load.duration_s, *acks, 0.0])) + 1
    per_second = [0] * seconds
    for a in acks:
        per_second[int(a)] += 1
    width = window.end_s - window.start_s
    in_window = sum(1 for a in acks if window.start_s <= a < window.end_s)
    return FaultResult(
        name=contender.name,
        note=contender.note,
        sent=sent,
        delivered=len(trace.acked_s),
        failed=len(trace.failed),
        unresolved=sent - len(trace.acked_s) - len(trace.failed),
        consumed=len(mine),
        lost=sent - len(mine),
        duplicates=sum(n - 1 for n in copies.values()),
        longest_call_s=trace.longest_call_s,
        longest_gap_s=max(b - a for a, b in itertools.pairwise(marks)),
        p50_ms=_quantile(latencies, 0.5) * 1e3,
        p99_ms=_quantile(latencies, 0.99) * 1e3,
        max_latency_s=max(latencies, default=float("nan")),
        delivered_per_s=len(acks) / max(last_send, 1e-9),
        during_fault_per_s=in_window / width if width > 0 else float("nan"),
        per_second=tuple(per_second),
        errors=tuple(Counter(e for _, e in trace.failed.values()).most_common()),
        paused_at_s=window.paused_at_s,
        resumed_at_s=window.resumed_at_s,
    )


def producers_under_fault(
    cluster: KafkaCluster,
    contenders: Sequence[Contender],
    load: Load,
    *,
    fault_start_s: float,
    fault_end_s: float,
    brokers: tuple[int, ...] = FAULTY,
    progress: Callable[[str], None] = lambda line: None,
) -> list[FaultResult]:
    """Scenario 1: each contender at ``load`` with ``brokers`` paused for the window."""
    results = []
    for contender in contenders:
        cluster.heal()
        topic, _ = new_topic(cluster, f"cmp-{contender.name.split()[0].lower()}")
        window = FaultWindow(cluster, brokers, fault_start_s, fault_end_s)
        progress(f"  {contender.name}: {load.total} messages at {load.rate_per_s:g}/s ...")
        try:
            trace = contender.run(cluster.bootstrap_servers, topic, load, window)
        finally:
            window.close()
        cluster.heal()
        healed = functools.partial(whole, cluster, topic)
        wait_for(healed, 120, f"{topic}: every ISR full again")
        records = [m.value() for m in read_back(cluster.bootstrap_servers, topic)]
        result = summarize(contender, trace, records, load, window)
        progress(
            f"    sent {result.sent}, delivered {result.delivered}, lost {result.lost}, "
            f"duplicates {result.duplicates}"
        )
        results.append(result)
    return results


@dataclass(frozen=True, slots=True, kw_only=True)
class ThroughputResult:
    """Scenario 4, one contender."""

    name: str
    rounds_per_s: tuple[float, ...]
    median_per_s: float
    ratio: float  # to the first contender's median (the raw confluent-kafka producer)


def throughput(
    cluster: KafkaCluster,
    contenders: Sequence[Contender],
    load: Load,
    *,
    rounds: int,
    progress: Callable[[str], None] = lambda line: None,
) -> list[ThroughputResult]:
    """Scenario 4: ``load.count`` messages as fast as each can, ``rounds`` alternated rounds."""
    cluster.heal()
    topic, _ = new_topic(cluster, "cmp-throughput")
    samples: dict[str, list[float]] = {c.name: [] for c in contenders}
    idle = FaultWindow(None, (), 0.0, 0.0)
    for r in range(rounds):
        # Each round starts at another contender, so none is always first after a pause.
        order = [*contenders[r % len(contenders) :], *contenders[: r % len(contenders)]]
        for contender in order:
            trace = contender.run(cluster.bootstrap_servers, topic, load, idle)
            rate = len(trace.acked_s) / trace.elapsed_s
            samples[contender.name].append(rate)
            progress(f"  round {r + 1}/{rounds} {contender.name}: {rate:,.0f} msg/s")
            time.sleep(0.5)
    reference = statistics.median(samples[contenders[0].name])
    return [
        ThroughputResult(
            name=c.name,
            rounds_per_s=tuple(samples[c.name]),
            median_per_s=statistics.median(samples[c.name]),
            ratio=statistics.median(samples[c.name]) / reference,
        )
        for c in contenders
    ]
