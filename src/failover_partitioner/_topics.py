"""Moved to :mod:`failover_partitioner.core.topic`; kept for old imports."""

from __future__ import annotations

from failover_partitioner.core.topic import TopicState, check_topic, legal_topic_name

__all__ = ["TopicState", "check_topic", "legal_topic_name"]
