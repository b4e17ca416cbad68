"""Bounded failed-message buffer, inflow counter and merger (pure Python, no Kafka imports).

Count messages in when they are admitted and out when they are done (delivered, finally
failed, or handed back by ``close()``); while the difference is at the limit, admit no more
(and none at all once ``shut_admission()`` was called: what is in flight still finishes).
Failed messages wait in a buffer that, being part of that count, can never overflow, and a
merger hands the producer failed-and-due messages before fresh ones. See docs/retry_buffer.md.
"""

from __future__ import annotations

from ._aio import AsyncMerger, AsyncRetryBuffer
from ._errors import AdmissionShut, BufferClosed, InflowTimeout, InvalidArgument, RetryBufferError
from ._model import Entry, RetryPolicy, Statistics
from ._threaded import Merger, RetryBuffer

__all__ = [
    "AdmissionShut",
    "AsyncMerger",
    "AsyncRetryBuffer",
    "BufferClosed",
    "Entry",
    "InflowTimeout",
    "InvalidArgument",
    "Merger",
    "RetryBuffer",
    "RetryBufferError",
    "RetryPolicy",
    "Statistics",
]
