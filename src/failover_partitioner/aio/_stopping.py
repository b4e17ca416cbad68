"""Stopping the asyncio producer: every task and client shut, every message accounted for.

The order matters: the flush comes first (bounded), then the background tasks are cancelled
and the refresher closed, then aiokafka stops, answering every batch it holds (within
``request_timeout_ms``), and the done-callbacks of those answers get their loop turns. Only
then is the retry buffer closed: what it still holds is handed back, marked as possibly
delivered where an attempt was out or ambiguous.
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
from retry_buffer import AsyncRetryBuffer, Entry

__all__ = ["wind_down"]

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
) -> list[UndeliveredMessage]:
    """Flush for up to ``timeout`` seconds, stop the lanes' tasks and ``tasks`` (read after
    the flush), the refresher and the inner client, and return what was not delivered."""
    await buffer.wait_idle(timeout)
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
        # What it still held is handed back below, marked as possibly delivered.
        logger.exception("%s: the inner aiokafka producer failed to stop cleanly", name)
    if lanes.handed_over:
        # Their futures are resolved; the done-callbacks run on the next loop turns.
        lanes.answered.clear()
        await lanes.answered.wait(1.0)
    return _hand_back(buffer.close())


def _hand_back(left: Iterable[Entry[Message]]) -> list[UndeliveredMessage]:
    """The messages the closed buffer gave back; their futures raise :class:`ProducerClosed`."""
    undelivered = []
    for entry in left:
        msg = entry.item
        if entry.possibly_duplicated:
            msg.dup = True
        undelivered.append(msg.undelivered(entry.last_error))
        if not msg.future.done():
            msg.future.set_exception(ProducerClosed("stop() handed this message back undelivered"))
            msg.future.exception()  # the returned list is its outcome: no "never retrieved"
    return undelivered
