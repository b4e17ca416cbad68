"""Where the demo runs: an embedded minibroker cluster it can break, or one it only talks to."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient

# Defined here; confluent_kafka.admin re-exports them without __all__, which strict mypy rejects.
from confluent_kafka.admin._config import ConfigResource
from confluent_kafka.cimpl import NewTopic

from failover_partitioner.confluent._shared import kafka_error_of
from failover_partitioner.demo.partitions import PartitionRow
from failover_partitioner.demo.producers import CLIENT_LOGGER

log = logging.getLogger(__name__)

PARTITIONS = 12
REPLICATION_FACTOR = 3
MIN_INSYNC_REPLICAS = 2
# A cluster that cannot describe itself within this long is reported as unreachable.
_REACH_TIMEOUT_S = 5.0


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
        """Use ``name`` if it exists, else create it like the embedded demo topic.

        DescribeCluster and DescribeTopics, not a Metadata request naming the topic: on a
        cluster with auto.create.topics.enable that request would create it with defaults.
        """
        try:
            brokers = len(
                self._admin.describe_cluster(request_timeout=_REACH_TIMEOUT_S)
                .result(timeout=_REACH_TIMEOUT_S + 5)
                .nodes
            )
        except Exception as e:
            raise DemoError(
                f"cannot reach the cluster at {self.bootstrap_servers!r} ({e}); "
                "check --bootstrap, or leave it out to use the embedded cluster"
            ) from e
        existing = self._describe(name)
        if existing:
            return Topic(
                name=name,
                partitions=len(existing),
                replication_factor=min(len(r.replicas) for r in existing),
                min_insync_replicas=self._min_insync_replicas(name),
                created=False,
            )
        rf = min(REPLICATION_FACTOR, max(1, brokers))
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

    def _describe(self, name: str) -> tuple[PartitionRow, ...]:
        """The topic's partitions, or () if it does not exist."""
        future = self._admin.describe_topics(
            TopicCollection([name]), request_timeout=self._timeout_s
        )[name]
        try:
            description = future.result(timeout=self._timeout_s + 5)
        except KafkaException as e:
            err = kafka_error_of(e)
            if err is not None and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                return ()
            raise
        return tuple(
            PartitionRow(
                partition=p.id,
                leader=None if p.leader is None or p.leader.id < 0 else p.leader.id,
                replicas=tuple(n.id for n in p.replicas),
                isr=tuple(n.id for n in p.isr),
            )
            for p in sorted(description.partitions, key=lambda p: p.id)
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
        return self._describe(topic.name)

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


# The embedded cluster's settings: Kafka's names, values that make the fault bite within a
# second instead of Kafka's 30 s (replica.lag.time.max.ms), and leadership moving back to the
# preferred replica after recovery so the "after" table looks like the "before" one.
EMBEDDED_BROKERS = 5
EMBEDDED_CONFIG = {
    "min.insync.replicas": str(MIN_INSYNC_REPLICAS),
    "default.replication.factor": str(REPLICATION_FACTOR),
    "replica.lag.time.max.ms": "1000",
    "auto.leader.rebalance.enable": "true",
}


class EmbeddedCluster:
    """A 5-broker minibroker cluster in this process: no setup, and faults on demand."""

    can_inject_faults = True

    def __init__(self) -> None:
        from minibroker import Cluster  # imported late: only the embedded mode needs it

        self._cluster = Cluster(brokers=EMBEDDED_BROKERS, config=EMBEDDED_CONFIG).start()
        self.bootstrap_servers = self._cluster.bootstrap_servers
        self.description = (
            f"embedded minibroker, {EMBEDDED_BROKERS} brokers at {self.bootstrap_servers}"
        )

    def prepare_topic(self, name: str) -> Topic:
        from minibroker.errors import MinibrokerError

        try:
            self._cluster.create_topic(
                name,
                partitions=PARTITIONS,
                replication_factor=REPLICATION_FACTOR,
                config={"min.insync.replicas": str(MIN_INSYNC_REPLICAS)},
            )
        except MinibrokerError as e:
            raise DemoError(f"cannot create topic {name!r} ({e}); choose another --topic") from e
        return Topic(
            name=name,
            partitions=PARTITIONS,
            replication_factor=REPLICATION_FACTOR,
            min_insync_replicas=MIN_INSYNC_REPLICAS,
            created=True,
        )

    def rows(self, topic: Topic) -> tuple[PartitionRow, ...]:
        return tuple(
            PartitionRow(
                partition=s.partition,
                leader=None if s.leader < 0 else s.leader,
                replicas=s.replicas,
                isr=s.isr,
            )
            for s in sorted(self._cluster.describe(topic.name), key=lambda s: s.partition)
        )

    def inject(self, kind: str, brokers: tuple[int, ...]) -> None:
        for b in brokers:
            if kind == "isolate":
                self._cluster.isolate_broker(b)
            elif kind == "stop":
                self._cluster.stop_broker(b)
            else:
                raise DemoError(f"fault {kind!r}: choose isolate or stop")

    def heal(self, kind: str, brokers: tuple[int, ...]) -> None:
        for b in brokers:
            if kind == "isolate":
                self._cluster.heal_broker(b)
            else:
                self._cluster.start_broker(b)

    def close(self) -> None:
        self._cluster.close()
