"""What the refresher needs from a client: partitions, min.insync.replicas, broker racks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from failover_partitioner.health import PartitionMetadata

__all__ = ["MetadataSource", "MinIsr", "PartitionsAnswer"]


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionsAnswer:
    """A topic's partitions as one metadata response gave them (``exists`` False: unknown;
    ``refused``: the cluster refused to describe it, TOPIC_AUTHORIZATION_FAILED)."""

    partitions: tuple[PartitionMetadata, ...]
    exists: bool = True
    refused: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class MinIsr:
    """min.insync.replicas and where it came from: ``"topic"`` or ``"broker"``."""

    value: int
    source: str


class MetadataSource(Protocol):
    """A client's way of asking the cluster. Methods block up to ``timeout_s`` and raise on
    failure; they are called from the refresher's thread, never from a delivery callback."""

    def partitions(self, topic: str, timeout_s: float) -> PartitionsAnswer: ...

    def min_insync_replicas(self, topic: str, timeout_s: float) -> MinIsr | None:
        """The configured value, or None when the cluster cannot say (no DescribeConfigs)."""
        ...

    def close(self) -> None: ...
