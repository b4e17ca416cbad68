"""Record batch v2 headers, read and patched with ``struct``; records are stepped over, not read.

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
from kio.serial.errors import DecodeError
from kio.serial.readers import read_signed_varint, read_signed_varlong

__all__ = [
    "HEADER_SIZE",
    "BatchError",
    "BatchHeader",
    "parse_batch",
    "patch_batch",
    "record_timestamps",
]

_log = logging.getLogger(__name__)

HEADER_SIZE = 61
_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_CRC = struct.Struct(">I")
_LENGTH_AT = 8
_MAGIC = 16
_LOG_OVERHEAD = 12  # baseOffset and batchLength, outside the length
_MIN_LENGTH = 14  # the smallest length Kafka reads for any magic (LegacyRecord.RECORD_OVERHEAD_V0)
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
    """The header fields of a produced batch that the broker needs, and its size in bytes."""

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


def parse_batch(
    records: bytes | bytearray | None, max_batch_bytes: int
) -> BatchHeader | BatchError:
    """The one record batch of a Produce partition, checked as Kafka checks a client's batch.

    The checks run in Kafka's order, so a batch with several faults gets Kafka's code:
    ``ProduceRequest.validateRecords`` (exactly one batch, of magic 2), then
    ``UnifiedLog.analyzeAndValidateRecords`` (baseOffset 0, size, CRC), then
    ``LogValidator.validateBatch`` (offset range, record count, control batches, sequence).
    Kafka also reads every record of an uncompressed batch and refuses one that does not parse;
    here the records are not read (docs/minibroker.md, "Deliberate differences": even reading
    only each record's length lowered the double-fault figure of bench/fault_row.py, which
    the broker process limits, below its target). Bytes after
    the batch too few to frame another batch are not part of it; Kafka ignores them too
    (``trimInvalidBytes``), and the caller stores ``size`` bytes only.
    """
    data = records or b""
    size = _framed_size(data, 0)
    if isinstance(size, BatchError):
        return size
    if size is None:
        return BatchError(INVALID_RECORD, "a produce request needs a record batch per partition")
    magic = data[_MAGIC]
    if magic != 2:
        return BatchError(INVALID_RECORD, f"record batch magic {magic}: produce takes magic 2 only")
    following = _framed_size(data, size)
    if isinstance(following, BatchError):
        return following
    if following is not None:
        return BatchError(
            INVALID_RECORD, "a produce request carries exactly one record batch per partition"
        )
    return _check_batch(data, size, max_batch_bytes)


def _framed_size(data: bytes | bytearray, position: int) -> int | BatchError | None:
    """The size of the batch framed at ``position``, or None when too few bytes remain.

    Kafka's ``ByteBufferLogInputStream``: a length under the smallest any magic allows or a
    magic Kafka does not know is corrupt; a batch cut short is no batch at all.
    """
    remaining = len(data) - position
    if remaining < _LOG_OVERHEAD:
        return None
    length: int = _INT32.unpack_from(data, position + _LENGTH_AT)[0]
    if length < _MIN_LENGTH:
        return BatchError(CORRUPT_MESSAGE, f"record batch length {length} is under {_MIN_LENGTH}")
    if remaining < _MAGIC + 1:
        return None
    magic = data[position + _MAGIC]
    if magic > 2:  # read unsigned: a negative magic is above 127
        return BatchError(CORRUPT_MESSAGE, f"record batch magic byte {magic:#04x} is unknown")
    if remaining < length + _LOG_OVERHEAD:
        return None
    return length + _LOG_OVERHEAD


def _check_batch(
    data: bytes | bytearray, size: int, max_batch_bytes: int
) -> BatchHeader | BatchError:
    """The checks on the one framed batch of ``size`` bytes at the start of ``data``."""
    (base_offset,) = _OFFSET.unpack_from(data, 0)
    if base_offset != 0:
        return BatchError(INVALID_RECORD, f"record batch baseOffset is {base_offset}, not 0")
    if size > max_batch_bytes:
        return BatchError(
            MESSAGE_TOO_LARGE,
            f"record batch of {size} bytes exceeds max.message.bytes {max_batch_bytes}",
        )
    if size < HEADER_SIZE:
        return BatchError(CORRUPT_MESSAGE, f"record batch of {size} bytes is under {HEADER_SIZE}")
    if crc32c(memoryview(data)[21:size]) != _CRC.unpack_from(data, 17)[0]:
        return BatchError(CORRUPT_MESSAGE, "record batch fails its CRC")
    (
        _base,
        _length,
        _epoch,
        _magic,
        _crc,
        attributes,
        last_delta,
        _base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    ) = _HEADER.unpack_from(data, 0)
    if last_delta < 0:
        return BatchError(
            INVALID_RECORD, f"record batch has a negative lastOffsetDelta {last_delta}"
        )
    if count <= 0:
        return BatchError(INVALID_RECORD, f"record batch reports {count} records")
    if count != last_delta + 1:
        return BatchError(
            INVALID_RECORD,
            f"inconsistent batch offset range [0, {last_delta}] and count of records {count}",
        )
    if attributes & _CONTROL:
        return BatchError(INVALID_RECORD, "clients are not allowed to write control records")
    if attributes & _TRANSACTIONAL:
        return BatchError(INVALID_RECORD, "transactional batches are not supported")
    if producer_id >= 0 and base_sequence < 0:
        return BatchError(
            INVALID_RECORD,
            f"invalid sequence number {base_sequence} in a batch of producer {producer_id}",
        )
    return BatchHeader(
        size, last_delta, max_ts, producer_id, producer_epoch, base_sequence, attributes
    )


def patch_batch(buffer: bytearray, base_offset: int, leader_epoch: int) -> None:
    """Write the offset and leader epoch the broker assigns (both outside the CRC)."""
    _OFFSET.pack_into(buffer, 0, base_offset)
    _INT32.pack_into(buffer, 12, leader_epoch)


def read_leader_epoch(batch: bytes | bytearray) -> int:
    value: int = _INT32.unpack_from(batch, 12)[0]
    return value


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
    end = len(records)
    try:
        for _ in range(count):
            length, used = read_signed_varint(records, position)
            body = position + used
            # Produce does not check the records of a batch, uncompressed or inside a
            # compressed one: a record that does not move forward would loop ``count`` times.
            if length <= 0 or body + length > end:
                return None
            ts_delta, used = read_signed_varlong(records, body + 1)  # after attributes (int8)
            offset_delta, _ = read_signed_varint(records, body + 1 + used)
            # LogAppendTime: every record carries the time the broker wrote in maxTimestamp.
            stamp = max_timestamp if log_append_time else base_timestamp + ts_delta
            found.append((base_offset + offset_delta, stamp))
            position = body + length
    except (DecodeError, ValueError):
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
