"""What the mirror reports: status snapshots, the status line, and Prometheus metrics."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["MirrorStatus", "PartitionStatus", "format_status"]


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionStatus:
    """One assigned source partition."""

    topic: str
    partition: int
    committed_offset: int | None
    """The group's committed offset: read when assigned, then each one this mirror commits
    (None while the group has none)."""
    high_watermark: int | None
    """The source partition's end as last seen by the consumer."""
    lag: int | None
    """What is left to read and commit: 0 if the partition is empty, else high_watermark -
    committed offset; with no committed offset, high_watermark - the log start offset when the
    consumer starts there (``auto.offset.reset=earliest``), else None (see ``partition_lag``)."""
    in_flight: int
    failed_offset: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class MirrorStatus:
    """A snapshot of a running (or finished) mirror. Counts are since the mirror started."""

    state: str
    """``starting``, ``running``, ``paused`` (in-flight bound reached), ``draining``,
    ``stopped`` or ``failed``."""
    elapsed_s: float
    consumed: int
    delivered: int
    """Messages finally delivered to the target (dead-lettered ones not included)."""
    rerouted: int
    """Messages sent again after a failed attempt (moved off a degraded partition)."""
    possible_duplicates: int = 0
    """Messages the fast lane sent again that may be on the target twice: their failed attempt
    may have been written (a timeout, NOT_ENOUGH_REPLICAS_AFTER_APPEND), or an equal message of
    the same span failed and both went again. The failover producer counts its own such
    messages in its ``statistics().possible_duplicates``."""
    dead_lettered: int
    failed: int
    """Messages that finally failed (the mirror stops at the first unless dead-lettering)."""
    in_flight: int
    """Messages handed to the producer whose outcome is not back yet."""
    uncommitted: int
    """Messages consumed and not covered by a commit (bounded by max_in_flight)."""
    lag: int | None
    """Sum of the partitions' lag; None while any assigned partition's lag is unknown."""
    delivered_per_s: float
    """Delivery rate since the previous status line."""
    commits: int
    partitions: tuple[PartitionStatus, ...]
    replication_latency_ms: tuple[tuple[str, float], ...] = ()
    """Per source topic, for its latest delivered span: when the mirror learned it was
    delivered minus its last record's timestamp (MirrorMaker 2's replication-latency-ms)."""
    record_age_ms: tuple[tuple[str, float], ...] = ()
    """Per source topic, its latest consumed record's age when consumed (MM2's
    record-age-ms)."""

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def format_status(status: MirrorStatus, *, as_json: bool = False) -> str:
    """The periodic status line: human-readable, or one JSON object (``--json``)."""
    if as_json:
        data = status.to_dict()  # partitions become a list of objects, one per partition
        data["elapsed_s"] = round(status.elapsed_s, 3)
        data["delivered_per_s"] = round(status.delivered_per_s, 1)
        return json.dumps(data, separators=(",", ":"), sort_keys=True)
    lag = "?" if status.lag is None else f"{status.lag:,}"
    line = (
        f"[{status.elapsed_s:8.1f}s] {status.state:<8} "
        f"rate {status.delivered_per_s:,.0f}/s  consumed {status.consumed:,}  "
        f"delivered {status.delivered:,}  in flight {status.in_flight:,}  lag {lag}  "
        f"rerouted {status.rerouted:,}  partitions {len(status.partitions)}"
    )
    if status.replication_latency_ms:
        line += f"  latency {max(v for _, v in status.replication_latency_ms):,.0f} ms"
    if status.record_age_ms:
        line += f"  age {max(v for _, v in status.record_age_ms):,.0f} ms"
    if status.possible_duplicates:
        line += f"  possible duplicates {status.possible_duplicates:,}"
    if status.dead_lettered:
        line += f"  dead-lettered {status.dead_lettered:,}"
    if status.failed:
        line += f"  FAILED {status.failed:,}"
    return line


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricsSnapshot:
    """What the Prometheus collector exposes; replaced whole, so a scrape never sees a torn view."""

    consumed: tuple[tuple[str, int], ...] = ()
    delivered: tuple[tuple[str, int], ...] = ()
    rerouted: tuple[tuple[str, int], ...] = ()
    possible_duplicates: tuple[tuple[str, int], ...] = ()
    dead_lettered: tuple[tuple[str, int], ...] = ()
    failed: tuple[tuple[str, int], ...] = ()
    commits: int = 0
    commit_failures: int = 0
    in_flight: int = 0
    uncommitted: int = 0
    paused: bool = False
    partitions: tuple[PartitionStatus, ...] = ()
    replication_latency_ms: tuple[tuple[str, float], ...] = ()
    record_age_ms: tuple[tuple[str, float], ...] = ()


class MirrorCollector(Collector):
    """Exposes a mirror's counters as ``failover_mirror_*`` metrics.

    The mirror keeps plain integers on its hot path and publishes a :class:`MetricsSnapshot`
    now and then; a scrape reads the latest one (from the exporter's thread).
    """

    def __init__(self) -> None:
        self.snapshot = MetricsSnapshot()

    def describe(self) -> Iterable[Metric]:
        return list(self._families(MetricsSnapshot()))

    def collect(self) -> Iterable[Metric]:
        return list(self._families(self.snapshot))

    def _families(self, snap: MetricsSnapshot) -> Iterator[Metric]:
        for name, doc, series in (
            ("consumed", "Messages consumed from the source, by source topic", snap.consumed),
            ("delivered", "Messages finally delivered to the target", snap.delivered),
            ("rerouted", "Messages sent again after a failed attempt", snap.rerouted),
            (
                "possible_duplicates",
                "Messages the fast lane sent again that may be on the target twice",
                snap.possible_duplicates,
            ),
            ("dead_lettered", "Messages sent to the dead-letter topic", snap.dead_lettered),
            ("failed", "Messages that finally failed", snap.failed),
        ):
            counter = CounterMetricFamily(f"failover_mirror_{name}", doc, labels=["topic"])
            for topic, value in series:
                counter.add_metric([topic], value)
            yield counter
        yield CounterMetricFamily(
            "failover_mirror_commits", "Successful offset commits", value=snap.commits
        )
        yield CounterMetricFamily(
            "failover_mirror_commit_failures",
            "Offset commits the group coordinator refused (retried later)",
            value=snap.commit_failures,
        )
        yield GaugeMetricFamily(
            "failover_mirror_in_flight",
            "Messages handed to the producer whose outcome is not back",
            value=snap.in_flight,
        )
        yield GaugeMetricFamily(
            "failover_mirror_uncommitted",
            "Messages consumed and not yet committed (bounded by max in flight)",
            value=snap.uncommitted,
        )
        yield GaugeMetricFamily(
            "failover_mirror_paused",
            "1 while consumption is paused at the in-flight bound",
            value=1 if snap.paused else 0,
        )
        for name, doc, values in (
            (
                "replication_latency_ms",
                "Latest delivered record's time from its source timestamp until the mirror "
                "knew it delivered, by source topic",
                snap.replication_latency_ms,
            ),
            (
                "record_age_ms",
                "Latest consumed record's age when consumed, by source topic",
                snap.record_age_ms,
            ),
        ):
            gauge = GaugeMetricFamily(f"failover_mirror_{name}", doc, labels=["topic"])
            for topic, ms in values:
                gauge.add_metric([topic], ms)
            yield gauge
        committed = GaugeMetricFamily(
            "failover_mirror_committed_offset",
            "Last committed source offset",
            labels=["topic", "partition"],
        )
        lag = GaugeMetricFamily(
            "failover_mirror_lag",
            "Source high watermark minus committed offset (none committed: minus where the "
            "mirror starts reading, if known; 0 when the partition is empty)",
            labels=["topic", "partition"],
        )
        for p in snap.partitions:
            labels = [p.topic, str(p.partition)]
            if p.committed_offset is not None:
                committed.add_metric(labels, p.committed_offset)
            if p.lag is not None:
                lag.add_metric(labels, p.lag)
        yield committed
        yield lag
