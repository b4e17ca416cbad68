"""Bounded failed-message buffer, inflow counter and merger (pure Python, no Kafka imports)."""

from __future__ import annotations

__all__: list[str] = []
