"""The failover core: every decision about a message's life and its topic's health, made once.

Theory of operation (the h11 shape: events in, decisions out, no I/O). The shells
(``FailoverProducer`` on confluent-kafka, ``AsyncFailoverProducer`` on aiokafka) own the client,
the threads or the event loop, the message objects and the retry buffer's waiting; they tell the
core what happened and do what it answers:

=========================================  ===================================================
event (the shell calls)                     answer (the shell then ...)
=========================================  ===================================================
``metadata(md)``: a topic's metadata came   :class:`MetadataChange`: watch it closely or not;
                                            re-route the client (leaders moved); the healthy
                                            path is off until :meth:`healthy_path` says again
``route(topic, key, nbytes, prefer)``       a partition (send there), ``CLIENT_PARTITIONER``
                                            (the client places it), ``NO_PARTITION`` /
                                            ``NO_METADATA`` / ``NO_TOPIC_YET`` (:meth:`hold`
                                            it), ``NO_TOPIC`` / ``NO_RIGHTS`` (:meth:`end`
                                            it, with :meth:`missing`'s / :meth:`refused`'s
                                            words)
``heed(topic, partition, ec)``: an attempt  :class:`Heed`: the partition was quarantined (watch
to it failed                                it closely, leave the healthy path); ask metadata
``unreachable(broker)``: the client could   the topics some of whose partitions (those it
not connect to a broker                     leads) were quarantined: as for :meth:`heed`
``failed(entry, error, ec, ...)``           :class:`Failed`: queued for a retry (try it alone
                                            next time?), or ended (its final failure is the
                                            buffer's callback)
``tick()``: time passed                     :class:`Tick`: quarantines released, when to look
                                            again; then :meth:`due` gives the messages to send
``healthy_path()``                          :class:`HealthyPath`: the topics whose messages may
                                            go straight to the client: their keyless rotation
                                            (over the usable partitions), which are whole (keys
                                            too), the keyed choice of the others
=========================================  ===================================================

The bound on what is in flight, the backoff and the "every message ends once" accounting are
the retry buffer's (:mod:`retry_buffer`), injected: the confluent shell's counts what its client
holds (``held=``), the asyncio shell's admits each message. Time is the injected ``clock``;
the core starts nothing and imports no client, thread or event loop (an import-linter contract
in pyproject.toml holds it so). Its model is tests/unit/test_core_stateful.py.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final, Generic, NamedTuple, Protocol, TypeVar

from failover_partitioner.choose import (
    CLIENT_PARTITIONER,
    NO_PARTITION,
    ChoiceOptions,
    PartitionChooser,
)
from failover_partitioner.core.statistics import ProducerStatistics
from failover_partitioner.core.topic import Lock, TopicState
from failover_partitioner.errors import ErrorClass, NoUsablePartition, try_alone
from failover_partitioner.health import TopicMetadata
from failover_partitioner.quarantine import QuarantinePolicy

# From the module that defines it: the import contract reads ``retry_buffer`` itself as
# importing its threaded buffer (threading).
from retry_buffer._model import Statistics

__all__ = [
    "CLIENT_PARTITIONER",
    "NO_METADATA",
    "NO_PARTITION",
    "NO_TOPIC",
    "NO_TOPIC_YET",
    "Failed",
    "FailoverCore",
    "Heed",
    "MetadataChange",
    "Tick",
]

logger = logging.getLogger(__name__)

E = TypeVar("E")

NO_METADATA: Final = -3
"""``route``: no metadata for the topic yet: the message waits (:meth:`FailoverCore.hold`)."""

NO_TOPIC: Final = -4
"""``route``: the cluster says the topic does not exist, and has said so since the topic's
propagation window ended: the message ends (:meth:`FailoverCore.end`, with the shell's client's
own error for it, worded by :meth:`FailoverCore.missing`)."""

NO_TOPIC_YET: Final = -5
"""``route``: the cluster does not list the topic, within its propagation window (a topic just
created reaches each broker a moment apart): the message waits (:meth:`FailoverCore.hold`)."""

NO_RIGHTS: Final = -6
"""``route``: the cluster refuses to describe the topic (TOPIC_AUTHORIZATION_FAILED in its
metadata: no DESCRIBE right): the message ends (:meth:`FailoverCore.end`, with the shell's
client's authorization error, worded by :meth:`FailoverCore.refused`), as the raw clients end
it at once."""


class Buffer(Protocol[E]):
    """What the core asks of a retry buffer (``RetryBuffer``, ``AsyncRetryBuffer``)."""

    @property
    def limit(self) -> int: ...

    def failed(
        self, entry: E, error: object, retriable: bool, possibly_persisted: bool = False
    ) -> bool: ...

    def take_failed(self) -> E | None: ...

    def next_due_in(self) -> float | None: ...

    def statistics(self) -> Statistics: ...


class HealthyPath(NamedTuple):
    """What may go straight to the client while nothing waits (:meth:`FailoverCore.healthy_path`).

    ``rotations``: each topic's keyless rotation (``next()`` of it is the next partition; None:
    the client places them), for a whole topic and for one some of whose partitions are out of
    use (the rotation then covers the usable ones). ``whole``: the topics with every partition
    usable, whose keyed messages the client may place. ``keyed``: for the others in
    ``rotations``, the keyed choice of the current view (the key's home while usable, else per
    the key policy; :data:`NO_PARTITION`: the message must wait, so it takes the long way).
    """

    rotations: dict[str, Iterator[int] | None]
    whole: frozenset[str]
    keyed: dict[str, Callable[[bytes], int]]


@dataclass(frozen=True, slots=True)
class MetadataChange:
    """What a metadata update means. ``new``: the topic's first; ``fast``: watch its metadata
    closely (something is out of use); ``leaders_moved``: re-route the client now;
    ``changed``: the topic's view changed (a new topic's too), so a shell's paths cut from
    the old one are out of date (else the fetch brought the same facts)."""

    new: bool
    fast: bool
    leaders_moved: bool
    changed: bool


@dataclass(frozen=True, slots=True)
class Heed:
    """What a failed attempt says of its partition: ``quarantined`` newly (watch the topic
    closely; every topic leaves the healthy path), ``refresh``: ask for its metadata again."""

    quarantined: bool
    refresh: bool


@dataclass(frozen=True, slots=True)
class Failed:
    """A failed attempt's verdict: ``queued`` for another attempt (else it ended finally),
    ``alone``: send it in a batch of its own from now on, ``possibly_persisted``: the attempt
    may have been written (another may duplicate it)."""

    queued: bool
    alone: bool
    possibly_persisted: bool


@dataclass(frozen=True, slots=True)
class Tick:
    """``tick()``'s answer: ``released`` per topic; ``fast``: each topic whose close watch
    should change to the value given; ``ends``: when a quarantine's back-off ends next, per
    topic."""

    released: dict[str, list[int]]
    fast: dict[str, bool]
    ends: dict[str, float]

    @property
    def next_at(self) -> float | None:
        """When a quarantine's back-off ends next, of any topic."""
        return min(self.ends.values(), default=None)


class FailoverCore(Generic[E]):
    """The decisions of one producer, over its topics and its retry buffer (see the module)."""

    def __init__(
        self,
        buffer: Buffer[E],
        *,
        options: ChoiceOptions,
        quarantine: QuarantinePolicy,
        clock: Callable[[], float],
        lock: Lock = contextlib.nullcontext,
        client_sticky: bool = False,
        client_keyed: bool = False,
        propagation_s: float = 30.0,
    ) -> None:
        self.buffer = buffer
        self.options = options
        self._qpolicy = quarantine
        self._clock = clock
        self._lock = lock
        self._new_topic = lock()
        self._client_sticky = client_sticky
        self._client_keyed = client_keyed
        self._count_bytes = options.counts_bytes
        self.topics: dict[str, TopicState] = {}
        # A topic the metadata does not list is taken for one not yet propagated until this
        # long after its first metadata (librdkafka's topic.metadata.propagation.max.ms).
        self.propagation_s = propagation_s
        self._propagated_by: dict[str, float] = {}
        # chooser by topic, for the shells' fast paths (one lookup per message)
        self.choosers: dict[str, PartitionChooser] = {}
        self.quarantines = 0
        self.rerouted = 0
        self.ambiguous = 0  # failed attempts that may have been written: the most extra copies

    # -- metadata ---------------------------------------------------------------------------

    def metadata(self, md: TopicMetadata) -> MetadataChange:
        """A topic's metadata was fetched: take it in (and release quarantines it shows over)."""
        topic = md.topic
        state = self.topics.get(topic)
        if state is None:
            with self._new_topic:
                state = self.topics.get(topic)
                if state is None:
                    state = TopicState(
                        md,
                        self._qpolicy,
                        self.options,
                        client_sticky=self._client_sticky,
                        client_keyed=self._client_keyed,
                        lock=self._lock,
                    )
                    self._propagated_by[topic] = self._clock() + self.propagation_s
                    self.topics[topic] = state
                    self.choosers[topic] = state.chooser
                    if md.refused:
                        logger.warning("%s", self.refused(topic))
                    elif not md.exists and self.propagation_s:
                        logger.warning(
                            "topic %s is not in the cluster's metadata; its messages wait up "
                            "to %g s (topic_propagation_max_s) for it to appear",
                            topic,
                            self.propagation_s,
                        )
                    return MetadataChange(
                        new=True, fast=self._fast(state), leaders_moved=False, changed=True
                    )
        old = state.metadata
        released, changed = state.apply_metadata(md, self._clock())
        if md.exists and not old.exists:
            logger.info("topic %s is now in the cluster's metadata", topic)
        if md.refused and not old.refused:
            logger.warning("%s", self.refused(topic))
        if released:
            logger.info("partitions %s of %s released from quarantine", released, topic)
        # (Leaders can have moved only in a view that changed.)
        moved = changed and [p.leader for p in old.partitions] != [p.leader for p in md.partitions]
        return MetadataChange(
            new=False, fast=self._fast(state), leaders_moved=moved, changed=changed
        )

    def _fast(self, state: TopicState) -> bool:
        """Watch the topic closely: something is out of use, or it may yet appear."""
        md = state.metadata
        return state.wants_fast_refresh or (
            not md.exists and not md.refused and self._waits_for(md.topic)
        )

    def _waits_for(self, topic: str) -> bool:
        """Within the topic's propagation window (a topic not listed may yet appear)."""
        return self._clock() < self._propagated_by.get(topic, 0.0)

    def missing(self, topic: str) -> str:
        """What a message for a topic the cluster does not have ends with (``NO_TOPIC``)."""
        waited = (
            f"more than {self.propagation_s:g} s after the producer first looked it up"
            if self.propagation_s
            else "not waited for"
        )
        return (
            f"topic {topic!r} does not exist (per cluster metadata, {waited}: "
            "topic_propagation_max_s); create it, or check its name"
        )

    def refused(self, topic: str) -> str:
        """What a message for a topic the cluster refuses to describe ends with
        (``NO_RIGHTS``)."""
        return (
            f"the cluster refuses to describe topic {topic!r} (TOPIC_AUTHORIZATION_FAILED): "
            "the client's principal needs DESCRIBE and WRITE on it; grant them (an ACL on "
            "the topic or a prefix of it), or check the topic's name. Its messages fail "
            "finally until then"
        )

    # -- routing ----------------------------------------------------------------------------

    def route(
        self, topic: str, key: bytes | None, nbytes: int = 0, prefer: int | None = None
    ) -> int:
        """The partition for a message's next attempt, or why it has none (see the module).
        ``prefer``: the caller's partition, taken while usable (first attempts only)."""
        chooser = self.choosers.get(topic)
        if chooser is None:
            return NO_METADATA
        if prefer is not None and chooser.usable(prefer):
            return prefer
        if key is None:
            p = chooser.keyless(nbytes if self._count_bytes else 0)
        else:
            p = chooser.keyed(key)
        if p == NO_PARTITION and not chooser.view.exists:
            if chooser.view.refused:
                return NO_RIGHTS
            return NO_TOPIC_YET if self._waits_for(topic) else NO_TOPIC
        return p

    def sent(self, previous: int, partition: int) -> None:
        """An attempt went to ``partition``; the one before, if any, to ``previous``."""
        if previous >= 0 and previous != partition:
            self.rerouted += 1

    def hold(self, entry: E, topic: str, why: int | BaseException) -> bool:
        """The message waits in the failed buffer without an attempt (``why``: the route's
        answer, or the client's refusal, such as a full queue). True: it newly waits there."""
        if isinstance(why, int):
            if why == NO_METADATA:
                error: object = NoUsablePartition(f"no metadata yet for topic {topic!r}")
            elif why == NO_TOPIC_YET:
                error = NoUsablePartition(
                    f"topic {topic!r} is not in the cluster's metadata yet (a new topic reaches "
                    f"each broker a moment apart): waiting up to {self.propagation_s:g} s "
                    "(topic_propagation_max_s) for it"
                )
            else:
                error = NoUsablePartition(f"no usable partition of {topic!r} for this message")
        else:
            error = why
        return self.buffer.failed(entry, error, True)

    def end(self, entry: E, error: object) -> None:
        """The message fails finally now (not retriable): the buffer reports it."""
        self.buffer.failed(entry, error, False)

    # -- outcomes ---------------------------------------------------------------------------

    def heed(self, topic: str, partition: int, ec: ErrorClass) -> Heed:
        """What a failure (or another client's, reported) says of its partition."""
        quarantined = False
        if ec.quarantine and partition >= 0:
            quarantined = bool(self._strike(topic, [partition], ec.held))
        return Heed(quarantined=quarantined, refresh=ec.refresh_metadata)

    def unreachable(self, broker: int) -> list[str]:
        """The client could not connect to ``broker``: quarantine the partitions it leads in
        the views (a crashed leader stays the leader in the metadata until the controller
        fences it; what the client queues for them waits), each released as soon as its
        metadata shows a new leader, else as a held write's (see the quarantine module).
        Returns the topics with a partition newly quarantined: the shell watches them as after
        :meth:`heed` (and asks metadata). A repeat of the failure while they are quarantined
        changes nothing."""
        struck = []
        for topic, state in list(self.topics.items()):  # a copy: others may add topics
            led = [p.partition for p in state.metadata.partitions if p.leader == broker]
            if led and self._strike(topic, led, unreachable=broker):
                struck.append(topic)
        return struck

    def _strike(
        self, topic: str, partitions: list[int], held: bool = False, unreachable: int | None = None
    ) -> list[int]:
        """Quarantine ``partitions`` of ``topic`` (one new view for them all); returns those
        newly quarantined."""
        state = self.topics.get(topic)
        if state is None:
            return []
        newly = state.strike(
            partitions, self._clock(), held=held, unreachable=unreachable is not None
        )
        self.quarantines += len(newly)
        q = state.quarantine
        if held:
            until = "until its leader or ISR changes (it held a write), or "
        elif unreachable is not None:
            until = f"until it has a leader other than broker {unreachable} (unreachable), or "
        else:
            until = ""
        for partition in newly:
            strikes = q.strikes(partition)
            logger.info(
                "partition %s-%d quarantined %sfor %.2f s (strike %d)",
                topic,
                partition,
                until,
                q.policy.max_s if until else q.policy.backoff_s(strikes),
                strikes,
            )
        return newly

    def failed(
        self,
        entry: E,
        error: object,
        ec: ErrorClass,
        *,
        fatal: bool = False,
        batch_size: int | None = None,
        alone: bool = False,
    ) -> Failed:
        """An attempt of ``entry`` failed with ``error`` (classified ``ec``): retry it, alone
        perhaps, or end it. ``batch_size``: its refused batch's size when the client says;
        ``alone``: it was sent alone already; ``fatal``: the client can send nothing more."""
        split = try_alone(ec, batch_size=batch_size, alone=alone)
        persisted = ec.possibly_persisted and not split
        if persisted:
            self.ambiguous += 1
        # Perhaps the batch's fault, not this record's: try it alone before giving up.
        retriable = (ec.retriable or split) and not fatal
        queued = self.buffer.failed(entry, error, retriable, persisted)
        return Failed(queued=queued, alone=split or alone, possibly_persisted=persisted)

    # -- time -------------------------------------------------------------------------------

    def tick(self) -> Tick:
        """Release quarantines whose back-off ended (where the metadata shows them usable)."""
        now = self._clock()
        released: dict[str, list[int]] = {}
        fast: dict[str, bool] = {}
        ends: dict[str, float] = {}
        for topic, state in list(self.topics.items()):
            if not len(state.quarantine):
                continue
            freed, upcoming = state.release_due(now)
            if freed:
                logger.info("partitions %s of %s released from quarantine", freed, topic)
                released[topic] = freed
                fast[topic] = state.wants_fast_refresh
            if upcoming is not None:
                ends[topic] = upcoming
        return Tick(released=released, fast=fast, ends=ends)

    def due(self) -> Iterator[E]:
        """The failed messages due for another attempt, oldest first (each then routed)."""
        take = self.buffer.take_failed
        for _ in range(self.buffer.limit):
            entry = take()
            if entry is None:
                return
            yield entry

    def next_at(self, tick: Tick) -> float | None:
        """When the shell should look again: a back-off's end, or a failed message's due time."""
        due_in = self.buffer.next_due_in()
        if due_in is None:
            return tick.next_at
        due_at = self._clock() + due_in
        return due_at if tick.next_at is None else min(due_at, tick.next_at)

    # -- the healthy path -------------------------------------------------------------------

    def healthy_path(self, failed_depth: int) -> HealthyPath:
        """The topics whose messages may go straight to the client, and how (see
        :class:`HealthyPath`). The path is off (nothing) while anything waits in the failed
        buffer."""
        if failed_depth:
            return HealthyPath({}, frozenset(), {})
        rotations: dict[str, Iterator[int] | None] = {}
        whole: set[str] = set()
        keyed: dict[str, Callable[[bytes], int]] = {}
        for topic, chooser in list(self.choosers.items()):
            rotation = chooser.whole_rotation(self._client_sticky)
            if rotation is not False:
                whole.add(topic)
            elif not chooser.view.whole:
                rotation = chooser.keyless_rotation()
                if rotation is not False:
                    keyed[topic] = chooser.keyed
            if rotation is not False:
                rotations[topic] = rotation
        return HealthyPath(rotations, frozenset(whole), keyed)

    def whole(self, topic: str) -> bool:
        chooser = self.choosers.get(topic)
        return chooser is not None and chooser.view.whole

    def usable(self, topic: str, partition: int) -> bool:
        chooser = self.choosers.get(topic)
        return chooser is not None and chooser.usable(partition)

    # -- figures ----------------------------------------------------------------------------

    def statistics(self, **figures: int) -> ProducerStatistics:
        """The producer's counters: the retry buffer's and the core's; ``figures`` replace
        those the shell counts itself (the confluent shell counts deliveries on its own)."""
        s = self.buffer.statistics()
        values = {
            "produced": s.admitted,
            "delivered": s.delivered,
            "final_failures": s.final_failures,
            "returned_on_close": s.returned_on_close,
            "in_flight": s.in_flight,
            "failed_buffer_depth": s.failed_depth,
            "peak_failed_buffer_depth": s.peak_failed_depth,
            "retries": s.retries,
            "rerouted": self.rerouted,
            "possible_duplicates": s.possibly_duplicated,
            "ambiguous_failures": self.ambiguous,
            "quarantines": self.quarantines,
            "max_in_flight": s.limit,
        }
        values.update(figures)
        return ProducerStatistics(**values)
