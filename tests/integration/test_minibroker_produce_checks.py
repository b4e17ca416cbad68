"""What a broker refuses from a client, byte for byte, then a real client's round trip after.

Malformed batches (Kafka's ``ProduceRequest.validateRecords``, ``analyzeAndValidateRecords``
and ``LogValidator``), topic names that collide on '.' against '_' (KRaft's
``ReplicationControlManager``) and Kafka's internal topics: each refusal must leave the cluster
as it was, so a confluent-kafka producer and consumer still see exactly their own messages.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # the stubs lag the package
    AdminClient,
    NewTopic,
)
from kio.schema.errors import ErrorCode

from minibroker import Cluster
from tests.integration.test_minibroker_protocol import Wire, batch, produce
from tests.unit.test_minibroker_log import patched, with_records

GOOD = batch([b"a", b"b", b"c"])


# One record of length -1 (zig-zag 0x01), claiming 2**24 records: stored, it made every
# ListOffsets by timestamp walk that many times in place on the loop all brokers share.
NOT_MOVING = with_records(GOOD, b"\x01\x00\x00\x00", 2**24)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with Cluster(brokers=2) as running:
        yield running


def leader_wire(cluster: Cluster, topic: str) -> Wire:
    leader = cluster.partition_state(topic, 0).leader
    return Wire(cluster.bootstrap_servers.split(",")[leader - 1])


def round_trip(cluster: Cluster, topic: str, values: list[bytes]) -> list[bytes]:
    """Produce ``values`` with confluent-kafka (acks=all), then read the partition from 0."""
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            errors.append(err)

    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for value in values:
        producer.produce(topic, value=value, partition=0, on_delivery=on_delivery)
    assert producer.flush(30) == 0
    assert errors == []
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": f"checks-{topic}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        read: list[bytes] = []
        end = cluster.partition_state(topic, 0).high_watermark
        deadline = time.monotonic() + 30
        while len(read) < end and time.monotonic() < deadline:
            for msg in consumer.consume(100, 0.5):
                assert msg.error() is None, msg.error()
                read.append(msg.value() or b"")
        return read
    finally:
        consumer.close()


@pytest.mark.parametrize(
    ("records", "error"),
    [
        pytest.param(b"", ErrorCode.invalid_record, id="no-batch"),
        pytest.param(GOOD + GOOD, ErrorCode.invalid_record, id="two-batches"),
        pytest.param(patched(GOOD, ">b", 16, 1, crc=False), ErrorCode.invalid_record, id="magic-1"),
        pytest.param(
            patched(GOOD, ">b", 16, 3, crc=False), ErrorCode.corrupt_message, id="magic-3"
        ),
        pytest.param(patched(GOOD, ">q", 0, 7, crc=False), ErrorCode.invalid_record, id="offset-7"),
        pytest.param(patched(GOOD, ">i", 57, 0), ErrorCode.invalid_record, id="count-0"),
        pytest.param(patched(GOOD, ">i", 57, 5), ErrorCode.invalid_record, id="count-5-of-3"),
        pytest.param(patched(GOOD, ">i", 23, 999_999), ErrorCode.invalid_record, id="delta-huge"),
        pytest.param(patched(GOOD, ">q", 43, 5000), ErrorCode.invalid_record, id="pid-no-seq"),
    ],
)
def test_a_malformed_batch_is_refused_with_kafkas_code_and_clients_carry_on(
    cluster: Cluster, records: bytes, error: ErrorCode, request: pytest.FixtureRequest
) -> None:
    topic = f"checks-{request.node.callspec.id}"
    cluster.create_topic(topic, partitions=1, replication_factor=2)
    wire = leader_wire(cluster, topic)
    try:
        assert produce(wire, topic, 0, GOOD).error_code == ErrorCode.none
        refused = produce(wire, topic, 0, records)
        assert (refused.error_code, refused.base_offset) == (error, -1)
        assert refused.error_message
        assert cluster.partition_state(topic, 0).log_end_offset == 3
    finally:
        wire.close()
    assert round_trip(cluster, topic, [b"after"]) == [b"a", b"b", b"c", b"after"]


def _offset_for(wire: Wire, topic: str, timestamp: int) -> tuple[ErrorCode, int]:
    response = wire.call(
        2,
        7,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {"name": topic, "partitions": [{"partition_index": 0, "timestamp": timestamp}]}
            ],
        },
    )
    found = response.topics[0].partitions[0]
    return found.error_code, int(found.offset)


def test_a_record_that_does_not_move_forward_does_not_stall_list_offsets(
    cluster: Cluster,
) -> None:
    """Produce does not read records (docs/minibroker.md), so the batch is stored; ListOffsets
    by timestamp, which reads them, gives up on it at once instead of stepping in place
    ``count`` times on the loop every broker shares (2**24 here: about 12 s and 2 GB before)."""
    cluster.create_topic("not-moving", partitions=1, replication_factor=2)
    wire = leader_wire(cluster, "not-moving")
    try:
        assert produce(wire, "not-moving", 0, NOT_MOVING).error_code == ErrorCode.none
        started = time.monotonic()
        assert _offset_for(wire, "not-moving", 0)[0] == ErrorCode.none
        assert _offset_for(wire, "not-moving", -3)[0] == ErrorCode.none
        assert time.monotonic() - started < 2
    finally:
        wire.close()
    cluster.create_topic("after-not-moving", partitions=1, replication_factor=2)
    assert round_trip(cluster, "after-not-moving", [b"x"]) == [b"x"]


def _create_topics(wire: Wire, *names: str) -> list[tuple[ErrorCode, str]]:
    response = wire.call(
        19,
        7,
        {
            "topics": [
                {
                    "name": name,
                    "num_partitions": 1,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [],
                }
                for name in names
            ],
            "timeout": 5000,
            "validate_only": False,
        },
    )
    return [(t.error_code, t.error_message or "") for t in response.topics]


def _metadata(wire: Wire, name: str) -> Any:
    return wire.call(
        3,
        12,
        {
            "topics": [{"name": name, "topic_id": None}],
            "allow_auto_topic_creation": True,
            "include_topic_authorized_operations": False,
        },
    ).topics[0]


def test_topic_names_colliding_on_dot_and_underscore_are_refused(cluster: Cluster) -> None:
    wire = Wire(cluster.bootstrap_servers.split(",")[0])
    try:
        assert _create_topics(wire, "orders.eu") == [(ErrorCode.none, "")]
        [(code, message)] = _create_topics(wire, "orders_eu")
        assert code == ErrorCode.invalid_topic_exception
        assert "collides with existing topic 'orders.eu'" in message
        [(code, _)] = _create_topics(wire, "orders.eu")
        assert code == ErrorCode.topic_already_exists
        auto = _metadata(wire, "orders_eu")
        assert (auto.error_code, auto.partitions) == (ErrorCode.invalid_topic_exception, ())
        # __consumer_offsets exists here as its partitions' leaders: it collides too
        [(code, _)] = _create_topics(wire, "__consumer.offsets")
        assert code == ErrorCode.invalid_topic_exception
    finally:
        wire.close()
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    refused = admin.create_topics([NewTopic("orders_eu", 1, 1)])["orders_eu"].exception(10)
    assert refused is not None
    assert refused.args[0].code() == KafkaError.TOPIC_EXCEPTION
    assert "orders_eu" not in cluster.topics()
    assert "__consumer.offsets" not in cluster.topics()
    assert round_trip(cluster, "orders.eu", [b"eu"]) == [b"eu"]


def test_internal_topics_are_never_created_nor_written_by_clients(cluster: Cluster) -> None:
    wire = Wire(cluster.bootstrap_servers.split(",")[0])
    try:
        offsets = _metadata(wire, "__consumer_offsets")
        assert (offsets.error_code, offsets.is_internal, offsets.partitions) == (
            ErrorCode.unknown_topic_or_partition,
            True,
            (),
        )
        assert [code for code, _ in _create_topics(wire, "__consumer_offsets")] == [
            ErrorCode.topic_already_exists
        ]
        assert [code for code, _ in _create_topics(wire, "__transaction_state")] == [
            ErrorCode.invalid_topic_exception
        ]
        for name in ("__consumer_offsets", "__transaction_state"):
            refused = produce(wire, name, 0, batch([b"x"]))
            assert refused.error_code == ErrorCode.invalid_topic_exception
            assert refused.error_message == f"Cannot append to internal topic {name}"
    finally:
        wire.close()
    assert not {"__consumer_offsets", "__transaction_state"} & set(cluster.topics())
    # Groups keep their offsets outside any topic: a commit still lands and reads back.
    cluster.create_topic("committed", partitions=1, replication_factor=2)
    assert round_trip(cluster, "committed", [b"c"]) == [b"c"]
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "g"})
    try:
        consumer.commit(offsets=[TopicPartition("committed", 0, 1)], asynchronous=False)
        [found] = consumer.committed([TopicPartition("committed", 0)], timeout=10)
        assert found.offset == 1
    finally:
        consumer.close()
