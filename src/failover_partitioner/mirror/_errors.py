"""The mirror's exceptions."""

from __future__ import annotations

from failover_partitioner.errors import ConfigError, FailoverError

__all__ = ["MessageFailedError", "MirrorConfigError", "MirrorError"]


class MirrorError(FailoverError):
    """Root of the mirror's errors."""


class MirrorConfigError(MirrorError, ConfigError):
    """An option, flag or client setting the mirror cannot run with."""


class MessageFailedError(MirrorError):
    """A source message could not be delivered to the target and no dead-letter topic took it.

    The mirror stopped and committed every source partition up to, not past, the failed message,
    so a restart resumes with it.
    """

    def __init__(
        self,
        message: str,
        *,
        topic: str,
        partition: int,
        offset: int,
        target_topic: str,
        error: str,
    ) -> None:
        super().__init__(message)
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.target_topic = target_topic
        self.error = error
