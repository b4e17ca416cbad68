"""Stopping the asyncio producer: every task and client shut, every message accounted for.

The order matters: the flush comes first (bounded), then the background tasks are cancelled
and the refresher closed, then aiokafka stops, answering every batch it holds (within
``request_timeout_ms``), and the done-callbacks of those answers get their loop turns. Only
then is the retry buffer closed (by the caller, ``close_buffer``): what it still holds is handed
back, marked as possibly delivered where an attempt was out or ambiguous.

Interrupted (the stopping task cancelled: a second Ctrl-C ends ``asyncio.run``, which cancels
every task left), the wind-down cancels the background tasks and goes no further; the caller
closes the buffer at once and hands back what it holds (a message handed to aiokafka counting
as possibly delivered), then shuts the refresher and the inner client without waiting for
answers (``shut_at_once``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

from failover_partitioner._message import UndeliveredMessage
from failover_partitioner.aio._lanes import Lanes, Message
from failover_partitioner.aio._metadata import AioMetadataRefresher
from failover_partitioner.errors import ProducerClosed
from retry_buffer import AsyncRetryBuffer

__all__ = ["close_buffer", "shut_at_once", "wind_down"]

logger = logging.getLogger(__name__)


async def wind_down(
    *,
    buffer: AsyncRetryBuffer[Message],
    lanes: Lanes,
    tasks: Iterable[asyncio.Task[Any]],
    meta: AioMetadataRefresher | None,
    inner: Any,
    name: str,
    timeout: float | None,
) -> None:
    """Flush for up to ``timeout`` seconds, stop the lanes' tasks and ``tasks`` (read after
    the flush), the refresher and the inner client."""
    try:
        await buffer.wait_idle(timeout)
    finally:  # (interrupted too: nothing is sent once the buffer is closed)
        background: list[asyncio.Task[Any]] = [*lanes.tasks, *tasks]
        for task in background:
            task.cancel()
    await asyncio.gather(*background, return_exceptions=True)
    if meta is not None:
        await meta.close()
    # aiokafka answers every batch it holds before it stops (within request_timeout_ms).
    try:
        await inner.stop()
    except Exception:
        # What it still held is handed back (close_buffer), marked as possibly delivered.
        logger.exception("%s: the inner aiokafka producer failed to stop cleanly", name)
    if lanes.handed_over:
        # Their futures are resolved; the done-callbacks run on the next loop turns.
        lanes.answered.clear()
        await lanes.answered.wait(1.0)


async def shut_at_once(meta: AioMetadataRefresher | None, inner: Any, name: str) -> None:
    """After an interruption: the refresher and the inner client closed, their connections
    too, without waiting for answers (what they held was handed back), within a second."""
    try:
        if meta is not None:
            await meta.close()
        try:
            await asyncio.wait_for(inner.stop(), 1.0)
        finally:
            await inner.client.close()  # (closed already unless the stop was cut short)
    except Exception:
        logger.exception("%s: the inner aiokafka producer failed to close", name)


def close_buffer(buffer: AsyncRetryBuffer[Message]) -> list[UndeliveredMessage]:
    """Close ``buffer``: the messages it still held, as handed back; their futures raise
    :class:`ProducerClosed`."""
    undelivered = []
    for entry in buffer.close():
        msg = entry.item
        if entry.possibly_duplicated:
            msg.dup = True
        undelivered.append(msg.undelivered(entry.last_error))
        if not msg.future.done():
            msg.future.set_exception(ProducerClosed("stop() handed this message back undelivered"))
            msg.future.exception()  # the returned list is its outcome: no "never retrieved"
    return undelivered
