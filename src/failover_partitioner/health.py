"""Partition health: what the cluster metadata and recent failures say about each partition.

A partition is

* ``UNAVAILABLE``: no leader, ISR below the effective minimum, or quarantined after a failure;
  an ``acks=all`` write there is refused (NOT_ENOUGH_REPLICAS) or cannot be sent.
* ``AT_RISK``: ISR exactly at the minimum; one more replica lost and it stops.
* ``HEALTHY``: ISR above the minimum.

The effective minimum is ``min(min.insync.replicas, replication factor)``, as the broker
computes it (Kafka's ``Partition.effectiveMinIsr``, KAFKA-15583). Metadata responses do not
carry min.insync.replicas (KIP-637 was never implemented), so it is an input here.

A :class:`TopicView` is an immutable snapshot built from one metadata fetch plus the current
quarantine set; the producer swaps a topic's view as a whole, so a reader never sees half of an
update.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

__all__ = [
    "PartitionHealth",
    "PartitionMetadata",
    "PartitionView",
    "TopicMetadata",
    "TopicView",
    "effective_min_isr",
    "partition_health",
]


class PartitionHealth(enum.IntEnum):
    """How safe it is to write to a partition with ``acks=all`` (ordered: worse < better)."""

    UNAVAILABLE = 0
    AT_RISK = 1
    HEALTHY = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionMetadata:
    """One partition as the cluster metadata reports it. ``leader`` is -1 when there is none."""

    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader_rack: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicMetadata:
    """One metadata fetch for one topic, plus the configured min.insync.replicas.

    ``partitions`` is indexed by partition id. ``exists`` is False when the cluster answered
    that the topic is unknown, or (``refused``) refused to describe it: the client's principal
    may not (TOPIC_AUTHORIZATION_FAILED). ``min_isr_source`` says where
    ``min_insync_replicas`` came from: ``"option"``, ``"topic"``, ``"broker"`` (the topic has
    no value of its own), ``"broker-default"`` (the brokers' own value, assumed because the
    topic's configs may not be read) or ``"default"`` (nothing known: 1).
    """

    topic: str
    partitions: tuple[PartitionMetadata, ...]
    min_insync_replicas: int = 1
    min_isr_source: str = "default"
    exists: bool = True
    fetched_at: float = 0.0
    refused: bool = False

    def __post_init__(self) -> None:
        for index, p in enumerate(self.partitions):
            if p.partition != index:
                raise ValueError(
                    f"topic {self.topic!r}: partitions must be indexed by id, found partition "
                    f"{p.partition} at position {index}"
                )
        if self.min_insync_replicas < 1:
            raise ValueError(
                f"topic {self.topic!r}: min_insync_replicas must be >= 1, got "
                f"{self.min_insync_replicas}"
            )


def effective_min_isr(min_insync_replicas: int, replication_factor: int) -> int:
    """The ISR size the broker requires for an ``acks=all`` write."""
    return max(1, min(min_insync_replicas, replication_factor))


def partition_health(
    p: PartitionMetadata, min_insync_replicas: int, *, quarantined: bool = False
) -> PartitionHealth:
    """The health of one partition."""
    if quarantined or p.leader < 0:
        return PartitionHealth.UNAVAILABLE
    # An ISR that does not even contain the leader is a metadata glitch; trust only its size.
    need = effective_min_isr(min_insync_replicas, len(p.replicas) or len(p.isr))
    have = len(p.isr)
    if have < need:
        return PartitionHealth.UNAVAILABLE
    if have == need:
        return PartitionHealth.AT_RISK
    return PartitionHealth.HEALTHY


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionView:
    """One partition in a :class:`TopicView`."""

    partition: int
    state: PartitionHealth
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    effective_min_isr: int
    quarantined: bool
    leader_rack: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicView:
    """Immutable health snapshot of one topic: the answer to ``producer.health(topic)``.

    Build it with :meth:`build`. The derived tuples (``usable``, ``healthy``, ...) list partition
    ids in ascending order and are computed once here, so the hot path only reads them.
    """

    topic: str
    partitions: tuple[PartitionView, ...]
    min_insync_replicas: int
    min_isr_source: str
    quarantined: frozenset[int]
    exists: bool
    metadata_fetched_at: float
    refused: bool = False  # the cluster refused to describe the topic (no DESCRIBE right)
    usable: tuple[int, ...] = field(init=False)
    healthy: tuple[int, ...] = field(init=False)
    at_risk: tuple[int, ...] = field(init=False)
    unavailable: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        by_state: dict[PartitionHealth, list[int]] = {s: [] for s in PartitionHealth}
        for p in self.partitions:
            by_state[p.state].append(p.partition)
        healthy = tuple(by_state[PartitionHealth.HEALTHY])
        at_risk = tuple(by_state[PartitionHealth.AT_RISK])
        object.__setattr__(self, "healthy", healthy)
        object.__setattr__(self, "at_risk", at_risk)
        object.__setattr__(self, "unavailable", tuple(by_state[PartitionHealth.UNAVAILABLE]))
        object.__setattr__(self, "usable", tuple(sorted(healthy + at_risk)))

    @classmethod
    def build(cls, metadata: TopicMetadata, quarantined: frozenset[int] = frozenset()) -> TopicView:
        """The view of ``metadata`` with the partitions in ``quarantined`` taken out of use."""
        views = []
        for p in metadata.partitions:
            q = p.partition in quarantined
            views.append(
                PartitionView(
                    partition=p.partition,
                    state=partition_health(p, metadata.min_insync_replicas, quarantined=q),
                    leader=p.leader,
                    replicas=p.replicas,
                    isr=p.isr,
                    effective_min_isr=effective_min_isr(
                        metadata.min_insync_replicas, len(p.replicas) or len(p.isr)
                    ),
                    quarantined=q,
                    leader_rack=p.leader_rack,
                )
            )
        return cls(
            topic=metadata.topic,
            partitions=tuple(views),
            min_insync_replicas=metadata.min_insync_replicas,
            min_isr_source=metadata.min_isr_source,
            quarantined=frozenset(q for q in quarantined if q < len(metadata.partitions)),
            exists=metadata.exists,
            metadata_fetched_at=metadata.fetched_at,
            refused=metadata.refused,
        )

    @property
    def num_partitions(self) -> int:
        return len(self.partitions)

    @property
    def whole(self) -> bool:
        """Every partition usable (and there is at least one): nothing needs routing around."""
        return 0 < len(self.usable) == len(self.partitions)

    def state(self, partition: int) -> PartitionHealth:
        return self.partitions[partition].state

    def counts(self) -> dict[PartitionHealth, int]:
        """How many partitions are in each state."""
        return {
            PartitionHealth.HEALTHY: len(self.healthy),
            PartitionHealth.AT_RISK: len(self.at_risk),
            PartitionHealth.UNAVAILABLE: len(self.unavailable),
        }

    def metadata_age_s(self, now: float) -> float:
        """Seconds since the metadata behind this view was fetched (same clock as ``now``)."""
        return max(0.0, now - self.metadata_fetched_at)
