"""One replica's log: opaque record batches in memory, offsets, leader-epoch cache, producer state.

Every replica of a partition has its own ``ReplicaLog``. The leader appends batches it received
from producers (assigning offsets by patching the batch header); followers append the leader's
``StoredBatch`` objects as they are (they are immutable once stored, so sharing them between
replicas in one process is a copy without the copying). Batches are never parsed record by record.

The leader-epoch cache (``(epoch, start offset)`` pairs, Kafka's ``LeaderEpochFileCache``) is what
lets a returning replica find where its log diverges from the new leader's and truncate there.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from minibroker._batch import BatchHeader, patch_batch, record_timestamps

__all__ = ["AppendResult", "ReplicaLog", "StoredBatch", "TimestampAndOffset"]

_SEQUENCE_MODULUS = 2**31
_PRODUCER_WINDOW = 5  # Kafka keeps the last five batches per producer for duplicate detection


class StoredBatch(NamedTuple):
    """A batch as stored: its bytes (offsets already patched) and header fields, never mutated."""

    base_offset: int
    next_offset: int
    data: bytes | bytearray
    max_timestamp: int
    leader_epoch: int
    producer_id: int
    producer_epoch: int
    base_sequence: int

    @property
    def last_sequence(self) -> int:
        return (self.base_sequence + self.next_offset - self.base_offset - 1) % _SEQUENCE_MODULUS


@dataclass(frozen=True, slots=True, kw_only=True)
class AppendResult:
    """Outcome of a leader append: offsets on success, or the Kafka error and nothing appended."""

    error: ErrorCode
    base_offset: int = -1
    next_offset: int = -1
    duplicate: bool = False
    message: str | None = None


class _ProducerState:
    __slots__ = ("epoch", "last_sequence", "recent")

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.last_sequence = -1
        self.recent: deque[tuple[int, int, int, int]] = deque(maxlen=_PRODUCER_WINDOW)


class ReplicaLog:
    """An in-memory replica log. Offsets are batch-aligned."""

    def __init__(self) -> None:
        self.batches: list[StoredBatch] = []
        self._next_offsets: list[int] = []
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.high_watermark = 0
        self.size_bytes = 0
        self._epochs: list[tuple[int, int]] = []
        self._producers: dict[int, _ProducerState] = {}

    # ----------------------------------------------------------------- leader side

    def append_as_leader(
        self, buffer: bytearray, header: BatchHeader, leader_epoch: int
    ) -> AppendResult:
        """Check the producer's sequence, assign offsets and append the one batch.

        ``buffer`` is exactly the batch (Produce carries one per partition, see ``_batch``).
        """
        if header.producer_id >= 0:
            verdict = self._check_sequence(header)
            if verdict is not None:
                return verdict
            duplicate = self._find_duplicate(header)
            if duplicate is not None:
                return AppendResult(
                    error=ErrorCode.none,
                    base_offset=duplicate[0],
                    next_offset=duplicate[1],
                    duplicate=True,
                )
        base = self.log_end_offset
        patch_batch(buffer, base, leader_epoch)
        self.append(
            StoredBatch(
                base,
                base + header.last_offset_delta + 1,
                buffer,
                header.max_timestamp,
                leader_epoch,
                header.producer_id,
                header.producer_epoch,
                header.base_sequence,
            )
        )
        return AppendResult(error=ErrorCode.none, base_offset=base, next_offset=self.log_end_offset)

    def _check_sequence(self, header: BatchHeader) -> AppendResult | None:
        """Kafka's ``ProducerAppendInfo.checkSequence`` for idempotent producers."""
        state = self._producers.get(header.producer_id)
        if state is None:
            return None  # unknown producer: any sequence starts its state (as Kafka 2.5+)
        if header.producer_epoch < state.epoch:
            return AppendResult(
                error=ErrorCode.invalid_producer_epoch,
                message=f"producer epoch {header.producer_epoch} is older than {state.epoch}",
            )
        if header.producer_epoch > state.epoch:
            if header.base_sequence != 0:
                return AppendResult(
                    error=ErrorCode.out_of_order_sequence_number,
                    message=f"a new producer epoch must start at sequence 0, "
                    f"got {header.base_sequence}",
                )
            return None
        if self._find_duplicate(header) is not None:
            return None
        expected = (state.last_sequence + 1) % _SEQUENCE_MODULUS
        if header.base_sequence != expected:
            return AppendResult(
                error=ErrorCode.out_of_order_sequence_number,
                message=f"expected sequence {expected} from producer {header.producer_id}, "
                f"got {header.base_sequence}",
            )
        return None

    def _find_duplicate(self, header: BatchHeader) -> tuple[int, int] | None:
        state = self._producers.get(header.producer_id)
        if state is None or state.epoch != header.producer_epoch:
            return None
        last = (header.base_sequence + header.last_offset_delta) % _SEQUENCE_MODULUS
        for base_seq, last_seq, base_offset, next_offset in state.recent:
            if base_seq == header.base_sequence and last_seq == last:
                return base_offset, next_offset
        return None

    # ----------------------------------------------------------------- every replica

    def append(self, batch: StoredBatch) -> None:
        """Append a batch whose offsets are already assigned (leader) or copied (follower)."""
        self.batches.append(batch)
        self._next_offsets.append(batch.next_offset)
        self.log_end_offset = batch.next_offset
        self.size_bytes += len(batch.data)
        if not self._epochs or batch.leader_epoch > self._epochs[-1][0]:
            self._epochs.append((batch.leader_epoch, batch.base_offset))
        if batch.producer_id >= 0:
            self._track_producer(batch)

    def append_replicated(self, batches: Sequence[StoredBatch]) -> None:
        for batch in batches:
            self.append(batch)

    def _track_producer(self, batch: StoredBatch) -> None:
        state = self._producers.get(batch.producer_id)
        if state is None or batch.producer_epoch > state.epoch:
            state = _ProducerState(batch.producer_epoch)
            self._producers[batch.producer_id] = state
        state.last_sequence = batch.last_sequence
        state.recent.append(
            (batch.base_sequence, batch.last_sequence, batch.base_offset, batch.next_offset)
        )

    def read(
        self, offset: int, max_bytes: int, upper: int, *, min_one: bool = True
    ) -> list[bytes | bytearray]:
        """The log's bytes from the batch holding ``offset`` to ``upper`` (a batch boundary), at
        most ``max_bytes`` of them, as Kafka's ``LogSegment.read`` slices its file: the last
        batch may be cut short (clients drop a partial batch at the end of a partition's data).

        With ``min_one`` the first batch comes whole even past ``max_bytes`` (KIP-74), so a
        consumer can always make progress; without it, a first batch over ``max_bytes`` gives
        nothing, as ``ReplicaManager.readFromLog`` answers an empty set rather than a part of one.
        """
        index = bisect.bisect_right(self._next_offsets, offset)
        batches = self.batches
        if index >= len(batches) or batches[index].next_offset > upper:
            return []
        first = len(batches[index].data)
        if first > max_bytes and not min_one:
            return []
        budget = max(max_bytes, first)
        out: list[bytes | bytearray] = []
        while index < len(batches) and budget > 0:
            batch = batches[index]
            if batch.next_offset > upper:
                break
            data = batch.data
            if len(data) > budget:
                out.append(bytes(memoryview(data)[:budget]))
                break
            out.append(data)
            budget -= len(data)
            index += 1
        return out

    def batches_from(self, offset: int) -> list[StoredBatch]:
        """Every batch at or after ``offset`` (what a follower fetch copies)."""
        index = bisect.bisect_right(self._next_offsets, offset)
        return self.batches[index:]

    def truncate_to(self, offset: int) -> None:
        """Drop every batch ending after ``offset`` (batches are atomic: the end may move down)."""
        if offset >= self.log_end_offset:
            return
        index = bisect.bisect_right(self._next_offsets, offset)
        del self.batches[index:]
        del self._next_offsets[index:]
        self.log_end_offset = (
            self._next_offsets[-1] if self._next_offsets else self.log_start_offset
        )
        self.size_bytes = sum(len(b.data) for b in self.batches)
        self.high_watermark = min(self.high_watermark, self.log_end_offset)
        while self._epochs and self._epochs[-1][1] >= self.log_end_offset:
            self._epochs.pop()
        self._producers.clear()
        for batch in self.batches:
            if batch.producer_id >= 0:
                self._track_producer(batch)

    @property
    def latest_epoch(self) -> int:
        return self._epochs[-1][0] if self._epochs else -1

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """Kafka's OffsetsForLeaderEpoch: (largest known epoch <= ``epoch``, its end offset).

        The end offset is where the next epoch starts, or the log end for the latest epoch;
        ``(-1, -1)`` when this log knows no epoch that old.
        """
        index = bisect.bisect_right(self._epochs, (epoch, 2**63)) - 1
        if index < 0:
            return -1, -1
        found = self._epochs[index][0]
        if index + 1 < len(self._epochs):
            return found, self._epochs[index + 1][1]
        return found, self.log_end_offset

    def offset_for_timestamp(self, timestamp: int, upper: int) -> TimestampAndOffset | None:
        """The first record stamped at or after ``timestamp``, below ``upper`` (the HWM).

        Kafka's ``FileRecords.searchForTimestamp``: the first batch whose max timestamp reaches
        the target, then the first record in it that does, with that record's own timestamp
        and the batch's leader epoch.
        """
        for batch in self.batches:
            if batch.base_offset >= upper:
                return None
            if batch.max_timestamp < timestamp:
                continue
            records = record_timestamps(batch.data, batch.base_offset)
            if records is None:  # unreadable records: the batch as a whole
                return _found(batch, batch.base_offset, batch.max_timestamp, upper)
            for offset, stamp in records:
                if stamp >= timestamp:
                    return _found(batch, offset, stamp, upper)
        return None

    def max_timestamp_offset(self, upper: int) -> TimestampAndOffset | None:
        """The first record carrying the largest timestamp below ``upper`` (ListOffsets -3).

        Kafka (3.8+, KAFKA-16310) answers that record's own offset, found in the first batch
        holding the largest timestamp; before that fix it answered the batch's last offset.
        """
        best: StoredBatch | None = None
        for batch in self.batches:
            if batch.next_offset > upper:
                break
            if best is None or batch.max_timestamp > best.max_timestamp:
                best = batch
        if best is None:
            return None
        records = record_timestamps(best.data, best.base_offset) or ()
        offset = next(
            (o for o, stamp in records if stamp == best.max_timestamp), best.next_offset - 1
        )
        return _found(best, offset, best.max_timestamp, upper)


class TimestampAndOffset(NamedTuple):
    """A ListOffsets answer: the record's offset and timestamp, and its batch's leader epoch."""

    offset: int
    timestamp: int
    leader_epoch: int


def _found(
    batch: StoredBatch, offset: int, timestamp: int, upper: int
) -> TimestampAndOffset | None:
    # Kafka's Partition.fetchOffsetForTimestamp hides an answer at or above the high watermark.
    if offset >= upper:
        return None
    return TimestampAndOffset(offset, timestamp, batch.leader_epoch)
