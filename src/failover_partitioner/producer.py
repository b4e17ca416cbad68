"""Moved to :mod:`failover_partitioner.confluent`; this path is kept for existing imports."""

from __future__ import annotations

from failover_partitioner.confluent.producer import (
    DeadLetterHook,
    DeliveryCallback,
    FailoverProducer,
    ProducerStatistics,
)

__all__ = ["DeadLetterHook", "DeliveryCallback", "FailoverProducer", "ProducerStatistics"]
