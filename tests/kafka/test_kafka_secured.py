"""Secured clusters: SCRAM-SHA-512 over TLS and ACLs, on real Apache Kafka.

A 5-broker cluster with a SASL_SSL listener (certificates of the run) and the StandardAuthorizer
(tests/realkafka/security.py). Each part of the library is given only the settings a user of its
client writes for SCRAM over TLS, and:

1. the failover producers, the mirror (source and target secured) and the Spark writer deliver
   10,000 messages each with brokers 4 and 5 paused mid-run, nothing lost;
2. a user without WRITE on the topic: every message ends with the authorization error within a
   second, none is rerouted, the producer does not spin;
3. a wrong password: AuthenticationFailed, naming the refused login, within the producer's
   timeout, and one error in the log;
4. a user without DESCRIBE_CONFIGS: production works, a warning names the min ISR assumed;
5. no password appears in logs (DEBUG included), exceptions, metrics or status lines.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import logging
import ssl
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from pyspark.sql import SparkSession

from failover_partitioner import AuthenticationFailed, FailoverProducer
from failover_partitioner.aio import AsyncFailoverProducer
from failover_partitioner.spark import write_to_kafka
from tests.integration.test_reliability_mirror_crash import MirrorProcess
from tests.kafka.support import FAULTY, new_topic, read_back, spread, wait_for, whole
from tests.realkafka.cluster import KafkaCluster
from tests.realkafka.jars import KafkaJars

MESSAGES = 10_000
SECRET = "pw-Zq8v-not-for-logs"  # every user's password ends with it


def password(user: str) -> str:
    return f"{user}-{SECRET}"


@pytest.fixture(scope="module")
def secured(kafka_jars: KafkaJars) -> Iterator[KafkaCluster]:
    with KafkaCluster(5, min_insync_replicas=2, secured=True, jars=kafka_jars) as cluster:
        yield cluster


@pytest.fixture
def cluster(secured: KafkaCluster) -> Iterator[KafkaCluster]:
    secured.heal()
    yield secured
    secured.heal()


def user_with(cluster: KafkaCluster, topics: list[str], operations: list[str]) -> str:
    user = f"u{uuid.uuid4().hex[:6]}"
    cluster.add_user(user, password(user))
    for topic in topics:
        for operation in operations:
            cluster.allow(user, operation, topic=topic)
    return user


def aio_settings(cluster: KafkaCluster, user: str) -> dict[str, Any]:
    """aiokafka's keyword arguments for SCRAM over TLS, as its users write them."""
    assert cluster.tls is not None
    context = ssl.create_default_context(cafile=str(cluster.tls.ca_pem))
    return {
        "bootstrap_servers": cluster.secured_bootstrap_servers,
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": user,
        "sasl_plain_password": password(user),
        "ssl_context": context,
    }


def pause_faulty(cluster: KafkaCluster) -> None:  # healed by the `cluster` fixture or a test
    for broker in FAULTY:
        cluster.pause(broker)


def consumed_back(cluster: KafkaCluster, topic: str, prefix: bytes) -> set[bytes]:
    wait_for(lambda: whole(cluster, topic), 90, "the ISRs to recover")
    return {m.value() for m in read_back(cluster.bootstrap_servers, topic)} & {
        prefix + b"%d" % i for i in range(MESSAGES)
    }


def test_failover_producer_secured_loses_nothing_with_brokers_paused(
    cluster: KafkaCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    topic, _ = new_topic(cluster, "secured-sync")
    user = user_with(cluster, [topic], ["write", "describe", "describe_configs"])
    registry = CollectorRegistry()
    p = FailoverProducer(
        {**cluster.client_settings(user, password(user)), "acks": "all"},
        metrics_registry=registry,
    )
    for i in range(MESSAGES):
        if i == MESSAGES // 3:
            pause_faulty(cluster)
        if i % 200 == 0:
            time.sleep(0.05)
            p.poll(0)
        p.produce(topic, b"s-%d" % i)
    assert p.flush(90) == 0
    stats = p.statistics()
    assert (stats.delivered, stats.final_failures) == (MESSAGES, 0)
    metrics = generate_latest(registry).decode()
    assert p.close() == []
    cluster.heal()
    assert len(consumed_back(cluster, topic, b"s-")) == MESSAGES
    assert SECRET not in caplog.text
    assert SECRET not in metrics
    assert SECRET not in repr(p)


def test_async_failover_producer_secured_loses_nothing_with_brokers_paused(
    cluster: KafkaCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    topic, _ = new_topic(cluster, "secured-async")
    user = user_with(cluster, [topic], ["write", "describe", "describe_configs"])

    async def run() -> int:
        async with AsyncFailoverProducer(**aio_settings(cluster, user)) as ap:
            futures = []
            for i in range(MESSAGES):
                if i == MESSAGES // 3:
                    pause_faulty(cluster)
                if i % 100 == 0:
                    await asyncio.sleep(0.02)
                futures.append(await ap.send(topic, b"a-%d" % i))
            assert await ap.flush(90) == 0
            results = await asyncio.gather(*futures, return_exceptions=True)
            assert not [r for r in results if isinstance(r, BaseException)]
            return ap.statistics().delivered

    assert asyncio.run(run()) == MESSAGES
    with warnings.catch_warnings():
        # aiokafka leaves unclosed the socket of a connection still in its TLS/SASL handshake
        # with a paused broker when the client stops (the connect is cancelled mid-handshake):
        # collected here, so it is not reported against the next test.
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    cluster.heal()
    assert len(consumed_back(cluster, topic, b"a-")) == MESSAGES
    assert SECRET not in caplog.text


def test_mirror_secured_on_both_sides_loses_nothing_with_target_brokers_paused(
    cluster: KafkaCluster, tmp_path: Path
) -> None:
    from confluent_kafka import Producer

    suffix = uuid.uuid4().hex[:8]
    source, target, group = f"sec-src-{suffix}", f"copy.sec-src-{suffix}", f"sec-{suffix}"
    cluster.create_topic(
        source, assignment=[[(p + i) % 3 + 1 for i in range(3)] for p in range(12)]
    )
    cluster.create_topic(target, assignment=spread())
    user = user_with(cluster, [source, target], ["read", "write", "describe", "describe_configs"])
    cluster.allow(user, "read", group=group)
    settings = cluster.client_settings(user, password(user))
    properties = "".join(f"{k}={v}\n" for k, v in settings.items() if k != "bootstrap.servers")
    (tmp_path / "client.properties").write_text(properties)
    writer = Producer({**settings, "acks": "all"})
    for i in range(MESSAGES):
        writer.produce(source, b"m-%d" % i)
        if i % 1000 == 0:
            writer.poll(0)
    assert writer.flush(60) == 0
    mirror = MirrorProcess(
        "secured-mirror",
        [
            "--source", settings["bootstrap.servers"],
            "--target", settings["bootstrap.servers"],
            "--consumer.config", str(tmp_path / "client.properties"),
            "--producer.config", str(tmp_path / "client.properties"),
            "--group", group, "--include", source, "--rename", "copy.{topic}",
            "--commit-interval", "0.5", "--status-interval", "0.2", "--json",
            "--log-level", "DEBUG",
        ],
        tmp_path / "mirror.log",
    )  # fmt: skip
    try:
        wait_for(lambda: mirror.logged("assigned " + source), 60, "the mirror's assignment")
        pause_faulty(cluster)
        wait_for(lambda: bool(mirror.statuses), 60, "a status line", mirror.tail)
        time.sleep(10)
        cluster.heal()
        wait_for(
            lambda: int(mirror.latest.get("delivered", 0)) >= MESSAGES,
            120,
            "the mirror to deliver every message",
            mirror.tail,
        )
        assert mirror.terminate() == 0, mirror.tail()
        assert len(consumed_back(cluster, target, b"m-")) == MESSAGES
    finally:
        if mirror.proc.poll() is None:
            mirror.kill()
    text = (tmp_path / "mirror.log").read_text()
    assert SECRET not in text  # its log, at DEBUG
    assert SECRET not in "\n".join(str(s) for s in mirror.statuses)


def test_spark_writer_secured_loses_nothing_with_brokers_paused(
    cluster: KafkaCluster, spark: SparkSession
) -> None:
    topic, _ = new_topic(cluster, "secured-spark")
    user = user_with(cluster, [topic], ["write", "describe", "describe_configs"])
    conf = {**cluster.client_settings(user, password(user)), "acks": "all"}
    df = spark.range(MESSAGES * 5, numPartitions=4).selectExpr("CAST(id AS STRING) AS value")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        job = pool.submit(write_to_kafka, df, topic, conf)
        time.sleep(1.0)
        pause_faulty(cluster)
        summary = job.result(timeout=300)
    assert (summary.delivered, summary.failed) == (MESSAGES * 5, 0)
    assert SECRET not in repr(summary)


def test_a_user_without_write_fails_each_message_at_once_and_nothing_is_rerouted(
    cluster: KafkaCluster,
) -> None:
    topic, _ = new_topic(cluster, "no-write")
    user = user_with(cluster, [topic], ["describe", "describe_configs"])
    outcomes: list[tuple[float, Any]] = []
    p = FailoverProducer({**cluster.client_settings(user, password(user)), "acks": "all"})
    p.health(topic)  # DESCRIBE is allowed: the metadata is known before the clock starts
    began = time.monotonic()
    for i in range(200):
        p.produce(
            topic, b"x-%d" % i, on_delivery=lambda e, m: outcomes.append((time.monotonic(), e))
        )
    assert p.flush(30) == 0
    stats = p.statistics()
    cpu_before = time.process_time()
    time.sleep(3)  # nothing left to do: the producer must sit still
    idle_cpu = time.process_time() - cpu_before
    p.close()
    assert len(outcomes) == 200
    assert all(e is not None and e.code() == 29 for _, e in outcomes)  # TOPIC_AUTHORIZATION_FAILED
    assert max(t for t, _ in outcomes) - began < 1.0  # every one ended within a second
    assert (stats.rerouted, stats.retries, stats.final_failures) == (0, 0, 200)
    assert idle_cpu < 0.5, f"{idle_cpu:.2f} s of CPU in 3 idle seconds"


def test_a_wrong_password_is_named_as_an_authentication_failure(
    cluster: KafkaCluster, caplog: pytest.LogCaptureFixture
) -> None:
    topic, _ = new_topic(cluster, "wrong-password")
    user = user_with(cluster, [topic], ["write", "describe"])
    wrong = "not-" + password(user)
    p = FailoverProducer({**cluster.client_settings(user, wrong), "acks": "all"})
    began = time.monotonic()
    with pytest.raises(AuthenticationFailed) as raised:
        p.produce(topic, b"x")  # not accepted: the caller still holds it
    assert time.monotonic() - began < 10  # the producer's produce_timeout_s (5 s) and a poll
    text = str(raised.value)
    assert "refused the credentials" in text
    assert "authentication" in text.lower(), text
    with pytest.raises(AuthenticationFailed):
        p.health(topic)
    assert p.close() == []  # nothing was accepted, nothing is left
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len([e for e in errors if "refused this producer's credentials" in e]) == 1
    for shown in (text, caplog.text):
        assert SECRET not in shown


def test_a_user_without_describe_configs_produces_and_is_told_the_min_isr_assumed(
    cluster: KafkaCluster, caplog: pytest.LogCaptureFixture
) -> None:
    topic, _ = new_topic(cluster, "no-describe-configs")
    user = user_with(cluster, [topic], ["write", "describe"])
    errors: list[Any] = []
    with FailoverProducer({**cluster.client_settings(user, password(user)), "acks": "all"}) as p:
        for i in range(100):
            p.produce(topic, b"x-%d" % i, on_delivery=lambda e, m: errors.append(e))
        assert p.flush(30) == 0
    assert errors == [None] * 100
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("min.insync.replicas" in w and "assuming 1" in w for w in warnings), warnings
