"""The ``--report`` JSON: one object per producer keyed by its name, plus the fault and the run."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from failover_partitioner.demo.partitions import Snapshot, classify
from failover_partitioner.demo.stats import ProducerSummary

# Keys next to the producers' names at the top level; a producer may not take one of these names.
RESERVED_KEYS = frozenset({"fault", "run", "partitions"})


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultWindow:
    """The injected fault: seconds since the run started, and the same moments in UTC."""

    kind: str
    brokers: tuple[int, ...]
    start_s: float
    end_s: float | None  # None if the run ended before the fault was healed
    start_utc: str
    end_utc: str | None
    degraded_partitions: tuple[int, ...] = ()  # refused acks=all writes just before the heal


@dataclass(frozen=True, slots=True, kw_only=True)
class RunInfo:
    topic: str
    bootstrap_servers: str
    embedded_cluster: bool
    duration_s: float
    rate_per_s: float
    min_insync_replicas: int
    deadline_s: float  # outcomes counted until here: the end of the drain
    elapsed_s: float  # produce, drain and consume-back together
    plot: str | None


def build_report(
    *,
    summaries: Sequence[ProducerSummary],
    fault: FaultWindow | None,
    run: RunInfo,
    snapshots: Sequence[Snapshot],
) -> dict[str, Any]:
    report: dict[str, Any] = {}
    for s in summaries:
        if s.name in RESERVED_KEYS or s.name in report:
            raise ValueError(f"producer name {s.name!r} clashes with another key of the report")
        fields = asdict(s)
        del fields["name"]
        fields["delivered_per_s"] = list(s.delivered_per_s)
        report[s.name] = fields
    report["fault"] = (
        None
        if fault is None
        else {
            **asdict(fault),
            "brokers": list(fault.brokers),
            "degraded_partitions": list(fault.degraded_partitions),
        }
    )
    report["run"] = asdict(run)
    report["partitions"] = {
        snap.label: {
            "at_s": snap.at_s,
            "rows": [
                {
                    "partition": r.partition,
                    "leader": r.leader,
                    "replicas": list(r.replicas),
                    "isr": list(r.isr),
                    "state": classify(r, min_insync_replicas=run.min_insync_replicas).name,
                }
                for r in snap.rows
            ],
        }
        for snap in snapshots
    }
    rounded: dict[str, Any] = _rounded(report)
    return rounded


def _rounded(value: Any) -> Any:
    """Floats to the microsecond (or microsecond-of-a-millisecond): readable, still exact enough."""
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_rounded(v) for v in value]
    return value
