"""Real Apache Kafka for the interop layer.

Three ways to get one, in this order:
- ``KAFKA_BOOTSTRAP=host:port`` names an existing cluster;
- testcontainers starts ``apache/kafka`` when a Docker engine answers;
- otherwise the session's real cluster of tests/realkafka (Kafka's jars from Maven Central, run
  as JVM processes), which skips with its reason where Java or Maven is missing (and fails
  instead under ``REALKAFKA_REQUIRED=1``, as in CI).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

KAFKA_IMAGE = os.environ.get("KAFKA_IMAGE", "apache/kafka:3.9.1")


@dataclass(frozen=True, slots=True, kw_only=True)
class RealKafka:
    bootstrap_servers: str
    source: str  # "KAFKA_BOOTSTRAP", "testcontainers" or "maven"


def _docker_reachable() -> str | None:
    """None when a Docker engine answers, else why not."""
    host = os.environ.get("DOCKER_HOST")
    if not host and not os.path.exists("/var/run/docker.sock"):
        return "no Docker engine (DOCKER_HOST unset and /var/run/docker.sock absent)"
    import docker  # testcontainers depends on it

    client = None
    try:
        client = docker.from_env(timeout=3)
        client.ping()
    except Exception as exc:
        return f"no Docker engine answered ({type(exc).__name__}: {exc})"
    finally:
        if client is not None:
            client.close()
    return None


@pytest.fixture(scope="session")
def real_kafka(request: pytest.FixtureRequest) -> Iterator[RealKafka]:
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP")
    if bootstrap:
        yield RealKafka(bootstrap_servers=bootstrap, source="KAFKA_BOOTSTRAP")
        return
    if _docker_reachable() is not None:  # no Docker: the cluster started from Maven's jars
        cluster = request.getfixturevalue("_kafka_session_cluster")
        yield RealKafka(bootstrap_servers=cluster.bootstrap_servers, source="maven")
        return
    from testcontainers.kafka import KafkaContainer

    with KafkaContainer(KAFKA_IMAGE).with_kraft() as container:
        yield RealKafka(bootstrap_servers=container.get_bootstrap_server(), source="testcontainers")
