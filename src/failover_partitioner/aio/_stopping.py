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

Without its loop (the event loop that started the producer is closed: ``asyncio.run`` ended
with the producer running, or a Ctrl-C left ``loop.run_until_complete`` while it stopped and
the loop was closed), ``stop()`` from any loop takes that path at once, without awaiting: the
buffer closed and its messages handed back, the clients' sockets shut (``abandon_inner``).
Nothing of the dead loop can run again, so the futures it made may stay pending: the list is
their outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable, Iterable
from typing import Any

from failover_partitioner._calls import call_each
from failover_partitioner._config import check_positive_number
from failover_partitioner._message import UndeliveredMessage
from failover_partitioner.aio._client import abandon_inner
from failover_partitioner.aio._inflow import wrong_loop
from failover_partitioner.aio._lanes import Lanes, Message
from failover_partitioner.aio._metadata import AioMetadataRefresher
from failover_partitioner.errors import ProducerClosed
from failover_partitioner.metrics import ProducerMetrics
from retry_buffer import AsyncRetryBuffer

__all__ = [
    "AsyncDeadLetterHook",
    "Stopping",
    "close_buffer",
    "shut_at_once",
    "unclosed",
    "wind_down",
]

logger = logging.getLogger(__name__)

AsyncDeadLetterHook = Callable[[UndeliveredMessage, BaseException], None]
"""``hook(message, exc)``: called once, on the loop, for each message that failed finally."""

# The producer's states.
_NEW, _STARTING, _RUNNING, _CLOSING, _CLOSED = range(5)


def unclosed(name: str, in_flight: int, how: str) -> None:
    """Log, at ERROR, a producer left running (``how``) with accepted messages: its
    ``ResourceWarning`` is hidden by default, and those messages have no outcome yet."""
    if in_flight:
        logger.error(
            "%s %s with %d accepted message(s) without an outcome: call await stop() before "
            "its event loop ends (after that, stop() from any loop returns them)",
            name,
            how,
            in_flight,
        )


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
        if not lanes.loop.is_closed():  # (closed: this coroutine is being thrown away)
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
        future = msg.future
        if not future.done():
            # (RuntimeError: of a closed loop, and awaited there: the list is its outcome)
            with contextlib.suppress(RuntimeError):
                future.set_exception(ProducerClosed("stop() handed this message back undelivered"))
            if future.done():
                future.exception()  # the returned list is its outcome: no "never retrieved"
    return undelivered


class Stopping:
    """AsyncFailoverProducer's ``stop()``: the wind-down above, and what becomes of the
    messages it leaves (handed back, or given to the dead-letter hook)."""

    _state: int
    _name: str
    _loop: asyncio.AbstractEventLoop | None
    _inner: Any
    _buffer: AsyncRetryBuffer[Message]
    _lanes: Lanes | None
    _meta: AioMetadataRefresher | None
    _metrics: ProducerMetrics | None
    _first_fetch: dict[str, asyncio.Task[None]]
    _retry_task: asyncio.Task[None] | None
    _started: asyncio.Event
    _undelivered: list[UndeliveredMessage] | None
    _handed_back: bool
    _stopping: asyncio.Task[list[UndeliveredMessage]] | None
    _dead_letter: AsyncDeadLetterHook | None

    async def stop(
        self, timeout: float | None = 30.0, *, hand_back: bool = True
    ) -> list[UndeliveredMessage]:
        """Flush for up to ``timeout`` seconds, stop, and return every undelivered message.

        Their futures raise :class:`ProducerClosed`; the returned list is their outcome.
        ``possibly_delivered`` marks messages that may have been written anyway (still in
        flight at stop, or an ambiguous failure). Calling ``stop`` again returns the same list.

        ``hand_back=False`` (what leaving an ``async with`` block does, where nobody could
        take the list): the ``dead_letter`` hook gets each of them, with the
        :class:`ProducerClosed` of its future, as for a final failure, and the list is empty.
        It does so too with a list no earlier ``stop()`` handed to its caller (one cancelled
        while it waited), once.

        Called while ``start()`` runs, it waits for it, then stops. Senders waiting for room
        at the in-flight limit raise :class:`ProducerClosed` at once (not accepted).

        Once the producer's event loop is closed (it ended with the producer running), it may
        be called from any loop: it hands back at once what the producer held (the futures
        of that loop may stay pending: the list is their outcome). Otherwise it must run on
        the producer's loop.
        """
        if timeout is not None:
            timeout = check_positive_number("timeout", timeout, allow_zero=True)
        loop = self._loop
        if loop is not None and self._undelivered is None:
            if loop.is_closed():
                return self._stop_without_loop(hand_back)
            error = wrong_loop(loop, self._name, "stop")
            if error is not None:
                raise error
        if self._state == _STARTING:
            await self._started.wait()
        if self._undelivered is None:
            if self._state == _NEW:
                self._state = _CLOSED
                self._undelivered = []
                return []
            if self._stopping is None:
                assert loop is not None
                self._stopping = loop.create_task(self._stop(timeout, hand_back))
                # Admission ends now (after the task is made: if that fails, nothing changed):
                # senders waiting for room wake and are refused.
                self._state = _CLOSING
                self._buffer.shut_admission()
            # Shielded: if the caller is cancelled, stopping still finishes and nothing is lost
            # silently (the list is kept for the next stop() and logged).
            await asyncio.shield(self._stopping)
        return self._hand_over(hand_back)

    def _hand_over(self, hand_back: bool) -> list[UndeliveredMessage]:
        """stop()'s answer to its caller, once stopped: the list; with ``hand_back=False``, an
        empty one, the dead-letter hook having had the list if no caller took it before."""
        assert self._undelivered is not None
        if hand_back:
            self._handed_back = True
            return list(self._undelivered)
        if self._undelivered and not self._handed_back:
            # The stop() that made the list was cancelled before it could return it.
            undelivered, self._undelivered = self._undelivered, []
            self._let_go(undelivered)
        return []

    def _stop_without_loop(self, hand_back: bool) -> list[UndeliveredMessage]:
        """``stop()`` once the producer's loop is closed: the interrupted path, at once."""
        logger.warning(
            "%s: its event loop is closed; stopping without it (%d message(s) without an "
            "outcome are handed back, possibly delivered if aiokafka had them)",
            self._name,
            self._buffer.in_flight,
        )
        undelivered = close_buffer(self._buffer)  # (its futures: of the closed loop)
        self._closed(undelivered, hand_back)
        if self._inner is not None:
            abandon_inner(self._inner, self._name)
        return self._hand_over(hand_back)

    async def close(self, timeout: float | None = 30.0) -> list[UndeliveredMessage]:
        """Same as :meth:`stop`."""
        return await self.stop(timeout)

    async def _stop(self, timeout: float | None, hand_back: bool) -> list[UndeliveredMessage]:
        assert self._lanes is not None
        retry_task = () if self._retry_task is None else (self._retry_task,)
        try:
            await wind_down(
                buffer=self._buffer,
                lanes=self._lanes,
                tasks=itertools.chain(self._first_fetch.values(), retry_task),
                meta=self._meta,
                inner=self._inner,
                name=self._name,
                timeout=timeout,
            )
        except BaseException as exc:
            # Interrupted (this task cancelled: a second Ctrl-C ends asyncio.run): what is left
            # is handed back or given to the hook, and logged, first; then the clients are
            # shut and the interruption goes on. A later stop() returns the list.
            if self._undelivered is None:  # (else a stop() without the loop did it)
                self._closed(close_buffer(self._buffer), hand_back)
            if not isinstance(exc, GeneratorExit):  # (the task of a closed loop, discarded)
                await shut_at_once(self._meta, self._inner, self._name)
            raise
        return self._closed(close_buffer(self._buffer), hand_back)

    def _closed(
        self, undelivered: list[UndeliveredMessage], hand_back: bool
    ) -> list[UndeliveredMessage]:
        if self._metrics is not None:
            self._metrics.close()
        self._state = _CLOSED
        if undelivered and not hand_back:
            self._undelivered = []
            self._let_go(undelivered)
            return []
        if undelivered:
            logger.warning(
                "%s stopped with %d undelivered message(s), returned by stop()",
                self._name,
                len(undelivered),
            )
        self._undelivered = undelivered
        return undelivered

    def _let_go(self, undelivered: list[UndeliveredMessage]) -> None:
        """``stop(hand_back=False)``: each message to the dead-letter hook, if there is one."""
        logger.warning(
            "%s stopped with %d undelivered message(s), given to the dead_letter hook (%s)",
            self._name,
            len(undelivered),
            "set" if self._dead_letter is not None else "none set; their futures raise",
        )
        closed = ProducerClosed(f"{self._name} stopped before this message was delivered")
        first = call_each(undelivered, lambda message: self._to_dead_letter(message, closed))
        if first is not None:
            raise first

    def _to_dead_letter(self, message: UndeliveredMessage, exc: BaseException) -> None:
        """The dead-letter hook, if there is one, gets ``message``; if it raises, that is
        logged and the producer goes on."""
        hook = self._dead_letter
        if hook is not None:
            try:
                hook(message, exc)
            except Exception:
                logger.exception("dead_letter hook raised for a message to %s", message.topic)
