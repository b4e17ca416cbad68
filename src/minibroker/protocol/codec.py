"""Decode request frames and encode responses with kio's generated schema types.

Handlers describe a response as plain values (dicts, lists, ints) and ``build`` turns them into
the kio entity of the exact version being answered, filling only the fields that version has and
leaving the others to their schema defaults. That lets one handler serve every version of an API
without hand-writing any encoder. Each class's build plan is computed once and cached.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import io
import struct
import uuid
from collections.abc import Callable, Mapping
from types import NoneType, UnionType
from typing import Any, NamedTuple, Union, get_args, get_origin

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from minibroker.protocol.validate import MalformedRequest, validate_request
from minibroker.protocol.versions import API_NAMES

__all__ = [
    "DecodedRequest",
    "MalformedRequest",
    "build",
    "decode_request",
    "encode_body",
    "encode_response",
    "frame_with_body",
    "peek_header",
    "request_class",
    "response_class",
]

_HEADER_PREFIX = struct.Struct(">hhi")
_LENGTH = struct.Struct(">i")


class DecodedRequest(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any


def peek_header(frame: bytes) -> tuple[int, int, int]:
    """(api key, api version, correlation id): the fixed prefix of every request header."""
    if len(frame) < _HEADER_PREFIX.size:
        raise MalformedRequest(f"frame of {len(frame)} bytes is shorter than a request header")
    key, version, correlation_id = _HEADER_PREFIX.unpack_from(frame, 0)
    return key, version, correlation_id


@functools.cache
def request_class(api_key: int, api_version: int) -> type[Any]:
    return load_request_schema(api_key, api_version)


@functools.cache
def response_class(api_key: int, api_version: int) -> type[Any]:
    return load_response_schema(api_key, api_version)


@functools.cache
def _readers(api_key: int, api_version: int) -> tuple[Callable[..., Any], Callable[..., Any]]:
    cls = request_class(api_key, api_version)
    return entity_reader(cls.__header_schema__), entity_reader(cls)


def decode_request(frame: bytes) -> DecodedRequest:
    """Decode a whole request frame (without its length prefix) whose version is supported.

    The frame is checked against its schema first (see ``validate``): kio's native reader must
    never see a length it would trust into an abort, nor a null where the schema forbids one.
    """
    api_key, api_version, correlation_id = peek_header(frame)
    validate_request(frame, api_key, api_version, request_class(api_key, api_version))
    read_header, read_body = _readers(api_key, api_version)
    try:
        header, used = read_header(frame, 0)
        body, _ = read_body(frame, used)
    except Exception as exc:  # the native reader raises assorted errors on bad input
        raise MalformedRequest(
            f"{API_NAMES.get(api_key, f'api key {api_key}')} v{api_version} does not decode: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    # Trailing bytes are ignored, as Kafka's own request parser does: librdkafka's admin
    # Metadata v12 request carries three of them.
    return DecodedRequest(api_key, api_version, correlation_id, header.client_id, body)


# ----------------------------------------------------------------------------- building

_ENTITY, _ENTITY_TUPLE, _PRIMITIVE_TUPLE, _PRIMITIVE = range(4)


def _to_error_code(value: object) -> object:
    if isinstance(value, ErrorCode):
        return value
    assert isinstance(value, int)
    return ErrorCode(value)


def _to_timedelta(value: object) -> object:
    if isinstance(value, datetime.timedelta):
        return value
    assert isinstance(value, int)
    return datetime.timedelta(milliseconds=value)


def _to_datetime(value: object) -> object:
    if isinstance(value, int):
        if value < 0:
            return None
        return datetime.datetime.fromtimestamp(value / 1000, tz=datetime.UTC)
    return value


def _to_uuid(value: object) -> object:
    return value if value is None or isinstance(value, uuid.UUID) else uuid.UUID(str(value))


_CONVERTERS: dict[str, Callable[[object], object]] = {
    "error_code": _to_error_code,
    "timedelta_i32": _to_timedelta,
    "timedelta_i64": _to_timedelta,
    "datetime_i64": _to_datetime,
    "uuid": _to_uuid,
}


def _unwrap_optional(tp: Any) -> Any:
    if get_origin(tp) in (UnionType, Union):
        args = [a for a in get_args(tp) if a is not NoneType]
        if len(args) == 1:
            return args[0]
    return tp


_Step = tuple[str, int, Any, Callable[[object], object] | None]
_PLANS: dict[type[Any], tuple[_Step, ...]] = {}


def _plan(cls: type[Any]) -> tuple[_Step, ...]:
    plan = _PLANS.get(cls)
    if plan is None:
        plan = _PLANS[cls] = _make_plan(cls)
    return plan


def _make_plan(cls: type[Any]) -> tuple[_Step, ...]:
    steps: list[_Step] = []
    for field in dataclasses.fields(cls):
        tp = _unwrap_optional(field.type)
        converter = _CONVERTERS.get(field.metadata.get("kafka_type", ""))
        if get_origin(tp) is tuple:
            inner = _unwrap_optional(get_args(tp)[0])
            if dataclasses.is_dataclass(inner):
                steps.append((field.name, _ENTITY_TUPLE, inner, None))
            else:
                steps.append((field.name, _PRIMITIVE_TUPLE, inner, converter))
        elif dataclasses.is_dataclass(tp):
            steps.append((field.name, _ENTITY, tp, None))
        else:
            steps.append((field.name, _PRIMITIVE, tp, converter))
    return tuple(steps)


def build(cls: type[Any], values: Mapping[str, Any]) -> Any:
    """The ``cls`` entity from plain values; keys the version lacks are ignored."""
    kwargs: dict[str, Any] = {}
    for name, kind, inner, converter in _plan(cls):
        if name not in values:
            continue
        value = values[name]
        if value is not None:
            if kind == _ENTITY_TUPLE:
                value = tuple(
                    item if isinstance(item, inner) else build(inner, item) for item in value
                )
            elif kind == _ENTITY:
                if not isinstance(value, inner):
                    value = build(inner, value)
            elif kind == _PRIMITIVE_TUPLE:
                value = tuple(map(converter, value)) if converter else tuple(value)
            elif converter is not None:
                value = converter(value)
        kwargs[name] = value
    return cls(**kwargs)


_Writers = tuple[Callable[..., None], Callable[..., None], type[Any]]
_WRITERS: dict[type[Any], _Writers] = {}


def _writers(cls: type[Any]) -> _Writers:
    found = _WRITERS.get(cls)
    if found is None:
        header_cls = cls.__header_schema__
        found = _WRITERS[cls] = (entity_writer(header_cls), entity_writer(cls), header_cls)
    return found


def encode_response(cls: type[Any], correlation_id: int, entity: Any) -> bytes:
    """A complete response frame: length prefix, response header (version from ``cls``), body."""
    write_header, write_body, header_cls = _writers(cls)
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    write_header(buffer, header_cls(correlation_id=correlation_id))
    write_body(buffer, entity)
    view = buffer.getbuffer()
    _LENGTH.pack_into(view, 0, len(view) - 4)
    del view
    return buffer.getvalue()


def encode_body(cls: type[Any], entity: Any) -> bytes:
    """The response body alone, for answers cached across requests (Metadata)."""
    write_body = _writers(cls)[1]
    buffer = io.BytesIO()
    write_body(buffer, entity)
    return buffer.getvalue()


def frame_with_body(cls: type[Any], correlation_id: int, body: bytes) -> bytes:
    """A response frame around a body encoded earlier by ``encode_body``."""
    write_header, _, header_cls = _writers(cls)
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    write_header(buffer, header_cls(correlation_id=correlation_id))
    buffer.write(body)
    view = buffer.getbuffer()
    _LENGTH.pack_into(view, 0, len(view) - 4)
    del view
    return buffer.getvalue()
