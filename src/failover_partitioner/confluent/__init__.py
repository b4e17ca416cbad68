"""The confluent-kafka shell: ``FailoverProducer`` (``producer``). Its healthy path forwards to
the client; the decisions are the core's (:mod:`failover_partitioner.core`).
"""

from __future__ import annotations

from failover_partitioner.confluent.producer import (
    DeadLetterHook,
    DeliveryCallback,
    FailoverProducer,
    ProducerStatistics,
)

__all__ = ["DeadLetterHook", "DeliveryCallback", "FailoverProducer", "ProducerStatistics"]
