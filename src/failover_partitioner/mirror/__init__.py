"""failover-mirror: MirrorMaker-style replication that commits only what was delivered.

Consumes from a source cluster with a consumer group, produces to a target cluster through the
failover producer (so degraded target partitions are routed around, not waited on), and commits
each source partition's offset only up to its first message not yet finally delivered.
"""

from __future__ import annotations

from ._clients import ConsumerLike, ProducerLike
from ._commits import CommitLedger, PartitionProgress, PartitionTracker
from ._config import MirrorOptions, TopicRouter, load_properties, parse_properties
from ._errors import MessageFailedError, MirrorConfigError, MirrorError
from ._gc import tune_gc
from ._mirror import Mirror
from ._provenance import (
    HEADER_SOURCE,
    HEADER_SOURCE_OFFSET,
    HEADER_SOURCE_PARTITION,
    HEADER_SOURCE_TOPIC,
)
from ._status import MirrorStatus, PartitionStatus, format_status
from ._topics import EXCLUDED_CONFIGS, TopicSyncError
from ._translate import PartitionTranslation, TranslateError, translate

__all__ = [
    "EXCLUDED_CONFIGS",
    "HEADER_SOURCE",
    "HEADER_SOURCE_OFFSET",
    "HEADER_SOURCE_PARTITION",
    "HEADER_SOURCE_TOPIC",
    "CommitLedger",
    "ConsumerLike",
    "MessageFailedError",
    "Mirror",
    "MirrorConfigError",
    "MirrorError",
    "MirrorOptions",
    "MirrorStatus",
    "PartitionProgress",
    "PartitionStatus",
    "PartitionTracker",
    "PartitionTranslation",
    "ProducerLike",
    "TopicRouter",
    "TopicSyncError",
    "TranslateError",
    "format_status",
    "load_properties",
    "parse_properties",
    "translate",
    "tune_gc",
]
