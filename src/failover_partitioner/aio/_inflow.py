"""The send path at the in-flight limit: waiting for room, bounded by ``produce_timeout_s``.

Room comes when messages reach their final outcome. The failed messages waiting to retry are
part of the in-flight count, so their outcomes are much of what makes room: each look re-sends
those that are due, and each wait ends at the next one's due time.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from failover_partitioner.aio._lanes import Message
from failover_partitioner.errors import ProducerClosed, ProduceTimeout
from retry_buffer import AsyncRetryBuffer, BufferClosed, InflowTimeout

__all__ = ["admit_waiting"]


async def admit_waiting(
    buffer: AsyncRetryBuffer[Message],
    msg: Message,
    timeout_s: float,
    service: Callable[[], object],
) -> None:
    """Count ``msg`` in once there is room, calling ``service`` (re-send due failed messages)
    first each time; :class:`ProduceTimeout` after ``timeout_s`` seconds (the message not
    accepted), :class:`ProducerClosed` if the producer stops meanwhile."""
    deadline = time.monotonic() + timeout_s
    while True:
        service()
        try:
            if buffer.try_enter(msg):
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ProduceTimeout(msg.undelivered(None), limit=buffer.limit, timeout_s=timeout_s)
            due_in = buffer.next_due_in()
            wait = remaining if due_in is None else min(remaining, max(due_in, 0.001))
            await buffer.enter(msg, timeout=wait)
            return
        except InflowTimeout:
            continue
        except BufferClosed:
            raise ProducerClosed(f"send to {msg.topic!r}: the producer was stopped") from None
