"""The exceptions minibroker raises to its Python callers (never sent over the wire)."""

from __future__ import annotations

__all__ = [
    "BrokerStateError",
    "ClusterClosedError",
    "ConfigError",
    "MinibrokerError",
    "TopicError",
]


class MinibrokerError(Exception):
    """Root of every exception minibroker raises."""


class ConfigError(MinibrokerError, ValueError):
    """A broker or topic setting is unknown or has a value Kafka would refuse."""


class TopicError(MinibrokerError):
    """A topic operation failed; ``error_code`` is the Kafka error a client would have seen."""

    def __init__(self, message: str, *, error_code: int) -> None:
        super().__init__(message)
        self.error_code = error_code


class BrokerStateError(MinibrokerError):
    """A fault was asked of a broker that does not exist or is not in the required state."""


class ClusterClosedError(MinibrokerError):
    """The cluster is not running (not started yet, or already closed)."""
