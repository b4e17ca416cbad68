"""The failover core under any interleaving of events, with a fake clock: a hypothesis state
machine plays a shell (messages admitted, routed, sent; attempts delivered or failed with any
Kafka error; metadata showing partitions under min ISR or back; time passing; close).

Whatever the order: in flight never exceeds the limit; every admitted message ends exactly once
(delivered, finally failed, or handed back by close) and, until then, is either with the client
or waiting in the failed buffer; a quarantined partition gets no message until it is released,
and no message goes to a partition the metadata shows unusable, through the router or the
healthy path's rotation; a message for a topic the metadata does not list waits while the
topic's propagation window lasts and ends only after it.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from failover_partitioner.choose import ChoiceOptions
from failover_partitioner.core import (
    CLIENT_PARTITIONER,
    NO_METADATA,
    NO_PARTITION,
    NO_TOPIC,
    NO_TOPIC_YET,
    FailoverCore,
)
from failover_partitioner.errors import classify
from failover_partitioner.health import PartitionMetadata, TopicMetadata
from failover_partitioner.quarantine import QuarantinePolicy
from retry_buffer import Entry, RetryBuffer, RetryPolicy
from tests.unit.test_retry_buffer_model import FakeClock, policies

TOPIC = "t"
# Delivery errors a broker or client answers: retriable and refused before the append (19),
# possibly written (20, 7 request timeout, -185 local timeout), refused for the batch's sake
# (10, 18: tried alone), final (29 authorization, 17 invalid topic, -1 an unknown code).
CODES = [19, 20, 7, -185, 10, 18, 29, 17, 6, 1000]


def topic_metadata(isr: tuple[int, ...], exists: bool = True, leader: int = 1) -> TopicMetadata:
    """Partition ``i`` has ``isr[i]`` in-sync replicas of 3 (min ISR 2): under 2, unusable;
    ``leader`` leads each partition with an ISR."""
    return TopicMetadata(
        topic=TOPIC,
        partitions=tuple(
            PartitionMetadata(
                partition=p,
                leader=leader if n else -1,
                replicas=(1, 2, 3),
                isr=tuple(range(1, n + 1)),
            )
            for p, n in enumerate(isr)
        )
        if exists
        else (),
        min_insync_replicas=2,
        exists=exists,
    )


class CoreMachine(RuleBasedStateMachine):
    core: FailoverCore[Entry[int]]

    @initialize(
        limit=st.integers(1, 6),
        policy=policies,
        partitions=st.integers(1, 4),
        strategy=st.sampled_from(["round_robin", "sticky"]),
        window=st.sampled_from([0.0, 1.0, 10.0]),
    )
    def setup(
        self, limit: int, policy: RetryPolicy, partitions: int, strategy: str, window: float
    ) -> None:
        self.clock = FakeClock()
        self.limit = limit
        self.partitions = partitions
        self.ended: list[int] = []
        self.buffer: RetryBuffer[int] = RetryBuffer(
            max_in_flight=limit,
            policy=policy,
            on_final_failure=lambda e, err: self.ended.append(e.item),
            clock=self.clock,
        )
        self.core = FailoverCore(
            self.buffer,
            options=ChoiceOptions(strategy=strategy),  # type: ignore[arg-type]
            quarantine=QuarantinePolicy(initial_s=0.5, max_s=4.0),
            clock=self.clock,
            propagation_s=window,
        )
        self.client: dict[int, tuple[Entry[int], int]] = {}  # item -> (entry, partition)
        self.accepted: list[int] = []
        self.next_item = 0
        self.closed = False
        self.known = False
        self.window = window
        self.first_seen = 0.0

    # -- helpers -----------------------------------------------------------------------------

    def _send(self, entry: Entry[int], key: bytes | None) -> None:
        """Route ``entry`` as a shell does, checking where the core sends it."""
        p = self.core.route(TOPIC, key)
        if p in (NO_TOPIC, NO_TOPIC_YET):
            assert not self.core.topics[TOPIC].metadata.exists
            # The window runs from the topic's first metadata: it waits within, ends after.
            assert (p == NO_TOPIC_YET) == (self.clock.now < self.first_seen + self.window)
        if p == NO_TOPIC:
            self.core.end(entry, "unknown topic")
            return
        if p in (NO_PARTITION, NO_METADATA, NO_TOPIC_YET):
            self.core.hold(entry, TOPIC, p)
            return
        assert p != CLIENT_PARTITIONER, "no client partitioner was declared"
        state = self.core.topics[TOPIC]
        assert p not in state.quarantine, f"partition {p} is quarantined"
        assert state.usable_by_metadata(p), f"partition {p} is not usable"
        self.client[entry.item] = (entry, p)

    # -- events -------------------------------------------------------------------------------

    @precondition(lambda self: not self.closed)
    @rule(
        isr=st.lists(st.integers(0, 3), min_size=1, max_size=4),
        exists=st.booleans(),
        leader=st.sampled_from([1, 2]),
    )
    def metadata(self, isr: list[int], exists: bool, leader: int) -> None:
        # Partitions never shrink in Kafka; a topic may be missing (not yet created, or deleted).
        n = max(self.partitions, len(isr))
        self.partitions = n
        full = tuple(isr) + (3,) * (n - len(isr))
        change = self.core.metadata(topic_metadata(full, exists, leader))
        if not self.known:
            self.first_seen = self.clock.now
        self.known = True
        # Watched closely while it may yet appear.
        if not exists and self.clock.now < self.first_seen + self.window:
            assert change.fast

    @precondition(lambda self: not self.closed)
    @rule(keyed=st.booleans(), key=st.binary(min_size=1, max_size=4))
    def admit(self, keyed: bool, key: bytes) -> None:
        item = self.next_item
        entry = self.buffer.try_admit(item)
        if entry is None:
            assert self.buffer.in_flight >= self.limit, "refused below the limit"
            return
        self.next_item += 1
        self.accepted.append(item)
        self._send(entry, key if keyed else None)

    @precondition(lambda self: bool(self.client))
    @rule(data=st.data())
    def deliver(self, data: st.DataObject) -> None:
        item = data.draw(st.sampled_from(sorted(self.client)))
        entry, _ = self.client.pop(item)
        self.buffer.delivered(entry)
        self.ended.append(item)

    @precondition(lambda self: bool(self.client))
    @rule(data=st.data(), code=st.sampled_from(CODES), batch=st.none() | st.integers(1, 3))
    def fail(self, data: st.DataObject, code: int, batch: int | None) -> None:
        item = data.draw(st.sampled_from(sorted(self.client)))
        entry, partition = self.client.pop(item)
        ec = classify(code)
        heed = self.core.heed(TOPIC, partition, ec)
        if heed.quarantined:
            assert partition in self.core.topics[TOPIC].quarantine
        self.core.failed(entry, f"error {code}", ec, batch_size=batch)

    @precondition(lambda self: not self.closed)
    @rule(broker=st.sampled_from([1, 2]))
    def unreachable(self, broker: int) -> None:
        """The client could not connect to ``broker``: exactly the partitions it leads are
        taken out of use (a repeat changes nothing)."""
        state = self.core.topics.get(TOPIC)
        before = set() if state is None else set(state.quarantine.partitions)
        struck = self.core.unreachable(broker)
        if state is None:
            assert struck == []
            return
        led = {p.partition for p in state.metadata.partitions if p.leader == broker}
        assert set(state.quarantine.partitions) == before | led
        assert struck == ([TOPIC] if led - before else [])

    @rule(seconds=st.sampled_from([0.0, 0.1, 0.5, 1.0, 5.0]))
    def time_passes(self, seconds: float) -> None:
        self.clock.now += seconds
        tick = self.core.tick()
        for topic, partitions in tick.released.items():
            for p in partitions:
                assert p not in self.core.topics[topic].quarantine
        for entry in self.core.due():
            assert not self.closed, "a message came back after close"
            self._send(entry, None)

    @precondition(lambda self: not self.closed)
    @rule()
    def close(self) -> None:
        self.closed = True
        left = self.buffer.close()
        self.ended.extend(e.item for e in left)
        for e in left:
            self.client.pop(e.item, None)
        assert not self.client, "the client held a message the buffer did not"

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    def bounded(self) -> None:
        if hasattr(self, "buffer"):
            assert self.buffer.in_flight <= self.limit

    @invariant()
    def ends_once(self) -> None:
        if not hasattr(self, "buffer"):
            return
        assert len(self.ended) == len(set(self.ended)), "a message ended twice"
        live = len(self.accepted) - len(self.ended)
        assert live == self.buffer.in_flight, (live, self.buffer.in_flight)
        if self.closed:
            assert sorted(self.ended) == self.accepted, "a message never ended"
        else:
            # Nothing is mislaid on the way: every live message is with the client or waits.
            assert live == len(self.client) + self.buffer.failed_depth, "a message was mislaid"

    @invariant()
    def quarantined_not_in_view(self) -> None:
        if not hasattr(self, "core"):
            return
        state = self.core.topics.get(TOPIC)
        if state is not None:
            for p in state.quarantine.partitions:
                assert not state.chooser.usable(p), f"quarantined {p} is choosable"

    @invariant()
    def the_healthy_path_offers_only_choosable_partitions(self) -> None:
        """What a shell may send straight to the client: the rotation of a topic (whole, or
        with some partitions out of use) names only partitions the chooser would, and only a
        topic with every partition usable lets its keys go to the client; nothing while a
        failed message waits."""
        if not hasattr(self, "core"):
            return
        rotations, whole, keyed = self.core.healthy_path(self.buffer.failed_depth)
        if self.buffer.failed_depth:
            assert (rotations, whole, keyed) == ({}, frozenset(), {})
            return
        state = self.core.topics.get(TOPIC)
        if state is None or TOPIC not in rotations:
            return
        assert (TOPIC in whole) == state.chooser.view.whole
        assert (TOPIC in keyed) != (TOPIC in whole), "keys: the client's, or the chooser's"
        for i in range(20 if TOPIC in keyed else 0):
            p = keyed[TOPIC](b"key-%d" % i)
            assert p == NO_PARTITION or state.chooser.usable(p), f"the key goes to {p}"
            assert p == NO_PARTITION or state.usable_by_metadata(p), f"{p} is not usable"
        rotation = rotations[TOPIC]
        assert rotation is not None, "no client partitioner was declared"
        for _ in range(2 * self.partitions):
            p = next(rotation)
            assert state.chooser.usable(p), f"the healthy path offers partition {p}"
            assert state.usable_by_metadata(p), f"partition {p} is not usable"


CoreMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
test_core_state_machine = CoreMachine.TestCase
