"""The asyncio shell: ``AsyncFailoverProducer`` on aiokafka (``producer``), with its adapters:
``_client`` (the inner aiokafka producer, answering at the first broker reply), ``_errors``
(aiokafka's errors to Kafka's codes), ``_metadata`` (the refresh task), ``_settings`` and
``_wake``. The decisions are the core's (:mod:`failover_partitioner.core`).
"""

from __future__ import annotations

from failover_partitioner.aio.producer import AsyncDeadLetterHook, AsyncFailoverProducer, HeadersIn

__all__ = ["AsyncDeadLetterHook", "AsyncFailoverProducer", "HeadersIn"]
