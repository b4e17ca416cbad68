"""The send path at the in-flight limit, bounded by ``produce_timeout_s``, and the check that
a call runs on the producer's own event loop.

At the limit a sender waits in the retry buffer (``AsyncRetryBuffer.enter``), woken by the
buffer's own outcome paths: nothing here keeps waiters or wakes them. Room comes when messages
reach their final outcome, and the failed messages waiting to retry are part of the in-flight
count, so their outcomes are much of what makes room: ``enter`` calls the producer's
``service`` (re-send those that are due) before each look, and ends each wait by the next
one's due time.

``stop()`` shuts the buffer's admission (``shut_admission``) before it does anything else:
every waiter wakes and is refused, with its message not accepted. A waiter that looked for room
alone would be accepted when the stop's flush made room, and nothing would send its message.
"""

from __future__ import annotations

import asyncio
from asyncio import get_running_loop
from collections.abc import Callable

from failover_partitioner.aio._lanes import Message
from failover_partitioner.errors import FailoverError, ProducerClosed, ProduceTimeout
from retry_buffer import AsyncRetryBuffer, BufferClosed, InflowTimeout

__all__ = ["enter_when_room", "wrong_loop"]


async def enter_when_room(
    buffer: AsyncRetryBuffer[Message],
    msg: Message,
    timeout_s: float,
    service: Callable[[], object],
) -> None:
    """Count ``msg`` in once there is room, calling ``service`` (re-send due failed messages)
    first each time; :class:`ProduceTimeout` after ``timeout_s`` seconds, and
    :class:`ProducerClosed` once ``stop()`` began (in both, the message not accepted)."""
    try:
        await buffer.enter(msg, timeout_s, service=service)
    except InflowTimeout:
        raise ProduceTimeout(
            msg.undelivered(None), limit=buffer.limit, timeout_s=timeout_s
        ) from None
    except BufferClosed:  # AdmissionShut: stop() shut admission
        raise ProducerClosed(
            f"send to {msg.topic!r}: stop() began while it waited for room; "
            "the message was not accepted"
        ) from None


def wrong_loop(
    loop: asyncio.AbstractEventLoop | None, name: str, call: str
) -> FailoverError | None:
    """The error for ``call`` made on another event loop than ``loop``, the producer's (None:
    not started, any will do), raised before anything is accepted or changed: asyncio objects
    belong to one loop, and one used from another thread corrupts it, or hangs."""
    if loop is None or get_running_loop() is loop:
        return None
    if loop.is_closed():
        return FailoverError(
            f"{call}() on {name}, whose event loop is closed: it can send nothing more. "
            "await stop() (from any loop) to get back the messages it still held"
        )
    if not loop.is_running():
        return FailoverError(
            f"{call}() on {name} from another event loop than the one that started it, "
            f"which is not running: call it on that loop (loop.run_until_complete(...)), "
            "or close that loop first and then await stop() to get back what it held"
        )
    return FailoverError(
        f"{call}() on {name} from another event loop than the one that started it: every "
        "call must run on the producer's loop; from another thread, use "
        f"asyncio.run_coroutine_threadsafe(producer.{call}(...), loop), with loop the one "
        "that ran start()"
    )
