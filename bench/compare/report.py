"""The tables as printed, the JSON report and the plot of deliveries per second."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from compare.mirror import CopyResult
from compare.scenario import FaultResult, ThroughputResult
from compare.spark_jobs import JobResult


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


def _maybe(x: float | None, form: str) -> str:
    return "-" if x is None else format(x, form)


def mirror_table(results: Sequence[CopyResult]) -> str:
    header = (
        "mirror", "fault", "copied", "lost", "dups", "first copy s", "all copied s", "copy/s",
        "before/s", "in fault/s", "catch-up s",
    )  # fmt: skip
    rows = [
        (
            r.name,
            "4,5 paused" if r.fault else "healthy",
            f"{r.copied:,}",
            str(r.lost),
            str(r.duplicates),
            _maybe(r.first_copy_s, ".1f"),
            _maybe(r.done_s, ".1f"),
            "-" if r.fault else f"{r.copy_per_s:,.0f}",
            _maybe(r.before_fault_per_s, ",.0f"),
            _maybe(r.during_fault_per_s, ",.0f"),
            _maybe(r.catch_up_s, ".1f"),
        )
        for r in results
    ]
    reported = [f"  {r.name} ({'fault' if r.fault else 'healthy'}): {r.reported}" for r in results]
    return _table(header, rows) + "\nWhat each reported:\n" + "\n".join(reported)


def spark_table(results: Sequence[JobResult]) -> str:
    header = ("writer", "fault", "outcome", "job s", "rows read back", "lost", "dups", "paused s")
    rows = [
        (
            r.name,
            "4,5 paused" if r.fault else "healthy",
            r.outcome,
            f"{r.job_s:.1f}",
            f"{r.stored:,}",
            str(r.lost),
            str(r.duplicates),
            "-"
            if r.paused_at_s is None or r.resumed_at_s is None
            else f"{r.paused_at_s:.0f}-{r.resumed_at_s:.0f}",
        )
        for r in results
    ]
    said = [
        f"  {r.name} ({'fault' if r.fault else 'healthy'}): {r.error or r.reported}"
        for r in results
    ]
    return _table(header, rows) + "\nWhat each reported:\n" + "\n".join(said)


def write_json(path: Path, meta: dict[str, Any], **sections: Sequence[Any]) -> None:
    body = dict(meta)
    for name, results in sections.items():
        body[name] = [dataclasses.asdict(r) for r in results]
    path.write_text(json.dumps(body, indent=2) + "\n")


def plot(
    path: Path,
    results: Sequence[FaultResult],
    fault_start_s: float,
    fault_end_s: float,
    *,
    version: str = "4.4",
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
    axes.set_title(f"Producers on real Kafka {version}, 12 partitions RF 3 min ISR 2")
    axes.legend(fontsize="small")
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def plot_mirrors(
    path: Path, results: Sequence[CopyResult], pause_s: float, *, version: str = "4.4"
) -> None:
    """Records copied per second under the fault, one line per mirror, aligned on the pause."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(10, 5))
    axes.axvspan(0, pause_s, color="tab:red", alpha=0.12, label="target brokers 4, 5 paused")
    for r in results:
        if r.paused_at_s is None:
            continue
        shift = int(r.paused_at_s)
        axes.plot(
            [s - shift for s in range(len(r.per_second))],
            r.per_second,
            label=r.name,
            linewidth=1.4,
        )
    axes.set_xlabel("seconds since the target's brokers 4 and 5 were paused")
    axes.set_ylabel("records copied per second (target high watermarks)")
    axes.set_title(f"Mirrors on real Kafka {version}: a copy of 12 partitions, RF 3, min ISR 2")
    axes.legend(fontsize="small")
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
