"""Kafka producers that route around partitions below min.insync.replicas and lose nothing.

Layout: ``core/`` decides (routing, failures, quarantine, retries; no client, thread or event
loop), over the pure ``health``, ``choose``, ``quarantine`` and ``errors``; ``confluent/``
(``FailoverProducer``) and ``aio/`` (``AsyncFailoverProducer``) are its shells; ``metadata/``
refreshes; ``mirror/`` and ``spark/`` produce through ``FailoverProducer``; ``demo/`` is the
``failover-demo`` command (never imported by the library).
"""

from __future__ import annotations

from failover_partitioner._config import FailoverConfigWarning
from failover_partitioner._message import DeliveryGroup, DeliveryReport, UndeliveredMessage
from failover_partitioner._options import FailoverOptions
from failover_partitioner.aio import AsyncFailoverProducer
from failover_partitioner.choose import NO_PARTITION, ChoiceOptions, PartitionChooser
from failover_partitioner.confluent import FailoverProducer, ProducerStatistics
from failover_partitioner.errors import (
    AuthenticationFailed,
    BatchRefused,
    ConfigError,
    ErrorClass,
    FailoverError,
    MetadataUnavailable,
    NoUsablePartition,
    ProducerClosed,
    ProduceTimeout,
    classify,
)
from failover_partitioner.health import (
    PartitionHealth,
    PartitionMetadata,
    PartitionView,
    TopicMetadata,
    TopicView,
)
from failover_partitioner.metrics import MetricsSnapshot
from failover_partitioner.quarantine import Quarantine, QuarantinePolicy

__all__ = [
    "NO_PARTITION",
    "AsyncFailoverProducer",
    "AuthenticationFailed",
    "BatchRefused",
    "ChoiceOptions",
    "ConfigError",
    "DeliveryGroup",
    "DeliveryReport",
    "ErrorClass",
    "FailoverConfigWarning",
    "FailoverError",
    "FailoverOptions",
    "FailoverProducer",
    "MetadataUnavailable",
    "MetricsSnapshot",
    "NoUsablePartition",
    "PartitionChooser",
    "PartitionHealth",
    "PartitionMetadata",
    "PartitionView",
    "ProduceTimeout",
    "ProducerClosed",
    "ProducerStatistics",
    "Quarantine",
    "QuarantinePolicy",
    "TopicMetadata",
    "TopicView",
    "UndeliveredMessage",
    "classify",
]
