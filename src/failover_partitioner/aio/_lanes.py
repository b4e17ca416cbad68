"""The asyncio shell's sending side: messages, per-partition batches, and the tasks that hand
them to aiokafka. No decision is made here: where a message goes is the core's answer."""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from collections.abc import Callable
from typing import Any

from aiokafka.structs import (  # type: ignore[import-untyped,unused-ignore]  # no py.typed
    RecordMetadata,
    TopicPartition,
)

from failover_partitioner._message import UndeliveredMessage
from failover_partitioner.aio._wake import Wakeup
from retry_buffer import AsyncRetryBuffer, Entry

__all__ = ["Batch", "Headers", "Lane", "Lanes", "Message"]

Headers = list[tuple[str, bytes | None]]


class Message(Entry["Message"]):
    """One accepted message and where its current attempt stands; its own retry-buffer entry
    (``AsyncRetryBuffer.try_enter``: one object per message, not a message and an entry)."""

    __slots__ = (
        "dup",
        "future",
        "headers",
        "key",
        "partition",
        "sent",
        "solo",
        "timestamp",
        "topic",
        "tries",
        "value",
    )

    def __init__(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        headers: Headers | None,
        timestamp: int | None,
        future: asyncio.Future[Any],
    ) -> None:
        # The entry's own fields are the buffer's to set (try_enter).
        self.topic = topic
        self.value = value
        self.key = key
        self.headers = headers
        self.timestamp = timestamp
        self.future = future
        self.partition = -1
        self.tries = 0  # attempts handed to aiokafka (the entry's attempts count the buffer's)
        self.dup = False  # an earlier attempt may have been written
        self.sent = False  # handed to aiokafka, no answer yet
        self.solo = False  # must travel in a batch of its own

    @property
    def item(self) -> Message:
        return self

    def __repr__(self) -> str:  # (Entry's shows its item: this one)
        return (
            f"Message(topic={self.topic!r}, partition={self.partition}, tries={self.tries}, "
            f"key={self.key!r}, value={self.value!r})"
        )

    def undelivered(self, last_error: object) -> UndeliveredMessage:
        return UndeliveredMessage(
            topic=self.topic,
            value=self.value,
            key=self.key,
            headers=None if self.headers is None else tuple(self.headers),
            timestamp=self.timestamp,
            attempts=self.tries,
            last_error=last_error,
            possibly_delivered=self.dup or self.sent,
        )


class Batch:
    __slots__ = ("builder", "lane", "messages")

    def __init__(self, lane: Lane, builder: Any) -> None:
        self.lane = lane
        self.builder = builder
        self.messages: list[Message] = []


class Lane:
    """One partition: its open batch, closed batches waiting, and whether its task runs."""

    __slots__ = ("busy", "open", "partition", "ready", "topic", "tp")

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.tp = TopicPartition(topic, partition)
        self.open: Batch | None = None
        self.ready: deque[Batch] = deque()
        self.busy = False

    def take(self) -> Batch | None:
        if self.ready:
            return self.ready.popleft()
        batch = self.open
        if batch is not None and batch.messages:
            self.open = None
            return batch
        return None


class Lanes:
    """Every partition's open batch and the task handing its closed batches to aiokafka, one
    at a time, the next once the one before is answered, so a stalled partition holds up no
    other and what waits for a partition stays in its lane (``withdraw``).
    A batch's answer delivers its messages (the buffer wakes the senders waiting for room); a
    failure goes to ``failed`` (the producer's, which asks the core). ``backlog``: the caller
    outruns a partition (closed batches pile up)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        inner: Any,
        buffer: AsyncRetryBuffer[Message],
        failed: Callable[[Batch, BaseException], None],
    ) -> None:
        self.loop = loop
        self._inner = inner
        self._buffer = buffer
        self._failed = failed
        self._lanes: dict[str, list[Lane]] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.handed_over: set[Batch] = set()
        self.answered = Wakeup()
        self.backlog = False

    def append(self, topic: str, partition: int, msg: Message) -> None:
        """Add ``msg`` to ``topic`` [``partition``]'s open batch (its lane made on first use)."""
        lanes = self._lanes.get(topic)
        if lanes is None:
            lanes = self._lanes[topic] = []
        while len(lanes) <= partition:
            lanes.append(Lane(topic, len(lanes)))
        lane = lanes[partition]
        batch = lane.open
        if batch is not None and msg.solo and batch.messages:
            lane.ready.append(batch)
            batch = None
        if batch is None:
            batch = lane.open = Batch(lane, self._inner.create_batch())
        md = batch.builder.append(
            timestamp=msg.timestamp, key=msg.key, value=msg.value, headers=msg.headers
        )
        if md is None:  # full: close it and start another (a first record always fits)
            lane.ready.append(batch)
            if len(lane.ready) > 1:
                self.backlog = True
            batch = lane.open = Batch(lane, self._inner.create_batch())
            md = batch.builder.append(
                timestamp=msg.timestamp, key=msg.key, value=msg.value, headers=msg.headers
            )
        if msg.timestamp is None:
            msg.timestamp = md.timestamp  # every later attempt keeps the first CreateTime
        batch.messages.append(msg)
        if msg.solo:
            lane.ready.append(batch)
            lane.open = None
        if not lane.busy:
            lane.busy = True
            task = self.loop.create_task(self._pump(lane))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    def withdraw(self, topic: str, partition: int) -> list[Message]:
        """Take back the messages of ``topic`` [``partition``] not yet handed to aiokafka (its
        closed and open batches), in order: the partition was just taken out of use, and a
        leader that held one write would hold these too, each batch a request timeout. Never
        sent there, they are placed again as first attempts (no reroute counted)."""
        lanes = self._lanes.get(topic)
        if lanes is None or partition >= len(lanes):
            return []
        lane = lanes[partition]
        batches = [*lane.ready, *([lane.open] if lane.open is not None else [])]
        lane.ready.clear()
        lane.open = None
        withdrawn = [m for batch in batches for m in batch.messages]
        for m in withdrawn:
            m.partition = -1
        return withdrawn

    async def _pump(self, lane: Lane) -> None:
        """Hand ``lane``'s batches to aiokafka one at a time, each after the last one's answer."""
        send_batch, cluster = self._inner.send_batch, self._inner.client.cluster
        try:
            while True:
                batch = lane.take()
                if batch is None:
                    return
                if len(lane.ready) < 2:
                    self.backlog = False
                for m in batch.messages:
                    m.sent = True
                    m.tries += 1
                try:
                    known = cluster.partitions_for_topic(lane.topic)
                    if known is None or lane.partition not in known:
                        # Newer than aiokafka's metadata (the producer's own fetch saw it
                        # first): aiokafka refuses it ("Unrecognized partition") until it
                        # has fetched its own again, and the partition would be struck.
                        await self._inner.client.force_metadata_update()
                    future = await send_batch(batch.builder, lane.topic, partition=lane.partition)
                except asyncio.CancelledError:
                    for m in batch.messages:
                        m.sent = False  # never reached aiokafka: stop() hands it back
                        m.tries -= 1
                    raise
                except Exception as exc:
                    self._failed(batch, exc)
                    continue
                self.handed_over.add(batch)
                future.add_done_callback(functools.partial(self._batch_done, batch))
                # The next batch waits for this one's answer: if the partition is taken out
                # of use meanwhile, what waits is still in the lane and goes elsewhere
                # (withdraw), instead of being held a request timeout in aiokafka's queue.
                await asyncio.wait((future,))
        finally:
            lane.busy = False

    # -- answers (done-callbacks: they report, they never send) -------------------------------

    def _batch_done(self, batch: Batch, future: asyncio.Future[Any]) -> None:
        handed_over = self.handed_over
        handed_over.discard(batch)
        if not handed_over:
            self.answered.set()
        if self._buffer.closed:
            return  # stop() already handed these messages back
        if future.cancelled():
            self._failed(batch, asyncio.CancelledError())
            return
        exc = future.exception()
        if exc is not None:
            self._failed(batch, exc)
            return
        md = future.result()
        delivered = self._buffer.delivered
        lane = batch.lane
        if md is None:  # acks=0: no offsets
            for m in batch.messages:
                m.sent = False
                delivered(m)
                if not m.future.done():
                    m.future.set_result(None)
            return
        base, ts, ts_type, log_start = (
            md.offset,
            md.timestamp,
            md.timestamp_type,
            md.log_start_offset,
        )
        topic, partition, tp = lane.topic, lane.partition, lane.tp
        for i, m in enumerate(batch.messages):
            m.sent = False
            delivered(m)
            f = m.future
            if not f.done():
                f.set_result(
                    RecordMetadata(
                        topic,
                        partition,
                        tp,
                        base + i,
                        m.timestamp if ts == -1 else ts,
                        ts_type,
                        log_start,
                    )
                )
