"""kafka-python 3.0 against minibroker."""

from __future__ import annotations

import gc
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from minibroker import Cluster

with warnings.catch_warnings():
    # kafka-python 3.0 loads its schemas with importlib.resources.read_text (deprecated)
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

pytestmark = [
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    # kafka-python 3.0 leaks the socket of a connect still in progress when a client closes
    pytest.mark.filterwarnings("ignore:unclosed <socket.socket:ResourceWarning"),
]


@pytest.fixture(autouse=True)
def _reap_kafka_python_sockets() -> Iterator[None]:
    """kafka-python 3.0 drops a socket whose connect is still in progress when the client
    closes (``kafka.net.inet.sock_connect`` never closes it); collect those here, quietly,
    instead of letting the ResourceWarning surface in whatever test runs next."""
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with Cluster(brokers=3, config={"min.insync.replicas": "2"}) as running:
        yield running


def produce(cluster: Cluster, topic: str, count: int, **config: Any) -> None:
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, **config)
    try:
        futures = [producer.send(topic, f"m{i}".encode()) for i in range(count)]
        producer.flush(30)
        if config.get("acks") != 0:
            assert all(f.get(timeout=10).offset >= 0 for f in futures)
    finally:
        producer.close()


def drain(consumers: list[Any], until: Callable[[list[Any]], bool]) -> list[Any]:
    """Poll every consumer in its own thread until ``until(records so far)`` holds."""
    got: list[Any] = []
    lock = threading.Lock()
    stop = threading.Event()

    def poll(consumer: Any) -> None:
        while not stop.is_set():
            # Long polls: kafka-python 3.0 abandons a join whose SyncGroup answer has not
            # arrived when poll's timeout ends, and rejoins (over and over on a busy machine).
            for records in consumer.poll(timeout_ms=1000).values():
                with lock:
                    got.extend(records)

    threads = [threading.Thread(target=poll, args=(c,)) for c in consumers]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 40
    try:
        while time.monotonic() < deadline:
            with lock:
                if until(list(got)):
                    break
            time.sleep(0.02)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    return got


def group_consumer(cluster: Cluster, topic: str, group: str) -> Any:
    return KafkaConsumer(
        topic,
        bootstrap_servers=cluster.bootstrap_servers,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        heartbeat_interval_ms=100,
        session_timeout_ms=6000,
    )


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_produce_with_each_acks_setting(cluster: Cluster, acks: int | str) -> None:
    topic = f"kp-acks-{acks}"
    cluster.create_topic(topic, partitions=3, replication_factor=3)
    produce(cluster, topic, 200, acks=acks)
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers)
    try:
        partitions = [TopicPartition(topic, p) for p in range(3)]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        got = drain([consumer], lambda g: len(g) >= 200)
    finally:
        consumer.close()
    assert sorted(r.value for r in got) == sorted(f"m{i}".encode() for i in range(200))


def test_idempotent_producer(cluster: Cluster) -> None:
    cluster.create_topic("kp-idem", partitions=2, replication_factor=3)
    produce(cluster, "kp-idem", 300, enable_idempotence=True, acks="all")
    assert sum(cluster.partition_state("kp-idem", p).high_watermark for p in (0, 1)) == 300


def test_group_rebalances_and_a_restarted_member_resumes(cluster: Cluster) -> None:
    cluster.create_topic("kp-g", partitions=4, replication_factor=3)
    produce(cluster, "kp-g", 100, acks="all")
    first = group_consumer(cluster, "kp-g", "kp-team")
    second = group_consumer(cluster, "kp-g", "kp-team")

    def split_evenly(got: list[Any]) -> bool:
        return len(got) >= 100 and len(first.assignment()) == len(second.assignment()) == 2

    got = drain([first, second], split_evenly)
    assert split_evenly(got)
    # a rebalance may hand an uncommitted record to the other member too: compare as sets
    assert {r.value for r in got} == {f"m{i}".encode() for i in range(100)}
    first.commit()
    second.commit()
    second.close()
    drain([first], lambda _: len(first.assignment()) == 4)
    assert len(first.assignment()) == 4
    first.close()

    produce(cluster, "kp-g", 20, acks="all")
    restarted = group_consumer(cluster, "kp-g", "kp-team")
    try:
        rest = drain([restarted], lambda g: len(g) >= 20)
        time.sleep(0.2)
        rest += drain([restarted], lambda _: True)
    finally:
        restarted.close()
    assert sorted(r.value for r in rest) == sorted(f"m{i}".encode() for i in range(20))


def test_init_transactions_fails_at_once_naming_the_cause(cluster: Cluster) -> None:
    from kafka.errors import TransactionalIdAuthorizationFailedError

    producer = KafkaProducer(
        bootstrap_servers=cluster.bootstrap_servers, transactional_id="tx-refused"
    )
    started = time.monotonic()
    try:
        with pytest.raises(TransactionalIdAuthorizationFailedError):
            producer.init_transactions()
    finally:
        producer.close(timeout=5)
    assert time.monotonic() - started < 5
