"""Which DataFrame columns the writer reads, checked against the schema on the driver.

The columns are those of Spark's own Kafka sink (structured-streaming-kafka-integration):
``value`` (required), ``key``, ``headers`` and ``topic``. Checking them before the job starts
turns a schema mistake into one clear driver-side error instead of a failed task on every
executor.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    StringType,
    StructField,
    StructType,
)

from failover_partitioner.errors import FailoverError

_STRING_OR_BINARY = "string or binary"
_HEADERS_TYPE = "array<struct<key:string,value:binary>>"


class ColumnError(FailoverError, ValueError):
    """The DataFrame's columns do not fit the Kafka sink layout."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RowLayout:
    """How a task reads a row: which columns are selected, in this order, and their types.

    Only the columns present are selected (value, then key, headers, topic when present):
    every selected column is a value Spark must convert and send to Python for each row.
    """

    value_is_binary: bool
    key_is_binary: bool
    has_key: bool
    has_headers: bool
    topic_from_rows: bool

    def columns(self) -> tuple[str, ...]:
        """Column names for ``DataFrame.select``, in the order tasks read them."""
        present = (
            ("value", True),
            ("key", self.has_key),
            ("headers", self.has_headers),
            ("topic", self.topic_from_rows),
        )
        return tuple(name for name, selected in present if selected)


def plan_rows(schema: StructType, *, topic: str | None) -> RowLayout:
    """Check ``schema`` against the sink layout and say how tasks will read it.

    ``topic``, when given, is used for every row and a ``topic`` column is then ignored (as in
    Spark's sink, where the ``topic`` option overrides the column). Other columns are ignored,
    except ``partition``: this writer chooses partitions itself, so a caller's choice would be
    silently dropped.
    """
    fields = {f.name: f for f in schema.fields}
    value = fields.get("value")
    if value is None:
        raise ColumnError(
            f"the DataFrame has no 'value' column ({_STRING_OR_BINARY}); its columns are "
            f"{sorted(fields)}. Select or alias the payload as 'value'."
        )
    _require_string_or_binary(value)
    key = fields.get("key")
    if key is not None:
        _require_string_or_binary(key)
    headers = fields.get("headers")
    if headers is not None and not _is_headers_type(headers.dataType):
        raise ColumnError(
            f"column 'headers' has type {headers.dataType.simpleString()}, expected "
            f"{_HEADERS_TYPE} (as in Spark's Kafka sink)."
        )
    if "partition" in fields:
        raise ColumnError(
            "the DataFrame has a 'partition' column, but this writer chooses partitions itself "
            "(it routes around partitions below min.insync.replicas). Drop the column; keyed "
            "rows keep their key's partition while it is healthy."
        )
    topic_column = fields.get("topic")
    if topic is not None:
        _check_topic_name(topic)
        topic_from_rows = False
    elif topic_column is None:
        raise ColumnError(
            "no topic: pass topic=... or add a string column 'topic' naming each row's topic."
        )
    elif not isinstance(topic_column.dataType, StringType):
        raise ColumnError(
            f"column 'topic' has type {topic_column.dataType.simpleString()}, expected string."
        )
    else:
        topic_from_rows = True
    return RowLayout(
        value_is_binary=isinstance(value.dataType, BinaryType),
        key_is_binary=key is not None and isinstance(key.dataType, BinaryType),
        has_key=key is not None,
        has_headers=headers is not None,
        topic_from_rows=topic_from_rows,
    )


def _require_string_or_binary(field: StructField) -> None:
    if not isinstance(field.dataType, StringType | BinaryType):
        raise ColumnError(
            f"column {field.name!r} has type {field.dataType.simpleString()}, expected "
            f"{_STRING_OR_BINARY}. Cast it, e.g. CAST({field.name} AS STRING) or to_json(...)."
        )


def _is_headers_type(data_type: DataType) -> bool:
    if not isinstance(data_type, ArrayType):
        return False
    element = data_type.elementType
    if not isinstance(element, StructType) or len(element.fields) != 2:
        return False
    key, value = element.fields
    return (
        key.name == "key"
        and isinstance(key.dataType, StringType)
        and value.name == "value"
        and isinstance(value.dataType, BinaryType)
    )


def _check_topic_name(topic: object) -> None:
    if not isinstance(topic, str) or not topic:
        raise ColumnError(f"topic must be a non-empty string, got {topic!r}.")
