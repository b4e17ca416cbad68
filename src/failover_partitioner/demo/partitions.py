"""The partition table: leader, replicas and ISR of each partition, and what state that is in."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass


class PartitionState(enum.Enum):
    HEALTHY = "healthy"
    AT_RISK = "at risk"  # ISR exactly at the minimum: one more failure stops acks=all writes
    UNDER_MIN = "UNDER MIN"  # acks=all writes are refused (NOT_ENOUGH_REPLICAS)
    OFFLINE = "OFFLINE"  # no leader


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionRow:
    partition: int
    leader: int | None
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    """The partitions of the demo topic at one moment, ``at_s`` seconds after the start."""

    label: str
    at_s: float
    rows: tuple[PartitionRow, ...]


def classify(row: PartitionRow, *, min_insync_replicas: int) -> PartitionState:
    """The state acks=all producers see: Kafka's effective minimum is min(min ISR, RF)."""
    if row.leader is None or row.leader < 0:
        return PartitionState.OFFLINE
    minimum = min(min_insync_replicas, len(row.replicas)) if row.replicas else min_insync_replicas
    if len(row.isr) < minimum:
        return PartitionState.UNDER_MIN
    if len(row.isr) == minimum:
        return PartitionState.AT_RISK
    return PartitionState.HEALTHY


def degraded(rows: Iterable[PartitionRow], *, min_insync_replicas: int) -> tuple[int, ...]:
    """Partitions that refuse acks=all writes (under the minimum or offline)."""
    bad = (PartitionState.UNDER_MIN, PartitionState.OFFLINE)
    return tuple(
        r.partition for r in rows if classify(r, min_insync_replicas=min_insync_replicas) in bad
    )
