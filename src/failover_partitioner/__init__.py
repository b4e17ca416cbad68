"""Kafka producers that route around partitions below min.insync.replicas and lose nothing."""

from __future__ import annotations

__all__: list[str] = []
