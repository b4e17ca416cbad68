"""The asyncio shell: ``AsyncFailoverProducer`` on aiokafka (``producer``), with its adapters:
``_client`` (the inner aiokafka producer, answering at the first broker reply), ``_errors``
(aiokafka's errors to Kafka's codes), ``_inflow`` (``send`` at the in-flight limit), ``_lanes``
(per-partition batches), ``_metadata`` (the refresh task), ``_settings``, ``_stopping`` (what
``stop`` shuts and hands back) and ``_wake``. The decisions are the core's
(:mod:`failover_partitioner.core`).
"""

from __future__ import annotations

from failover_partitioner.aio.producer import AsyncDeadLetterHook, AsyncFailoverProducer, HeadersIn

__all__ = ["AsyncDeadLetterHook", "AsyncFailoverProducer", "HeadersIn"]
