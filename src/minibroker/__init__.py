"""An embedded multi-broker Kafka cluster that speaks the real wire protocol."""

from __future__ import annotations

__all__: list[str] = []
