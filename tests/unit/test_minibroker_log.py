"""ReplicaLog and record batch headers: offsets, reads, truncation, epochs, idempotence."""

from __future__ import annotations

import datetime
import gzip
import io
import struct

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.records.readers import read_batch
from kio.records.schema import NewRecordBatch, Record
from kio.records.writers import write_new_batch
from kio.schema.errors import ErrorCode
from kio.static.primitive import TZAwareMicros, i8, i16, i32, i64

from minibroker._batch import (
    HEADER_SIZE,
    BatchError,
    BatchHeader,
    parse_batch,
    record_timestamps,
)
from minibroker.log import ReplicaLog, StoredBatch

BASE_TS = 1_700_000_000_000


def make_batch(
    count: int,
    *,
    producer_id: int = -1,
    epoch: int = -1,
    sequence: int = -1,
    first_ts: int = BASE_TS,
    step_ms: int = 1,
) -> bytes:
    records = tuple(
        Record(
            attributes=i8(0),
            timestamp=TZAwareMicros.parse(
                datetime.datetime.fromtimestamp((first_ts + i * step_ms) / 1000, tz=datetime.UTC)
            ),
            offset=i64(i),
            key=None,
            value=f"v{i}".encode(),
            headers=(),
        )
        for i in range(count)
    )
    buffer = io.BytesIO()
    write_new_batch(
        buffer,
        NewRecordBatch(
            producer_id=i64(producer_id),
            producer_epoch=i16(epoch),
            base_sequence=i32(sequence),
            records=records,
            attributes=i16(0),
        ),
    )
    return buffer.getvalue()


def header_of(data: bytes) -> BatchHeader:
    parsed = parse_batch(data, 1_000_000)
    assert isinstance(parsed, BatchHeader), parsed
    return parsed


def leader_append(log: ReplicaLog, data: bytes, epoch: int = 0) -> tuple[int, int]:
    result = log.append_as_leader(bytearray(data), header_of(data), epoch)
    assert result.error == ErrorCode.none
    return result.base_offset, result.next_offset


@settings(deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=20), min_size=1, max_size=15))
def test_offsets_are_dense_and_patched_into_the_batch(counts: list[int]) -> None:
    log = ReplicaLog()
    expected = 0
    for count in counts:
        base, end = leader_append(log, make_batch(count), epoch=3)
        assert (base, end) == (expected, expected + count)
        expected = end
    assert log.log_end_offset == sum(counts)
    for stored in log.batches:
        decoded, _ = read_batch(bytes(stored.data), 0)
        # the patched offset and epoch are what a consumer decodes; the CRC still holds
        assert decoded.base_offset == stored.base_offset
        assert decoded.partition_leader_epoch == 3
        assert crc32c(stored.data[21:]) == struct.unpack_from(">I", stored.data, 17)[0]


@settings(deadline=None)
@given(
    st.lists(st.integers(min_value=1, max_value=10), min_size=1, max_size=12),
    st.data(),
)
def test_read_returns_whole_batches_from_the_one_holding_the_offset(
    counts: list[int], data: st.DataObject
) -> None:
    log = ReplicaLog()
    for count in counts:
        leader_append(log, make_batch(count))
    end = log.log_end_offset
    offset = data.draw(st.integers(min_value=0, max_value=end - 1))
    upper = data.draw(st.integers(min_value=offset, max_value=end))
    chunks = log.read(offset, 10**9, upper)
    bases = [read_batch(bytes(c), 0)[0].base_offset for c in chunks]
    holding = [b for b in log.batches if b.base_offset <= offset < b.next_offset]
    visible = [b for b in log.batches if b.next_offset > offset and b.next_offset <= upper]
    assert bases == [b.base_offset for b in visible]
    if visible:
        assert visible[0] == holding[0]


def test_read_returns_at_least_one_batch_even_over_max_bytes() -> None:
    log = ReplicaLog()
    leader_append(log, make_batch(50))
    leader_append(log, make_batch(50))
    assert len(log.read(0, 1, log.log_end_offset)) == 1
    assert len(log.read(0, 10**6, log.log_end_offset)) == 2


@settings(deadline=None)
@given(
    st.lists(st.integers(min_value=1, max_value=10), min_size=1, max_size=8),
    st.data(),
)
def test_read_slices_the_log_as_kafkas_log_segment_read(
    counts: list[int], data: st.DataObject
) -> None:
    # Kafka's LogSegment.read: from the start of the batch holding the offset, at most
    # max(max_bytes, first batch) bytes (min_one) or max_bytes, up to the upper bound; and
    # ReplicaManager.readFromLog's empty answer when the first batch does not fit otherwise.
    log = ReplicaLog()
    for count in counts:
        leader_append(log, make_batch(count))
    offset = data.draw(st.integers(min_value=0, max_value=log.log_end_offset))
    upper = data.draw(st.sampled_from([offset, *(b.next_offset for b in log.batches)]))
    max_bytes = data.draw(st.integers(min_value=0, max_value=log.size_bytes + 10))
    min_one = data.draw(st.booleans())
    got = b"".join(log.read(offset, max_bytes, upper, min_one=min_one))
    visible = [b for b in log.batches if b.next_offset > offset and b.next_offset <= upper]
    available = b"".join(bytes(b.data) for b in visible)
    first = len(visible[0].data) if visible else 0
    if not visible or (first > max_bytes and not min_one):
        assert got == b""
    else:
        assert got == available[: max(max_bytes, first) if min_one else max_bytes]


def test_truncation_drops_whole_batches_and_forgets_their_epochs() -> None:
    log = ReplicaLog()
    leader_append(log, make_batch(5), epoch=0)
    leader_append(log, make_batch(5), epoch=1)
    leader_append(log, make_batch(5), epoch=2)
    assert log.end_offset_for_epoch(1) == (1, 10)
    log.truncate_to(12)  # inside the last batch: the whole batch goes
    assert log.log_end_offset == 10
    assert log.latest_epoch == 1
    assert log.end_offset_for_epoch(5) == (1, 10)
    log.truncate_to(0)
    assert (log.log_end_offset, log.latest_epoch, log.batches) == (0, -1, [])


def test_end_offset_for_epoch_follows_kafka() -> None:
    log = ReplicaLog()
    assert log.end_offset_for_epoch(0) == (-1, -1)
    leader_append(log, make_batch(3), epoch=2)
    leader_append(log, make_batch(3), epoch=4)
    assert log.end_offset_for_epoch(1) == (-1, -1)
    assert log.end_offset_for_epoch(2) == (2, 3)
    assert log.end_offset_for_epoch(3) == (2, 3)
    assert log.end_offset_for_epoch(4) == (4, 6)
    assert log.end_offset_for_epoch(9) == (4, 6)


def test_follower_appends_share_the_leaders_batches() -> None:
    leader, follower = ReplicaLog(), ReplicaLog()
    leader_append(leader, make_batch(4), epoch=1)
    follower.append_replicated(leader.batches_from(0))
    assert follower.log_end_offset == 4
    assert follower.batches[0] is leader.batches[0]
    assert follower.latest_epoch == 1


def test_idempotent_duplicate_and_gaps() -> None:
    log = ReplicaLog()
    first = make_batch(2, producer_id=7, epoch=0, sequence=0)
    base, _ = leader_append(log, first)
    duplicate = log.append_as_leader(bytearray(first), header_of(first), 0)
    assert (duplicate.error, duplicate.duplicate, duplicate.base_offset) == (
        ErrorCode.none,
        True,
        base,
    )
    assert log.log_end_offset == 2
    gap = make_batch(1, producer_id=7, epoch=0, sequence=3)
    refused = log.append_as_leader(bytearray(gap), header_of(gap), 0)
    assert refused.error == ErrorCode.out_of_order_sequence_number
    assert log.log_end_offset == 2
    following = make_batch(1, producer_id=7, epoch=0, sequence=2)
    leader_append(log, following)
    new_epoch = make_batch(1, producer_id=7, epoch=1, sequence=4)
    assert (
        log.append_as_leader(bytearray(new_epoch), header_of(new_epoch), 0).error
        == ErrorCode.out_of_order_sequence_number
    )
    old_epoch_again = make_batch(1, producer_id=7, epoch=1, sequence=0)
    leader_append(log, old_epoch_again)
    fenced = make_batch(1, producer_id=7, epoch=0, sequence=3)
    assert (
        log.append_as_leader(bytearray(fenced), header_of(fenced), 0).error
        == ErrorCode.invalid_producer_epoch
    )


def test_producer_state_is_rebuilt_after_truncation() -> None:
    log = ReplicaLog()
    leader_append(log, make_batch(1, producer_id=9, epoch=0, sequence=0))
    leader_append(log, make_batch(1, producer_id=9, epoch=0, sequence=1))
    log.truncate_to(1)
    # sequence 1 is gone with its batch, so it is the next one expected again
    again = make_batch(1, producer_id=9, epoch=0, sequence=1)
    result = log.append_as_leader(bytearray(again), header_of(again), 0)
    assert (result.error, result.duplicate, result.base_offset) == (ErrorCode.none, False, 1)


def gzipped(batch: bytes) -> bytes:
    """The same batch with its records gzip-compressed (codec 1), as a producer sends it."""
    records = gzip.compress(batch[HEADER_SIZE:])
    out = bytearray(batch[:HEADER_SIZE]) + records
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">h", out, 21, struct.unpack_from(">h", out, 21)[0] | 1)
    struct.pack_into(">I", out, 17, crc32c(out[21:]))
    return bytes(out)


def patched(data: bytes, fmt: str, at: int, value: int, *, crc: bool = True) -> bytes:
    """``data`` with one header field rewritten, its CRC recomputed unless ``crc`` is False."""
    out = bytearray(data)
    struct.pack_into(fmt, out, at, value)
    if crc:
        struct.pack_into(">I", out, 17, crc32c(out[21:]))
    return bytes(out)


def with_records(data: bytes, records: bytes, count: int) -> bytes:
    """``data``'s header over other record bytes: ``count`` records, offsets 0 to count - 1."""
    out = bytearray(data[:HEADER_SIZE]) + records
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">i", out, 23, count - 1)
    struct.pack_into(">i", out, 57, count)
    struct.pack_into(">I", out, 17, crc32c(out[21:]))
    return bytes(out)


GOOD = make_batch(3)
RECORDS = GOOD[HEADER_SIZE:]
FIRST_RECORD = RECORDS[: 1 + RECORDS[0] // 2]  # a one-byte length (zig-zag) and its body


@pytest.mark.parametrize(
    ("records", "error_code", "message"),
    [
        # ProduceRequest.validateRecords: exactly one batch, of magic 2
        (b"", 87, "needs a record batch"),
        (None, 87, "needs a record batch"),
        (GOOD[:-5], 87, "needs a record batch"),  # cut short: Kafka reads no batch in it
        (GOOD + GOOD, 87, "exactly one record batch"),
        (patched(GOOD, ">b", 16, 1, crc=False), 87, "magic 1"),
        (patched(GOOD, ">b", 16, 0, crc=False), 87, "magic 0"),
        # ByteBufferLogInputStream: corrupt framing
        (patched(GOOD, ">b", 16, 3, crc=False), 2, "magic byte 0x03"),
        (patched(GOOD, ">i", 8, 13, crc=False), 2, "length 13"),
        (patched(GOOD, ">i", 8, 30, crc=False)[:42], 2, "42 bytes is under 61"),
        # UnifiedLog.analyzeAndValidateRecords: baseOffset, size, CRC
        (patched(GOOD, ">q", 0, 7, crc=False), 87, "baseOffset is 7"),
        (patched(GOOD, ">i", 57, 4, crc=False), 2, "CRC"),
        # LogValidator.validateBatch
        (patched(GOOD, ">i", 23, -1), 87, "negative lastOffsetDelta"),
        (patched(GOOD, ">i", 57, 0), 87, "reports 0 records"),
        (patched(GOOD, ">i", 57, 5), 87, "inconsistent batch offset range [0, 2]"),
        (patched(GOOD, ">i", 23, 999_999), 87, "inconsistent batch offset range"),
        (patched(GOOD, ">h", 21, 0x20), 87, "control records"),
        (patched(GOOD, ">h", 21, 0x10), 87, "transactional"),
        (patched(GOOD, ">q", 43, 5000), 87, "invalid sequence number -1"),
    ],
)
def test_parse_batch_refuses_what_kafka_refuses_with_its_code(
    records: bytes | None, error_code: int, message: str
) -> None:
    refused = parse_batch(records, 10_000)
    assert isinstance(refused, BatchError)
    assert refused.error_code == error_code
    assert message in refused.message


def test_parse_batch_accepts_what_clients_send() -> None:
    assert header_of(GOOD).size == len(GOOD)
    assert header_of(with_records(GOOD, FIRST_RECORD, 1)).last_offset_delta == 0
    # Bytes too few to frame another batch are not part of this one (Kafka trims them).
    assert header_of(GOOD + b"\x01" * 10).size == len(GOOD)
    # The records are not read (docs/minibroker.md, "Deliberate differences"), garbage or not.
    assert header_of(with_records(GOOD, b"\xff" * len(RECORDS), 3)).last_offset_delta == 2
    # An idempotent producer's batch; a compressed one.
    assert header_of(make_batch(2, producer_id=5, epoch=0, sequence=0)).producer_id == 5
    assert header_of(gzipped(GOOD)).last_offset_delta == 2
    too_big = parse_batch(GOOD, len(GOOD) - 1)
    assert isinstance(too_big, BatchError)
    assert too_big.error_code == 10


def test_record_timestamps_stop_at_a_record_that_does_not_move_forward() -> None:
    # A record length of -1 used to leave the walk in place for every one of ``count`` records,
    # on the event loop every broker shares; a compressed batch's records are not checked at
    # Produce, so the walk itself must stop.
    crafted = with_records(GOOD, b"\x01\x00\x00\x00", 10**6)
    assert record_timestamps(crafted, 0) is None
    assert record_timestamps(gzipped(crafted), 0) is None
    overrun = with_records(GOOD, FIRST_RECORD[:-1], 1)  # declares one byte more than remains
    assert record_timestamps(overrun, 0) is None


@settings(deadline=None)
@given(
    st.integers(min_value=1, max_value=30),
    st.integers(min_value=0, max_value=400),
    st.booleans(),
)
def test_record_timestamps_read_every_record(count: int, wanted: int, compress: bool) -> None:
    data = make_batch(count, first_ts=BASE_TS, step_ms=10)
    if compress:
        data = gzipped(data)
    records = record_timestamps(data, 100)
    assert records == [(100 + i, BASE_TS + i * 10) for i in range(count)]


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
def test_offset_for_timestamp_is_the_exact_record(compress: bool) -> None:
    # Kafka's FileRecords.searchForTimestamp: the first record at or after the target, with
    # its own timestamp and its batch's leader epoch, inside a compressed batch too.
    log = ReplicaLog()
    for first_ts, epoch in ((BASE_TS, 1), (BASE_TS + 100, 2)):
        data = make_batch(3, first_ts=first_ts, step_ms=10)
        leader_append(log, gzipped(data) if compress else data, epoch=epoch)
    end = log.log_end_offset
    assert log.offset_for_timestamp(BASE_TS + 15, end) == (2, BASE_TS + 20, 1)
    assert log.offset_for_timestamp(BASE_TS + 105, end) == (4, BASE_TS + 110, 2)
    assert log.offset_for_timestamp(BASE_TS + 50, end) == (3, BASE_TS + 100, 2)
    assert log.offset_for_timestamp(BASE_TS + 500, end) is None
    assert log.offset_for_timestamp(BASE_TS + 50, 3) is None  # above the HWM is invisible
    assert log.max_timestamp_offset(end) == (5, BASE_TS + 120, 2)


def test_max_timestamp_is_the_first_record_carrying_it() -> None:
    # KAFKA-16310: the record's own offset, not its batch's last one.
    log = ReplicaLog()
    data = make_batch(4, first_ts=BASE_TS + 40, step_ms=-10)  # 40, 30, 20, 10
    leader_append(log, gzipped(data))
    assert log.max_timestamp_offset(log.log_end_offset) == (0, BASE_TS + 40, 0)


def test_snappy_records_in_the_java_clients_xerial_framing_are_read() -> None:
    cramjam = pytest.importorskip("cramjam")
    plain = make_batch(6, first_ts=BASE_TS, step_ms=10)
    records = plain[HEADER_SIZE:]
    blocks = [records[:40], records[40:]]  # xerial frames split the stream into blocks
    framed = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    for block in blocks:
        compressed = bytes(cramjam.snappy.compress_raw(block))
        framed += struct.pack(">i", len(compressed)) + compressed
    out = bytearray(plain[:HEADER_SIZE]) + framed
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">h", out, 21, 2)  # snappy
    struct.pack_into(">I", out, 17, crc32c(out[21:]))
    assert record_timestamps(out, 0) == [(i, BASE_TS + 10 * i) for i in range(6)]


def test_unreadable_records_answer_with_the_whole_batch() -> None:
    data = bytearray(gzipped(make_batch(3, first_ts=BASE_TS, step_ms=10)))
    struct.pack_into(">h", data, 21, struct.unpack_from(">h", data, 21)[0] | 4)  # "zstd"
    struct.pack_into(">I", data, 17, crc32c(data[21:]))
    assert record_timestamps(data, 0) is None
    log = ReplicaLog()
    leader_append(log, bytes(data))
    assert log.offset_for_timestamp(BASE_TS + 15, 3) == (0, BASE_TS + 20, 0)


def test_stored_batch_last_sequence_wraps() -> None:
    stored = StoredBatch(0, 3, b"", 0, 0, 1, 0, 2**31 - 2)
    assert stored.last_sequence == 0


@pytest.mark.parametrize("offset", [0, 4, 5])
def test_batches_from(offset: int) -> None:
    log = ReplicaLog()
    leader_append(log, make_batch(5))
    leader_append(log, make_batch(5))
    assert [b.base_offset for b in log.batches_from(offset)] == [
        b.base_offset for b in log.batches if b.next_offset > offset
    ]
