"""The data path: Produce, Fetch (long poll) and ListOffsets.

Batches travel as bytes: Produce checks each partition's one batch as Kafka does (header, CRC,
and the framing of its records, ``_batch``) and hands it to the partition leader, which patches
offsets in place; Fetch returns stored batches joined into one records field, cut at its byte
limits as Kafka cuts them.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from minibroker._batch import BatchError, parse_batch
from minibroker.controller import INTERNAL_TOPICS
from minibroker.replication import Partition
from minibroker.server import FetchWaiter

if TYPE_CHECKING:
    from minibroker.server import RequestContext

__all__ = ["handle_fetch", "handle_list_offsets", "handle_produce"]

_NONE = ErrorCode.none
_PRODUCE_RESPONSE_LEADER_HINT = 10  # KIP-951 current_leader in Produce responses from v10
# and in Fetch responses from v16 (Kafka's KafkaApis; earlier versions have the field unset).
_FETCH_RESPONSE_LEADER_HINT = 16


class _ProduceReply:
    """Collects a Produce request's partition outcomes; answers when the last one is known."""

    __slots__ = ("ctx", "pending", "topics")

    def __init__(self, ctx: RequestContext, topics: list[dict[str, Any]]) -> None:
        self.ctx = ctx
        self.topics = topics
        self.pending = 0

    def waiter(self, entry: dict[str, Any]) -> Any:
        def done(error: ErrorCode) -> None:
            if error != _NONE:
                entry["error_code"] = error
                entry["base_offset"] = -1
            self.pending -= 1
            if self.pending == 0:
                self.send()

        return done

    def send(self) -> None:
        if not self.ctx.closed:
            self.ctx.respond({"responses": self.topics, "throttle_time": 0})


def _leader_hint(partition: Partition) -> dict[str, int]:
    return {"leader_id": partition.leader, "leader_epoch": partition.leader_epoch}


def handle_produce(ctx: RequestContext, request: Any) -> None:
    controller = ctx.cluster.controller
    broker_id = ctx.broker_id
    acks = request.acks
    now = time.monotonic()
    deadline = now + request.timeout.total_seconds()
    topics: list[dict[str, Any]] = []
    reply = _ProduceReply(ctx, topics)
    failed = False
    for topic_data in request.topic_data:
        topic = controller.topics.get(topic_data.name)
        entries: list[dict[str, Any]] = []
        topics.append({"name": topic_data.name, "partition_responses": entries})
        for data in topic_data.partition_data:
            entry: dict[str, Any] = {
                "index": data.index,
                "error_code": _NONE,
                "base_offset": -1,
                "log_start_offset": -1,
                "record_errors": (),
            }
            entries.append(entry)
            if acks not in (0, 1, -1):
                entry["error_code"] = ErrorCode.invalid_required_acks
                failed = True
                continue
            if topic_data.name in INTERNAL_TOPICS:
                # Kafka's ReplicaManager.appendRecords: only the broker itself writes them.
                entry["error_code"] = ErrorCode.invalid_topic_exception
                entry["error_message"] = f"Cannot append to internal topic {topic_data.name}"
                failed = True
                continue
            if topic is None or not 0 <= data.index < len(topic.partitions):
                entry["error_code"] = ErrorCode.unknown_topic_or_partition
                failed = True
                continue
            partition = topic.partitions[data.index]
            if partition.leader != broker_id:
                entry["error_code"] = ErrorCode.not_leader_or_follower
                if ctx.api_version >= _PRODUCE_RESPONSE_LEADER_HINT and partition.leader >= 0:
                    entry["current_leader"] = _leader_hint(partition)
                failed = True
                continue
            header = parse_batch(data.records, topic.max_message_bytes)
            if isinstance(header, BatchError):
                entry["error_code"] = ErrorCode(header.error_code)
                entry["error_message"] = header.message
                failed = True
                continue
            batch = bytearray(memoryview(data.records)[: header.size])
            result = partition.append(batch, header, acks=acks, now=now)
            if result.error != _NONE:
                entry["error_code"] = result.error
                entry["error_message"] = result.message
                failed = True
                continue
            entry["base_offset"] = result.base_offset
            entry["log_start_offset"] = partition.leader_log.log_start_offset
            if acks == -1:
                outcome = partition.await_commit(result.next_offset, deadline, reply.waiter(entry))
                if outcome is None:
                    reply.pending += 1
                elif outcome != _NONE:
                    entry["error_code"] = outcome
    if acks == 0:
        ctx.no_response()
        if failed:
            # Kafka closes the connection so an acks=0 producer notices and refreshes metadata
            ctx.close_connection("acks=0 produce failed on at least one partition")
        return
    if reply.pending == 0:
        reply.send()


def _epoch_error(requested: int, partition: Partition) -> ErrorCode | None:
    if requested < 0 or requested == partition.leader_epoch:
        return None
    if requested < partition.leader_epoch:
        return ErrorCode.fenced_leader_epoch
    return ErrorCode.unknown_leader_epoch


def _leader_error(partition: Partition, broker_id: int, requested_epoch: int) -> ErrorCode | None:
    """Why ``broker_id`` may not serve a client's Fetch or ListOffsets of ``partition``, as Kafka
    decides it: a broker with no replica answers NOT_LEADER_OR_FOLLOWER
    (``ReplicaManager.getPartitionOrError``); a replica checks the client's current leader epoch
    first and leadership after (``Partition.localLogWithEpochOrThrow``), so a follower answers
    FENCED_LEADER_EPOCH or UNKNOWN_LEADER_EPOCH to an epoch that is not its own."""
    if broker_id not in partition.replicas:
        return ErrorCode.not_leader_or_follower
    epoch_error = _epoch_error(requested_epoch, partition)
    if epoch_error is not None:
        return epoch_error
    if partition.leader != broker_id:
        return ErrorCode.not_leader_or_follower
    return None


class _Fetch:
    """One Fetch request, answered at once or when data arrives or max wait passes."""

    def __init__(self, ctx: RequestContext, request: Any) -> None:
        self.ctx = ctx
        self.request = request
        self.min_bytes = request.min_bytes
        self.max_wait_s = request.max_wait.total_seconds()
        self.waiter: FetchWaiter | None = None
        self.watched: list[Partition] = []
        self.timer: Any = None
        self.wake_scheduled = False
        # What compute() has left of the request's max_bytes, and whether the next partition with
        # data may still exceed it.
        self.remaining = 0
        self.min_one = True

    def compute(self) -> tuple[dict[str, Any], int, bool]:
        controller = self.ctx.cluster.controller
        request = self.request
        read_committed = getattr(request, "isolation_level", 0) == 1
        # Kafka's ReplicaManager.readFromLog: partitions are read in request order, each up to
        # min(partition_max_bytes, what is left of max_bytes); the first batch of the first
        # partition with data comes whole even past both limits (KIP-74), and from then on the
        # limits hold, a partition whose first batch does not fit getting nothing.
        self.remaining = max(getattr(request, "max_bytes", 2**31 - 1), 0)
        self.min_one = True
        total = 0
        errors = False
        responses = []
        self.watched = []
        for fetch_topic in request.topics:
            topic = controller.topics.get(fetch_topic.topic)
            entries = []
            for fetch_partition in fetch_topic.partitions:
                entry: dict[str, Any] = {
                    "partition_index": fetch_partition.partition,
                    "error_code": _NONE,
                    "high_watermark": -1,
                    "last_stable_offset": -1,
                    "log_start_offset": -1,
                    "aborted_transactions": [] if read_committed else None,
                    "preferred_read_replica": -1,
                    "records": b"",
                }
                entries.append(entry)
                index = fetch_partition.partition
                if topic is None or not 0 <= index < len(topic.partitions):
                    entry["error_code"] = ErrorCode.unknown_topic_or_partition
                    errors = True
                    continue
                size = self._read(entry, topic.partitions[index], fetch_partition)
                if size < 0:
                    errors = True
                total += max(size, 0)
            responses.append({"topic": fetch_topic.topic, "partitions": entries})
        values = {"throttle_time": 0, "error_code": _NONE, "session_id": 0, "responses": responses}
        return values, total, errors

    def _read(self, entry: dict[str, Any], partition: Partition, fetch_partition: Any) -> int:
        """Fill one partition's ``entry``; the bytes of records it got, or -1 on an error."""
        error = _leader_error(
            partition, self.ctx.broker_id, getattr(fetch_partition, "current_leader_epoch", -1)
        )
        if error is not None:
            entry["error_code"] = error
            if (
                self.ctx.api_version >= _FETCH_RESPONSE_LEADER_HINT
                and error in (ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch)
                and partition.leader >= 0
            ):
                entry["current_leader"] = _leader_hint(partition)
            return -1
        log = partition.leader_log
        high_watermark = log.high_watermark
        # No transactions, so the last stable offset is the high watermark.
        entry["high_watermark"] = high_watermark
        entry["last_stable_offset"] = high_watermark
        entry["log_start_offset"] = log.log_start_offset
        offset = fetch_partition.fetch_offset
        if offset < log.log_start_offset or offset > log.log_end_offset:
            entry["error_code"] = ErrorCode.offset_out_of_range
            return -1
        self.watched.append(partition)
        limit = min(fetch_partition.partition_max_bytes, self.remaining)
        chunks = log.read(offset, limit, high_watermark, min_one=self.min_one)
        if not chunks:
            return 0
        records = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        entry["records"] = records
        self.remaining = max(self.remaining - len(records), 0)
        self.min_one = False
        return len(records)

    def start(self) -> None:
        values, size, errors = self.compute()
        if errors or size >= self.min_bytes or self.max_wait_s <= 0:
            self.ctx.respond(values)
            return
        if not self.watched:
            self.ctx.respond(values)
            return
        cluster = self.ctx.cluster
        self.waiter = FetchWaiter(self.wake)
        cluster.watch(self.watched, self.waiter)
        self.timer = cluster.loop.call_later(self.max_wait_s, self.finish)

    def wake(self) -> None:
        if not self.wake_scheduled:
            self.wake_scheduled = True
            self.ctx.cluster.loop.call_soon(self.retry)

    def retry(self) -> None:
        self.wake_scheduled = False
        if self.waiter is None:
            return
        if self.ctx.closed:
            self.cleanup()
            return
        values, size, errors = self.compute()
        if errors or size >= self.min_bytes:
            self.cleanup()
            self.ctx.respond(values)

    def finish(self) -> None:
        if self.waiter is None:
            return
        self.cleanup()
        if not self.ctx.closed:
            self.ctx.respond(self.compute()[0])

    def cleanup(self) -> None:
        if self.waiter is not None:
            self.ctx.cluster.unwatch(self.watched, self.waiter)
            self.waiter = None
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


def handle_fetch(ctx: RequestContext, request: Any) -> None:
    session_id = getattr(request, "session_id", 0)
    if session_id != 0:
        # minibroker never creates fetch sessions (KIP-227 lets a broker decline), so any id
        # a client sends is one we do not know.
        ctx.respond(
            {
                "throttle_time": 0,
                "error_code": ErrorCode.fetch_session_id_not_found,
                "session_id": 0,
                "responses": [],
            }
        )
        return
    _Fetch(ctx, request).start()


_EARLIEST, _LATEST, _MAX_TIMESTAMP, _EARLIEST_LOCAL = -2, -1, -3, -4


def handle_list_offsets(ctx: RequestContext, request: Any) -> None:
    controller = ctx.cluster.controller
    # A partition asked for twice gets INVALID_REQUEST in each place, before any other check
    # (Kafka's ListOffsetsRequest.duplicatePartitions).
    asked = Counter((t.name, p.partition_index) for t in request.topics for p in t.partitions)
    topics = []
    for list_topic in request.topics:
        topic = controller.topics.get(list_topic.name)
        entries = []
        for item in list_topic.partitions:
            entry: dict[str, Any] = {
                "partition_index": item.partition_index,
                "error_code": _NONE,
                "timestamp": -1,
                "offset": -1,
                "leader_epoch": -1,
            }
            entries.append(entry)
            index = item.partition_index
            if asked[(list_topic.name, index)] > 1:
                entry["error_code"] = ErrorCode.invalid_request
                continue
            if topic is None or not 0 <= index < len(topic.partitions):
                entry["error_code"] = ErrorCode.unknown_topic_or_partition
                continue
            partition = topic.partitions[index]
            error = _leader_error(
                partition, ctx.broker_id, getattr(item, "current_leader_epoch", -1)
            )
            if error is not None:
                entry["error_code"] = error
                continue
            log = partition.leader_log
            high_watermark = log.high_watermark
            entry["leader_epoch"] = partition.leader_epoch
            timestamp = item.timestamp
            # A new leader knows the high watermark only as its followers last told it, until
            # they fetch from it: below its epoch's start offset, Kafka answers the latest
            # offset, and a timestamp it cannot find under that mark, with OFFSET_NOT_AVAILABLE
            # (retriable; KIP-207, Partition.fetchOffsetForTimestamp).
            behind = high_watermark < partition.epoch_start_offset
            if timestamp == _LATEST and behind:
                entry["error_code"] = ErrorCode.offset_not_available
                entry["leader_epoch"] = -1
            elif timestamp == _LATEST:
                entry["offset"] = high_watermark
            elif timestamp in (_EARLIEST, _EARLIEST_LOCAL):
                entry["offset"] = log.log_start_offset
            elif timestamp >= 0 or timestamp == _MAX_TIMESTAMP:
                found = (
                    log.offset_for_timestamp(timestamp, high_watermark)
                    if timestamp >= 0
                    else log.max_timestamp_offset(high_watermark)
                )
                # Nothing found: offset and timestamp -1 and no epoch, as Kafka answers.
                entry["leader_epoch"] = -1
                if found is None and behind:
                    entry["error_code"] = ErrorCode.offset_not_available
                elif found is not None:
                    entry["offset"], entry["timestamp"] = found.offset, found.timestamp
                    entry["leader_epoch"] = found.leader_epoch
            else:
                entry["error_code"] = ErrorCode.invalid_request
        topics.append({"name": list_topic.name, "partitions": entries})
    ctx.respond({"throttle_time": 0, "topics": topics})
