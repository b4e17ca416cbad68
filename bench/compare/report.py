"""The tables as printed, the JSON report and the plot of deliveries per second."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from compare.scenario import FaultResult, ThroughputResult


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    lines = [
        "  ".join(
            h.rjust(w) if i else h.ljust(w)
            for i, (h, w) in enumerate(zip(header, widths, strict=True))
        )
    ]
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        lines.append(
            "  ".join(
                c.rjust(w) if i else c.ljust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
    return "\n".join(lines)


def fault_table(results: Sequence[FaultResult]) -> str:
    header = (
        "contender", "sent", "delivered", "failed", "lost", "dups", "call max s",
        "no-ack gap s", "p50 ms", "p99 ms", "max lat s", "deliv/s", "in fault/s",
    )  # fmt: skip
    rows = [
        (
            r.name,
            str(r.sent),
            str(r.delivered),
            str(r.failed + r.unresolved),
            str(r.lost),
            str(r.duplicates),
            f"{r.longest_call_s:.2f}",
            f"{r.longest_gap_s:.2f}",
            f"{r.p50_ms:.1f}",
            f"{r.p99_ms:.0f}",
            f"{r.max_latency_s:.1f}",
            f"{r.delivered_per_s:,.0f}",
            f"{r.during_fault_per_s:,.0f}",
        )
        for r in results
    ]
    return _table(header, rows)


def throughput_table(results: Sequence[ThroughputResult]) -> str:
    header = ("contender", "median msg/s", "ratio to raw confluent-kafka", "rounds msg/s")
    rows = [
        (
            r.name,
            f"{r.median_per_s:,.0f}",
            f"{r.ratio:.2f}",
            " / ".join(f"{x / 1e3:.1f}k" for x in r.rounds_per_s),
        )
        for r in results
    ]
    return _table(header, rows)


def write_json(path: Path, meta: dict[str, Any], **sections: Sequence[Any]) -> None:
    body = dict(meta)
    for name, results in sections.items():
        body[name] = [dataclasses.asdict(r) for r in results]
    path.write_text(json.dumps(body, indent=2) + "\n")


def plot(
    path: Path, results: Sequence[FaultResult], fault_start_s: float, fault_end_s: float
) -> None:
    """Deliveries per second over time, one line per contender, the fault window shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(10, 5))
    axes.axvspan(
        fault_start_s, fault_end_s, color="tab:red", alpha=0.12, label="brokers 4, 5 paused"
    )
    for r in results:
        axes.plot(range(len(r.per_second)), r.per_second, label=r.name, linewidth=1.4)
    axes.set_xlabel("seconds since the contender's first message")
    axes.set_ylabel("messages delivered per second")
    axes.set_title("Producers on real Kafka 4.4, 12 partitions RF 3 min ISR 2")
    axes.legend(fontsize="small")
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
