"""The wire protocol edge cases, driven by a raw socket client built on kio.

What a client library hides (bad frames, CRC errors, sequence gaps, the exact error code) is
asserted here byte for byte.
"""

from __future__ import annotations

import datetime
import io
import socket
import struct
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from kio.records.schema import NewRecordBatch, Record
from kio.records.writers import write_new_batch
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import TZAwareMicros, i8, i16, i32, i64

from minibroker import Cluster
from minibroker.protocol.codec import build, request_class, response_class

LEN = struct.Struct(">i")


class Wire:
    """One raw connection: send any request version, read its response."""

    def __init__(self, address: str) -> None:
        host, port = address.split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def send_frame(self, payload: bytes) -> None:
        self.sock.sendall(LEN.pack(len(payload)) + payload)

    def encode(
        self,
        api_key: int,
        version: int,
        values: Mapping[str, Any],
        *,
        client_id: str = "wire-test",
    ) -> bytes:
        cls = request_class(api_key, version)
        self.correlation_id += 1
        buffer = io.BytesIO()
        header = cls.__header_schema__(
            request_api_key=api_key,
            request_api_version=version,
            correlation_id=self.correlation_id,
            client_id=client_id,
        )
        entity_writer(cls.__header_schema__)(buffer, header)
        entity_writer(cls)(buffer, build(cls, values))
        return buffer.getvalue()

    def read_frame(self) -> bytes | None:
        head = self._read_exactly(4)
        if head is None:
            return None
        return self._read_exactly(LEN.unpack(head)[0])

    def _read_exactly(self, size: int) -> bytes | None:
        chunks = b""
        while len(chunks) < size:
            try:
                chunk = self.sock.recv(size - len(chunks))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            chunks += chunk
        return chunks

    def call(self, api_key: int, version: int, values: Mapping[str, Any]) -> Any:
        self.send_frame(self.encode(api_key, version, values))
        return self.receive(api_key, version)

    def receive(self, api_key: int, version: int) -> Any:
        """The response to the last request sent (for a request sent earlier and parked)."""
        frame = self.read_frame()
        assert frame is not None, "the broker closed the connection"
        cls = response_class(api_key, version)
        header, used = entity_reader(cls.__header_schema__)(frame, 0)
        assert header.correlation_id == self.correlation_id
        return entity_reader(cls)(frame, used)[0]

    def closed_by_peer(self) -> bool:
        self.sock.settimeout(5)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True


def batch(
    values: list[bytes],
    *,
    producer_id: int = -1,
    epoch: int = -1,
    sequence: int = -1,
    timestamps_ms: list[int] | None = None,
) -> bytes:
    stamps = timestamps_ms or [1_700_000_000_000] * len(values)
    records = tuple(
        Record(
            attributes=i8(0),
            timestamp=TZAwareMicros.parse(
                datetime.datetime.fromtimestamp(ts / 1000, tz=datetime.UTC)
            ),
            offset=i64(i),
            key=None,
            value=v,
            headers=(),
        )
        for i, (v, ts) in enumerate(zip(values, stamps, strict=True))
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


def produce(wire: Wire, topic: str, partition: int, records: bytes, acks: int = -1) -> Any:
    response = wire.call(
        0,
        9,
        {
            "transactional_id": None,
            "acks": acks,
            "timeout": 5000,
            "topic_data": [
                {"name": topic, "partition_data": [{"index": partition, "records": records}]}
            ],
        },
    )
    return response.responses[0].partition_responses[0]


def long_poll(wire: Wire, topic: str, partition: int, max_wait_ms: int) -> bytes:
    """A Fetch v12 request that waits its whole ``max_wait_ms``: it asks for more than there is."""
    return wire.encode(
        1,
        12,
        {
            "max_wait": max_wait_ms,
            "min_bytes": 1_000_000,
            "max_bytes": 1_000_000,
            "isolation_level": 0,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {"partition": partition, "fetch_offset": 0, "partition_max_bytes": 10_000}
                    ],
                }
            ],
            "forgotten_topics_data": [],
        },
    )


def answer_times(wire: Wire, requests: list[bytes]) -> list[float]:
    """Send ``requests`` back to back; the seconds from then to each response."""
    began = time.monotonic()
    wire.sock.sendall(b"".join(LEN.pack(len(r)) + r for r in requests))
    answered = []
    for _ in requests:
        assert wire.read_frame() is not None, "the broker closed the connection"
        answered.append(time.monotonic() - began)
    return answered


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    config = {"socket.request.max.bytes": "100000", "message.max.bytes": "2000"}
    with Cluster(brokers=2, config=config) as running:
        running.create_topic("wire", partitions=2, replication_factor=2)
        yield running


@pytest.fixture
def wire(cluster: Cluster) -> Iterator[Wire]:
    connection = Wire(cluster.bootstrap_servers.split(",")[0])
    yield connection
    connection.close()


def leader_wire(cluster: Cluster, topic: str, partition: int) -> Wire:
    leader = cluster.partition_state(topic, partition).leader
    return Wire(cluster.bootstrap_servers.split(",")[leader - 1])


def test_api_versions_lists_what_is_served_and_answers_unknown_versions_in_v0(
    wire: Wire,
) -> None:
    for version in range(5):
        response = wire.call(
            18, version, {"client_software_name": "t", "client_software_version": "1"}
        )
        assert response.error_code == ErrorCode.none
        served = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        assert served[0] == (3, 10)
        assert served[1] == (4, 12)
        assert 71 not in served  # telemetry is not implemented, so it is not advertised
    # ApiVersions v99: KIP-511's v0-shaped UNSUPPORTED_VERSION with the supported list
    wire.send_frame(struct.pack(">hhih", 18, 99, 4242, -1))
    frame = wire.read_frame()
    assert frame is not None
    cls = response_class(18, 0)
    header, used = entity_reader(cls.__header_schema__)(frame, 0)
    response = entity_reader(cls)(frame, used)[0]
    assert header.correlation_id == 4242
    assert response.error_code == ErrorCode.unsupported_version
    assert {k.api_key for k in response.api_keys} >= {0, 1, 3, 18}


def test_describe_topic_partitions_pages_by_cursor_in_topic_name_order(wire: Wire) -> None:
    request: dict[str, Any] = {
        "topics": [{"name": "wire"}, {"name": "absent"}],
        "response_partition_limit": 1,
    }
    first = wire.call(75, 0, request)
    assert [(t.name, t.error_code) for t in first.topics] == [
        ("absent", ErrorCode.unknown_topic_or_partition),
        ("wire", ErrorCode.none),
    ]
    assert [p.partition_index for p in first.topics[1].partitions] == [0]
    assert (first.next_cursor.topic_name, first.next_cursor.partition_index) == ("wire", 1)
    cursor = {"topic_name": "wire", "partition_index": 1}
    rest = wire.call(75, 0, {**request, "cursor": cursor})
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in rest.topics] == [
        ("wire", [1])
    ]
    assert rest.next_cursor is None
    described = rest.topics[0].partitions[0]
    assert described.eligible_leader_replicas == described.last_known_elr == ()


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(struct.pack(">hhih", 9999, 0, 1, -1), id="unknown-api-key"),
        pytest.param(struct.pack(">hhih", 0, 99, 1, -1), id="unsupported-version"),
        pytest.param(struct.pack(">hhih", 3, 12, 1, -1) + b"\xff\xff\xff", id="garbage-body"),
        pytest.param(b"\x00\x03", id="shorter-than-a-header"),
        # AddPartitionsToTxn: a real API, not advertised (no transactions). Kafka closes the
        # connection for an API its listener does not enable.
        pytest.param(struct.pack(">hhih", 24, 3, 1, -1), id="api-not-advertised"),
    ],
)
def test_bad_frames_close_only_their_own_connection(
    cluster: Cluster, wire: Wire, payload: bytes
) -> None:
    bystander = Wire(cluster.bootstrap_servers.split(",")[0])
    try:
        wire.send_frame(payload)
        assert wire.closed_by_peer()
        response = bystander.call(
            3,
            12,
            {
                "topics": None,
                "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False,
            },
        )
        assert {t.name for t in response.topics} >= {"wire"}
    finally:
        bystander.close()


def test_a_frame_over_socket_request_max_bytes_closes_the_connection(wire: Wire) -> None:
    wire.sock.sendall(LEN.pack(100_001) + b"\0" * 64)
    assert wire.closed_by_peer()


def test_a_negative_frame_length_closes_the_connection(wire: Wire) -> None:
    wire.sock.sendall(LEN.pack(-1) + b"\0" * 16)
    assert wire.closed_by_peer()


METADATA_ALL = {
    "topics": None,
    "allow_auto_topic_creation": False,
    "include_topic_authorized_operations": False,
}


def test_requests_before_a_bad_frame_are_answered_then_the_connection_closes(
    cluster: Cluster,
) -> None:
    # Kafka reads a connection's next request only after answering the previous one, so a
    # Fetch long poll pipelined before a bad frame is still answered, at its max_wait.
    wire = leader_wire(cluster, "wire", 1)
    try:
        fetch = long_poll(wire, "wire", 1, 300)
        wire.sock.sendall(LEN.pack(len(fetch)) + fetch + LEN.pack(2) + b"\x00\x03")
        frame = wire.read_frame()
        assert frame is not None, "the Fetch before the bad frame was not answered"
        cls = response_class(1, 12)
        header, used = entity_reader(cls.__header_schema__)(frame, 0)
        assert header.correlation_id == wire.correlation_id
        assert entity_reader(cls)(frame, used)[0].error_code == ErrorCode.none
        assert wire.closed_by_peer()
    finally:
        wire.close()


def test_a_connection_is_served_one_request_at_a_time(cluster: Cluster) -> None:
    # Kafka mutes a connection from reading a request until it has answered it: a request sent
    # behind one the broker holds (a Fetch long poll here, an acks=all write waiting for the
    # ISR alike) starts only then, and so waits both times in turn, whatever its partition.
    wire = leader_wire(cluster, "wire", 1)
    try:
        fetch = long_poll(wire, "wire", 1, 300)
        answered = answer_times(wire, [fetch, fetch])
        assert answered[0] >= 0.25, answered
        assert answered[1] - answered[0] >= 0.25, f"served side by side: {answered}"
    finally:
        wire.close()


def test_a_connection_stalled_mid_frame_holds_up_nobody(cluster: Cluster, wire: Wire) -> None:
    wire.sock.sendall(LEN.pack(1000) + b"\0" * 10)  # 990 bytes never come
    other = Wire(cluster.bootstrap_servers.split(",")[0])
    try:
        assert {t.name for t in other.call(3, 12, METADATA_ALL).topics} >= {"wire"}
    finally:
        other.close()


def test_api_versions_with_an_invalid_client_software_name_is_invalid_request(
    wire: Wire,
) -> None:
    # KIP-511's ApiVersionsRequest.isValid: the connection stays open.
    refused = wire.call(
        18, 3, {"client_software_name": "bad name!", "client_software_version": "1.0"}
    )
    assert refused.error_code == ErrorCode.invalid_request
    assert refused.api_keys == ()
    served = wire.call(18, 3, {"client_software_name": "ok", "client_software_version": "1.0"})
    assert served.error_code == ErrorCode.none


def test_bad_crc_is_corrupt_message_and_nothing_is_appended(cluster: Cluster) -> None:
    wire = leader_wire(cluster, "wire", 0)
    try:
        before = cluster.partition_state("wire", 0).log_end_offset
        good = bytearray(batch([b"a", b"b"]))
        good[-1] ^= 0xFF
        result = produce(wire, "wire", 0, bytes(good))
        assert result.error_code == ErrorCode.corrupt_message
        assert cluster.partition_state("wire", 0).log_end_offset == before
    finally:
        wire.close()


def test_oversized_batch_is_message_too_large(cluster: Cluster) -> None:
    wire = leader_wire(cluster, "wire", 0)
    try:
        result = produce(wire, "wire", 0, batch([b"x" * 3000]))
        assert result.error_code == ErrorCode.message_too_large
    finally:
        wire.close()


def test_produce_to_a_follower_is_not_leader_or_follower(cluster: Cluster) -> None:
    state = cluster.partition_state("wire", 1)
    follower = next(r for r in state.replicas if r != state.leader)
    wire = Wire(cluster.bootstrap_servers.split(",")[follower - 1])
    try:
        result = produce(wire, "wire", 1, batch([b"x"]))
        assert result.error_code == ErrorCode.not_leader_or_follower
    finally:
        wire.close()


def test_idempotent_duplicates_are_acknowledged_once_and_gaps_refused(cluster: Cluster) -> None:
    wire = leader_wire(cluster, "wire", 1)
    try:
        init = wire.call(22, 4, {"transactional_id": None, "transaction_timeout": 60000})
        producer_id = init.producer_id
        first = batch([b"1", b"2"], producer_id=producer_id, epoch=0, sequence=0)
        sent = produce(wire, "wire", 1, first)
        assert sent.error_code == ErrorCode.none
        end = cluster.partition_state("wire", 1).log_end_offset
        again = produce(wire, "wire", 1, first)
        assert (again.error_code, again.base_offset) == (ErrorCode.none, sent.base_offset)
        assert cluster.partition_state("wire", 1).log_end_offset == end
        gap = batch([b"5"], producer_id=producer_id, epoch=0, sequence=5)
        assert produce(wire, "wire", 1, gap).error_code == ErrorCode.out_of_order_sequence_number
        following = batch([b"3"], producer_id=producer_id, epoch=0, sequence=2)
        assert produce(wire, "wire", 1, following).error_code == ErrorCode.none
    finally:
        wire.close()


def _init_producer_id(wire: Wire, producer_id: int, epoch: int) -> tuple[int, int, int]:
    values = {
        "transactional_id": None,
        "transaction_timeout": 60000,
        "producer_id": producer_id,
        "producer_epoch": epoch,
    }
    answer = wire.call(22, 4, values)
    return int(answer.error_code), int(answer.producer_id), int(answer.producer_epoch)


def test_init_producer_id_without_a_transactional_id_always_gives_a_new_id(wire: Wire) -> None:
    # Kafka's TransactionCoordinator.handleInitProducerId: with no transactional id, a new id at
    # epoch 0 whatever id and epoch the producer names (as Kafka 4.4 answered, tests/realkafka);
    # KafkaApis.handleInitProducerIdRequest refuses an id without an epoch or the reverse.
    error, first, epoch = _init_producer_id(wire, -1, -1)
    assert (error, epoch) == (ErrorCode.none, 0)
    for given_epoch in (0, 5):
        error, again, epoch = _init_producer_id(wire, first, given_epoch)
        assert (error, epoch) == (ErrorCode.none, 0)
        assert again not in (first, -1)
    for producer_id, given_epoch in ((first, -1), (-1, 3)):
        assert _init_producer_id(wire, producer_id, given_epoch) == (
            ErrorCode.invalid_request,
            -1,
            -1,
        )


@pytest.mark.parametrize(
    ("name", "partitions", "factor", "configs", "error"),
    [
        ("bad/name", 1, 1, [], ErrorCode.invalid_topic_exception),
        ("x" * 250, 1, 1, [], ErrorCode.invalid_topic_exception),
        ("wire", 1, 1, [], ErrorCode.topic_already_exists),
        ("too-many-replicas", 1, 3, [], ErrorCode.invalid_replication_factor),
        ("no-partitions", 0, 1, [], ErrorCode.invalid_partitions),
        ("bad-config", 1, 1, [("min.insync.replicas", "zero")], ErrorCode.invalid_config),
        ("unknown-config", 1, 1, [("no.such.setting", "1")], ErrorCode.invalid_config),
    ],
)
def test_create_topics_refuses_with_kafka_error_codes(
    wire: Wire,
    name: str,
    partitions: int,
    factor: int,
    configs: list[tuple[str, str]],
    error: ErrorCode,
) -> None:
    response = wire.call(
        19,
        7,
        {
            "topics": [
                {
                    "name": name,
                    "num_partitions": partitions,
                    "replication_factor": factor,
                    "assignments": [],
                    "configs": [{"name": k, "value": v} for k, v in configs],
                }
            ],
            "timeout": 5000,
            "validate_only": False,
        },
    )
    assert response.topics[0].error_code == error
    assert response.topics[0].error_message


def _fetch(wire: Wire, topic: str, offset: int, max_wait_ms: int) -> Any:
    return (
        wire.call(
            1,
            12,
            {
                "max_wait": max_wait_ms,
                "min_bytes": 1,
                "max_bytes": 1_000_000,
                "isolation_level": 1,
                "topics": [
                    {
                        "topic": topic,
                        "partitions": [
                            {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 100_000}
                        ],
                    }
                ],
                "forgotten_topics_data": [],
            },
        )
        .responses[0]
        .partitions[0]
    )


def test_fetch_long_poll_waits_for_data_and_returns_when_it_arrives(cluster: Cluster) -> None:
    cluster.create_topic("poll", partitions=1, replication_factor=2)
    wire = leader_wire(cluster, "poll", 0)
    producer = leader_wire(cluster, "poll", 0)
    try:
        started = time.monotonic()
        empty = _fetch(wire, "poll", 0, 300)
        assert time.monotonic() - started >= 0.25
        assert (empty.error_code, empty.high_watermark, empty.records) == (ErrorCode.none, 0, b"")

        wire.send_frame(
            wire.encode(
                1,
                12,
                {
                    "max_wait": 10_000,
                    "min_bytes": 1,
                    "max_bytes": 1_000_000,
                    "isolation_level": 1,
                    "topics": [
                        {
                            "topic": "poll",
                            "partitions": [
                                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 10_000}
                            ],
                        }
                    ],
                    "forgotten_topics_data": [],
                },
            )
        )
        time.sleep(0.2)
        started = time.monotonic()
        assert produce(producer, "poll", 0, batch([b"hello"])).error_code == ErrorCode.none
        frame = wire.read_frame()
        assert time.monotonic() - started < 5
        assert frame is not None
        assert b"hello" in frame

        beyond = _fetch(wire, "poll", 5, 0)
        assert beyond.error_code == ErrorCode.offset_out_of_range
    finally:
        wire.close()
        producer.close()


def test_list_offsets_earliest_latest_and_by_timestamp(cluster: Cluster) -> None:
    cluster.create_topic("times", partitions=1, replication_factor=1)
    wire = leader_wire(cluster, "times", 0)
    try:
        base = 1_700_000_000_000
        produce(wire, "times", 0, batch([b"a", b"b"], timestamps_ms=[base, base + 10]))
        produce(wire, "times", 0, batch([b"c"], timestamps_ms=[base + 20]))

        def offset_for(timestamp: int) -> int:
            response = wire.call(
                2,
                7,
                {
                    "replica_id": -1,
                    "isolation_level": 0,
                    "topics": [
                        {
                            "name": "times",
                            "partitions": [{"partition_index": 0, "timestamp": timestamp}],
                        }
                    ],
                },
            )
            found = response.topics[0].partitions[0]
            assert found.error_code == ErrorCode.none
            return int(found.offset)

        assert offset_for(-2) == 0
        assert offset_for(-1) == 3
        assert offset_for(base + 5) == 1  # inside the first batch
        assert offset_for(base + 20) == 2
        assert offset_for(base + 21) == -1
    finally:
        wire.close()


def test_list_offsets_answers_a_repeated_partition_invalid_request_each_time(
    cluster: Cluster,
) -> None:
    # Kafka's ListOffsetsRequest.duplicatePartitions, checked before anything else: even the
    # same topic listed twice, or a partition the topic does not have.
    cluster.create_topic("twice", partitions=2, replication_factor=1)
    wire = leader_wire(cluster, "twice", 0)
    try:
        produce(wire, "twice", 0, batch([b"a"]))

        def asked(partition: int, timestamp: int) -> dict[str, int]:
            return {"partition_index": partition, "timestamp": timestamp}

        response = wire.call(
            2,
            7,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {"name": "twice", "partitions": [asked(0, -1), asked(0, -2), asked(9, -1)]},
                    {"name": "twice", "partitions": [asked(9, -1)]},
                    {"name": "nope", "partitions": [asked(0, -1)]},
                ],
            },
        )
        answers = [
            [(int(p.partition_index), p.error_code, int(p.offset)) for p in t.partitions]
            for t in response.topics
        ]
        assert answers == [
            [
                (0, ErrorCode.invalid_request, -1),
                (0, ErrorCode.invalid_request, -1),
                (9, ErrorCode.invalid_request, -1),
            ],
            [(9, ErrorCode.invalid_request, -1)],
            [(0, ErrorCode.unknown_topic_or_partition, -1)],
        ]
    finally:
        wire.close()


def test_find_coordinator_follows_the_offsets_partition_leader() -> None:
    # Replication factor 1: when the group's coordinator is fenced, nobody can take its
    # __consumer_offsets partition over, and Kafka answers COORDINATOR_NOT_AVAILABLE.
    config = {"offsets.topic.replication.factor": "1", "broker.session.timeout.ms": "1000"}
    with Cluster(brokers=2, config=config) as cluster:
        coordinator = cluster.group_coordinator("lonely")
        other = 3 - coordinator
        wire = Wire(cluster.bootstrap_servers.split(",")[other - 1])
        try:

            def find() -> Any:
                response = wire.call(10, 4, {"key_type": 0, "coordinator_keys": ["lonely"]})
                return response.coordinators[0]

            assert (find().error_code, find().node_id) == (ErrorCode.none, coordinator)
            cluster.stop_broker(coordinator)
            # Not fenced yet: still named, as Kafka names a leader it has not fenced.
            assert find().node_id == coordinator
            deadline = time.monotonic() + 10
            while find().error_code != ErrorCode.coordinator_not_available:
                assert time.monotonic() < deadline, "never COORDINATOR_NOT_AVAILABLE"
                time.sleep(0.05)
            cluster.start_broker(coordinator)
            assert (find().error_code, find().node_id) == (ErrorCode.none, coordinator)
        finally:
            wire.close()
