"""The pre-decode validator: every request a client can encode passes, and no frame that would
make kio's native decoder abort (or hand a handler a forbidden null) gets through."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import io
import struct
import uuid
from types import NoneType, UnionType
from typing import Any, Union, get_args, get_origin

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.serial import entity_writer
from kio.static.primitive import i16, i32

from minibroker.protocol.codec import MalformedRequest, decode_request, request_class
from minibroker.protocol.validate import validate_request
from minibroker.protocol.versions import SUPPORTED_VERSIONS

SERVED = [(key, v) for key, (low, high) in SUPPORTED_VERSIONS.items() for v in range(low, high + 1)]
_INT_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64, "timedelta_i32": 32}


def _optional(tp: Any) -> tuple[Any, bool]:
    if get_origin(tp) in (UnionType, Union):
        return next(a for a in get_args(tp) if a is not NoneType), True
    return tp, False


def _draw_value(draw: st.DrawFn, tp: Any, kafka_type: str | None, depth: int) -> Any:
    if dataclasses.is_dataclass(tp):
        return _draw_entity(draw, tp, depth + 1)  # type: ignore[arg-type]  # a kio entity class
    if kafka_type in _INT_BITS:
        bits = _INT_BITS[kafka_type]
        n = draw(st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1))
        if kafka_type == "timedelta_i32":
            return tp(datetime.timedelta(milliseconds=n))
        return tp(n)
    if kafka_type == "timedelta_i64":
        return tp(datetime.timedelta(milliseconds=draw(st.integers(-(2**40), 2**40))))
    if kafka_type == "bool":
        return draw(st.booleans())
    if kafka_type == "string":
        text = draw(st.text(max_size=12))
        return text if tp is str else tp(text)
    if kafka_type in ("bytes", "records"):
        raw = draw(st.binary(max_size=200))
        return raw if tp is bytes else tp(raw)
    if kafka_type == "uuid":
        return draw(st.uuids())
    raise AssertionError(f"no generator for kafka type {kafka_type} ({tp})")


def _draw_entity(draw: st.DrawFn, cls: type[Any], depth: int = 0) -> Any:
    kwargs: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        tp, optional = _optional(field.type)
        if optional and draw(st.booleans()):
            kwargs[field.name] = None
            continue
        kafka_type = field.metadata.get("kafka_type")
        if get_origin(tp) is tuple:
            element, _ = _optional(get_args(tp)[0])
            n = draw(st.integers(0, 0 if depth > 2 else 3))
            kwargs[field.name] = tuple(
                _draw_value(draw, element, kafka_type, depth) for _ in range(n)
            )
        else:
            kwargs[field.name] = _draw_value(draw, tp, kafka_type, depth)
    return cls(**kwargs)


def encode(api_key: int, version: int, body: Any, client_id: str | None = "fuzz") -> bytes:
    cls = request_class(api_key, version)
    buffer = io.BytesIO()
    header = cls.__header_schema__(
        request_api_key=i16(api_key),
        request_api_version=i16(version),
        correlation_id=i32(1),
        client_id=client_id,
    )
    entity_writer(cls.__header_schema__)(buffer, header)
    entity_writer(cls)(buffer, body)
    return buffer.getvalue()


def validate(frame: bytes) -> None:
    key, version = struct.unpack_from(">hh", frame)
    validate_request(frame, key, version, request_class(key, version))


@st.composite
def valid_requests(draw: st.DrawFn) -> bytes:
    key, version = draw(st.sampled_from(SERVED))
    body = _draw_entity(draw, request_class(key, version))
    client_id = draw(st.none() | st.text(max_size=8))
    return encode(key, version, body, client_id)


@settings(max_examples=250, deadline=None)
@given(valid_requests())
def test_every_request_a_client_can_encode_passes(frame: bytes) -> None:
    validate(frame)
    validate(frame + b"\x00\x01\x02")  # trailing bytes are allowed, as in Kafka


@settings(max_examples=200, deadline=None)
@given(valid_requests(), st.data())
def test_any_truncation_is_refused(frame: bytes, data: st.DataObject) -> None:
    key, version = struct.unpack_from(">hh", frame)
    cut = data.draw(st.integers(0, len(frame) - 1))
    with pytest.raises(MalformedRequest):
        validate_request(frame[:cut], key, version, request_class(key, version))


@settings(max_examples=250, deadline=None)
@given(valid_requests(), st.data())
def test_corrupted_frames_raise_nothing_but_malformed_request(
    frame: bytes, data: st.DataObject
) -> None:
    corrupted = bytearray(frame)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(4, len(corrupted) - 1))  # keep key and version
        replacement = data.draw(
            st.sampled_from(
                [b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\x80\x00", b"\xff" * 9, b"\x00"]
            )
            | st.binary(min_size=1, max_size=4)
        )
        corrupted[at : at + len(replacement)] = replacement
    with contextlib.suppress(MalformedRequest):
        validate(bytes(corrupted))


# -- each kind of length, corrupted ------------------------------------------------------------

# FindCoordinator v4: header v2 (key, version, correlation id, client id "fuzz", no tags), then
# key_type int8 and coordinator_keys, a compact array of compact strings.
FIND_COORDINATOR_V4_HEAD = bytes.fromhex("000a0004000000010004") + b"fuzz" + b"\x00" + b"\x00"


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def refused(frame: bytes) -> str:
    with pytest.raises(MalformedRequest) as caught:
        validate(frame)
    return str(caught.value)


@given(st.integers(2**32, 2**35 - 1))
def test_a_compact_length_beyond_32_bits_is_refused(length: int) -> None:
    # What made kio allocate billions of elements and abort the process.
    message = refused(FIND_COORDINATOR_V4_HEAD + uvarint(length) + b"\x00")
    assert message.startswith("FindCoordinator v4 coordinator_keys: ")
    assert "beyond 32 bits" in message


def test_the_frame_that_aborted_kio_is_refused_by_decode_request() -> None:
    frame = bytes.fromhex("000a0004000000010004") + b"fuzz" + bytes.fromhex("0000bfcf91833d")
    with pytest.raises(MalformedRequest, match="FindCoordinator v4 coordinator_keys"):
        decode_request(frame)


def test_a_varint_longer_than_five_bytes_is_refused() -> None:
    assert "longer than 5 bytes" in refused(FIND_COORDINATOR_V4_HEAD + b"\x81\x80\x80\x80\x80\x00")


@given(st.integers(2, 2**32 - 1), st.binary(max_size=40))
def test_a_compact_array_longer_than_the_bytes_left_is_refused(stored: int, rest: bytes) -> None:
    # Each element is a compact string (one byte at least): count - 1 > bytes left is refused.
    if stored - 1 <= len(rest):
        rest = rest[: stored - 2]
    message = refused(FIND_COORDINATOR_V4_HEAD + uvarint(stored) + rest)
    assert "coordinator_keys" in message


@given(st.integers(3, 2**32 - 2))
def test_a_compact_string_longer_than_the_bytes_left_is_refused(length: int) -> None:
    frame = FIND_COORDINATOR_V4_HEAD + b"\x02" + uvarint(length + 1) + b"ab"
    message = refused(frame)
    assert message.startswith("FindCoordinator v4 coordinator_keys[0]: ")


def test_a_string_longer_than_kafka_allows_is_refused() -> None:
    frame = FIND_COORDINATOR_V4_HEAD + b"\x02" + uvarint(0x8000 + 1) + b"a" * 0x8000 + b"\x00\x00"
    assert "exceeds the limit of 32767" in refused(frame)


@given(st.integers(-(2**31), 2**31 - 1).filter(lambda n: n != 0))
def test_a_classic_array_length_that_does_not_fit_is_refused(count: int) -> None:
    # OffsetFetch v1: group_id (int16 string), then topics (int32 array of topics).
    frame = struct.pack(">hhih", 9, 1, 1, 4) + b"fuzz" + struct.pack(">h", 1) + b"g"
    message = refused(frame + struct.pack(">i", count) + b"\x00\x01ab")
    assert message.startswith("OffsetFetch v1 topics: ")


@given(st.integers(-(2**15), 2**15 - 1).filter(lambda n: n < 0 or n > 3))
def test_a_classic_string_length_that_does_not_fit_is_refused(length: int) -> None:
    frame = struct.pack(">hhih", 9, 1, 1, 4) + b"fuzz" + struct.pack(">h", length) + b"abc"
    assert refused(frame).startswith("OffsetFetch v1 group_id: ")


@given(st.integers(-(2**31), 2**31 - 1).filter(lambda n: n < -1 or n > 2))
def test_a_classic_bytes_length_that_does_not_fit_is_refused(length: int) -> None:
    # Produce v3: transactional_id (nullable string), acks, timeout, topic_data[name,
    # partition_data[index, records (nullable int32 bytes)]].
    head = struct.pack(">hhih", 0, 3, 1, 4) + b"fuzz" + struct.pack(">hhi", -1, -1, 1000)
    topic = struct.pack(">ih", 1, 1) + b"t" + struct.pack(">ii", 1, 0)
    message = refused(head + topic + struct.pack(">i", length) + b"ab")
    assert message.startswith("Produce v3 topic_data[0].partition_data[0].records: ")


def test_a_length_prefix_cut_by_the_frame_end_is_refused() -> None:
    frame = struct.pack(">hhih", 9, 1, 1, 4) + b"fuzz" + b"\x00"
    assert "runs past the end" in refused(frame)


@pytest.mark.parametrize(
    ("frame", "where"),
    [
        # FindCoordinator v4 coordinator_keys: compact array, length 0 is null.
        (FIND_COORDINATOR_V4_HEAD + b"\x00\x00", "coordinator_keys: null array"),
        # FindCoordinator v4, one key that is a null compact string.
        (FIND_COORDINATOR_V4_HEAD + b"\x02\x00\x00", "coordinator_keys[0]: null compact string"),
        # OffsetFetch v1 group_id: classic string of length -1.
        (struct.pack(">hhih", 9, 1, 1, 4) + b"fuzz" + struct.pack(">hi", -1, 0), "group_id: null"),
        # OffsetFetch v1 topics: classic array of length -1.
        (
            struct.pack(">hhih", 9, 1, 1, 4) + b"fuzz" + struct.pack(">h", 1) + b"g" + b"\xff" * 4,
            "topics: null array",
        ),
    ],
)
def test_a_null_where_the_schema_forbids_one_is_refused(frame: bytes, where: str) -> None:
    assert where in refused(frame)


def test_a_null_where_the_schema_allows_one_passes() -> None:
    # Metadata v1 topics is nullable (all topics); Produce v3 transactional_id too.
    validate(struct.pack(">hhihi", 3, 1, 1, -1, -1))
    head = struct.pack(">hhih", 0, 3, 1, 4) + b"fuzz" + struct.pack(">hhi", -1, -1, 1000)
    validate(head + struct.pack(">i", 0))


@given(st.integers(1, 2**32 - 1), st.binary(max_size=6))
def test_tagged_fields_beyond_the_bytes_left_are_refused(count: int, rest: bytes) -> None:
    # The body's tagged-field count, then too few bytes for that many tags and sizes (or a
    # size that overflows): ListGroups v4 is states_filter then tagged fields.
    body = b"\x01" + uvarint(count) + rest[: 2 * count - 1]
    frame = struct.pack(">hhih", 16, 4, 1, 4) + b"fuzz" + b"\x00" + body
    assert refused(frame).startswith("ListGroups v4 tagged fields: ")


def test_a_tagged_field_size_beyond_the_bytes_left_is_refused() -> None:
    frame = struct.pack(">hhih", 16, 4, 1, 4) + b"fuzz" + b"\x00" + b"\x01" + b"\x01\x05\x10ab"
    assert "tagged field 5 of 16 bytes exceeds the 2 left" in refused(frame)


def test_an_unknown_tagged_field_is_skipped_by_its_size() -> None:
    frame = struct.pack(">hhih", 16, 4, 1, 4) + b"fuzz" + b"\x00" + b"\x01" + b"\x01\x05\x02ab"
    validate(frame)


def test_the_header_client_id_is_checked_too() -> None:
    frame = struct.pack(">hhih", 18, 3, 1, 0x7FFF) + b"fuzz"
    assert refused(frame).startswith("ApiVersions v3 header.client_id: ")


def test_a_known_tagged_field_must_fill_its_size() -> None:
    # Fetch v12's cluster_id is tag 0 of the body (a nullable compact string).
    cls = request_class(1, 12)
    tags = [f for f in dataclasses.fields(cls) if "tag" in f.metadata]
    assert [(f.name, f.metadata["tag"]) for f in tags] == [("cluster_id", 0)]
    body = _fetch_v12_without_tags()
    ok = body + b"\x01" + b"\x00\x03" + b"\x03ab"
    validate(ok)
    short = body + b"\x01" + b"\x00\x04" + b"\x03ab!"
    assert "tagged field cluster_id uses 3 of its 4 bytes" in refused(short)


def _fetch_v12_without_tags() -> bytes:
    cls = request_class(1, 12)
    frame = encode(1, 12, cls(**_fetch_v12_values()))
    assert frame.endswith(b"\x00")  # the body's empty tagged fields
    return frame[:-1]


def _fetch_v12_values() -> dict[str, Any]:
    return {
        "replica_id": i32(-1),
        "max_wait": datetime.timedelta(milliseconds=100),
        "min_bytes": i32(1),
        "max_bytes": i32(1000),
        "isolation_level": 0,
        "session_id": i32(0),
        "session_epoch": i32(-1),
        "topics": (),
        "forgotten_topics_data": (),
        "rack_id": "",
    }


def test_every_served_request_class_has_a_validation_rule() -> None:
    for key, version in SERVED:
        empty = struct.pack(">hh", key, version)
        with pytest.raises(MalformedRequest):
            validate_request(empty, key, version, request_class(key, version))


def test_uuid_fields_are_sixteen_bytes() -> None:
    # Metadata v12: topics[topic_id (16 bytes), name (nullable compact string)].
    head = struct.pack(">hhih", 3, 12, 1, 4) + b"fuzz" + b"\x00"
    topic = uuid.UUID(int=5).bytes + b"\x00" + b"\x00"
    validate(head + b"\x02" + topic + b"\x00\x00" + b"\x00")
    # One byte short of the id: everything after it shifts, and the body ends too early.
    assert "runs past the end" in refused(head + b"\x02" + topic[1:] + b"\x00\x00\x00")
