"""Metadata from confluent-kafka: ``Producer.list_topics`` and ``AdminClient.describe_configs``.

``list_topics`` is called on the producer's own handle (it shares its connections, and the
answer also refreshes librdkafka's cache), from the refresher's thread only: calling it from
inside a delivery callback re-enters the client (DESIGN.md section 4). librdkafka sends it to
the broker it sent to last, so a request a hung broker holds draws every later one there until
it expires: the handle's ``socket.timeout.ms`` bounds that (``_config.CLIENT_DEFAULTS``).
min.insync.replicas is
not in metadata responses (KIP-637 was never implemented), so it comes from DescribeConfigs on
the topic, which answers with the effective value and whether the topic or the broker set it.
A user without DESCRIBE_CONFIGS on the topic gets the brokers' own value instead (DescribeConfigs
on a broker, which needs DESCRIBE_CONFIGS on the cluster), marked ``"broker-default"``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from failover_partitioner._config import NOT_FOR_ADMIN, companion_conf
from failover_partitioner.errors import MetadataUnavailable
from failover_partitioner.health import PartitionMetadata
from failover_partitioner.metadata._source import MinIsr, PartitionsAnswer

__all__ = ["ConfluentMetadataSource", "admin_config"]

logger = logging.getLogger(__name__)

_UNKNOWN_TOPIC_CODES = frozenset({3, -188})  # UNKNOWN_TOPIC_OR_PART, librdkafka's _UNKNOWN_TOPIC


def admin_config(producer_conf: Mapping[str, Any]) -> dict[str, Any] | None:
    """The config for an AdminClient next to a producer with ``producer_conf``.

    None for librdkafka's mock cluster (``test.mock.num.brokers``): a second client would start
    a second mock cluster, and the mock has no DescribeConfigs anyway.
    """
    if "test.mock.num.brokers" in producer_conf:
        return None
    return companion_conf(producer_conf, "admin", drop=NOT_FOR_ADMIN)


def _described(admin: Any, resource: Any, timeout_s: float) -> Any:
    """The ``min.insync.replicas`` entry of ``resource``'s configs, or None if it has none."""
    futures = admin.describe_configs([resource], request_timeout=timeout_s)
    entry = next(iter(futures.values())).result(timeout=timeout_s + 1.0).get("min.insync.replicas")
    return None if entry is None or entry.value is None else entry


class ConfluentMetadataSource:
    """A :class:`~failover_partitioner.metadata.MetadataSource` over confluent-kafka."""

    def __init__(
        self,
        client: Any,
        admin_conf: Mapping[str, Any] | None,
        *,
        want_racks: bool = False,
        racks_refresh_s: float = 300.0,
    ) -> None:
        self._client = client
        self._admin_conf = None if admin_conf is None else dict(admin_conf)
        self._admin: Any = None
        self._admin_lock = threading.Lock()
        self._want_racks = want_racks
        self._racks_refresh_s = racks_refresh_s
        self._racks: dict[int, str | None] = {}
        self._racks_at: float | None = None

    def _admin_client(self) -> Any:
        if self._admin_conf is None:
            return None
        with self._admin_lock:
            if self._admin is None:
                from confluent_kafka.admin import AdminClient

                self._admin = AdminClient(self._admin_conf)
            return self._admin

    def partitions(self, topic: str, timeout_s: float) -> PartitionsAnswer:
        md = self._client.list_topics(topic, timeout=timeout_s)
        t = md.topics.get(topic)
        if t is None:
            return PartitionsAnswer(partitions=(), exists=False)
        if t.error is not None and t.error.code() in _UNKNOWN_TOPIC_CODES:
            return PartitionsAnswer(partitions=(), exists=False)
        if t.error is not None and t.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            return PartitionsAnswer(partitions=(), exists=False, refused=True)
        if not t.partitions:
            raise MetadataUnavailable(
                f"metadata for topic {topic!r} has no partitions (error: {t.error})"
            )
        racks = self._broker_racks(timeout_s) if self._want_racks else {}
        count = max(t.partitions) + 1
        parts = []
        for pid in range(count):
            pm = t.partitions.get(pid)
            if pm is None:  # a hole in the answer: treat as leaderless until the next fetch
                parts.append(PartitionMetadata(partition=pid, leader=-1, replicas=(), isr=()))
                continue
            leader = int(pm.leader)
            parts.append(
                PartitionMetadata(
                    partition=pid,
                    leader=leader,
                    replicas=tuple(int(r) for r in pm.replicas),
                    isr=tuple(int(r) for r in pm.isrs),
                    leader_rack=racks.get(leader),
                )
            )
        return PartitionsAnswer(partitions=tuple(parts), exists=True)

    def min_insync_replicas(self, topic: str, timeout_s: float) -> MinIsr | None:
        admin = self._admin_client()
        if admin is None:
            return None
        # The bundled stubs do not list these re-exports of confluent_kafka.admin.
        from confluent_kafka.admin import (  # type: ignore[attr-defined]
            ConfigResource,
            ConfigSource,
        )

        deadline = time.monotonic() + timeout_s
        try:
            entry = _described(admin, ConfigResource(ConfigResource.Type.TOPIC, topic), timeout_s)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_AUTHORIZATION_FAILED:
                raise
            # No DESCRIBE_CONFIGS on the topic: the brokers' own value is the better guess.
            brokers = self._client.list_topics(timeout=max(0.05, deadline - time.monotonic()))
            broker = ConfigResource(ConfigResource.Type.BROKER, str(next(iter(brokers.brokers))))
            entry = _described(admin, broker, max(0.05, deadline - time.monotonic()))
            if entry is None:
                return None
            return MinIsr(value=max(1, int(entry.value)), source="broker-default")
        if entry is None:
            return None
        topic_level = ConfigSource.DYNAMIC_TOPIC_CONFIG
        source = "topic" if entry.source in (topic_level, topic_level.value) else "broker"
        return MinIsr(value=max(1, int(entry.value)), source=source)

    def _broker_racks(self, timeout_s: float) -> dict[int, str | None]:
        now = time.monotonic()
        if self._racks_at is not None and now - self._racks_at < self._racks_refresh_s:
            return self._racks
        admin = self._admin_client()
        if admin is None:
            return self._racks
        try:
            cluster = admin.describe_cluster(request_timeout=timeout_s).result(timeout=timeout_s)
            self._racks = {int(n.id): n.rack for n in cluster.nodes}
        except Exception as exc:
            logger.info("broker racks not available (DescribeCluster failed: %s)", exc)
        self._racks_at = now
        return self._racks

    def close(self) -> None:
        self._admin = None
