"""Record batch v2 headers, read and patched with ``struct``; records themselves stay opaque.

Layout (Kafka "Message Format", ``DefaultRecordBatch``): baseOffset i64 @0, batchLength i32 @8,
partitionLeaderEpoch i32 @12, magic i8 @16, crc u32 @17, then, covered by the CRC-32C:
attributes i16 @21, lastOffsetDelta i32 @23, baseTimestamp i64 @27, maxTimestamp i64 @35,
producerId i64 @43, producerEpoch i16 @51, baseSequence i32 @53, recordsCount i32 @57, records @61.
baseOffset and partitionLeaderEpoch sit outside the CRC, so the broker assigns them by writing
the bytes in place, exactly as Kafka does, and never recomputes the checksum.
"""

from __future__ import annotations

import logging
import struct
import zlib
from dataclasses import dataclass
from typing import Any

from crc32c import crc32c

__all__ = [
    "HEADER_SIZE",
    "BatchError",
    "BatchHeader",
    "parse_batches",
    "patch_batch",
    "record_timestamps",
]

_log = logging.getLogger(__name__)

HEADER_SIZE = 61
_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET_EPOCH = struct.Struct(">q")
_EPOCH = struct.Struct(">i")
_TRANSACTIONAL = 0x10
_CONTROL = 0x20
_CODEC = 0x07
_LOG_APPEND_TIME = 0x08
_XERIAL_MAGIC = b"\x82SNAPPY\x00"

# Kafka error codes this module can report
CORRUPT_MESSAGE = 2
MESSAGE_TOO_LARGE = 10
INVALID_RECORD = 87


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """Where one batch sits in a records blob, and the header fields the broker needs."""

    position: int
    size: int
    last_offset_delta: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    attributes: int


@dataclass(frozen=True, slots=True)
class BatchError:
    """Why a records blob is refused: a Kafka error code and a message for the client."""

    error_code: int
    message: str


def parse_batches(
    records: bytes | bytearray, max_batch_bytes: int
) -> list[BatchHeader] | BatchError:
    """Split a Produce partition's records into batches, checking framing, magic, CRC and size."""
    view = memoryview(records)
    end = len(records)
    headers: list[BatchHeader] = []
    position = 0
    while position < end:
        if end - position < HEADER_SIZE:
            return BatchError(CORRUPT_MESSAGE, f"truncated record batch at byte {position}")
        (
            _base,
            length,
            _epoch,
            magic,
            crc,
            attributes,
            last_delta,
            _base_ts,
            max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        ) = _HEADER.unpack_from(records, position)
        size = length + 12
        if length < HEADER_SIZE - 12 or position + size > end:
            return BatchError(CORRUPT_MESSAGE, f"record batch at byte {position} overruns its data")
        if magic != 2:
            return BatchError(
                CORRUPT_MESSAGE, f"record batch magic {magic} is not supported (only v2)"
            )
        if crc32c(view[position + 21 : position + size]) != crc:
            return BatchError(CORRUPT_MESSAGE, f"record batch at byte {position} fails its CRC")
        if size > max_batch_bytes:
            return BatchError(
                MESSAGE_TOO_LARGE,
                f"record batch of {size} bytes exceeds max.message.bytes {max_batch_bytes}",
            )
        if last_delta < 0 or count < 0:
            return BatchError(INVALID_RECORD, "record batch has a negative offset delta or count")
        if attributes & (_TRANSACTIONAL | _CONTROL):
            return BatchError(INVALID_RECORD, "transactional and control batches are not supported")
        headers.append(
            BatchHeader(
                position,
                size,
                last_delta,
                max_ts,
                producer_id,
                producer_epoch,
                base_sequence,
                attributes,
            )
        )
        position += size
    if not headers:
        return BatchError(CORRUPT_MESSAGE, "empty record set")
    return headers


def patch_batch(buffer: bytearray, position: int, base_offset: int, leader_epoch: int) -> None:
    """Write the offset and leader epoch the broker assigns (both outside the CRC)."""
    _OFFSET_EPOCH.pack_into(buffer, position, base_offset)
    _EPOCH.pack_into(buffer, position + 12, leader_epoch)


def read_leader_epoch(batch: bytes | bytearray) -> int:
    value: int = _EPOCH.unpack_from(batch, 12)[0]
    return value


def _varint(data: bytes | bytearray, position: int) -> tuple[int, int]:
    """A zig-zag varint (records use them for lengths and deltas) and the position after it."""
    shift = 0
    raw = 0
    while True:
        byte = data[position]
        position += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), position
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def record_timestamps(batch: bytes | bytearray, base_offset: int) -> list[tuple[int, int]] | None:
    """(offset, timestamp) of every record in the batch, in order; None if they cannot be read.

    For ListOffsets, never the data path. A compressed batch is decompressed as Kafka's
    ``FileRecords.searchForTimestamp`` does to find the exact record: gzip always, snappy, lz4
    and zstd when ``cramjam`` is installed. None means a codec is missing or the records do not
    parse (the CRC held, so only a producer's bug gets there); the caller then answers with the
    batch as a whole.
    """
    attributes: int = struct.unpack_from(">h", batch, 21)[0]
    base_timestamp: int = struct.unpack_from(">q", batch, 27)[0]
    max_timestamp: int = struct.unpack_from(">q", batch, 35)[0]
    count: int = struct.unpack_from(">i", batch, 57)[0]
    records = _decompress(attributes & _CODEC, bytes(batch[HEADER_SIZE:]))
    if records is None:
        return None
    log_append_time = bool(attributes & _LOG_APPEND_TIME)
    found = []
    position = 0
    try:
        for _ in range(count):
            length, body = _varint(records, position)
            cursor = body + 1  # record attributes (int8)
            ts_delta, cursor = _varint(records, cursor)
            offset_delta, cursor = _varint(records, cursor)
            # LogAppendTime: every record carries the time the broker wrote in maxTimestamp.
            stamp = max_timestamp if log_append_time else base_timestamp + ts_delta
            found.append((base_offset + offset_delta, stamp))
            position = body + length
    except (IndexError, ValueError):
        return None
    return found


def _decompress(codec: int, data: bytes) -> bytes | None:
    try:
        if codec == 0:
            return data
        if codec == 1:
            return zlib.decompress(data, wbits=31)  # gzip framing
        import cramjam  # type: ignore[import-not-found,unused-ignore]  # optional: snappy/lz4/zstd

        if codec == 2:
            return _snappy(cramjam, data)
        if codec == 3:
            return bytes(cramjam.lz4.decompress(data))
        if codec == 4:
            return bytes(cramjam.zstd.decompress(data))
    except ImportError:
        _log.debug("ListOffsets: cramjam is not installed; cannot read codec %d records", codec)
    except Exception:
        _log.debug("ListOffsets: records of codec %d do not decompress", codec, exc_info=True)
    return None


def _snappy(cramjam: Any, data: bytes) -> bytes:
    # The Java client writes xerial's framing (a magic header, then length-prefixed blocks);
    # librdkafka writes raw snappy. Kafka reads both.
    if not data.startswith(_XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    out = bytearray()
    position = 16
    while position < len(data):
        (size,) = struct.unpack_from(">i", data, position)
        position += 4
        out += bytes(cramjam.snappy.decompress_raw(data[position : position + size]))
        position += size
    return bytes(out)
