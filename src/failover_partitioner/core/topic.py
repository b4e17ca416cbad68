"""A topic as the failover core tracks it: metadata, quarantine and chooser, rebuilt together.

The core keeps one per topic for both shells. Changes run under ``lock`` (made by the core's
``lock`` factory: a ``threading.Lock`` for the confluent-kafka shell, whose metadata thread and
callers change it, nothing for the asyncio one) and rebuild the chooser; the chooser then
serves the new view (its swap is a single assignment, safe for readers).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager

from failover_partitioner.choose import ChoiceOptions, PartitionChooser
from failover_partitioner.health import (
    PartitionHealth,
    PartitionMetadata,
    TopicMetadata,
    TopicView,
    partition_health,
)
from failover_partitioner.quarantine import Quarantine, QuarantinePolicy

__all__ = ["Lock", "TopicState", "check_topic", "legal_topic_name"]

Lock = Callable[[], AbstractContextManager[object]]
"""A factory of locks: ``threading.Lock`` where threads share the state, else no lock."""

# Kafka's rule for topic names (org.apache.kafka.common.internals.Topic.validate).
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")


def legal_topic_name(name: str) -> bool:
    """True for a legal Kafka topic name: 1 to 249 of a-z A-Z 0-9 . _ -, and not . or .."""
    return name not in (".", "..") and _TOPIC_NAME.fullmatch(name) is not None


def check_topic(topic: object) -> None:
    """Refuse a topic that is not a legal Kafka topic name (a client would wait on it for ever,
    asking the cluster for metadata it never has). Both producers check a topic new to them."""
    if not isinstance(topic, str):
        raise TypeError(f"topic must be a str, got {topic!r} ({type(topic).__name__})")
    if not legal_topic_name(topic):
        raise ValueError(
            f"topic {topic!r} is not a legal Kafka topic name: use 1 to 249 of the "
            f"characters a-z A-Z 0-9 . _ -, and not '.' or '..'"
        )


def check_timestamp(timestamp: object, name: str = "timestamp") -> None:
    """Refuse a message timestamp the producers cannot store: epoch milliseconds from 1 up to
    2**63 - 1 (a record batch holds 64 bits, and the Java client refuses a negative one).
    Kafka would store 0, but librdkafka reads a timestamp of 0 as "now" and writes the time
    of sending instead, so 0 is refused too, by both producers alike (None means now).
    Both producers check one given, before the message is accepted."""
    if isinstance(timestamp, bool) or not isinstance(timestamp, int):
        raise TypeError(
            f"{name} must be an int of epoch milliseconds or None, got {timestamp!r} "
            f"({type(timestamp).__name__})"
        )
    if not 0 < timestamp < _TIMESTAMP_END:
        raise ValueError(
            f"{name} must be epoch milliseconds from 1 to 2**63 - 1 (None: now; not 0, which "
            f"librdkafka writes as the time of sending), got {timestamp!r}; the message was "
            "not accepted"
        )


_TIMESTAMP_END = 2**63


def check_partition(partition: object, topic: str, metadata: TopicMetadata | None) -> None:
    """Refuse a partition preference that is not a partition of ``topic``: not an int, or
    past the partitions its ``metadata`` lists (when it lists the topic). As the Java client
    and librdkafka refuse one, rather than place the message elsewhere without a word."""
    if isinstance(partition, bool) or not isinstance(partition, int):
        raise TypeError(
            f"partition must be an int or None, got {partition!r} ({type(partition).__name__})"
        )
    count = len(metadata.partitions) if metadata is not None and metadata.exists else None
    if partition < 0 or (count is not None and partition >= count):
        have = "" if count is None else f" (it has {count} as the producer last saw it)"
        raise ValueError(
            f"partition {partition} of topic {topic!r} does not exist{have}; after adding "
            f"partitions, call refresh({topic!r}). The message was not accepted"
        )


def check_header_name(name: str, topic: str) -> None:
    """Refuse a header name that is not UTF-8 text (a lone surrogate): aiokafka would fail as
    it builds the batch, after the message was accepted, and confluent-kafka 2.16 crashes the
    process on one (a segmentation fault). Both producers check a name that is not ASCII."""
    if not name.isascii():
        try:
            name.encode()
        except UnicodeEncodeError:
            raise ValueError(
                f"the header name {name!r} for topic {topic!r} cannot be encoded as UTF-8; "
                "the message was not accepted"
            ) from None


class TopicState:
    """One topic: its latest metadata, quarantine and chooser. ``lock`` guards rebuilds."""

    __slots__ = ("chooser", "lock", "metadata", "quarantine", "quarantines")

    def __init__(
        self,
        metadata: TopicMetadata,
        policy: QuarantinePolicy,
        options: ChoiceOptions,
        *,
        client_sticky: bool = False,
        client_keyed: bool = False,
        lock: Lock = contextlib.nullcontext,
    ) -> None:
        self.lock = lock()
        self.metadata = metadata
        self.quarantine = Quarantine(policy)
        self.quarantines = 0
        self.chooser = PartitionChooser(
            TopicView.build(metadata),
            options,
            client_sticky=client_sticky,
            client_keyed=client_keyed,
        )

    @property
    def view(self) -> TopicView:
        return self.chooser.view

    def rebuild(self) -> None:
        self.chooser.update(TopicView.build(self.metadata, self.quarantine.partitions))

    def rebuild_unchanged(self) -> None:
        """Nothing changed but the fetch time: keep the plan, refresh the snapshot's time."""
        self.chooser.replace_view(TopicView.build(self.metadata, self.quarantine.partitions))

    def usable_by_metadata(self, partition: int) -> bool:
        parts = self.metadata.partitions
        if partition >= len(parts):
            return False
        state = partition_health(parts[partition], self.metadata.min_insync_replicas)
        return state is not PartitionHealth.UNAVAILABLE

    def _elsewhere(self) -> bool:
        """Some partition outside the quarantine takes writes, per the metadata."""
        q = self.quarantine
        if not q.holding():
            return True  # no held write to release: the answer does not matter
        return any(
            p not in q and self.usable_by_metadata(p) for p in range(len(self.metadata.partitions))
        )

    @property
    def wants_fast_refresh(self) -> bool:
        """Watch the metadata closely while anything is out of use, to see it come back."""
        return len(self.quarantine) > 0 or bool(self.view.unavailable)

    def partition_metadata(self, partition: int) -> PartitionMetadata | None:
        parts = self.metadata.partitions
        return parts[partition] if partition < len(parts) else None

    def strike(
        self,
        partitions: Iterable[int],
        now: float,
        *,
        held: bool = False,
        unreachable: bool = False,
    ) -> list[int]:
        """Writes to ``partitions`` failed (``held``: they were held until a timeout), or the
        client could not connect to their leader (``unreachable``): quarantine them; returns
        those newly quarantined. One new view for them all (a broker may lead hundreds)."""
        with self.lock:
            parts = self.metadata.partitions
            newly = [
                p
                for p in partitions
                if p < len(parts)
                and self.quarantine.strike(
                    p, now, held=parts[p] if held or unreachable else None, unreachable=unreachable
                )
            ]
            if newly:
                self.quarantines += len(newly)
                self.rebuild()
            return newly

    def apply_metadata(self, md: TopicMetadata, now: float) -> tuple[list[int], bool]:
        """Take a new metadata fetch; release quarantines it shows usable and due. Returns
        those released, and whether the chooser's view changed (else only its fetch time)."""
        with self.lock:
            old = self.metadata
            self.metadata = md
            if len(md.partitions) < len(old.partitions):
                self.quarantine.forget(range(len(md.partitions), len(old.partitions)))
            released = self.quarantine.release_due(
                now, self.usable_by_metadata, self.partition_metadata, elsewhere=self._elsewhere()
            )
            if (
                released
                or md.partitions != old.partitions
                or md.min_insync_replicas != old.min_insync_replicas
                or md.exists != old.exists
                or md.refused != old.refused
            ):
                self.rebuild()
                return released, True
            # The same facts: keep the chooser's rotation; only the snapshot's time moves.
            self.rebuild_unchanged()
            return released, False

    def release_due(self, now: float) -> tuple[list[int], float | None]:
        """Release due quarantines the metadata shows usable; also the next back-off end.

        A back-off that has ended while the metadata still shows the partition unusable is
        released by the next metadata update (:meth:`apply_metadata`), not by polling here.
        """
        with self.lock:
            released = self.quarantine.release_due(
                now, self.usable_by_metadata, self.partition_metadata, elsewhere=self._elsewhere()
            )
            if released:
                self.rebuild()
            return released, self.quarantine.next_release_after(now)
