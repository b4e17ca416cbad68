"""The writer's schema check: the right columns pass, every wrong one is named on the driver."""

from __future__ import annotations

import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructField,
    StructType,
)

from failover_partitioner.errors import FailoverError
from failover_partitioner.spark.columns import ColumnError, plan_rows

HEADERS = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)


def schema(**columns: DataType) -> StructType:
    return StructType([StructField(name, t) for name, t in columns.items()])


def test_value_only_with_topic_argument() -> None:
    layout = plan_rows(schema(value=StringType()), topic="t")
    assert layout.columns() == ("value",)
    assert not layout.value_is_binary
    assert not layout.has_key
    assert not layout.has_headers
    assert not layout.topic_from_rows


def test_every_column_binary_and_topic_per_row() -> None:
    layout = plan_rows(
        schema(value=BinaryType(), key=BinaryType(), headers=HEADERS, topic=StringType()),
        topic=None,
    )
    assert layout.columns() == ("value", "key", "headers", "topic")
    assert layout.value_is_binary
    assert layout.key_is_binary
    assert layout.has_key
    assert layout.has_headers
    assert layout.topic_from_rows


def test_topic_argument_wins_over_column() -> None:
    layout = plan_rows(schema(value=StringType(), topic=StringType()), topic="t")
    assert not layout.topic_from_rows
    assert layout.columns() == ("value",)


def test_extra_columns_are_ignored() -> None:
    layout = plan_rows(
        schema(id=IntegerType(), key=StringType(), value=StringType(), extra=BinaryType()),
        topic="t",
    )
    assert layout.columns() == ("value", "key")


@pytest.mark.parametrize(
    ("columns", "topic", "expected"),
    [
        (schema(payload=StringType()), "t", r"no 'value' column .*\['payload'\]"),
        (schema(value=IntegerType()), "t", r"column 'value' has type int, expected string or"),
        (
            schema(value=StringType(), key=IntegerType()),
            "t",
            r"column 'key' has type int, expected string or binary",
        ),
        (
            schema(value=StringType(), headers=StringType()),
            "t",
            r"column 'headers' has type string, expected array<struct<key:string,value:binary>>",
        ),
        (
            schema(value=StringType(), headers=ArrayType(StringType())),
            "t",
            r"column 'headers' has type array<string>",
        ),
        (schema(value=StringType()), None, r"no topic: pass topic=\.\.\. or add a string"),
        (
            schema(value=StringType(), topic=IntegerType()),
            None,
            r"column 'topic' has type int, expected string",
        ),
        (schema(value=StringType(), partition=IntegerType()), "t", r"'partition' column"),
        (schema(value=StringType()), "", r"topic must be a non-empty string"),
    ],
)
def test_wrong_schema_names_the_column_and_type(
    columns: StructType, topic: str | None, expected: str
) -> None:
    with pytest.raises(ColumnError, match=expected) as info:
        plan_rows(columns, topic=topic)
    assert isinstance(info.value, FailoverError)
