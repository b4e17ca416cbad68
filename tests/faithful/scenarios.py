"""The scenarios: each drives a backend with real clients and returns what a client observed.
(Scenario 4 is in elections.py, 6 in groups.py; catalog.py names them all.)

An ``Outcome`` holds the observations that must be equal on Kafka and minibroker (``observed``)
and the timings, which are only bounded (``timings_s``: each scenario's test checks them within a
tolerance). Scenarios leave every broker healthy again; each uses topics of its own.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, not in the stub
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)

from minibroker.protocol.versions import API_NAMES
from tests.faithful.backends import Backend, wait_until
from tests.integration.test_minibroker_protocol import Wire, answer_times, long_poll

__all__ = ["Outcome", "api_versions"]

NO_ERROR = 0
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """What a client saw in one scenario on one backend."""

    scenario: str
    observed: tuple[tuple[str, object], ...]
    """Compared between the backends: error codes, offsets, counts, leaders, ISRs."""
    timings_s: tuple[tuple[str, float], ...] = field(default=(), compare=False)
    """Bounded by each scenario's test, not compared."""

    def __getitem__(self, key: str) -> object:
        return dict(self.observed)[key]

    def timing(self, key: str) -> float:
        return dict(self.timings_s)[key]


def unique(prefix: str) -> str:
    return f"faithful-{prefix}-{uuid.uuid4().hex[:8]}"


# -- clients ------------------------------------------------------------------------------------


def produce(
    backend: Backend,
    topic: str,
    values: list[bytes],
    *,
    acks: int = -1,
    partition: int = 0,
    request_timeout_ms: int = 30_000,
    message_timeout_ms: int | None = None,
    timestamps_ms: list[int] | None = None,
) -> list[int]:
    """Each value's delivery error code (0: none), the client's own retries off."""
    codes: dict[int, int] = {}

    def report(index: int) -> Callable[[KafkaError | None, Any], None]:
        def on_delivery(err: KafkaError | None, msg: Any) -> None:
            codes[index] = NO_ERROR if err is None else int(err.code())

        return on_delivery

    producer = Producer(
        {
            "bootstrap.servers": backend.bootstrap_servers,
            "acks": acks,
            "retries": 0,
            "enable.idempotence": False,
            "request.timeout.ms": request_timeout_ms,
            "message.timeout.ms": message_timeout_ms or max(request_timeout_ms * 2, 30_000),
            "linger.ms": 5,
            "log_level": 0,
        }
    )
    for index, value in enumerate(values):
        timestamp = timestamps_ms[index] if timestamps_ms else 0  # 0: the client's clock
        producer.produce(
            topic, value, partition=partition, on_delivery=report(index), timestamp=timestamp
        )
    producer.flush(90)
    assert len(codes) == len(values), f"{len(values) - len(codes)} deliveries unreported"
    return [codes[i] for i in range(len(values))]


def _consumer(backend: Backend) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": backend.bootstrap_servers,
            "group.id": f"faithful-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
            "log_level": 0,
        }
    )


# Retriable in Kafka's Errors, though librdkafka's KafkaError.retriable() is False for them here.
_RETRIABLE_LIST_OFFSETS = frozenset(
    {
        KafkaError.OFFSET_NOT_AVAILABLE,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
    }
)


def _asked_again(
    call: Callable[[], _T], again: Callable[[KafkaError], bool], timeout_s: float
) -> _T:
    """``call()``, made again every 0.1 s while it raises an error ``again`` accepts."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return call()
        except KafkaException as exc:
            if not again(exc.args[0]) or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _ends(consumer: Consumer, topic: str, partition: int) -> tuple[int, int]:
    """ListOffsets earliest and latest, retried while the answer is retriable: a new leader
    answers OFFSET_NOT_AVAILABLE until its high watermark reaches its epoch's start."""
    low, high = _asked_again(
        lambda: consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10),
        lambda error: error.retriable() or error.code() in _RETRIABLE_LIST_OFFSETS,
        15,
    )
    return int(low), int(high)


def watermarks(backend: Backend, topic: str, partition: int = 0) -> tuple[int, int]:
    consumer = _consumer(backend)
    try:
        return _ends(consumer, topic, partition)
    finally:
        consumer.close()


def read_all(backend: Backend, topic: str, partition: int = 0) -> list[bytes]:
    """Every value a consumer reads up to the high watermark at the time of the call."""
    consumer = _consumer(backend)
    try:
        _, end = _ends(consumer, topic, partition)
        out: list[bytes] = []
        if end <= 0:
            return out
        consumer.assign([TopicPartition(topic, partition, 0)])
        deadline = time.monotonic() + 30
        position = 0
        while position < end and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.2):
                offset = message.offset()
                if message.error() is None and offset is not None:
                    out.append(bytes(message.value() or b""))
                    position = offset + 1
        return out
    finally:
        consumer.close()


def isr_of(backend: Backend, topic: str) -> tuple[int, ...]:
    views = backend.describe(topic)
    return views[0].isr if views else ()


def leader_of(backend: Backend, topic: str) -> int:
    views = backend.describe(topic)
    return views[0].leader if views else -1


# -- 1. writes below min ISR --------------------------------------------------------------------


def min_isr_writes(backend: Backend) -> Outcome:
    """acks=all/1/0 on a partition whose followers stop: error codes and what is readable."""
    topic = unique("min-isr")
    backend.create_topic(topic, [[1, 2, 3]])
    first = produce(backend, topic, [b"first"])
    began = time.monotonic()
    for broker in (2, 3):
        backend.pause(broker)
    # Appended while the ISR still has 3, then the followers fall out of it.
    (pending,) = produce(backend, topic, [b"pending"], request_timeout_ms=6_000)
    pending_s = time.monotonic() - began
    wait_until(lambda: isr_of(backend, topic) == (1,), 30, "the ISR to shrink to the leader")
    shrunk_s = time.monotonic() - began
    (refused,) = produce(backend, topic, [b"refused"])
    (acks_one,) = produce(backend, topic, [b"acks-1"], acks=1)
    (acks_zero,) = produce(backend, topic, [b"acks-0"], acks=0)
    below = watermarks(backend, topic)
    readable_below = read_all(backend, topic)
    for broker in (2, 3):
        backend.resume(broker)
    recovered_s = wait_until(
        lambda: isr_of(backend, topic) == (1, 2, 3), 60, "the followers back in the ISR"
    )
    wait_until(lambda: watermarks(backend, topic)[1] >= 4, 30, "the high watermark to catch up")
    return Outcome(
        scenario="1 writes below min ISR",
        observed=(
            ("acks=all before", tuple(first)),
            ("acks=all appended, then ISR shrank", pending),
            ("acks=all under min ISR", refused),
            ("acks=1 under min ISR", acks_one),
            ("acks=0 under min ISR", acks_zero),
            ("watermarks under min ISR", below),
            ("readable under min ISR", tuple(readable_below)),
            ("watermarks after recovery", watermarks(backend, topic)),
            ("readable after recovery", tuple(read_all(backend, topic))),
        ),
        timings_s=(
            ("pending write answered", pending_s),
            ("ISR shrank", shrunk_s),
            ("ISR whole after resume", recovered_s),
        ),
    )


# -- 2. ISR shrink and rejoin -------------------------------------------------------------------


# Longer than the broker session timeout (4 s): a fence a pause earned has come by then.
SETTLE_S = 5.0


def stays_whole(backend: Backend, topic: str, isr: tuple[int, ...], hold_s: float) -> None:
    """Wait until ``topic``'s first partition has shown ``isr`` for ``hold_s`` on end."""
    since: list[float] = []  # when it last became ``isr``

    def held() -> bool:
        if isr_of(backend, topic) != isr:
            since.clear()
            return False
        if not since:
            since.append(time.monotonic())
        return time.monotonic() - since[0] >= hold_s

    wait_until(held, 60, f"the ISR of {topic} to stay {isr} for {hold_s:g} s")


def isr_shrink_and_rejoin(backend: Backend) -> Outcome:
    """A follower paused, resumed, killed, restarted: the ISRs a client's metadata shows."""
    topic = unique("isr")
    backend.create_topic(topic, [[1, 2, 3]])
    seen: list[tuple[int, ...]] = [isr_of(backend, topic)]

    def isr_becomes(isr: tuple[int, ...], what: str) -> float:
        def check() -> bool:
            now = isr_of(backend, topic)
            if now and now != seen[-1]:
                seen.append(now)
            return now == isr

        return wait_until(check, 60, what)

    began = time.monotonic()
    backend.pause(3)
    # A follower that stops fetching leaves the ISR once its leader has more than it last
    # fetched (Kafka's Replica.isCaughtUp), after the replica lag: this write, acknowledged
    # then. Idle, the partition would keep it until a fence, which Kafka's pause (SIGSTOP)
    # earns after the broker session and minibroker's (isolation) never does.
    (while_paused,) = produce(backend, topic, [b"while-paused"])
    isr_becomes((1, 2), "broker 3 out of the ISR after pause")
    pause_s = time.monotonic() - began
    (while_shrunk,) = produce(backend, topic, [b"two-in-isr"])
    backend.resume(3)
    resume_s = isr_becomes((1, 2, 3), "broker 3 back after resume")
    # Kafka fences a broker paused past the session timeout (4 s), and the fence may land
    # just after the resume, taking it out of the ISR again: the kill's shrink was once seen
    # 0.06 s after it. Killed only once the ISR has stayed whole past that timeout.
    stays_whole(backend, topic, (1, 2, 3), SETTLE_S)
    backend.kill(3)
    kill_s = isr_becomes((1, 2), "broker 3 out of the ISR after kill")
    began = time.monotonic()
    backend.restart(3)
    restart_s = isr_becomes((1, 2, 3), "broker 3 back after restart") + (time.monotonic() - began)
    return Outcome(
        scenario="2 ISR shrink and rejoin",
        observed=(
            ("ISRs seen", tuple(seen)),
            ("leader", leader_of(backend, topic)),
            ("acks=all as broker 3 leaves the ISR", while_paused),
            ("acks=all with ISR 2 of 3", while_shrunk),
            ("watermarks", watermarks(backend, topic)),
        ),
        timings_s=(
            ("shrink after pause", pause_s),
            ("rejoin after resume", resume_s),
            ("shrink after kill", kill_s),
            ("rejoin after restart", restart_s),
        ),
    )


# -- 3. leader killed ---------------------------------------------------------------------------


def leader_killed(backend: Backend) -> Outcome:
    """The leader crashes: a new leader from the ISR, every acknowledged write readable."""
    topic = unique("leader")
    backend.create_topic(topic, [[1, 2, 3]])
    before = [f"before-{i}".encode() for i in range(200)]
    acked = [v for v, code in zip(before, produce(backend, topic, before), strict=True) if not code]
    backend.kill(1)
    elected_s = wait_until(
        lambda: leader_of(backend, topic) not in (-1, 1), 30, "a new leader after the kill"
    )
    new_leader = leader_of(backend, topic)
    isr_after_kill = isr_of(backend, topic)
    readable_after_kill = read_all(backend, topic)
    after = [f"after-{i}".encode() for i in range(100)]
    after_codes = produce(backend, topic, after)
    backend.restart(1)
    rejoin_s = wait_until(
        lambda: isr_of(backend, topic) == (1, 2, 3), 60, "the old leader back in the ISR"
    )
    return Outcome(
        scenario="3 leader killed",
        observed=(
            ("acks=all acknowledged before the kill", len(acked)),
            ("new leader", new_leader),
            ("ISR after the kill", isr_after_kill),
            ("acknowledged writes readable", readable_after_kill == acked),
            ("acks=all on the new leader", tuple(sorted(set(after_codes)))),
            ("leader after the old one returned", leader_of(backend, topic)),
            ("everything readable in order", read_all(backend, topic) == acked + after),
        ),
        timings_s=(("new leader", elected_s), ("old leader back in the ISR", rejoin_s)),
    )


# -- 7. idempotent producer across a leader change ---------------------------------------------


def idempotent_across_leader_change(backend: Backend) -> Outcome:
    """An idempotent producer keeps sending while its partition's leader is killed."""
    topic = unique("idempotent")
    backend.create_topic(topic, [[1, 2, 3]])
    errors: list[int] = []
    delivered = 0

    def on_delivery(err: KafkaError | None, msg: Any) -> None:
        nonlocal delivered
        if err is None:
            delivered += 1
        else:
            errors.append(int(err.code()))

    producer = Producer(
        {
            "bootstrap.servers": backend.bootstrap_servers,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 60_000,
            "log_level": 0,
        }
    )
    count = 4_000
    for i in range(count):
        producer.produce(topic, f"{i:06d}".encode(), partition=0, on_delivery=on_delivery)
        producer.poll(0)
        if i == count // 4:
            producer.flush(30)
            backend.kill(1)
        if i % 100 == 0:
            time.sleep(0.01)  # spread the sends over the election
    producer.flush(90)
    values = read_all(backend, topic)
    backend.restart(1)
    return Outcome(
        scenario="7 idempotent producer across a leader change",
        observed=(
            ("delivered", delivered),
            ("delivery errors", tuple(sorted(set(errors)))),
            ("records in the log", len(values)),
            ("duplicates", len(values) - len(set(values))),
            ("in send order", values == sorted(values)),
        ),
    )


# -- 5. admin -----------------------------------------------------------------------------------


def _create_error(admin: AdminClient, topic: NewTopic) -> int:
    try:
        admin.create_topics([topic])[topic.topic].result(timeout=30)
    except KafkaException as exc:
        return int(exc.args[0].code())
    return NO_ERROR


def _error_of(future: Any) -> int:
    try:
        future.result(timeout=30)
    except KafkaException as exc:
        return int(exc.args[0].code())
    return NO_ERROR


def _config(admin: AdminClient, topic: str, name: str) -> tuple[str, str]:
    """A topic config's value and source. A broker learns a new topic from the metadata log a
    moment after its leaders show: until then it answers UNKNOWN_TOPIC_OR_PART, asked again."""
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entry = _asked_again(
        lambda: admin.describe_configs([resource])[resource].result(timeout=30)[name],
        lambda error: error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART,
        30,
    )
    return str(entry.value), ConfigSource(entry.source).name


def admin_requests(backend: Backend) -> Outcome:
    """CreateTopics errors, DescribeConfigs, IncrementalAlterConfigs, CreatePartitions,
    DeleteTopics, DescribeCluster and ListOffsets as the confluent-kafka AdminClient and
    Consumer see them."""
    admin = AdminClient({"bootstrap.servers": backend.bootstrap_servers, "log_level": 0})
    topic = unique("admin")
    backend.create_topic(topic, [[1, 2, 3]])
    own = unique("admin-own")
    backend.create_topic(own, [[2, 3, 4]], {"min.insync.replicas": "3"})
    errors = {
        "create: 0 partitions": _create_error(admin, NewTopic(unique("p0"), 0, 3)),
        "create: RF 6 on 5 brokers": _create_error(admin, NewTopic(unique("rf6"), 1, 6)),
        "create: min.insync.replicas=abc": _create_error(
            admin, NewTopic(unique("cfg"), 1, 3, config={"min.insync.replicas": "abc"})
        ),
        "create: unknown config": _create_error(
            admin, NewTopic(unique("cfg"), 1, 3, config={"no.such.setting": "1"})
        ),
        "create: existing topic": _create_error(admin, NewTopic(topic, 1, 3)),
    }
    default_min_isr = _config(admin, topic, "min.insync.replicas")
    own_min_isr = _config(admin, own, "min.insync.replicas")
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    altered = _error_of(admin.incremental_alter_configs([resource])[resource])
    retention = wait_and_read(lambda: _config(admin, topic, "retention.ms"), "3600000")
    grow = _error_of(admin.create_partitions([NewPartitions(topic, 3)])[topic])
    shrink = _error_of(admin.create_partitions([NewPartitions(topic, 2)])[topic])
    wait_until(lambda: len(backend.describe(topic)) == 3, 30, "3 partitions in the metadata")
    cluster = admin.describe_cluster().result(timeout=30)

    # Recent timestamps: older ones would fall to the 1 h retention just set.
    base_ms = int(time.time() * 1000) - 60_000
    stamps = [base_ms, base_ms + 10_000, base_ms + 20_000]
    produce(backend, topic, [b"a", b"b", b"c"], timestamps_ms=stamps)
    consumer = _consumer(backend)
    try:
        # One lookup per request: librdkafka answers -1 for all when a partition repeats.
        found = tuple(
            consumer.offsets_for_times([TopicPartition(topic, 0, base_ms + delta)], timeout=10)[
                0
            ].offset
            for delta in (5_000, 20_000, 90_000)
        )
    finally:
        consumer.close()
    ends = watermarks(backend, topic)

    deleted = _error_of(admin.delete_topics([own])[own])
    wait_until(lambda: not backend.describe(own), 30, f"{own} gone from the metadata")
    deleted_again = _error_of(admin.delete_topics([own])[own])
    return Outcome(
        scenario="5 admin requests",
        observed=(
            *errors.items(),
            ("min.insync.replicas (value, source): broker default", default_min_isr),
            ("min.insync.replicas (value, source): topic's own", own_min_isr),
            ("IncrementalAlterConfigs retention.ms", altered),
            ("retention.ms (value, source) after", retention),
            ("CreatePartitions 1 -> 3", grow),
            ("CreatePartitions 3 -> 2", shrink),
            ("DescribeCluster brokers", len(cluster.nodes)),
            ("ListOffsets earliest, latest", ends),
            ("ListOffsets by time t0+5 s, t0+20 s, t0+90 s", found),
            ("DeleteTopics", deleted),
            ("DeleteTopics again", deleted_again),
        ),
    )


def wait_and_read(read: Callable[[], tuple[str, str]], value: str) -> tuple[str, str]:
    """A dynamic config reaches every broker through the metadata log: read it once it has."""
    latest = read()
    deadline = time.monotonic() + 10
    while latest[0] != value and time.monotonic() < deadline:
        time.sleep(0.2)
        latest = read()
    return latest


# -- 8. ApiVersions -----------------------------------------------------------------------------

# The APIs the three Python clients send in these scenarios and in the project's own use:
# the ones minibroker serves, named as it names them.
CLIENT_APIS: Mapping[int, str] = API_NAMES


def api_versions(backend: Backend) -> dict[int, tuple[int, int]]:
    """Every API a broker advertises (ApiVersions v3): key -> (min, max)."""
    wire = Wire(backend.address(1))
    try:
        response = wire.call(
            18, 3, {"client_software_name": "faithful", "client_software_version": "1"}
        )
    finally:
        wire.close()
    return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}


def advertised_versions(backend: Backend) -> Outcome:
    served = api_versions(backend)
    return Outcome(
        scenario="8 ApiVersions (client APIs)",
        observed=tuple(
            (f"{key} {name}", served.get(key, "not served")) for key, name in CLIENT_APIS.items()
        ),
    )


# -- 9. one request at a time per connection ----------------------------------------------------


def requests_in_turn(backend: Backend) -> Outcome:
    """Two Fetch long polls sent back to back on one connection: the second is read only once
    the first is answered, so it waits its own max_wait after the first's. A request that a
    broker holds (this long poll, an acks=all write waiting for its ISR) holds every request
    behind it on the connection, whatever the partition."""
    topic = unique("in-turn")
    backend.create_topic(topic, [[1, 2, 3]])
    wait_until(lambda: leader_of(backend, topic) == 1, 30, "the topic's leader")
    wire = Wire(backend.address(1))
    try:
        fetch = long_poll(wire, topic, 0, 500)
        answered = answer_times(wire, [fetch, fetch])
    finally:
        wire.close()
    return Outcome(
        scenario="9 one request at a time per connection",
        observed=(("second long poll waited its own max_wait", answered[1] - answered[0] >= 0.4),),
        timings_s=(("first answered", answered[0]), ("second answered", answered[1])),
    )
