"""Kafka producers that route around partitions below min.insync.replicas and lose nothing.

``FailoverProducer`` wraps confluent-kafka; the pure core (``health``, ``choose``,
``quarantine``, ``errors``) is client-agnostic and also serves the asyncio producer.
"""

from __future__ import annotations

from failover_partitioner._config import FailoverConfigWarning
from failover_partitioner._message import DeliveryGroup, DeliveryReport, UndeliveredMessage

# The asyncio producer (aiokafka), from aio.py.
from failover_partitioner.aio import AsyncFailoverProducer
from failover_partitioner.choose import NO_PARTITION, ChoiceOptions, PartitionChooser
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
from failover_partitioner.producer import FailoverProducer, ProducerStatistics
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
