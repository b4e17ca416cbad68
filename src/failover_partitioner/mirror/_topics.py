"""Target topics made to follow their source topics: created, grown and configured.

This is MirrorMaker 2's topic and config sync (KIP-382, ``MirrorSourceConnector``): a missing
target topic is created with the source's partition count and its topic-level configuration,
a target topic is given more partitions when its source grows, and topic-level configuration is
copied again every ``config_sync_interval_s``. Which configuration is copied follows MM2's
``DefaultConfigPropertyFilter`` with ``use.defaults.from=target``: settings made on the source
topic itself (not broker or static defaults), minus :data:`EXCLUDED_CONFIGS`, which describe the
source cluster's own operation (throttles, timestamp handling, durability) rather than the data.

:func:`plan_topic` decides (pure); :class:`TopicSync` asks both clusters and carries the plan
out with admin clients (a thin shell).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from failover_partitioner._config import NOT_FOR_ADMIN, companion_conf
from failover_partitioner.confluent._shared import kafka_error_of

from ._errors import MirrorError

__all__ = [
    "EXCLUDED_CONFIGS",
    "ClusterIdsUnread",
    "PendingEnds",
    "TopicPlan",
    "TopicShape",
    "TopicSync",
    "TopicSyncError",
    "admin_config",
    "plan_topic",
]

logger = logging.getLogger(__name__)

# MirrorMaker 2's config.properties.exclude default (DefaultConfigPropertyFilter).
EXCLUDED_CONFIGS = (
    "follower.replication.throttled.replicas",
    "leader.replication.throttled.replicas",
    "message.timestamp.difference.max.ms",
    "message.timestamp.type",
    "unclean.leader.election.enable",
    "min.insync.replicas",
)

# DescribeConfigs' source of a setting made on the topic itself (ConfigSource.DYNAMIC_TOPIC_CONFIG).
_TOPIC_SET = 1

# Answers to describe_cluster that mean the cluster cannot be described this way, not that it
# cannot be read: its cluster id is then read from its metadata (see TopicSync.cluster_ids).
_NOT_DESCRIBED = frozenset({KafkaError._UNSUPPORTED_FEATURE, KafkaError.UNSUPPORTED_VERSION})


class PendingEnds:
    """The answer to :meth:`TopicSync.ask_ends`, once it comes: the high watermarks the
    target's leaders had at some moment between the asking and the answer.

    ``topics``: the target topics asked for."""

    def __init__(self, futures: Mapping[Any, Future[Any]], topics: frozenset[str]) -> None:
        self._futures = futures
        self.topics = topics

    def wait(self, timeout_s: float) -> bool:
        """True once the whole answer is in (at most ``timeout_s`` of waiting for it)."""
        if timeout_s > 0:
            futures_wait(list(self._futures.values()), timeout=timeout_s)
        return all(f.done() for f in self._futures.values())

    def result(self) -> dict[str, tuple[int, ...]]:
        """Each topic's high watermarks by partition; a KafkaException if any was refused
        or timed out. Only once :meth:`wait` is true."""
        found: dict[str, dict[int, int]] = {}
        for tp, future in self._futures.items():
            found.setdefault(tp.topic, {})[tp.partition] = future.result().offset
        return {t: tuple(by_q[q] for q in range(len(by_q))) for t, by_q in found.items()}


class TopicSyncError(MirrorError):
    """The target cluster refused to create or grow a target topic, topics cannot be read for
    lack of rights, or a target topic has fewer partitions than its source where that would
    fold source partitions together."""


def admin_config(conf: Mapping[str, Any]) -> dict[str, Any]:
    """An admin client's settings from a consumer or producer config (see companion_conf)."""
    return companion_conf(conf, "admin", drop=NOT_FOR_ADMIN)


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicShape:
    """What the sync reads of a topic: its partition count and its topic-level settings."""

    partitions: int
    configs: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicPlan:
    """What to do to one target topic. Empty when it already follows its source."""

    source: str
    target: str
    create: bool = False
    """Create the target with ``partitions`` partitions and ``set_configs``."""
    partitions: int = 0
    grow_to: int = 0
    """Add partitions to the target until it has this many (0: none to add)."""
    set_configs: tuple[tuple[str, str], ...] = ()
    delete_configs: tuple[str, ...] = ()
    """Target topic settings the source does not make: back to the target's default."""

    @property
    def empty(self) -> bool:
        return not (self.create or self.grow_to or self.set_configs or self.delete_configs)


def copied_configs(
    source: Mapping[str, str], extra: Mapping[str, str], excluded: re.Pattern[str]
) -> dict[str, str]:
    """The target's topic-level settings: the source's, minus excluded names, plus ``extra``
    (which wins, and is never excluded: the user asked for it)."""
    out = {k: v for k, v in source.items() if not excluded.fullmatch(k)}
    out.update(extra)
    return out


def plan_topic(
    source_name: str,
    target_name: str,
    source: TopicShape,
    target: TopicShape | None,
    *,
    manage: bool,
    configs: bool,
    extra_configs: Mapping[str, str] = MappingProxyType({}),
    excluded: re.Pattern[str] | None = None,
) -> TopicPlan:
    """Decide what brings ``target`` in line with ``source``.

    ``manage``: the mirror may create, grow and configure target topics (else the plan is
    empty; what a short target means for placement is ``_targets``);
    ``configs``: compare topic-level settings this time too. A target never loses partitions
    (Kafka cannot), and one with more than its source is left alone.
    """
    excluded = excluded if excluded is not None else default_excluded()
    wanted = copied_configs(source.configs, extra_configs, excluded)
    if target is None:
        if not manage:
            return TopicPlan(source=source_name, target=target_name)
        return TopicPlan(
            source=source_name,
            target=target_name,
            create=True,
            partitions=source.partitions,
            set_configs=tuple(sorted(wanted.items())),
        )
    grow_to = source.partitions if manage and target.partitions < source.partitions else 0
    set_configs: tuple[tuple[str, str], ...] = ()
    delete_configs: tuple[str, ...] = ()
    if manage and configs:
        have = target.configs
        set_configs = tuple(sorted((k, v) for k, v in wanted.items() if have.get(k) != v))
        # As MM2 with use.defaults.from=target: a setting the source leaves at its default
        # goes back to the target's default. Excluded names stay the target's business.
        delete_configs = tuple(
            sorted(k for k in have if k not in wanted and not excluded.fullmatch(k))
        )
    return TopicPlan(
        source=source_name,
        target=target_name,
        grow_to=grow_to,
        set_configs=set_configs,
        delete_configs=delete_configs,
    )


def default_excluded() -> re.Pattern[str]:
    return exclusion_pattern(EXCLUDED_CONFIGS)


def exclusion_pattern(names: Iterable[str]) -> re.Pattern[str]:
    """One pattern matching any of ``names`` (each a whole-name regular expression)."""
    parts = [f"(?:{n})" for n in names if n]
    return re.compile("|".join(parts) if parts else r"(?!)")


class ClusterIdsUnread(KafkaException):
    """:meth:`TopicSync.cluster_ids` could not read the id of each cluster in ``unread``
    ("source", "target": what its request raised); it carries the first one's error."""

    def __init__(self, unread: Mapping[str, KafkaException], *args: object) -> None:
        super().__init__(*args)
        self.unread = dict(unread)


class TopicSync:
    """Brings target topics in line with their source topics through admin clients.

    ``source_admin`` and ``target_admin`` are ``confluent_kafka.admin.AdminClient``s (or
    anything with its ``list_topics``, ``describe_cluster``, ``describe_configs``,
    ``create_topics``, ``create_partitions`` and ``incremental_alter_configs``).
    """

    def __init__(
        self,
        source_admin: Any,
        target_admin: Any,
        *,
        manage: bool,
        replication_factor: int = -1,
        extra_configs: Mapping[str, str] = MappingProxyType({}),
        excluded: re.Pattern[str] | None = None,
        timeout_s: float = 15.0,
    ) -> None:
        self._source = source_admin
        self._target = target_admin
        self._manage = manage
        self._replication_factor = replication_factor
        self._extra = dict(extra_configs)
        self._excluded = excluded if excluded is not None else default_excluded()
        self._timeout_s = timeout_s
        self.partitions: dict[str, int] = {}
        """Target topic -> partition count, as of the last sync (missing: no such topic)."""
        self.changed: set[str] = set()
        """Target topics the last sync created or gave partitions to."""

    @property
    def timeout_s(self) -> float:
        """How long each request to a cluster waits for its answer."""
        return self._timeout_s

    def sync(
        self,
        pairs: Sequence[tuple[str, str]],
        *,
        configs: bool,
        source_topics: Mapping[str, Any] | None = None,
    ) -> list[TopicPlan]:
        """Read source and target topics of ``pairs`` (source, target) and act on the plans.
        ``source_topics``: the source's topic metadata when the caller has just read it.

        Raises :class:`TopicSyncError` when the target refuses to create or grow a topic, and
        ``KafkaException`` when a cluster cannot be read. A refused config change is logged
        and tried again at the next config sync: the data still flows.
        """
        if not pairs:
            return []
        timeout = self._timeout_s
        src_md = (
            self._source.list_topics(timeout=timeout).topics
            if source_topics is None
            else source_topics
        )
        dst_md = self._target.list_topics(timeout=timeout).topics
        sources = {s: t for s, t in pairs if s in src_md}
        existing = [t for t in sources.values() if _exists(dst_md.get(t))]
        need_configs = configs or any(t not in existing for t in sources.values())
        src_configs = (
            self._topic_configs(self._source, list(sources))
            if need_configs and self._manage
            else {}
        )
        dst_configs = (
            self._topic_configs(self._target, existing) if configs and self._manage else {}
        )
        plans = []
        for s, t in sources.items():
            shape = TopicShape(partitions=len(src_md[s].partitions), configs=src_configs.get(s, {}))
            target = None
            if t in existing:
                # Partitions never go away: a count below one we made or saw is metadata that
                # has not caught up yet (right after a grow), not a smaller topic.
                count = max(len(dst_md[t].partitions), self.partitions.get(t, 0))
                target = TopicShape(partitions=count, configs=dst_configs.get(t, {}))
            else:
                self.partitions.pop(t, None)
            plan = plan_topic(
                s,
                t,
                shape,
                target,
                manage=self._manage,
                configs=configs,
                extra_configs=self._extra,
                excluded=self._excluded,
            )
            if target is not None:
                self.partitions[t] = target.partitions
            plans.append(plan)
        self._apply(plans)
        return plans

    def cluster_ids(
        self, waiting: Callable[[], None] = lambda: None
    ) -> tuple[str | None, str | None]:
        """The source's and the target's cluster ids (None: not told), both asked at once;
        ``waiting`` is called about twice a second until both are answered (it may raise to
        stop waiting). Raises :class:`ClusterIdsUnread` (a ``KafkaException``) naming the
        clusters that cannot be read.

        ``describe_cluster`` asks for the cluster alone: librdkafka sends a Metadata request
        for no topic (about 100 bytes back), where ``list_topics`` would bring every topic and
        partition of the cluster (56 KB for 200 topics of 6 partitions on minibroker), which
        the topic sync reads moments later anyway."""
        timeout = self._timeout_s
        asked = [
            (admin, admin.describe_cluster(request_timeout=timeout))
            for admin in (self._source, self._target)
        ]
        while futures_wait([future for _, future in asked], timeout=0.5).not_done:
            waiting()
        ids: list[str | None] = []
        unread: dict[str, KafkaException] = {}
        for cluster, (admin, future) in zip(("source", "target"), asked, strict=True):
            try:
                ids.append(self._cluster_id(admin, future))
            except KafkaException as exc:
                unread[cluster] = exc
                ids.append(None)
        if unread:
            first = next(iter(unread.values()))
            raise ClusterIdsUnread(unread, *first.args) from first
        return ids[0], ids[1]

    def _cluster_id(self, admin: Any, future: Future[Any]) -> str | None:
        try:
            cluster_id: str | None = future.result().cluster_id
        except KafkaException as exc:
            err = kafka_error_of(exc)
            if err is None or err.code() not in _NOT_DESCRIBED:
                raise
            # librdkafka 2.16 describes a cluster with that Metadata request, which any broker
            # answers; a client that sends DescribeCluster itself (KIP-700) is refused by a
            # broker older than Kafka 2.8. The full metadata carries the id as well.
            logger.debug("cannot describe the cluster (%s); reading its metadata", err.str())
            cluster_id = admin.list_topics(timeout=self._timeout_s).cluster_id
        return cluster_id

    def ensure(self, topic: str, *, partitions: int, configs: Mapping[str, str]) -> None:
        """Create the mirror's own ``topic`` on the target if it is missing (even with
        ``manage`` off: it is the mirror's, not a copy of a source topic)."""
        md = self._target.list_topics(topic, timeout=self._timeout_s).topics.get(topic)
        if _exists(md):
            return
        plan = TopicPlan(
            source="(the mirror's own)",
            target=topic,
            create=True,
            partitions=partitions,
            set_configs=tuple(sorted(configs.items())),
        )
        self._create([plan])

    def ask_ends(self, topics: Iterable[str]) -> PendingEnds:
        """Ask for the high watermark of every partition of each target topic (as many
        partitions as the last sync saw), in one request, without waiting for the answer."""
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]  # stubs lag

        asked = frozenset(topics)
        wanted = {
            TopicPartition(t, q): OffsetSpec.latest()  # type: ignore[no-untyped-call]
            for t in asked
            for q in range(self.partitions.get(t, 0))
        }
        if not wanted:
            return PendingEnds({}, asked)
        futures = self._target.list_offsets(wanted, request_timeout=self._timeout_s)
        return PendingEnds(futures, asked)

    def _topic_configs(self, admin: Any, topics: list[str]) -> dict[str, dict[str, str]]:
        from confluent_kafka.admin import (  # type: ignore[attr-defined]  # stubs lag
            ConfigResource,
            ResourceType,
        )

        if not topics:
            return {}
        resources = [ConfigResource(ResourceType.TOPIC, t) for t in topics]
        out: dict[str, dict[str, str]] = {}
        for resource, future in admin.describe_configs(
            resources, request_timeout=self._timeout_s
        ).items():
            entries = future.result()
            out[resource.name] = {
                name: entry.value
                for name, entry in entries.items()
                if _source_of(entry) == _TOPIC_SET and entry.value is not None
            }
        return out

    def _apply(self, plans: list[TopicPlan]) -> None:
        self.changed = set()
        creating = [p for p in plans if p.create]
        if creating:
            self._create(creating)
        growing = [p for p in plans if p.grow_to]
        if growing:
            self._grow(growing)
        altering = [p for p in plans if (p.set_configs or p.delete_configs) and not p.create]
        if altering:
            self._alter(altering)

    def _create(self, plans: list[TopicPlan]) -> None:
        from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]  # stubs lag

        topics = [
            NewTopic(
                p.target,
                num_partitions=p.partitions,
                replication_factor=self._replication_factor,
                config=dict(p.set_configs),
            )
            for p in plans
        ]
        by_name = {p.target: p for p in plans}
        futures = self._target.create_topics(topics, request_timeout=self._timeout_s)
        for name, future in futures.items():
            plan = by_name[name]
            try:
                future.result()
            except KafkaException as exc:
                err = kafka_error_of(exc)
                if err is not None and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    continue  # made meanwhile (another mirror, or by hand): the next sync reads it
                raise TopicSyncError(
                    f"the target cluster refused to create topic {name!r} (mirror of "
                    f"{plan.source!r}, {plan.partitions} partitions, replication factor "
                    f"{_rf(self._replication_factor)}, configs {dict(plan.set_configs)}): "
                    f"{_describe(exc)}. {_advice(err)}"
                ) from exc
            self.partitions[name] = plan.partitions
            self.changed.add(name)
            logger.info(
                "created target topic %r: %d partitions like %r, configs %s",
                name,
                plan.partitions,
                plan.source,
                dict(plan.set_configs),
            )

    def _grow(self, plans: list[TopicPlan]) -> None:
        from confluent_kafka.admin import NewPartitions  # type: ignore[attr-defined]  # stubs lag

        futures = self._target.create_partitions(
            [NewPartitions(p.target, p.grow_to) for p in plans], request_timeout=self._timeout_s
        )
        by_name = {p.target: p for p in plans}
        for name, future in futures.items():
            plan = by_name[name]
            try:
                future.result()
            except KafkaException as exc:
                err = kafka_error_of(exc)
                if self._grown_meanwhile(name, plan.grow_to):
                    self.partitions[name] = plan.grow_to
                    continue  # grown meanwhile (our metadata was behind): nothing to do
                raise TopicSyncError(
                    f"source topic {plan.source!r} has {plan.grow_to} partitions and the "
                    f"target cluster refused to grow target topic {name!r} to as many: "
                    f"{_describe(exc)}. {_advice(err)}"
                ) from exc
            logger.info(
                "target topic %r now has %d partitions, like its source %r",
                name,
                plan.grow_to,
                plan.source,
            )
            self.partitions[name] = plan.grow_to
            self.changed.add(name)

    def _grown_meanwhile(self, topic: str, count: int) -> bool:
        """Whether ``topic`` has ``count`` partitions already, as its metadata says within a
        few seconds (a grow refused as INVALID_PARTITIONS may only have raced an earlier one
        whose metadata had not reached us)."""
        deadline = time.monotonic() + min(5.0, self._timeout_s)
        while True:
            try:
                md = self._target.list_topics(topic, timeout=self._timeout_s).topics.get(topic)
            except KafkaException:
                md = None
            if _exists(md) and len(md.partitions) >= count:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.2)

    def _alter(self, plans: list[TopicPlan]) -> None:
        from confluent_kafka.admin import (  # type: ignore[attr-defined]  # stubs lag
            AlterConfigOpType,
            ConfigEntry,
            ConfigResource,
            ResourceType,
        )

        resources = []
        for p in plans:
            entries = [
                ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                for k, v in p.set_configs
            ] + [
                ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
                for k in p.delete_configs
            ]
            resources.append(
                ConfigResource(ResourceType.TOPIC, p.target, incremental_configs=entries)
            )
        by_name = {p.target: p for p in plans}
        for resource, future in self._target.incremental_alter_configs(
            resources, request_timeout=self._timeout_s
        ).items():
            plan = by_name[resource.name]
            try:
                future.result()
            except KafkaException as exc:
                logger.warning(
                    "the target cluster refused to change configs of %r (set %s, back to "
                    "default %s): %s; trying again at the next config sync",
                    resource.name,
                    dict(plan.set_configs),
                    list(plan.delete_configs),
                    _describe(exc),
                )
                continue
            logger.info(
                "target topic %r configs synced from %r: set %s, back to default %s",
                resource.name,
                plan.source,
                dict(plan.set_configs),
                list(plan.delete_configs),
            )


def _exists(md: Any) -> bool:
    return md is not None and md.error is None and len(md.partitions) > 0


def _source_of(entry: Any) -> int:
    source = entry.source
    return int(getattr(source, "value", source))


def _describe(exc: KafkaException) -> str:
    err = kafka_error_of(exc)
    if err is None:
        return str(exc)
    return f"{err.name()} ({err.str()})"


def _rf(replication_factor: int) -> str:
    return "the broker default" if replication_factor < 0 else str(replication_factor)


def _advice(err: KafkaError | None) -> str:
    """What to do about a refused create or grow, by the error's kind."""
    code = err.code() if err is not None else None
    if code in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED):
        return (
            "Grant the mirror's target principal CREATE and ALTER on the topic (or cluster), or "
            "create the topic yourself and pass --no-sync-topics"
        )
    if code == KafkaError.POLICY_VIOLATION:
        return (
            "The target's create.topic.policy refuses it: adjust --topic-replication-factor or "
            "--topic-config, or create the topic yourself and pass --no-sync-topics"
        )
    if code in (KafkaError.INVALID_REPLICATION_FACTOR, KafkaError.INVALID_PARTITIONS):
        return "Pass a --topic-replication-factor the target cluster can place"
    if code == KafkaError.INVALID_CONFIG:
        return "Fix or remove that setting with --topic-config, or exclude it with --config-exclude"
    return "Nothing was mirrored to it; fix the cause and restart"
