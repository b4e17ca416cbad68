"""Knowing the cluster: metadata sources and the background refresher.

A :class:`MetadataSource` answers two questions about a topic: its partitions (leader,
replicas, ISR) and its min.insync.replicas. :class:`MetadataRefresher` asks them on its own
thread, faster while a partition is quarantined, retries with back-off, and keeps the last
answer (with its age) when the cluster cannot be reached. Client shells provide the source:
:mod:`failover_partitioner.metadata.confluent` for confluent-kafka.
"""

from __future__ import annotations

from failover_partitioner.metadata._refresher import MetadataRefresher, RefreshSchedule
from failover_partitioner.metadata._source import MetadataSource, MinIsr, PartitionsAnswer

__all__ = ["MetadataRefresher", "MetadataSource", "MinIsr", "PartitionsAnswer", "RefreshSchedule"]
