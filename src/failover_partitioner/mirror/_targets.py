"""Target topics: the subscription to source topics, the topic sync, and placement.

Before a source topic is consumed, and at each topic refresh, its target topic is created,
grown and configured like it (``_topics``), and its placement decided once (``preserve``:
source partition p to target p while usable; see :meth:`Targets.placement`). Whether a target
topic is whole (every partition usable: the fast lane may take its messages) is asked here too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from failover_partitioner._config import client_settings, surfacing
from failover_partitioner.confluent._shared import kafka_error_of
from failover_partitioner.errors import FailoverError

from ._clients import (
    CHECK_ADDRESS,
    UNANSWERED,
    AdminFactory,
    Clients,
    LaneProducer,
    PlacingProducer,
    RebalanceCallback,
    build,
    describe,
    unanswered,
)
from ._config import MirrorOptions, TopicRouter, refuse_copy_onto_itself
from ._errors import MirrorConfigError, MirrorError
from ._logins import Logins
from ._topics import (
    EXCLUDED_CONFIGS,
    ClusterIdsUnread,
    TopicSync,
    TopicSyncError,
    admin_config,
    exclusion_pattern,
)

__all__ = ["LANE_RETRY_S", "Targets"]

logger = logging.getLogger(__name__)

# Answers to the topic sync's admin requests that trying again will not change.
_REFUSED = frozenset(
    {
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.SASL_AUTHENTICATION_FAILED,
    }
)


# While a target topic is not whole, the fast lane is off; this often it looks again.
LANE_RETRY_S = 1.0


class Targets:
    """The source topics subscribed to and their target topics: synced, placed, seen.

    ``sync``: the topic sync (None without an admin factory); ``offset_syncs_on``: off when
    the target refused the offset-syncs topic (warned once at start); ``seen``: every target
    topic produced to (the lane comes back on once all of them are whole);
    ``source_logins``, ``target_logins``: what the clients of each cluster told of refused
    logins (a request that fails after one stops the mirror, see ``_logins``)."""

    def __init__(
        self,
        options: MirrorOptions,
        clients: Clients,
        admin_factory: AdminFactory | None,
        clock: Callable[[], float],
    ) -> None:
        self._options = options
        self.router: TopicRouter = options.router()
        self._clients = clients
        self._admin_factory = admin_factory
        self._clock = clock
        self.sync: TopicSync | None = None
        self._next_config_sync = 0.0
        # Source topic -> partition count, as the last successful topic sync saw them.
        self._synced_shape: dict[str, int] = {}
        # Target topic -> True while its messages keep their source partition number.
        self.preserve: dict[str, bool] = {}
        self._short_warned: set[str] = set()
        self._refresh_at: dict[str, float] = {}
        # Off when the target refused the offset-syncs topic (warned once at start).
        self.offset_syncs_on = options.offset_syncs_topic is not None
        self.seen: set[str] = set()
        self.subscribed: tuple[str, ...] | None = None
        # Source and target are one cluster: by the same bootstrap list until the clusters'
        # ids are read at start.
        self.same_cluster = options.source_servers == options.target_servers
        self.source_logins = Logins("source", "--consumer.config")
        self.target_logins = Logins("target", "--producer.config")
        # The clusters whose id the first request could not read (none answered it).
        self._unanswered: set[str] = set()

    def start(self) -> None:
        """Check the producer can place as asked; build the topic sync; make the
        offset-syncs topic (or turn offset syncs off when the target refuses it)."""
        opts = self._options
        if opts.partitioning == "preserve" and not isinstance(
            self._clients.producer, PlacingProducer
        ):
            raise MirrorConfigError(
                "--partitioning preserve needs the failover producer (a producer with usable() "
                "and a partition preference); this Mirror was given another producer"
            )
        factory = self._admin_factory
        if factory is None:
            return
        started = self._clock()
        target_conf = client_settings(opts.producer_config).client_conf
        self.sync = TopicSync(
            admin_client("source", factory, opts.consumer_config, self.source_logins),
            admin_client("target", factory, target_conf, self.target_logins),
            manage=opts.sync_topics,
            replication_factor=opts.topic_replication_factor,
            extra_configs=opts.topic_configs,
            excluded=exclusion_pattern((*EXCLUDED_CONFIGS, *opts.config_exclude)),
        )
        self._compare_clusters(self.sync)
        if opts.offset_syncs_topic is not None:
            # One partition, compacted, as MirrorMaker 2's offset-syncs topic.
            try:
                self.sync.ensure(
                    opts.offset_syncs_topic, partitions=1, configs={"cleanup.policy": "compact"}
                )
            except TopicSyncError as exc:
                cause = exc.__cause__
                err = kafka_error_of(cause) if isinstance(cause, KafkaException) else None
                if err is None or err.code() not in _REFUSED:
                    raise
                # As MirrorMaker 2: syncs only help translation, so a principal without the
                # right to make their topic mirrors without them (told once, here).
                self.offset_syncs_on = False
                logger.warning(
                    "offset syncs are off: the target refused to create topic %r (%s). "
                    "Mirroring goes on; 'failover-mirror translate' then reads each target "
                    "partition from its start. Create the topic (one partition, "
                    "cleanup.policy=compact) or grant CREATE on it, or pass --no-offset-syncs",
                    opts.offset_syncs_topic,
                    describe(err),
                )
            except KafkaException as exc:
                err = kafka_error_of(exc)
                if err is None or err.code() not in UNANSWERED:
                    raise
                # No target broker answered the ids nor this: a mistyped --target, or a
                # cluster that is not running. Stop, naming it, rather than fail with
                # librdkafka's words alone.
                self.target_logins.failed()
                raise MirrorError(self._unanswered_error(exc, self._clock() - started)) from exc

    def _where(self, cluster: str) -> tuple[str, str]:
        """The bootstrap servers of ``cluster`` ("source", "target") and where they were given."""
        opts = self._options
        if cluster == "source":
            return opts.source_servers, (
                "--source"
                if opts.source_bootstrap is not None
                else "bootstrap.servers in --consumer.config"
            )
        return opts.target_servers, (
            "--target"
            if opts.target_bootstrap is not None
            else "bootstrap.servers in --producer.config"
        )

    def _unanswered_error(self, exc: KafkaException, waited_s: float) -> str:
        """The error of a mirror stopped at start because the target answered nothing."""
        told = unanswered("target", *self._where("target"), waited_s, exc)
        if "source" in self._unanswered:
            servers, flag = self._where("source")
            told += f"; nor did the source cluster at {servers} ({flag})"
        assert self.sync is not None
        wait_s = 2 * self.sync.timeout_s  # the clusters' ids, then the offset-syncs topic
        return (
            f"{told}: {CHECK_ADDRESS}; the mirror waits {wait_s:.0f} s for the target at "
            "startup. Nothing was mirrored or committed; fix it and restart"
        )

    def _compare_clusters(self, sync: TopicSync) -> None:
        """Whether source and target are one cluster, by the ids in their metadata: two
        bootstrap lists (one broker and all of them, a name and its address) may name one."""
        try:
            source_id, target_id = sync.cluster_ids(waiting=self._check_logins)
        except KafkaException as exc:
            # The first request to both: a cluster that refuses the credentials stops it here.
            self.source_logins.failed()
            self.target_logins.failed()
            unread = exc.unread if isinstance(exc, ClusterIdsUnread) else {}
            self._unanswered = {
                c
                for c, e in unread.items()
                if (err := kafka_error_of(e)) and err.code() in UNANSWERED
            }
            for cluster in sorted(self._unanswered):
                logger.warning(
                    "%s: %s; waiting for it",
                    unanswered(cluster, *self._where(cluster), sync.timeout_s, unread[cluster]),
                    CHECK_ADDRESS,
                )
            if not self._unanswered:
                logger.warning("cannot read the clusters' ids (%s); telling them by bootstrap", exc)
            return
        self.source_logins.succeeded()
        self.target_logins.succeeded()
        if source_id is None or target_id is None:
            return
        self.same_cluster = source_id == target_id
        if self.same_cluster:
            refuse_copy_onto_itself(self.router, f"both have cluster id {source_id!r}")

    def _check_logins(self) -> None:
        self.source_logins.check()
        self.target_logins.check()

    def _sync_topics(self, topics: Sequence[str], source_md: Any) -> bool:
        """Bring the target topics of ``topics`` in line with their sources (create, grow, and
        every ``config_sync_interval_s`` configs), then decide each one's placement. False
        when a cluster could not be read: the caller keeps its subscription as it is."""
        sync = self.sync
        now = self._clock()
        configs = now >= self._next_config_sync
        # What the source looks like (topics and partition counts): while it stays as the last
        # sync saw it and configs are not due, there is nothing to do, and the loop asks
        # neither cluster anything (a request to a hung broker would hold it).
        shape = (
            {t: len(md.partitions) for t in topics if (md := source_md.topics.get(t))}
            if sync is not None
            else {}
        )
        if sync is not None and topics and (configs or shape != self._synced_shape):
            try:
                sync.sync(
                    [(t, self.router.target(t)) for t in topics],
                    configs=configs,
                    source_topics=source_md.topics,
                )
            except KafkaException as exc:
                err = kafka_error_of(exc)
                if err is not None and err.code() in _REFUSED:
                    raise TopicSyncError(
                        f"cannot read or change topics to keep the target in step with the "
                        f"source: {describe(err)}. The source principal needs DESCRIBE_CONFIGS "
                        "on the mirrored topics, the target's CREATE, ALTER and DESCRIBE_CONFIGS; "
                        "or pass --no-sync-topics and manage target topics yourself"
                    ) from exc
                self.source_logins.failed()
                self.target_logins.failed()
                logger.warning(
                    "cannot sync target topics (%s); keeping the current subscription", exc
                )
                return False
            self.target_logins.succeeded()
            if configs:
                self._next_config_sync = now + self._options.config_sync_interval_s
            self._synced_shape = shape
            for target in sync.changed:
                self._refresh_target(target)
        for topic in topics:
            self._decide_placement(topic, source_md.topics.get(topic))
        return True

    def _refresh_target(self, target: str) -> None:
        """A target topic was created or grew: the producer learns its partitions now, so
        that preserve mode does not route the new partitions' messages elsewhere meanwhile."""
        refresh = getattr(self._clients.producer, "refresh", None)
        if refresh is None or target not in self.seen:
            return  # metadata is fetched when the topic is first produced to
        try:
            refresh(target)
        except (FailoverError, KafkaException) as exc:
            logger.debug("cannot refresh target topic %r now: %s", target, exc)

    def _decide_placement(self, topic: str, source_md: Any) -> None:
        """Whether ``topic``'s messages keep their partition number on the target (one place
        for the rule; see MirrorOptions.partitioning)."""
        mode = self._options.partitioning
        target = self.router.target(topic)
        if mode == "key" or not isinstance(self._clients.producer, PlacingProducer):
            self.preserve[target] = False
            return
        known = self.sync.partitions.get(target) if self.sync else None
        source_partitions = len(source_md.partitions) if source_md is not None else 0
        if known is not None and known < source_partitions:
            detail = (
                f"target topic {target!r} has {known} partitions and its source {topic!r} has "
                f"{source_partitions}"
            )
            remedy = (
                f"add partitions to the target (kafka-topics.sh --alter --topic {target} "
                f"--partitions {source_partitions}), let the mirror do it (without "
                "--no-sync-topics), or pass --partitioning key"
            )
            if mode == "preserve":
                raise TopicSyncError(
                    f"{detail}: --partitioning preserve cannot keep source partitions "
                    f"{known}..{source_partitions - 1} on their numbers, and will not fold them "
                    f"onto others; {remedy}"
                )
            if target not in self._short_warned:
                self._short_warned.add(target)
                logger.warning(
                    "%s: its messages are placed by key, not by source partition; %s",
                    detail,
                    remedy,
                )
            self.preserve[target] = False
            return
        self.preserve[target] = True

    def placement(self, target: str, partition: int) -> int:
        """The target partition for messages of source ``partition`` now: the same number
        while that partition is usable (preserve mode), else -1 (the producer places them)."""
        if not self.preserve.get(target):
            return -1
        producer: PlacingProducer = self._clients.producer  # type: ignore[assignment]  # see _decide_placement
        if target not in self.seen and isinstance(producer, LaneProducer):
            self.whole(target)  # fetches the topic's metadata once
        elif target not in self.seen:
            self.seen.add(target)
            try:
                producer.health(target)
            except (FailoverError, KafkaException) as exc:
                logger.debug("no metadata for target topic %r yet: %s", target, exc)
        if producer.usable(target, partition):
            return partition
        sync = self.sync
        if sync is not None and partition < sync.partitions.get(target, 0):
            try:
                seen = producer.health(target).num_partitions
            except (FailoverError, KafkaException):
                return -1
            if partition < seen:
                return -1  # a partition the producer knows, and not usable: degraded
            # The target has this partition (the sync made or saw it) but the producer's view
            # predates it: look again, at most every LANE_RETRY_S, rather than route the new
            # partition's messages elsewhere until the next periodic refresh.
            now = self._clock()
            if now >= self._refresh_at.get(target, 0.0):
                self._refresh_at[target] = now + LANE_RETRY_S
                self._refresh_target(target)
                if producer.usable(target, partition):
                    return partition
        return -1

    def whole(self, target: str) -> bool:
        """Whether every partition of ``target`` is usable (the lane may take its messages)."""
        producer = self._clients.lane_producer()
        if target not in self.seen:
            self.seen.add(target)  # the lane looks at every target seen
            if not producer.whole(target):
                # Not produced to yet: fetch its metadata now, so the lane takes it at once.
                try:
                    producer.health(target)
                except (FailoverError, KafkaException) as exc:
                    logger.debug("no metadata for target topic %r yet: %s", target, exc)
                    return False
        return producer.whole(target)

    def refresh(
        self,
        on_assign: RebalanceCallback,
        on_revoke: RebalanceCallback,
        on_lost: RebalanceCallback,
    ) -> None:
        """Subscribe to the source topics selected now, their target topics synced first."""
        consumer = self._clients.consumer
        assert consumer is not None
        try:
            metadata = consumer.list_topics(timeout=10)
        except KafkaException as exc:
            # No broker answered: a refused login stops the mirror, anything else is waited out.
            self.source_logins.failed()
            logger.warning("cannot list source topics (%s); keeping the current subscription", exc)
            return
        self.source_logins.succeeded()
        topics = tuple(sorted(t for t in metadata.topics if self.router.selects(t)))
        for topic in topics:
            self.router.target(topic)  # an illegal renamed name fails here, before consuming
        if self.same_cluster:
            # One cluster: a topic the mirror could have written is not mirrored again (copy.t
            # would become copy.copy.t, and so on), also once its source is gone or when an
            # earlier run wrote it, as MirrorMaker 2 skips its remote topics.
            topics = tuple(t for t in topics if not self.router.could_write(t))
        if not self._sync_topics(topics, metadata):
            return
        if topics == (self.subscribed or ()):
            if not topics and self.subscribed is None:
                logger.debug("no source topic matches --include %r yet", self._options.include)
            return
        if topics:
            logger.info("subscribing to %d source topics: %s", len(topics), ", ".join(topics))
            consumer.subscribe(
                list(topics),
                on_assign=surfacing(on_assign),
                on_revoke=surfacing(on_revoke),
                on_lost=surfacing(on_lost),
            )
            self.subscribed = topics
        else:
            logger.warning("no source topic matches any more; unsubscribing")
            consumer.unsubscribe()
            self.subscribed = None


def admin_client(
    cluster: str, factory: AdminFactory, conf: Mapping[str, Any], logins: Logins
) -> Any:
    """An admin client of ``cluster`` (from its consumer or producer ``conf``) that tells
    ``logins`` of its errors: the first request to a cluster is an admin client's."""
    admin = build(
        f"{cluster} admin client", factory, {**admin_config(conf), "error_cb": logins.error_cb}
    )
    logins.served_by(admin)
    return admin
