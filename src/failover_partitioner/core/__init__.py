"""The failover core: the decisions both producers make, per message and per topic.

Plain Python with an injected clock: no client, thread or event loop (import-linter holds it
so). :class:`FailoverCore` takes events (metadata, a failed attempt, time passing) and answers
what to do; the shells (:mod:`failover_partitioner.confluent`, :mod:`failover_partitioner.aio`)
do it. See :mod:`failover_partitioner.core.engine` and docs/architecture.md.
"""

from __future__ import annotations

from failover_partitioner.core.engine import (
    CLIENT_PARTITIONER,
    NO_METADATA,
    NO_PARTITION,
    NO_RIGHTS,
    NO_TOPIC,
    NO_TOPIC_YET,
    Failed,
    FailoverCore,
    HealthyPath,
    Heed,
    MetadataChange,
    Tick,
)
from failover_partitioner.core.statistics import ProducerStatistics
from failover_partitioner.core.topic import (
    TopicState,
    check_header_name,
    check_partition,
    check_timestamp,
    check_topic,
    legal_topic_name,
)

__all__ = [
    "CLIENT_PARTITIONER",
    "NO_METADATA",
    "NO_PARTITION",
    "NO_RIGHTS",
    "NO_TOPIC",
    "NO_TOPIC_YET",
    "Failed",
    "FailoverCore",
    "HealthyPath",
    "Heed",
    "MetadataChange",
    "ProducerStatistics",
    "Tick",
    "TopicState",
    "check_header_name",
    "check_partition",
    "check_timestamp",
    "check_topic",
    "legal_topic_name",
]
