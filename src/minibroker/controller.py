"""The cluster controller: topics, replica placement, broker liveness and leader elections.

Pure state with an injected clock, like ``replication``. The controller is the only place that
creates or deletes topics, fences brokers and elects leaders; partitions change their own ISR
(leader-side decisions) and tell the controller through the ``PartitionListener`` callbacks, which
is how an ISR change reaches every broker's Metadata answers (all brokers read this one state).

Liveness, after KRaft with eligible leader replicas on (KIP-966; the default for clusters made
by Kafka 4.1+): a stopped broker is noticed ``broker.session.timeout.ms`` later and *fenced*, one
broker at a time: it leaves every ISR, the last member too (an ISR may be empty), and every
partition it led gets a new leader, chosen as Kafka's ``PartitionChangeBuilder`` does: the first
replica (assignment order) in the ISR and not fenced; with an empty ISR, the first such replica
in the ELR (the replicas that left the ISR while it was under the minimum, see ``replication``);
with both empty, the last leader when it is back (``last_known_elr``); failing all that, when
``unclean.leader.election.enable`` holds for the topic, the first unfenced replica, whose log
becomes the truth; otherwise the partition goes offline (leader -1). Every leader change bumps
the leader epoch. Every stop is a crash: a broker that starts again registers after an unclean
shutdown, so its replicas leave the ISRs and ELRs before it is unfenced and the leaderless
partitions are elected again (a broker restarted before it was fenced is fenced first, as KRaft
does with a new broker incarnation).

Group coordinators follow the leaders of ``__consumer_offsets`` (:class:`OffsetsPartition`):
minibroker keeps no log for that topic, only who leads each partition, elected by the same rules
(a fenced leader is replaced by its first unfenced replica, a returning replica leads a partition
that had none, the preferred replica takes it back only with ``auto.leader.rebalance.enable``).
So a group moves when its partition's leadership moves, never merely because a broker returned.
"""

from __future__ import annotations

import enum
import logging
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from minibroker.config import ConfigStore, validate_topic_configs, validate_topic_name
from minibroker.errors import ConfigError, TopicError
from minibroker.replication import Partition, PartitionListener

__all__ = [
    "INTERNAL_TOPICS",
    "OFFSETS_TOPIC",
    "BrokerStatus",
    "Controller",
    "OffsetsPartition",
    "Topic",
    "assign_replicas",
]

logger = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
# Kafka's Topic.INTERNAL_TOPICS: clients may not produce to them, and minibroker never creates
# one as a topic (it has no transactions and no share groups, and keeps OFFSETS_TOPIC as its
# partitions' leaders only).
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, "__transaction_state", "__share_group_state"})


class BrokerStatus(enum.Enum):
    RUNNING = "running"
    STOPPED = "stopped"  # not running; the controller has not noticed yet
    FENCED = "fenced"  # not running and fenced by the controller


@dataclass(slots=True, kw_only=True)
class Topic:
    name: str
    topic_id: uuid.UUID
    partitions: list[Partition]
    configs: dict[str, str] = field(default_factory=dict)
    max_message_bytes: int = 1048588


@dataclass(slots=True, kw_only=True)
class OffsetsPartition:
    """A ``__consumer_offsets`` partition: its replicas and leader (-1 while none is alive)."""

    index: int
    replicas: tuple[int, ...]
    leader: int


@dataclass(slots=True)
class _Broker:
    status: BrokerStatus
    stopped_at: float = 0.0


def assign_replicas(
    partitions: int, replication_factor: int, brokers: tuple[int, ...], start_index: int = 0
) -> list[tuple[int, ...]]:
    """Kafka's rack-unaware ``assignReplicasToBrokers`` with a fixed start and shift.

    The first replica of partition p is broker ``(p + start) mod n``; the others follow at a
    shift that grows every n partitions, so leaders and followers spread evenly.
    """
    n = len(brokers)
    if not 1 <= replication_factor <= n:
        raise ValueError(f"replication factor {replication_factor} needs 1..{n} brokers")
    shift = 0
    result = []
    for p in range(partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start_index) % n
        replicas = [brokers[first]]
        for j in range(replication_factor - 1):
            step = 1 + (shift + j) % (n - 1)
            replicas.append(brokers[(first + step) % n])
        result.append(tuple(replicas))
    return result


class Controller:
    """Topics, brokers and elections of one cluster."""

    def __init__(
        self,
        *,
        broker_ids: tuple[int, ...],
        configs: ConfigStore,
        listener: PartitionListener,
        now: float,
    ) -> None:
        self.configs = configs
        self.brokers: dict[int, _Broker] = {b: _Broker(BrokerStatus.RUNNING) for b in broker_ids}
        self.topics: dict[str, Topic] = {}
        self.metadata_version = 0
        self._listener = listener
        self._session_timeout_s = configs.settings.get_int("broker.session.timeout.ms") / 1000
        self._lag_time_s = configs.settings.get_int("replica.lag.time.max.ms") / 1000
        self._auto_rebalance = configs.settings.get_bool("auto.leader.rebalance.enable")
        self._rebalance_every_s = configs.settings.get_int(
            "leader.imbalance.check.interval.seconds"
        )
        self._last_rebalance_check = now
        offsets_rf = min(
            configs.settings.get_int("offsets.topic.replication.factor"), len(broker_ids)
        )
        self.offsets_partitions = [
            OffsetsPartition(index=i, replicas=replicas, leader=replicas[0])
            for i, replicas in enumerate(
                assign_replicas(
                    configs.settings.get_int("offsets.topic.num.partitions"),
                    offsets_rf,
                    broker_ids,
                )
            )
        ]

    # ----------------------------------------------------------------- PartitionListener

    def appended(self, partition: Partition) -> None:
        self._listener.appended(partition)

    def high_watermark_advanced(self, partition: Partition) -> None:
        self._listener.high_watermark_advanced(partition)

    def state_changed(self, partition: Partition) -> None:
        self.metadata_version += 1
        self._listener.state_changed(partition)

    # ----------------------------------------------------------------- views

    @property
    def controller_id(self) -> int:
        """One running broker is the controller: the lowest id (re-elected when it stops)."""
        running = [b for b, s in self.brokers.items() if s.status is BrokerStatus.RUNNING]
        return min(running) if running else -1

    def is_running(self, broker_id: int) -> bool:
        return self.brokers[broker_id].status is BrokerStatus.RUNNING

    def is_fenced(self, broker_id: int) -> bool:
        return self.brokers[broker_id].status is BrokerStatus.FENCED

    def registered_brokers(self) -> list[int]:
        """Brokers in the metadata: every broker the controller has not fenced."""
        return [b for b, s in sorted(self.brokers.items()) if s.status is not BrokerStatus.FENCED]

    def partitions(self) -> Iterator[Partition]:
        for topic in self.topics.values():
            yield from topic.partitions

    def partition(self, topic: str, index: int) -> Partition | None:
        found = self.topics.get(topic)
        if found is None or not 0 <= index < len(found.partitions):
            return None
        return found.partitions[index]

    # ----------------------------------------------------------------- topics

    def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: Mapping[str, object] | None,
        now: float,
        *,
        assignments: Sequence[Sequence[int]] | None = None,
        validate_only: bool = False,
    ) -> Topic | None:
        """Create a topic (``-1`` means the broker default); raise TopicError with Kafka's code.

        ``assignments`` gives each partition's replicas explicitly (CreateTopics allows it);
        otherwise replicas are placed as Kafka places them.
        """
        problem = validate_topic_name(name)
        if problem is not None:
            raise TopicError(problem, error_code=ErrorCode.invalid_topic_exception)
        if name in self.topics or name == OFFSETS_TOPIC:
            raise TopicError(
                f"topic {name!r} already exists", error_code=ErrorCode.topic_already_exists
            )
        if name in INTERNAL_TOPICS:
            raise TopicError(
                f"{name!r} is an internal topic of a feature minibroker does not have",
                error_code=ErrorCode.invalid_topic_exception,
            )
        colliding = self._colliding_topic(name)
        if colliding is not None:
            raise TopicError(
                f"topic {name!r} collides with existing topic {colliding!r}",
                error_code=ErrorCode.invalid_topic_exception,
            )
        live = tuple(self.registered_brokers())
        if assignments:
            if partitions not in (-1, len(assignments)) or replication_factor != -1:
                raise TopicError(
                    f"topic {name!r}: give either replica assignments or partitions and "
                    "replication factor, not both",
                    error_code=ErrorCode.invalid_request,
                )
            placement = self._check_assignments(name, assignments, 0)
            partitions, replication_factor = len(placement), len(placement[0])
        else:
            if partitions == -1:
                partitions = self.configs.settings.get_int("num.partitions")
            if replication_factor == -1:
                replication_factor = self.configs.settings.get_int("default.replication.factor")
            if partitions < 1:
                raise TopicError(
                    f"topic {name!r}: partitions must be at least 1, got {partitions}",
                    error_code=ErrorCode.invalid_partitions,
                )
            if not 1 <= replication_factor <= len(live):
                raise TopicError(
                    f"topic {name!r}: replication factor {replication_factor} is not between 1 "
                    f"and the {len(live)} available brokers",
                    error_code=ErrorCode.invalid_replication_factor,
                )
            placement = assign_replicas(partitions, replication_factor, live)
        try:
            checked = validate_topic_configs(configs)
        except ConfigError as exc:
            raise TopicError(str(exc), error_code=ErrorCode.invalid_config) from None
        if validate_only:
            return None
        topic = Topic(name=name, topic_id=uuid.uuid4(), partitions=[], configs=checked)
        self._add_partitions(topic, placement, now)
        self.topics[name] = topic
        self._refresh_topic_configs(topic)
        self.metadata_version += 1
        logger.info(
            "Created topic %s: %d partitions, replication factor %d, configs %s",
            name,
            partitions,
            replication_factor,
            checked,
        )
        return topic

    def _colliding_topic(self, name: str) -> str | None:
        """An existing topic whose name differs from ``name`` only by '.' against '_'.

        Kafka's metric names write both as '_', so KRaft refuses the second of two such names
        (``ReplicationControlManager.validateNewTopicNames``, KAFKA-13743). OFFSETS_TOPIC
        exists here without being in ``topics``, so it counts too.
        """
        if "." not in name and "_" not in name:
            return None
        unified = name.replace(".", "_")
        for existing in (OFFSETS_TOPIC, *self.topics):
            if existing.replace(".", "_") == unified:
                return existing
        return None

    def _check_assignments(
        self, name: str, assignments: Sequence[Sequence[int]], first_index: int
    ) -> list[tuple[int, ...]]:
        placement = [tuple(replicas) for replicas in assignments]
        factor = len(placement[0])
        for offset, replicas in enumerate(placement):
            problem = None
            if len(replicas) != factor or not replicas:
                problem = "every partition needs the same, non-zero number of replicas"
            elif len(set(replicas)) != len(replicas):
                problem = "a replica list names a broker twice"
            elif any(r not in self.brokers for r in replicas):
                problem = f"unknown broker id (brokers are {sorted(self.brokers)})"
            elif not self._active(replicas):
                problem = "every broker it names is fenced"
            if problem is not None:
                raise TopicError(
                    f"topic {name!r}: partition {first_index + offset} assignment "
                    f"{list(replicas)} is invalid: {problem}",
                    error_code=ErrorCode.invalid_replica_assignment,
                )
        return placement

    def _active(self, replicas: tuple[int, ...]) -> tuple[int, ...]:
        """The replicas on brokers the controller has not fenced, in assignment order."""
        return tuple(r for r in replicas if not self.is_fenced(r))

    def _add_partitions(
        self, topic: Topic, placement: Sequence[tuple[int, ...]], now: float
    ) -> None:
        # A new partition's ISR is its active replicas and the first of them leads (Kafka's
        # ReplicationControlManager.createTopic / createPartitions filter the assignment with
        # isActive): an explicit assignment may name a fenced broker, even first.
        isrs = [self._active(replicas) for replicas in placement]
        min_isr = self.configs.topic_int(topic.configs, "min.insync.replicas", isrs[0][0])
        first = len(topic.partitions)
        for offset, (replicas, isr) in enumerate(zip(placement, isrs, strict=True)):
            topic.partitions.append(
                Partition(
                    topic=topic.name,
                    index=first + offset,
                    replicas=replicas,
                    isr=isr,
                    min_insync_replicas=min_isr,
                    replica_lag_time_max_s=self._lag_time_s,
                    listener=self,
                    now=now,
                )
            )

    def add_partitions(
        self,
        name: str,
        count: int,
        assignments: Sequence[Sequence[int]] | None,
        now: float,
        *,
        validate_only: bool = False,
    ) -> None:
        """CreatePartitions: grow ``name`` to ``count`` partitions (Kafka never shrinks)."""
        topic = self.topics.get(name)
        if topic is None:
            raise TopicError(
                f"topic {name!r} does not exist", error_code=ErrorCode.unknown_topic_or_partition
            )
        current = len(topic.partitions)
        if count <= current:
            raise TopicError(
                f"topic {name!r} has {current} partitions; the new count {count} must be larger",
                error_code=ErrorCode.invalid_partitions,
            )
        if assignments:
            if len(assignments) != count - current:
                raise TopicError(
                    f"topic {name!r}: {len(assignments)} assignments for "
                    f"{count - current} new partitions",
                    error_code=ErrorCode.invalid_replica_assignment,
                )
            placement = self._check_assignments(name, assignments, current)
        else:
            factor = len(topic.partitions[0].replicas)
            live = tuple(self.registered_brokers())
            if factor > len(live):
                raise TopicError(
                    f"topic {name!r} has replication factor {factor} but only {len(live)} "
                    "brokers are available",
                    error_code=ErrorCode.invalid_replication_factor,
                )
            placement = assign_replicas(count, factor, live)[current:]
        if validate_only:
            return
        self._add_partitions(topic, placement, now)
        self.metadata_version += 1
        logger.info("Topic %s grew from %d to %d partitions", name, current, count)

    def delete_topic(self, name: str) -> Topic:
        topic = self.topics.pop(name, None)
        if topic is None:
            raise TopicError(
                f"topic {name!r} does not exist", error_code=ErrorCode.unknown_topic_or_partition
            )
        for partition in topic.partitions:
            partition.close(ErrorCode.unknown_topic_or_partition)
        self.metadata_version += 1
        logger.info("Deleted topic %s", name)
        return topic

    def alter_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        """Replace the topic's overrides with ``configs`` (already validated)."""
        topic = self.topics[name]
        topic.configs = configs
        self._refresh_topic_configs(topic)

    def refresh_all_configs(self) -> None:
        for topic in self.topics.values():
            self._refresh_topic_configs(topic)

    def _refresh_topic_configs(self, topic: Topic) -> None:
        first = topic.partitions[0]
        any_broker = first.leader if first.leader >= 0 else first.replicas[0]
        topic.max_message_bytes = self.configs.topic_int(
            topic.configs, "max.message.bytes", any_broker
        )
        for partition in topic.partitions:
            broker = partition.leader if partition.leader >= 0 else partition.replicas[0]
            value = self.configs.topic_int(topic.configs, "min.insync.replicas", broker)
            if value != partition.min_insync_replicas:
                partition.set_min_insync_replicas(value)

    # ----------------------------------------------------------------- brokers

    def broker_stopped(self, broker_id: int, now: float) -> None:
        broker = self.brokers[broker_id]
        if broker.status is BrokerStatus.RUNNING:
            broker.status = BrokerStatus.STOPPED
            broker.stopped_at = now
            logger.info(
                "Broker %d stopped; the controller fences it in %d ms",
                broker_id,
                round(self._session_timeout_s * 1000),
            )

    def broker_started(self, broker_id: int, now: float) -> None:
        broker = self.brokers[broker_id]
        if broker.status is BrokerStatus.RUNNING:
            return
        if broker.status is BrokerStatus.STOPPED:
            self._fence([broker_id], now, "restarted before its session expired")
        # Every stop here is a crash: the broker registers after an unclean shutdown, so its
        # replicas leave the ISRs and ELRs (Kafka's handleBrokerUncleanShutdown, KIP-966).
        for partition in self.partitions():
            if broker_id in partition.isr or broker_id in partition.elr:
                self._change(partition, now, f"broker {broker_id} crashed", crashed=broker_id)
        broker.status = BrokerStatus.RUNNING
        self.metadata_version += 1
        logger.info("Broker %d registered again and is unfenced", broker_id)
        for offsets in self.offsets_partitions:
            if offsets.leader < 0 and broker_id in offsets.replicas:
                self._move_coordinator(offsets, broker_id, "a replica returned")
        for partition in self.partitions():
            if partition.leader < 0:
                self._change(partition, now, f"broker {broker_id} is back")
            elif broker_id in partition.replicas:
                partition.restart_follower(broker_id, now)

    def _unclean_allowed(self, partition: Partition) -> bool:
        topic = self.topics[partition.topic]
        return self.configs.topic_bool(
            topic.configs, "unclean.leader.election.enable", partition.replicas[0]
        )

    def _fence(self, broker_ids: list[int], now: float, reason: str) -> None:
        elections = 0
        # One broker at a time, as Kafka's controller fences them: the ELR depends on the order.
        for broker_id in broker_ids:
            self.brokers[broker_id].status = BrokerStatus.FENCED
            logger.warning("Controller fences broker %d (%s)", broker_id, reason)
            for partition in self.partitions():
                if broker_id in partition.isr:
                    leader = partition.leader
                    self._change(partition, now, f"broker {broker_id} was fenced", fenced=broker_id)
                    elections += partition.leader != leader
        fenced = set(broker_ids)
        for offsets in self.offsets_partitions:
            if offsets.leader in fenced:
                alive = [r for r in offsets.replicas if not self.is_fenced(r)]
                self._move_coordinator(offsets, alive[0] if alive else -1, "leader fenced")
        self.metadata_version += 1
        if elections:
            logger.info("Controller changed the leaders of %d partitions", elections)

    def _change(
        self,
        partition: Partition,
        now: float,
        reason: str,
        *,
        fenced: int | None = None,
        crashed: int | None = None,
    ) -> None:
        """A partition's leader, ISR and ELR once ``fenced`` left, ``crashed`` returned from an
        unclean shutdown, or a broker came back: Kafka's ``PartitionChangeBuilder`` with eligible
        leader replicas on (KIP-966), an ONLINE election or, where the topic allows it, UNCLEAN.
        """
        gone = {fenced, crashed}
        isr = tuple(r for r in partition.isr if r not in gone)
        elr = partition.elr_after(isr, crashed)
        leader, how = self._choose_leader(partition, isr, elr, gone)
        if leader != partition.leader and how != "clean":
            isr, elr = (leader,), tuple(r for r in elr if r != leader) if how == "elr" else ()
        last_known = partition.last_known_elr
        if not isr and partition.isr and partition.leader >= 0:
            last_known = (partition.leader,)  # the first time it has no ISR: its last leader
        elif leader >= 0:
            last_known = ()
        if leader == partition.leader:
            partition.change_isr(isr, elr, last_known, reason)
        else:
            why = reason if how == "clean" else f"{reason}; {how} election"
            partition.elect(leader, isr, now, why, elr=elr, last_known_elr=last_known)

    def _choose_leader(
        self,
        partition: Partition,
        isr: tuple[int, ...],
        elr: tuple[int, ...],
        gone: set[int | None],
    ) -> tuple[int, str]:
        """Kafka's ``electAnyLeader``: the leader kept or chosen, and how it was chosen
        (clean from the ISR, from the ELR, the last known leader, unclean, or -1: none)."""

        def acceptable(replica: int) -> bool:
            return replica not in gone and not self.is_fenced(replica)

        def valid(replica: int) -> bool:
            return (replica in isr or (not isr and replica in elr)) and acceptable(replica)

        if partition.leader >= 0 and valid(partition.leader):
            return partition.leader, "clean"
        for replica in partition.replicas:
            if valid(replica):
                return replica, "clean" if replica in isr else "elr"
        last = partition.last_known_elr
        if not isr and not elr and len(last) == 1 and acceptable(last[0]):
            return last[0], "last known leader"
        if self._unclean_allowed(partition):
            for replica in partition.replicas:
                if acceptable(replica):
                    return replica, "unclean"
        return -1, "clean"

    # ----------------------------------------------------------------- time

    def tick(self, now: float) -> None:
        expired = [
            b
            for b, s in self.brokers.items()
            if s.status is BrokerStatus.STOPPED and now - s.stopped_at >= self._session_timeout_s
        ]
        if expired:
            self._fence(
                expired, now, f"no heartbeat for {round(self._session_timeout_s * 1000)} ms"
            )
        for partition in self.partitions():
            if partition.leader >= 0 and self.is_running(partition.leader):
                partition.tick(now)
        if self._auto_rebalance and now - self._last_rebalance_check >= self._rebalance_every_s:
            # Kafka checks every leader.imbalance.check.interval.seconds (300 s by default);
            # its 10% per-broker imbalance threshold is not modelled.
            self._last_rebalance_check = now
            self._rebalance_leaders(now)

    def _rebalance_leaders(self, now: float) -> None:
        for partition in self.partitions():
            preferred = partition.replicas[0]
            if (
                partition.leader >= 0
                and partition.leader != preferred
                and preferred in partition.isr
                and self.is_running(preferred)
            ):
                partition.elect(preferred, partition.isr, now, "preferred replica is back in sync")
        for offsets in self.offsets_partitions:
            preferred = offsets.replicas[0]
            if offsets.leader != preferred and self.is_running(preferred):
                self._move_coordinator(offsets, preferred, "preferred replica is back")

    def _move_coordinator(self, offsets: OffsetsPartition, leader: int, reason: str) -> None:
        logger.info(
            "__consumer_offsets-%d: leader %d -> %d (%s); its groups move",
            offsets.index,
            offsets.leader,
            leader,
            reason,
        )
        offsets.leader = leader
