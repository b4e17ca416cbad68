"""Text for people: the progress line, the producer table and the partition table."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from failover_partitioner.demo.partitions import Snapshot, classify
from failover_partitioner.demo.stats import ProducerSummary


@dataclass(frozen=True, slots=True, kw_only=True)
class ProgressFigures:
    """One producer's counters at one tick of the progress line."""

    name: str
    rate_per_s: float  # deliveries per second since the previous tick
    sent: int
    delivered: int
    failed: int
    rerouted: int


def progress_line(*, elapsed_s: float, phase: str, figures: Sequence[ProgressFigures]) -> str:
    parts = [
        f"{f.name} {f.rate_per_s:4.0f}/s delivered {f.delivered:>6} failed {f.failed:>3}"
        f" rerouted {f.rerouted:>4}"
        for f in figures
    ]
    return f"{elapsed_s:5.1f}s {phase:<8} | " + " | ".join(parts)


def _count(value: int | None) -> str:
    return "n/a" if value is None else str(value)


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f} ms" if value >= 10 else f"{value:.1f} ms"


_PRODUCER_ROWS: tuple[tuple[str, Callable[[ProducerSummary], str]], ...] = (
    ("sent", lambda s: str(s.sent)),
    ("delivered (acknowledged)", lambda s: str(s.delivered)),
    ("LOST (not in topic)", lambda s: str(s.lost)),
    ("undelivered at deadline", lambda s: str(s.undelivered)),
    ("failed (final error)", lambda s: str(s.failed)),
    ("duplicated in topic", lambda s: str(s.duplicated_messages)),
    ("possible duplicates", lambda s: _count(s.possible_duplicates)),
    ("rerouted", lambda s: str(s.rerouted)),
    ("not delivered within 1 s", lambda s: str(s.not_delivered_within_1s)),
    ("longest stall", lambda s: f"{s.longest_stall_s:.1f} s"),
    ("p50 delivery latency", lambda s: _ms(s.p50_ms)),
    ("p99 delivery latency", lambda s: _ms(s.p99_ms)),
)


def producer_table(summaries: Sequence[ProducerSummary]) -> str:
    """One column per producer, one row per figure."""
    header = ["", *(s.name for s in summaries)]
    rows = [[label, *(cell(s) for s in summaries)] for label, cell in _PRODUCER_ROWS]
    return _align([header, *rows], right_from=1)


def partition_table(snapshots: Sequence[Snapshot], *, min_insync_replicas: int) -> str:
    """Partition, Replicas, then Leader / ISR / State for each snapshot side by side."""
    if not snapshots:
        return "(no partition snapshots)"
    by_partition = [{r.partition: r for r in snap.rows} for snap in snapshots]
    partitions = sorted({p for rows in by_partition for p in rows})
    group_header = ["", ""]
    header = ["Partition", "Replicas"]
    for snap in snapshots:
        group_header += [f"{snap.label} (t={snap.at_s:.1f}s)", "", ""]
        header += ["Leader", "ISR", "State"]
    body: list[list[str]] = []
    for p in partitions:
        first = next(rows[p] for rows in by_partition if p in rows)
        line = [str(p), _ids(first.replicas)]
        for rows in by_partition:
            row = rows.get(p)
            if row is None:
                line += ["?", "?", "?"]
                continue
            state = classify(row, min_insync_replicas=min_insync_replicas)
            leader = "none" if row.leader is None or row.leader < 0 else str(row.leader)
            line += [leader, _ids(row.isr), state.value]
        body.append(line)
    return _align([group_header, header, *body], right_from=None, groups_row=0, group_size=3)


def _ids(ids: Sequence[int]) -> str:
    return ",".join(str(i) for i in ids) if ids else "-"


def _align(
    lines: list[list[str]],
    *,
    right_from: int | None,
    groups_row: int | None = None,
    group_size: int = 1,
) -> str:
    """Columns padded to their widest cell; a group label row may span ``group_size`` columns."""
    ncols = max(len(line) for line in lines)
    widths = [0] * ncols
    for i, line in enumerate(lines):
        if i == groups_row:
            continue
        for c, cell in enumerate(line):
            widths[c] = max(widths[c], len(cell))
    if groups_row is not None:
        # Widen a group's last column if its label is longer than the columns under it.
        for c, label in enumerate(lines[groups_row]):
            if not label:
                continue
            span = range(c, min(ncols, c + group_size))
            room = sum(widths[k] for k in span) + 2 * (len(span) - 1)
            if len(label) > room:
                widths[span[-1]] += len(label) - room
    out: list[str] = []
    for i, line in enumerate(lines):
        if i == groups_row:
            cells: list[str] = []
            c = 0
            while c < len(line):
                label = line[c]
                if label:
                    span = range(c, min(ncols, c + group_size))
                    room = sum(widths[k] for k in span) + 2 * (len(span) - 1)
                    cells.append(label.ljust(room))
                    c += len(span)
                else:
                    cells.append(" " * widths[c])
                    c += 1
            out.append("  ".join(cells).rstrip())
            continue
        padded = [
            cell.rjust(widths[c])
            if right_from is not None and c >= right_from
            else cell.ljust(widths[c])
            for c, cell in enumerate(line)
        ]
        out.append("  ".join(padded).rstrip())
    return "\n".join(out)


def verdict(summary: ProducerSummary) -> str:
    """One sentence per producer, from its figures alone."""
    s = summary
    parts = [f"LOST {s.lost} of {s.sent} messages" if s.lost else f"lost none of {s.sent} messages"]
    if s.undelivered:
        parts.append(f"{s.undelivered} still undelivered at the deadline")
    if s.failed:
        parts.append(f"{s.failed} failed")
    parts.append(
        f"{s.not_delivered_within_1s} not delivered within 1 s "
        f"(longest wait {s.longest_stall_s:.1f} s)"
    )
    if s.rerouted:
        parts.append(f"{s.rerouted} rerouted")
    if s.duplicated_messages:
        if s.possible_duplicates is None:
            parts.append(f"{s.duplicated_messages} messages duplicated in the topic, none reported")
        else:
            parts.append(
                f"{s.duplicated_messages} messages duplicated in the topic, "
                f"{s.possible_duplicates} reported as possible duplicates"
            )
    return f"{s.name}: " + ", ".join(parts)
