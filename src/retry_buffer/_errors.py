"""The package's exceptions: one root, a subclass per thing a caller may want to catch."""

from __future__ import annotations

__all__ = ["AdmissionShut", "BufferClosed", "InflowTimeout", "InvalidArgument", "RetryBufferError"]


class RetryBufferError(Exception):
    """Root of every error this package raises, including misuse such as delivering twice."""


class InvalidArgument(RetryBufferError, ValueError):
    """A constructor or call argument is out of range; the message names the value."""


class InflowTimeout(RetryBufferError, TimeoutError):
    """Admission waited ``timeout`` seconds while in-flight messages were at the limit."""

    def __init__(self, *, limit: int, timeout_s: float) -> None:
        super().__init__(
            f"no room to admit a message: {limit} messages are in flight (the limit) and none "
            f"finished within timeout={timeout_s!r}s; raise max_in_flight, wait longer, or "
            "deliver/fail the outstanding ones"
        )
        self.limit = limit
        self.timeout_s = timeout_s


class BufferClosed(RetryBufferError):
    """The buffer was closed; its unfinished entries were handed back by ``close()``."""


class AdmissionShut(BufferClosed):
    """Admission was shut (``shut_admission()``): the message was not admitted, and none will
    be. Unlike after ``close()``, the entries in flight are still there and still get their
    outcomes; a ``BufferClosed`` because, to a sender, the buffer is closed to new messages."""
