"""Hostile input: at least 10,000 seeded random frames against a live 3-broker minibroker.

The frames, drawn in full from the seed before the run (``FUZZ_SEED=N`` replays them), mix:

* ``random-bytes``: raw random bytes on a fresh connection, length prefix included;
* ``truncated``: a valid request cut short, either with its original length prefix (the
  connection then ends) or with a prefix that matches the cut;
* ``oversized``: a length prefix above ``socket.request.max.bytes``, or negative;
* ``garbage-body``: a valid header of a served API and version, then random bytes;
* ``unknown-api``: API keys the broker does not serve, and served keys at versions it does not;
* ``random-valid``: well-formed requests of every served API and version with random field
  values (edge integers, random and non-ASCII strings, random bytes as record batches);
* ``mutated``: realistic requests (metadata, produce with a real record batch, fetch, offsets,
  group, config calls) with 1-3 bit flips, byte overwrites, extreme integers, cuts or inserts.

Twelve connections send them concurrently to the three brokers; after each complete frame an
ApiVersions probe tells whether the broker answered, stayed silent (acks=0), or closed the
connection (then a new one is opened). Meanwhile a confluent-kafka producer (acks=all) and a
consumer in a group keep writing and reading a protected topic that was filled before the fuzz.

The brokers never crash or stop answering, no handler fails on the input, the real clients keep
working throughout (an acknowledgement at least every few seconds), and every message
acknowledged before or during the fuzz is still there, with nothing foreign added.

Every frame goes to the live brokers. A frame that breaks its request schema (a length beyond
the bytes left, a compact length beyond 32 bits, a null where the schema forbids one) is refused
before decoding, logged and its connection closed, as Kafka does; the broker must log no other
error. The cluster runs in a child process, so that a crash is a failed assertion, not a dead
test run. CreateTopics and CreatePartitions keep to small partition counts: the broker accepts up
to 100,000 partitions per topic, and creating that many would only slow the run down.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import io
import itertools
import json
import os
import random
import re
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from types import NoneType, UnionType
from typing import Any, Union, get_args, get_origin

import pytest
from confluent_kafka import Consumer, Producer
from kio.records.schema import NewRecordBatch, Record
from kio.records.writers import write_new_batch
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import TZAwareMicros, i8, i16, i32, i64

from minibroker import Cluster
from minibroker.protocol.codec import build, request_class, response_class
from minibroker.protocol.versions import SUPPORTED_VERSIONS
from tests.integration.reliability_support import read_until, seed_from_env, wait_for

pytestmark = pytest.mark.chaos

PROTECTED = "ledger-protected"
SCRATCH = "fuzz-scratch"
DEFAULT_SEED = 20261124
FRAMES = int(os.environ.get("FUZZ_FRAMES", "12000"))
WORKERS = 12
MAX_REQUEST_BYTES = 1_000_000
LEN = struct.Struct(">i")
SERVED = sorted(SUPPORTED_VERSIONS)
# Partition counts stay small in generated admin requests (see the module doc).
_SMALL_INT_FIELDS = {"num_partitions": (-1, 0, 1, 2, 3), "count": (-1, 0, 1, 2, 3)}
_INT_BITS = {
    "int8": 8,
    "int16": 16,
    "int32": 32,
    "int64": 64,
    "timedelta_i32": 32,
    "timedelta_i64": 32,  # a timedelta cannot hold every int64 of milliseconds
}


# -- frames ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Frame:
    kind: str
    data: bytes
    """Bytes to write, length prefix included."""
    complete: bool
    """True when ``data`` is whole frames (a probe may follow); else the stream ends after it."""


def _optional(tp: Any) -> tuple[Any, bool]:
    if get_origin(tp) in (UnionType, Union):
        args = [a for a in get_args(tp) if a is not NoneType]
        return args[0], True
    return tp, False


def _edge_int(rng: random.Random, bits: int) -> int:
    low: int = -(2 ** (bits - 1))
    high: int = 2 ** (bits - 1) - 1
    r = rng.random()
    if r < 0.35:
        return rng.choice([0, 1, -1, 2, 3])
    if r < 0.55:
        return rng.choice([low, high, low + 1, high - 1])
    if r < 0.8:
        return rng.randint(0, 100)
    return rng.randint(low, high)


def _random_text(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.3:
        return ""
    if r < 0.6:
        return "fuzz-" + "".join(rng.choice("abcxyz.-_0") for _ in range(rng.randint(0, 8)))
    return "".join(chr(rng.randint(1, 0x2FF)) for _ in range(rng.randint(0, 40)))


def _random_value(
    tp: Any, name: str, kafka_type: str | None, rng: random.Random, depth: int
) -> Any:
    if dataclasses.is_dataclass(tp):
        return random_entity(tp, rng, depth + 1)  # type: ignore[arg-type]  # a kio entity class
    if kafka_type in _INT_BITS:
        small = _SMALL_INT_FIELDS.get(name)
        n = rng.choice(small) if small else _edge_int(rng, _INT_BITS[kafka_type])
        if kafka_type.startswith("timedelta"):
            return tp(datetime.timedelta(milliseconds=n))
        return tp(n)
    if kafka_type == "bool":
        return rng.random() < 0.5
    if kafka_type == "string":
        return _random_text(rng) if tp is str else tp(_random_text(rng))
    if kafka_type in ("bytes", "records"):
        raw = rng.randbytes(rng.choice([0, 1, 8, 61, 70, 200]))
        return raw if tp is bytes else tp(raw)
    if kafka_type == "uuid":
        return uuid.UUID(int=rng.getrandbits(128))
    if kafka_type == "float64":
        return rng.choice([0.0, -1.0, 1e308, float("nan")])
    raise TypeError(f"no generator for field {name} of kafka type {kafka_type} ({tp})")


def random_entity(cls: type[Any], rng: random.Random, depth: int = 0) -> Any:
    """An instance of a kio request (or nested) entity with random field values."""
    kwargs: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        tp, optional = _optional(field.type)
        if optional and rng.random() < 0.15:
            kwargs[field.name] = None
            continue
        kafka_type = field.metadata.get("kafka_type")
        if get_origin(tp) is tuple:
            element, _ = _optional(get_args(tp)[0])
            n = 0 if depth > 3 else rng.choice([0, 1, 1, 2, 3])
            kwargs[field.name] = tuple(
                _random_value(element, field.name, kafka_type, rng, depth) for _ in range(n)
            )
        else:
            kwargs[field.name] = _random_value(tp, field.name, kafka_type, rng, depth)
    return cls(**kwargs)


def encode(api_key: int, version: int, body: Any, correlation_id: int) -> bytes:
    """A request frame's payload (no length prefix) for a kio entity ``body``."""
    cls = request_class(api_key, version)
    buffer = io.BytesIO()
    header = cls.__header_schema__(
        request_api_key=i16(api_key),
        request_api_version=i16(version),
        correlation_id=i32(correlation_id),
        client_id="fuzz",
    )
    entity_writer(cls.__header_schema__)(buffer, header)
    entity_writer(cls)(buffer, body)
    return buffer.getvalue()


def encode_values(api_key: int, version: int, values: Mapping[str, Any]) -> bytes:
    return encode(api_key, version, build(request_class(api_key, version), values), 7)


def header_only(api_key: int, version: int, correlation_id: int) -> bytes:
    """The header of a served API and version, with no body."""
    cls = request_class(api_key, version)
    buffer = io.BytesIO()
    header = cls.__header_schema__(
        request_api_key=i16(api_key),
        request_api_version=i16(version),
        correlation_id=i32(correlation_id),
        client_id="fuzz",
    )
    entity_writer(cls.__header_schema__)(buffer, header)
    return buffer.getvalue()


def record_batch(values: list[bytes]) -> bytes:
    records = tuple(
        Record(
            attributes=i8(0),
            timestamp=TZAwareMicros.parse(datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)),
            offset=i64(i),
            key=None,
            value=v,
            headers=(),
        )
        for i, v in enumerate(values)
    )
    buffer = io.BytesIO()
    write_new_batch(
        buffer,
        NewRecordBatch(
            producer_id=i64(-1),
            producer_epoch=i16(-1),
            base_sequence=i32(-1),
            records=records,
            attributes=i16(0),
        ),
    )
    return buffer.getvalue()


def realistic_requests() -> list[bytes]:
    """Requests as clients send them (what the ``mutated`` frames start from)."""
    batch = record_batch([b"scratch-%d" % i for i in range(5)])
    group = "fuzz-group"
    return [
        encode_values(
            3,
            12,
            {
                "topics": [{"name": PROTECTED, "topic_id": None}],
                "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False,
            },
        ),
        encode_values(
            0,
            9,
            {
                "transactional_id": None,
                "acks": -1,
                "timeout": 5000,
                "topic_data": [
                    {"name": SCRATCH, "partition_data": [{"index": 0, "records": batch}]}
                ],
            },
        ),
        encode_values(
            1,
            12,
            {
                "replica_id": -1,
                "max_wait": 100,
                "min_bytes": 1,
                "max_bytes": 1_000_000,
                "isolation_level": 0,
                "session_id": 0,
                "session_epoch": -1,
                "topics": [
                    {
                        "topic": SCRATCH,
                        "partitions": [
                            {
                                "partition": 0,
                                "current_leader_epoch": -1,
                                "fetch_offset": 0,
                                "last_fetched_epoch": -1,
                                "log_start_offset": -1,
                                "partition_max_bytes": 100_000,
                            }
                        ],
                    }
                ],
                "forgotten_topics_data": [],
                "rack_id": "",
            },
        ),
        encode_values(
            2,
            7,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {
                        "name": PROTECTED,
                        "partitions": [
                            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}
                        ],
                    }
                ],
            },
        ),
        encode_values(10, 4, {"key_type": 0, "coordinator_keys": [group]}),
        encode_values(
            8,
            8,
            {
                "group_id": group,
                "generation_id_or_member_epoch": -1,
                "member_id": "",
                "group_instance_id": None,
                "topics": [
                    {
                        "name": SCRATCH,
                        "partitions": [
                            {
                                "partition_index": 0,
                                "committed_offset": 3,
                                "committed_leader_epoch": -1,
                                "committed_metadata": "",
                            }
                        ],
                    }
                ],
            },
        ),
        encode_values(
            9,
            8,
            {
                "groups": [
                    {"group_id": group, "topics": [{"name": SCRATCH, "partition_indexes": [0]}]}
                ],
                "require_stable": False,
            },
        ),
        encode_values(
            32,
            4,
            {
                "resources": [
                    {"resource_type": 2, "resource_name": PROTECTED, "configuration_keys": None}
                ],
                "include_synonyms": True,
                "include_documentation": False,
            },
        ),
        encode_values(18, 3, {"client_software_name": "fuzz", "client_software_version": "1"}),
        encode_values(16, 4, {"states_filter": []}),
    ]


def _prefixed(payload: bytes) -> bytes:
    return LEN.pack(len(payload)) + payload


def _mutate(rng: random.Random, payload: bytes) -> bytes:
    data = bytearray(payload)
    for _ in range(rng.randint(1, 3)):
        if not data:
            data += rng.randbytes(4)
        at = rng.randrange(len(data))
        op = rng.randrange(6)
        if op == 0:
            data[at] ^= 1 << rng.randrange(8)
        elif op == 1:
            data[at] = rng.randrange(256)
        elif op == 2:
            extreme = rng.choice([0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0, 0x7FFF, 0xFFFF])
            data[at : at + 4] = extreme.to_bytes(4, "big")
        elif op == 3:
            del data[at : at + rng.randint(1, 16)]
        elif op == 4:
            data[at:at] = rng.randbytes(rng.randint(1, 16))
        else:
            end = min(len(data), at + rng.randint(1, 32))
            data[at:at] = data[at:end]
    return bytes(data)


def _valid_payload(rng: random.Random, templates: list[bytes]) -> bytes:
    if rng.random() < 0.5:
        return rng.choice(templates)
    key = rng.choice(SERVED)
    low, high = SUPPORTED_VERSIONS[key]
    version = rng.randint(low, high)
    return encode(
        key, version, random_entity(request_class(key, version), rng), rng.randint(0, 999)
    )


def make_frames(seed: int, count: int, templates: list[bytes]) -> list[Frame]:
    rng = random.Random(seed)
    kinds = ["random-bytes", "truncated", "oversized", "garbage-body", "unknown-api"]
    kinds += ["random-valid", "mutated"]
    weights = [10, 10, 5, 20, 10, 20, 25]
    frames: list[Frame] = []
    for _ in range(count):
        kind = rng.choices(kinds, weights)[0]
        if kind == "random-bytes":
            frames.append(Frame(kind, rng.randbytes(rng.randint(1, 100)), complete=False))
        elif kind == "truncated":
            payload = _valid_payload(rng, templates)
            cut = rng.randrange(len(payload))
            if rng.random() < 0.5:
                data = LEN.pack(len(payload)) + payload[:cut]  # the rest never comes
                frames.append(Frame(kind, data, complete=False))
            else:
                frames.append(Frame(kind, _prefixed(payload[:cut]), complete=True))
        elif kind == "oversized":
            size = rng.choice(
                [
                    MAX_REQUEST_BYTES + 1,
                    2**31 - 1,
                    -1,
                    -(2**31),
                    rng.randint(MAX_REQUEST_BYTES, 2**31 - 1),
                ]
            )
            frames.append(Frame(kind, LEN.pack(size) + rng.randbytes(16), complete=False))
        elif kind == "garbage-body":
            key = rng.choice(SERVED)
            low, high = SUPPORTED_VERSIONS[key]
            head = header_only(key, rng.randint(low, high), rng.randint(0, 999))
            body = rng.randbytes(rng.choice([0, 1, 4, 16, 64, 300]))
            frames.append(Frame(kind, _prefixed(head + body), complete=True))
        elif kind == "unknown-api":
            if rng.random() < 0.5:
                key = rng.randint(-(2**15), 2**15 - 1)
                while key in SUPPORTED_VERSIONS:
                    key = rng.randint(-(2**15), 2**15 - 1)
                version = rng.randint(-5, 20)
            else:
                key = rng.choice(SERVED)
                low, high = SUPPORTED_VERSIONS[key]
                version = rng.choice([low - 1, high + 1, 2**15 - 1, -(2**15)])
            head = struct.pack(">hhih", key, version, rng.randint(0, 999), 4) + b"fuzz"
            frames.append(Frame(kind, _prefixed(head + rng.randbytes(rng.randint(0, 32))), True))
        elif kind == "random-valid":
            key = rng.choice(SERVED)
            low, high = SUPPORTED_VERSIONS[key]
            version = rng.randint(low, high)
            body = random_entity(request_class(key, version), rng)
            frames.append(Frame(kind, _prefixed(encode(key, version, body, 5)), complete=True))
        else:
            frames.append(Frame(kind, _prefixed(_mutate(rng, rng.choice(templates))), True))
    return frames


# -- sending -----------------------------------------------------------------------------------


def probe(correlation_id: int) -> bytes:
    """ApiVersions v0: answered by every broker, in order after what came before it."""
    return _prefixed(struct.pack(">hhih", 18, 0, correlation_id, -1))


async def _read_frame(reader: asyncio.StreamReader, timeout_s: float) -> bytes:
    head = await asyncio.wait_for(reader.readexactly(4), timeout_s)
    return await asyncio.wait_for(reader.readexactly(LEN.unpack(head)[0]), timeout_s)


async def _send_all(addresses: list[str], frames: list[Frame], outcomes: Counter[str]) -> None:
    async def worker(w: int) -> None:
        host, port = addresses[w % len(addresses)].split(":")
        connection: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        for n, frame in enumerate(frames[w::WORKERS]):
            if connection is None:
                connection = await asyncio.open_connection(host, int(port))
            reader, writer = connection
            outcome = "closed"
            try:
                if frame.complete:
                    correlation_id = 0x5A000000 + w * 100_000 + n
                    writer.write(frame.data + probe(correlation_id))
                    answered = 0
                    while True:
                        response = await _read_frame(reader, 1.0)
                        if struct.unpack_from(">i", response)[0] == correlation_id:
                            break
                        answered += 1
                    outcome = "answered" if answered else "silent"
                else:
                    writer.write(frame.data)
                    writer.write_eof()
                    await asyncio.wait_for(reader.read(), 1.0)
            except (asyncio.IncompleteReadError, ConnectionError):
                outcome = "closed"
            except TimeoutError:
                outcome = "parked"  # e.g. a long-poll fetch or a join waiting for its group
            outcomes[f"{frame.kind}/{outcome}"] += 1
            if outcome in ("closed", "parked") or not frame.complete:
                writer.close()
                connection = None
        if connection is not None:
            connection[1].close()

    await asyncio.gather(*(worker(w) for w in range(WORKERS)))


# -- the real client ---------------------------------------------------------------------------


class LiveClient(threading.Thread):
    """A producer (acks=all) and a group consumer on the protected topic, both in one thread."""

    def __init__(self, bootstrap: str, expected: set[bytes]) -> None:
        super().__init__(name="live-client", daemon=True)
        self.bootstrap = bootstrap
        self.stopping = threading.Event()
        self.acked: list[tuple[float, bytes]] = []
        self.failed: list[str] = []
        self.consumed: set[bytes] = set()
        self.expected = set(expected)
        self.error: BaseException | None = None

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is None:
            self.acked.append((time.monotonic(), msg.value()))
        else:
            self.failed.append(str(err))

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:
            self.error = exc

    def _run(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 5})
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": "live-readers",
                "auto.offset.reset": "earliest",
            }
        )
        consumer.subscribe([PROTECTED])
        try:
            i = 0
            while not self.stopping.is_set():
                producer.produce(PROTECTED, b"live-%06d" % i, on_delivery=self._on_delivery)
                i += 1
                producer.poll(0)
                self._consume(consumer, 0.01)
            if producer.flush(30):
                self.failed.append("the live producer could not flush")
            self.expected |= {v for _, v in self.acked}
            deadline = time.monotonic() + 60
            while not self.expected <= self.consumed and time.monotonic() < deadline:
                self._consume(consumer, 0.2)
        finally:
            consumer.close()

    def _consume(self, consumer: Consumer, timeout_s: float) -> None:
        for msg in consumer.consume(500, timeout_s):
            if msg.error() is None:
                value = msg.value()
                assert isinstance(value, bytes)
                self.consumed.add(value)


ROOT = Path(__file__).resolve().parents[2]
_ERROR_LINE = re.compile(r"ERROR |CRITICAL |Fatal Python error")


class BrokerChild:
    """The cluster under fuzz, in a child process (``reliability_broker_child``)."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self._stderr = log.open("wb")
        config = {
            "min.insync.replicas": "2",
            "default.replication.factor": "3",
            "socket.request.max.bytes": str(MAX_REQUEST_BYTES),
        }
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.integration.reliability_broker_child",
                "--brokers",
                "3",
                "--topic",
                f"{PROTECTED}:3",
                "--topic",
                f"{SCRATCH}:1",
                *(f"--config={k}={v}" for k, v in config.items()),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            cwd=ROOT,
        )
        self.bootstrap = str(self._answer()["bootstrap"])

    def _answer(self) -> Any:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait(10)
            raise AssertionError(f"the broker process died (exit code {code}):\n{self.tail()}")
        return json.loads(line)

    def ask(self, command: str) -> Any:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self._answer()

    def ends(self, topic: str) -> dict[int, int]:
        return {p["partition"]: p["high_watermark"] for p in self.ask(f"describe {topic}")}

    def errors(self) -> list[str]:
        """Each error the brokers logged, with the exception that ended its traceback."""
        lines = self.log.read_text(errors="replace").splitlines()
        out: list[str] = []
        for i, line in enumerate(lines):
            if _ERROR_LINE.match(line):
                end = i + 1
                while end < len(lines) and not lines[end].startswith(("WARNING", "INFO", "ERROR")):
                    end += 1
                out.append(f"{line} -> {lines[end - 1].strip()}")
        return out

    def refused(self) -> tuple[int, int]:
        """Frames refused as malformed (the connection closed): by the schema check before
        decoding, and by kio's decoder after it (e.g. a string that is not UTF-8)."""
        lines = [
            line
            for line in self.log.read_text(errors="replace").splitlines()
            if ": malformed request: " in line
        ]
        by_kio = sum(" does not decode: " in line for line in lines)
        return len(lines) - by_kio, by_kio

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.ask("quit")
                self.proc.wait(30)
            except (AssertionError, BrokenPipeError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(10)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()
        self._stderr.close()


def api_versions_answered(address: str) -> bool:
    host, port = address.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(probe(99))
        head = sock.recv(4)
        return len(head) == 4 and LEN.unpack(head)[0] > 0


def test_random_frames_never_crash_the_broker_nor_lose_acknowledged_messages(
    tmp_path: Path,
) -> None:
    seed = seed_from_env("FUZZ_SEED", DEFAULT_SEED)
    print(f"fuzz seed {seed} (FUZZ_SEED={seed} replays the frames)")
    frames = make_frames(seed, FRAMES, realistic_requests())
    broker = BrokerChild(tmp_path / "broker.log")
    try:
        bootstrap = broker.bootstrap
        addresses = bootstrap.split(",")
        before = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        pre_acked: list[bytes] = []

        def on_delivery(err: Any, msg: Any) -> None:
            assert err is None, err
            pre_acked.append(msg.value())

        for i in range(3000):
            before.produce(PROTECTED, b"before-%06d" % i, on_delivery=on_delivery)
        assert before.flush(30) == 0
        before.close()
        assert len(pre_acked) == 3000

        live = LiveClient(bootstrap, set(pre_acked))
        outcomes: Counter[str] = Counter()
        try:
            live.start()
            wait_for(lambda: len(live.acked) > 100, 30, "the live producer to get going")
            began = time.monotonic()
            asyncio.run(_send_all(addresses, frames, outcomes))
            ended = time.monotonic()
            assert broker.proc.poll() is None, f"the broker process died:\n{broker.tail()}"
            assert all(b["status"] == "running" for b in broker.ask("brokers"))
            for address in addresses:
                assert api_versions_answered(address), address
        finally:
            live.stopping.set()
            live.join(120)
        assert live.error is None, live.error
        assert live.failed == [], live.failed[:5]
        stored = {r.value for r in read_until(bootstrap, PROTECTED, broker.ends(PROTECTED))}
        errors = broker.errors()
        refused = broker.refused()
    finally:
        broker.close()

    # The broker never failed on the input (a handler error would log it and close).
    assert errors == [], "\n".join(sorted(set(errors)))
    # The real clients kept working while the fuzz ran.
    stamps = [began] + [t for t, _ in live.acked if began <= t <= ended] + [ended]
    longest_gap_s = max(b - a for a, b in itertools.pairwise(stamps))
    assert longest_gap_s < 5.0, f"no acknowledgement for {longest_gap_s:.1f} s during the fuzz"
    acked_during = len(stamps) - 2
    # Nothing acknowledged is lost, nothing foreign was added, the consumer saw everything.
    acked = set(pre_acked) | {v for _, v in live.acked}
    assert acked <= live.consumed, f"{len(acked - live.consumed)} acknowledged, never consumed"
    assert acked <= stored, f"{len(acked - stored)} acknowledged messages lost (seed {seed})"
    assert stored == acked, f"foreign records: {sorted(stored - acked)[:5]}"

    sent = sum(outcomes.values())
    assert sent == len(frames) >= 10_000
    kinds = Counter(f.kind for f in frames)
    by_outcome = Counter(key.split("/")[1] for key in outcomes.elements())
    print(
        f"{sent} frames in {ended - began:.1f} s over {WORKERS} connections at a time "
        f"({refused[0]} refused as malformed before decoding, {refused[1]} by the decoder): "
        f"{dict(sorted(kinds.items()))}; outcomes {dict(sorted(by_outcome.items()))}; "
        f"live client: {acked_during} acknowledgements during the fuzz, longest gap "
        f"{longest_gap_s:.2f} s; {len(pre_acked)} messages acknowledged before and "
        f"{len(live.acked)} by the live producer, all stored and consumed; lost 0"
    )


_ONE_FRAME = """
import logging, os, socket, sys, time
from minibroker import Cluster

logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

frame = bytes.fromhex(sys.argv[1])
probe = bytes.fromhex(sys.argv[2])


def answers(sock):
    try:
        return len(sock.recv(4)) == 4
    except OSError:
        return False


cluster = Cluster(brokers=1).start()
host, port = cluster.bootstrap_servers.split(":")
with socket.create_connection((host, int(port)), timeout=3) as sock:
    sock.sendall(len(frame).to_bytes(4, "big") + frame)
    first = "answered" if answers(sock) else "closed"
with socket.create_connection((host, int(port)), timeout=3) as sock:
    sock.sendall(probe)
    alive = answers(sock)
print(first, "alive" if alive else "frozen", flush=True)
sys.stderr.flush()
os._exit(0)  # a frozen cluster cannot be closed
"""


def one_frame(payload: bytes) -> tuple[int, str, str]:
    """Send one frame to a 1-broker cluster in a child process: (exit code, outcome, log)."""
    child = subprocess.run(
        [sys.executable, "-c", _ONE_FRAME, payload.hex(), probe(1).hex()],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )
    return child.returncode, child.stdout.strip(), child.stderr


def test_a_compact_array_length_beyond_32_bits_is_refused_not_an_abort() -> None:
    # FindCoordinator v4 (header v2: key, version, correlation id, client id, no tags), then
    # key_type 0 and coordinator_keys whose unsigned varint length is 0x3d833d... (> 2**32):
    # kio 0.6.5's native decoder would try to allocate that many elements and abort.
    frame = bytes.fromhex("000a0004000000010004") + b"fuzz" + bytes.fromhex("0000bfcf91833d")
    code, outcome, log = one_frame(frame)
    assert (code, outcome) == (0, "closed alive"), log[-500:]
    assert "malformed request: FindCoordinator v4 coordinator_keys: " in log, log[-500:]
    assert "beyond 32 bits" in log, log[-500:]


def test_a_create_topics_for_two_billion_partitions_is_refused() -> None:
    request = encode_values(
        19,
        7,
        {
            "topics": [
                {
                    "name": "huge",
                    "num_partitions": 2**31 - 1,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [],
                }
            ],
            "timeout": 5000,
            "validate_only": False,
        },
    )
    code, outcome, log = one_frame(request)
    assert (code, outcome) == (0, "answered alive"), log[-500:]


def test_a_null_array_where_kafka_forbids_one_is_a_malformed_request() -> None:
    # Kafka's generated readers refuse null for a non-nullable array ("non-nullable field ...
    # was serialized as null") and the request is dropped as malformed; kio would decode it as
    # None. FindCoordinator v4: header v2, then key_type 0, coordinator_keys of compact length 0
    # (null), no tagged fields.
    frame = bytes.fromhex("000a0004000000010004") + b"fuzz" + bytes.fromhex("00000000")
    code, outcome, log = one_frame(frame)
    assert (code, outcome) == (0, "closed alive"), log[-1500:]
    assert "failed serving" not in log, log[-1500:]
    assert "coordinator_keys: null array in a non-nullable field" in log, log[-1500:]


def test_a_metadata_v10_request_by_topic_id_is_answered() -> None:
    # v10 and v11 carry a topic id field but must not use it; Kafka answers INVALID_REQUEST.
    request = encode_values(
        3,
        10,
        {
            "topics": [{"name": None, "topic_id": uuid.UUID(int=0)}],
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        },
    )
    code, outcome, log = one_frame(request)
    assert (code, outcome) == (0, "answered alive"), log[-1500:]
    assert "failed serving" not in log, log[-1500:]


def _metadata(bootstrap: str, version: int, topics: list[dict[str, Any]]) -> Any:
    """Send one Metadata request over a socket and decode the answer."""
    request = encode_values(
        3,
        version,
        {
            "topics": topics,
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        },
    )
    host, port = bootstrap.split(",")[0].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(_prefixed(request))
        data = b""
        while len(data) < 4 or len(data) < 4 + LEN.unpack_from(data)[0]:
            chunk = sock.recv(65536)
            assert chunk, "the broker closed the connection"
            data += chunk
    cls = response_class(3, version)
    _, used = entity_reader(cls.__header_schema__)(data, 4)
    return entity_reader(cls)(data, 4 + used)[0]


def test_metadata_names_topics_by_id_from_v12_and_refuses_ids_before() -> None:
    unknown = uuid.UUID(int=7)
    with Cluster(brokers=1) as cluster:
        cluster.create_topic("by-id", partitions=2, replication_factor=1)
        by_name = _metadata(cluster.bootstrap_servers, 12, [{"name": "by-id", "topic_id": None}])
        topic_id = by_name.topics[0].topic_id
        assert isinstance(topic_id, uuid.UUID)
        assert topic_id.int != 0

        answer = _metadata(
            cluster.bootstrap_servers,
            12,
            [{"name": None, "topic_id": topic_id}, {"name": None, "topic_id": unknown}],
        )
        known, missing = answer.topics
        assert (known.error_code, known.name, known.topic_id) == (0, "by-id", topic_id)
        assert len(known.partitions) == 2
        assert (missing.error_code, missing.name, missing.topic_id) == (100, None, unknown)

        for version in (10, 11):
            refused = _metadata(
                cluster.bootstrap_servers, version, [{"name": None, "topic_id": topic_id}]
            )
            assert [(t.error_code, t.name, t.partitions) for t in refused.topics] == [(42, "", ())]
