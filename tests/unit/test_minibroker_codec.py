"""Protocol round trips through kio: what the broker builds decodes to what it meant."""

from __future__ import annotations

import io
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from minibroker.protocol.codec import (
    MalformedRequest,
    build,
    decode_request,
    encode_response,
    request_class,
    response_class,
)
from minibroker.protocol.versions import SUPPORTED_VERSIONS

names = st.text(alphabet="abcdefghij.-_", min_size=1, max_size=20)


def decode_response(api_key: int, version: int, frame: bytes) -> tuple[int, Any]:
    (length,) = struct.unpack_from(">i", frame, 0)
    assert length == len(frame) - 4
    cls = response_class(api_key, version)
    header, used = entity_reader(cls.__header_schema__)(frame[4:], 0)
    return header.correlation_id, entity_reader(cls)(frame[4:], used)[0]


@pytest.mark.parametrize("version", range(0, 13))
@settings(max_examples=20, deadline=None)
@given(
    topics=st.lists(
        st.tuples(names, st.lists(st.integers(1, 9), min_size=1, max_size=3, unique=True)),
        max_size=4,
    ),
    correlation_id=st.integers(0, 2**31 - 1),
)
def test_metadata_response_round_trips_in_every_served_version(
    version: int, topics: list[tuple[str, list[int]]], correlation_id: int
) -> None:
    values = {
        "throttle_time": 0,
        "brokers": [{"node_id": 1, "host": "127.0.0.1", "port": 9092, "rack": "r1"}],
        "cluster_id": "c",
        "controller_id": 1,
        "topics": [
            {
                "error_code": 0,
                "name": name,
                "topic_id": None,
                "partitions": [
                    {
                        "error_code": 0,
                        "partition_index": 0,
                        "leader_id": replicas[0],
                        "leader_epoch": 3,
                        "replica_nodes": replicas,
                        "isr_nodes": replicas[:1],
                        "offline_replicas": [],
                    }
                ],
            }
            for name, replicas in topics
        ],
    }
    cls = response_class(3, version)
    frame = encode_response(cls, correlation_id, build(cls, values))
    got_id, decoded = decode_response(3, version, frame)
    assert got_id == correlation_id
    assert [t.name for t in decoded.topics] == [name for name, _ in topics]
    for topic, (_, replicas) in zip(decoded.topics, topics, strict=True):
        assert list(topic.partitions[0].replica_nodes) == replicas
        assert list(topic.partitions[0].isr_nodes) == replicas[:1]
        if version >= 7:
            assert topic.partitions[0].leader_epoch == 3


@pytest.mark.parametrize(("api_key", "bounds"), sorted(SUPPORTED_VERSIONS.items()))
def test_every_advertised_version_exists_in_kio(api_key: int, bounds: tuple[int, int]) -> None:
    for version in range(bounds[0], bounds[1] + 1):
        assert request_class(api_key, version).__api_key__ == api_key
        assert response_class(api_key, version).__version__ == version


@settings(deadline=None)
@given(records=st.binary(max_size=200), acks=st.sampled_from([0, 1, -1]))
def test_produce_request_decodes_with_opaque_records(records: bytes, acks: int) -> None:
    cls = request_class(0, 9)
    buffer = io.BytesIO()
    entity_writer(cls.__header_schema__)(
        buffer,
        cls.__header_schema__(
            request_api_key=0, request_api_version=9, correlation_id=5, client_id="c"
        ),
    )
    entity_writer(cls)(
        buffer,
        build(
            cls,
            {
                "acks": acks,
                "timeout": 1000,
                "topic_data": [{"name": "t", "partition_data": [{"index": 2, "records": records}]}],
            },
        ),
    )
    decoded = decode_request(buffer.getvalue())
    assert (decoded.api_key, decoded.api_version, decoded.correlation_id) == (0, 9, 5)
    assert decoded.body.acks == acks
    assert decoded.body.topic_data[0].partition_data[0].records == records


def test_truncated_request_is_malformed() -> None:
    with pytest.raises(MalformedRequest):
        decode_request(struct.pack(">hhih", 3, 12, 1, 4) + b"ab")
    with pytest.raises(MalformedRequest):
        decode_request(b"\x00")


def test_build_converts_plain_values() -> None:
    cls = response_class(0, 9)
    entity = build(
        cls,
        {
            "throttle_time": 7,
            "responses": [
                {
                    "name": "t",
                    "partition_responses": [
                        {"index": 0, "error_code": 19, "base_offset": -1, "record_errors": []}
                    ],
                }
            ],
            "not_a_field_in_this_version": 1,
        },
    )
    assert entity.throttle_time.total_seconds() == 0.007
    assert entity.responses[0].partition_responses[0].error_code is ErrorCode.not_enough_replicas
