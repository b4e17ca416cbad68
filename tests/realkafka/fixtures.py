"""pytest fixtures for a real Apache Kafka cluster (loaded from tests/conftest.py).

``kafka_cluster``: 5 brokers and a controller, min.insync.replicas=2 cluster-wide, started once
per test session (starting six JVMs takes about 20 s here) and healed after each test that uses
it: paused brokers resumed, killed or stopped ones restarted, all unfenced again. A test that
needs other broker settings starts its own with ``kafka_cluster_factory``.

Where Java, Maven or Maven Central is missing the fixtures skip with the reason; with
``REALKAFKA_REQUIRED=1`` (set by .ci/run) they fail instead, so CI cannot pass without them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest

from tests.realkafka.cluster import KafkaCluster
from tests.realkafka.jars import KafkaJars, Unavailable, ensure_jars

REQUIRED_VARIABLE = "REALKAFKA_REQUIRED"


def _required() -> bool:
    return os.environ.get(REQUIRED_VARIABLE, "") not in ("", "0", "false", "no")


def unavailable(why: str) -> None:
    """Skip, or fail where real Kafka is required."""
    if _required():
        pytest.fail(f"real Kafka is required here ({REQUIRED_VARIABLE}=1) but {why}")
    pytest.skip(f"real Kafka unavailable: {why} (set {REQUIRED_VARIABLE}=1 to make this fail)")


@pytest.fixture(scope="session")
def kafka_jars() -> KafkaJars:
    try:
        return ensure_jars()
    except Unavailable as exc:
        unavailable(str(exc))
        raise  # unreachable: unavailable() skips or fails


@pytest.fixture(scope="session")
def _kafka_session_cluster(kafka_jars: KafkaJars) -> Iterator[KafkaCluster]:
    with KafkaCluster(5, min_insync_replicas=2, jars=kafka_jars) as cluster:
        yield cluster


@pytest.fixture
def kafka_cluster(_kafka_session_cluster: KafkaCluster) -> Iterator[KafkaCluster]:
    """The session's 5-broker cluster, every fault undone after the test."""
    cluster = _kafka_session_cluster
    cluster.heal()
    yield cluster
    cluster.heal()


@pytest.fixture
def kafka_cluster_factory(kafka_jars: KafkaJars) -> Iterator[Callable[..., KafkaCluster]]:
    """Start clusters of your own (``factory(brokers, config=..., ...)``); all stopped after."""
    started: list[KafkaCluster] = []

    def factory(brokers: int = 3, **options: object) -> KafkaCluster:
        cluster = KafkaCluster(brokers, jars=kafka_jars, **options)  # type: ignore[arg-type]
        started.append(cluster)
        cluster.start()
        return cluster

    yield factory
    for cluster in started:
        cluster.close()
