"""Where the demo runs: an embedded minibroker cluster it can break, or one it only talks to."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

# Defined here; confluent_kafka.admin re-exports them without __all__, which strict mypy rejects.
from confluent_kafka.admin._config import ConfigResource
from confluent_kafka.cimpl import NewTopic

from failover_partitioner._demo.partitions import PartitionRow
from failover_partitioner._demo.producers import CLIENT_LOGGER

log = logging.getLogger(__name__)

PARTITIONS = 12
REPLICATION_FACTOR = 3
MIN_INSYNC_REPLICAS = 2


class DemoError(Exception):
    """The demo cannot run as asked; the message says what to change."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Topic:
    name: str
    partitions: int
    replication_factor: int
    min_insync_replicas: int
    created: bool  # by this run, so it is deleted again on an external cluster


class DemoCluster(Protocol):
    bootstrap_servers: str
    description: str
    can_inject_faults: bool

    def prepare_topic(self, name: str) -> Topic: ...

    def rows(self, topic: Topic) -> tuple[PartitionRow, ...]: ...

    def inject(self, kind: str, brokers: tuple[int, ...]) -> None: ...

    def heal(self, kind: str, brokers: tuple[int, ...]) -> None: ...

    def close(self) -> None: ...


class ExternalCluster:
    """A cluster somebody else runs (``--bootstrap``): the demo only produces and reads it."""

    can_inject_faults = False

    def __init__(self, bootstrap_servers: str, *, timeout_s: float = 10.0) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.description = f"existing cluster at {bootstrap_servers}"
        self._timeout_s = timeout_s
        self._admin = AdminClient({"bootstrap.servers": bootstrap_servers}, logger=CLIENT_LOGGER)
        self._created: list[str] = []

    def prepare_topic(self, name: str) -> Topic:
        """Use ``name`` if it exists, else create it like the embedded demo topic."""
        try:
            md = self._admin.list_topics(timeout=self._timeout_s)
        except KafkaException as e:
            raise DemoError(
                f"cannot reach the cluster at {self.bootstrap_servers!r} ({e}); "
                "check --bootstrap, or leave it out to use the embedded cluster"
            ) from e
        existing = md.topics.get(name)
        if existing is not None and existing.error is None and existing.partitions:
            replicas = min(len(p.replicas) for p in existing.partitions.values())
            return Topic(
                name=name,
                partitions=len(existing.partitions),
                replication_factor=replicas,
                min_insync_replicas=self._min_insync_replicas(name),
                created=False,
            )
        rf = min(REPLICATION_FACTOR, max(1, len(md.brokers)))
        min_isr = min(MIN_INSYNC_REPLICAS, rf)
        futures = self._admin.create_topics(
            [NewTopic(name, PARTITIONS, rf, config={"min.insync.replicas": str(min_isr)})],
            operation_timeout=self._timeout_s,
            request_timeout=self._timeout_s,
        )
        try:
            futures[name].result(timeout=self._timeout_s + 5)
        except Exception as e:
            raise DemoError(
                f"cannot create topic {name!r} on {self.bootstrap_servers} ({e}); "
                "create it yourself and pass it with --topic"
            ) from e
        self._created.append(name)
        return Topic(
            name=name,
            partitions=PARTITIONS,
            replication_factor=rf,
            min_insync_replicas=min_isr,
            created=True,
        )

    def _min_insync_replicas(self, name: str) -> int:
        resource = ConfigResource("TOPIC", name)
        try:
            configs = self._admin.describe_configs([resource], request_timeout=self._timeout_s)
            entry = configs[resource].result(timeout=self._timeout_s + 5).get("min.insync.replicas")
        except Exception as e:
            # The table's states need a minimum; Kafka's own default is 1.
            log.warning("cannot read min.insync.replicas of %s (%s); assuming 1", name, e)
            return 1
        return int(entry.value) if entry is not None and entry.value is not None else 1

    def rows(self, topic: Topic) -> tuple[PartitionRow, ...]:
        md = self._admin.list_topics(topic.name, timeout=self._timeout_s)
        t = md.topics.get(topic.name)
        if t is None:
            return ()
        return tuple(
            PartitionRow(
                partition=p.id,
                leader=None if p.leader < 0 else p.leader,
                replicas=tuple(p.replicas),
                isr=tuple(p.isrs),
            )
            for p in sorted(t.partitions.values(), key=lambda p: p.id)
        )

    def inject(self, kind: str, brokers: tuple[int, ...]) -> None:
        raise DemoError("faults can only be injected into the embedded cluster")

    def heal(self, kind: str, brokers: tuple[int, ...]) -> None:
        raise DemoError("faults can only be injected into the embedded cluster")

    def close(self) -> None:
        if self._created:
            futures = self._admin.delete_topics(self._created, operation_timeout=self._timeout_s)
            for name, future in futures.items():
                try:
                    future.result(timeout=self._timeout_s + 5)
                except Exception as e:
                    log.warning("could not delete demo topic %s: %s", name, e)
            self._created.clear()
