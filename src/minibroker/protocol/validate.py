"""Check a request frame against its schema before kio's native decoder sees it.

kio 0.6.5 trusts the lengths it reads: an unsigned varint array length beyond 32 bits makes it
allocate that many elements and the process aborts, and a null where the schema forbids one
decodes as ``None`` and fails later in a handler. Kafka's generated readers refuse both
(``InvalidRequestException`` in the request-parsing path, after which the broker closes the
connection), so this module walks the request schema first and does the same.

The walk is derived from kio's entity classes (dataclass fields carrying the Kafka type, the
flexible flag, nested entities and tags), following the same wire rules as kio's writers; no API
is described by hand. Every length prefix (int16/int32 lengths, compact lengths, tagged-field
counts and sizes) is checked against the bytes left and against Kafka's bounds, and every null
against the field's nullability. Checkers are built once per request class and cached.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

from minibroker.errors import MinibrokerError
from minibroker.protocol.versions import API_NAMES

__all__ = ["MalformedRequest", "validate_request"]


class MalformedRequest(MinibrokerError):
    """The frame does not decode as the request its header announces (the broker closes that
    connection, as Kafka does; raised to Python callers of the decoder only)."""


class _Fault(Exception):
    """Raised inside the walk; ``path`` grows as it unwinds through fields and elements."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path: list[str] = []


# A checker reads one value starting at ``pos`` that must end by ``end``; it returns where the
# value ends, or raises _Fault.
_Check = Callable[[bytes, int, int], int]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I8 = struct.Struct(">b")

# Kafka refuses a string longer than this (``Short.MAX_VALUE``), in either encoding.
_MAX_STRING_BYTES = 0x7FFF
_MAX_UVARINT = 0xFFFFFFFF

_FIXED_BYTES: dict[str, int] = {
    "bool": 1,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}


def _uvarint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """(value, next position) of an unsigned varint: at most 5 bytes and 32 bits, as Kafka."""
    value = 0
    shift = 0
    while True:
        if pos >= end:
            raise _Fault("an unsigned varint runs past the end of the frame")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
        if shift > 28:
            raise _Fault("an unsigned varint is longer than 5 bytes")
    if value > _MAX_UVARINT:
        raise _Fault(f"an unsigned varint ({value}) is beyond 32 bits")
    return value, pos


def _skip(size: int) -> _Check:
    def check(buf: bytes, pos: int, end: int) -> int:
        pos += size
        if pos > end:
            raise _Fault(f"{size} bytes needed, {end - pos + size} left")
        return pos

    return check


def _sized_check(flexible: bool, nullable: bool, max_bytes: int | None, what: str) -> _Check:
    """A string, bytes or records value: a length prefix, then that many bytes."""
    bound = _MAX_STRING_BYTES if max_bytes is None else max_bytes

    if flexible:

        def check_compact(buf: bytes, pos: int, end: int) -> int:
            if pos < end and buf[pos] < 0x80:  # one-byte length: the common case
                stored = buf[pos]
                pos += 1
            else:
                stored, pos = _uvarint(buf, pos, end)
            if stored == 0:
                if nullable:
                    return pos
                raise _Fault(f"null compact {what} in a non-nullable field")
            length = stored - 1
            if length > bound:
                raise _Fault(f"compact {what} length {length} exceeds the limit of {bound}")
            pos += length
            if pos > end:
                raise _Fault(
                    f"compact {what} length {length} exceeds the {end - pos + length} bytes left"
                )
            return pos

        return check_compact

    prefix = _I16 if what == "string" else _I32
    width = prefix.size

    def check_classic(buf: bytes, pos: int, end: int) -> int:
        if pos + width > end:
            raise _Fault(f"{what} length prefix runs past the end of the frame")
        length = prefix.unpack_from(buf, pos)[0]
        pos += width
        if length < 0:
            if length == -1 and nullable:
                return pos
            if length == -1:
                raise _Fault(f"null {what} in a non-nullable field")
            raise _Fault(f"negative {what} length {length}")
        if length > bound:
            raise _Fault(f"{what} length {length} exceeds the limit of {bound}")
        pos += length
        if pos > end:
            raise _Fault(f"{what} length {length} exceeds the {end - pos + length} bytes left")
        return pos

    return check_classic


def _array_check(
    item: _Check, item_bytes: int, fixed: bool, flexible: bool, nullable: bool
) -> _Check:
    min_item_bytes = max(item_bytes, 1)

    def check(buf: bytes, pos: int, end: int) -> int:
        if flexible:
            if pos < end and buf[pos] < 0x80:  # one-byte length: the common case
                count = buf[pos] - 1
                pos += 1
            else:
                stored, pos = _uvarint(buf, pos, end)
                count = stored - 1
        else:
            if pos + 4 > end:
                raise _Fault("array length prefix runs past the end of the frame")
            count = _I32.unpack_from(buf, pos)[0]
            pos += 4
        if count < 0:
            if count == -1 and nullable:
                return pos
            if count == -1:
                raise _Fault("null array in a non-nullable field")
            raise _Fault(f"negative array length {count}")
        # Kafka refuses a count above the bytes left; each element also needs its minimum size.
        if count * min_item_bytes > end - pos:
            raise _Fault(
                f"array of {count} elements of at least {min_item_bytes} bytes each exceeds "
                f"the {end - pos} bytes left"
            )
        if fixed:
            return pos + count * item_bytes
        for index in range(count):
            try:
                pos = item(buf, pos, end)
            except _Fault as fault:
                fault.path.append(f"[{index}]")
                raise
        return pos

    return check


def _nullable_entity_check(entity: _Check) -> _Check:
    # KIP-893: a nullable struct is preceded by an int8 marker, -1 for null and 1 otherwise.
    def check(buf: bytes, pos: int, end: int) -> int:
        if pos >= end:
            raise _Fault("a struct marker runs past the end of the frame")
        marker = _I8.unpack_from(buf, pos)[0]
        if marker == -1:
            return pos + 1
        if marker != 1:
            raise _Fault(f"struct marker {marker} is neither -1 (null) nor 1")
        return entity(buf, pos + 1, end)

    return check


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _Plan:
    """How to check one field's value, and the fewest bytes it can take."""

    check: _Check
    min_bytes: int
    fixed: bool


def _field_plan(field: dataclasses.Field[Any], flexible: bool, *, client_id: bool) -> _Plan:
    nullable = is_optional(field)
    if client_id:
        # RequestHeader.client_id is a nullable classic string in every header version.
        return _Plan(check=_sized_check(False, True, None, "string"), min_bytes=2, fixed=False)
    kind = classify_field(field)
    if isinstance(kind, EntityField | EntityTupleField):
        inner = _entity_plan(kind.type_)
        if isinstance(kind, EntityField):
            if nullable:
                return _Plan(check=_nullable_entity_check(inner.check), min_bytes=1, fixed=False)
            return inner
        return _Plan(
            check=_array_check(inner.check, inner.min_bytes, False, flexible, nullable),
            min_bytes=1 if flexible else 4,
            fixed=False,
        )
    assert isinstance(kind, PrimitiveField | PrimitiveTupleField)
    kafka_type = get_schema_field_type(field)
    size = _FIXED_BYTES.get(kafka_type)
    if size is not None:
        item = _Plan(check=_skip(size), min_bytes=size, fixed=True)
    elif kafka_type in ("string", "bytes", "records"):
        # The nullability of a primitive array belongs to the array, not to its elements.
        item_nullable = nullable and isinstance(kind, PrimitiveField)
        bound = None if kafka_type == "string" else _MAX_UVARINT
        what = "string" if kafka_type == "string" else "bytes"
        item = _Plan(
            check=_sized_check(flexible, item_nullable, bound, what),
            min_bytes=1 if flexible else (2 if what == "string" else 4),
            fixed=False,
        )
    else:
        raise NotImplementedError(f"no validation rule for kafka type {kafka_type!r}")
    if isinstance(kind, PrimitiveField):
        return item
    return _Plan(
        check=_array_check(item.check, item.min_bytes, item.fixed, flexible, nullable),
        min_bytes=1 if flexible else 4,
        fixed=False,
    )


def _tags_check(tagged: dict[int, tuple[str, _Check]]) -> _Check:
    def check(buf: bytes, pos: int, end: int) -> int:
        if pos < end and buf[pos] == 0:  # no tagged fields: the common case
            return pos + 1
        count, pos = _uvarint(buf, pos, end)
        if count * 2 > end - pos:  # a tag and a size take a byte each at least
            raise _Fault(f"{count} tagged fields exceed the {end - pos} bytes left")
        for _ in range(count):
            tag, pos = _uvarint(buf, pos, end)
            size, pos = _uvarint(buf, pos, end)
            stop = pos + size
            if stop > end:
                raise _Fault(f"tagged field {tag} of {size} bytes exceeds the {end - pos} left")
            known = tagged.get(tag)
            if known is not None:
                name, value_check = known
                try:
                    used = value_check(buf, pos, stop)
                except _Fault as fault:
                    fault.path.append(name)
                    raise
                if used != stop:
                    raise _Fault(f"tagged field {name} uses {used - pos} of its {size} bytes")
            pos = stop
        return pos

    return check


_ENTITY_PLANS: dict[type[Any], _Plan] = {}
_REQUEST_CHECKS: dict[type[Any], _Check] = {}


def _entity_plan(cls: type[Any]) -> _Plan:
    plan = _ENTITY_PLANS.get(cls)
    if plan is None:
        plan = _ENTITY_PLANS[cls] = _make_entity_plan(cls)
    return plan


def _make_entity_plan(cls: type[Any]) -> _Plan:
    flexible: bool = cls.__flexible__
    is_header = cls.__name__ == "RequestHeader"
    steps: list[tuple[str, _Check]] = []
    tagged: dict[int, tuple[str, _Check]] = {}
    min_bytes = 0
    run: list[str] = []  # consecutive fixed-size fields are checked as one span
    run_bytes = 0

    def close_run() -> None:
        nonlocal run_bytes
        if run:
            steps.append(("/".join(run), _skip(run_bytes)))
            run.clear()
            run_bytes = 0

    for field in dataclasses.fields(cls):
        plan = _field_plan(field, flexible, client_id=is_header and field.name == "client_id")
        tag = get_field_tag(field)
        if tag is not None:
            tagged[int(tag)] = (field.name, plan.check)
            continue
        min_bytes += plan.min_bytes
        if plan.fixed:
            run.append(field.name)
            run_bytes += plan.min_bytes
        else:
            close_run()
            steps.append((field.name, plan.check))
    close_run()
    if flexible:
        steps.append(("tagged fields", _tags_check(tagged)))
        min_bytes += 1
    named_steps = tuple(steps)

    def check(buf: bytes, pos: int, end: int) -> int:
        for name, step in named_steps:
            try:
                pos = step(buf, pos, end)
            except _Fault as fault:
                fault.path.append(name)
                raise
        return pos

    return _Plan(check=check, min_bytes=min_bytes, fixed=False)


def _make_request_check(cls: type[Any]) -> _Check:
    header = _entity_plan(cls.__header_schema__).check
    body = _entity_plan(cls).check

    def check(buf: bytes, pos: int, end: int) -> int:
        try:
            pos = header(buf, pos, end)
        except _Fault as fault:
            fault.path.append("header")
            raise
        return body(buf, pos, end)

    return check


def validate_request(frame: bytes, api_key: int, api_version: int, cls: type[Any]) -> None:
    """Refuse ``frame`` (without its length prefix) unless it fits ``cls``, the kio request
    class of ``api_key`` v``api_version``; raise MalformedRequest naming the field and the fault.

    Trailing bytes after the body are allowed, as Kafka's request parser allows them.
    """
    check = _REQUEST_CHECKS.get(cls)
    if check is None:
        check = _REQUEST_CHECKS[cls] = _make_request_check(cls)
    try:
        check(frame, 0, len(frame))
    except _Fault as fault:
        where = ".".join(reversed(fault.path)).replace(".[", "[") or "request"
        name = API_NAMES.get(api_key, f"api key {api_key}")
        raise MalformedRequest(f"{name} v{api_version} {where}: {fault.reason}") from None
