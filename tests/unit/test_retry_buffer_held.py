"""The retry buffer's accounting when the sender holds the count (``held=``), under any
interleaving: a hypothesis state machine plays a producer whose client keeps its own queue
count and bound (``len(producer)``, ``queue.buffering.max.messages`` at the limit).

Messages enter three ways, as the confluent-kafka producer's do: on its healthy path, sent
without asking the buffer, only while the failed buffer is empty and the client's bounded queue
takes them; on its other paths, after ``has_room()``; or straight into the failed buffer when
the client refused them at once (``adopt`` + ``failed``). A failure report moves a message from
the client to the failed buffer, a retry moves it back. Whatever the order: in flight (what the
client holds plus the failed buffer) never exceeds the limit, and every message ends exactly
once. Once admission is shut, the sender sends nothing new (the buffer refuses what it is
asked, and the healthy path is the sender's to stop), and what it holds still ends.
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from retry_buffer import (
    AdmissionShut,
    BufferClosed,
    Entry,
    InflowTimeout,
    InvalidArgument,
    Merger,
    RetryBuffer,
    RetryPolicy,
)
from tests.unit.test_retry_buffer_model import FakeClock, policies


class HeldMachine(RuleBasedStateMachine):
    buf: RetryBuffer[int]

    @initialize(limit=st.integers(1, 6), policy=policies)
    def setup(self, limit: int, policy: RetryPolicy) -> None:
        self.clock = FakeClock()
        self.limit = limit
        self.final: list[int] = []
        # The client: what it holds, with the entry of those that have one (a retry, or a
        # message that waited), None for a first attempt sent without one.
        self.client: dict[int, Entry[int] | None] = {}
        self.buf = RetryBuffer(
            max_in_flight=limit,
            policy=policy,
            on_final_failure=lambda e, err: self.final.append(e.item),
            clock=self.clock,
            held=lambda: len(self.client),
        )
        self.next_item = 0
        self.accepted: list[int] = []
        self.ended: list[int] = []
        self.closed = False
        self.accepted_at_shut: int | None = None

    def _new(self) -> int:
        item = self.next_item
        self.next_item += 1
        self.accepted.append(item)
        return item

    def _finals(self) -> None:
        self.ended.extend(self.final)
        self.final.clear()

    # -- entering ------------------------------------------------------------------------------

    @rule()
    @precondition(lambda self: self.accepted_at_shut is None)
    def send_healthy(self) -> None:
        # The healthy path looks at nothing but the buffer having no entry (nothing waits in
        # the failed buffer, no retry is out); first attempts go to a client of their own
        # (FailoverProducer's quiet client), whose queue, bounded at the limit, refuses what
        # does not fit. Retries go to another client (the main one): both count in held().
        first_attempts = sum(1 for e in self.client.values() if e is None)
        if self.buf.entries or first_attempts >= self.limit:
            return
        self.client[self._new()] = None

    @rule()
    def send_checked(self) -> None:
        if not self.buf.has_room():
            shut = self.accepted_at_shut is not None
            assert shut or len(self.client) + self.buf.failed_depth >= self.limit
            return
        assert self.accepted_at_shut is None
        self.client[self._new()] = None

    @rule(k=st.integers(1, 4))
    def send_many(self, k: int) -> None:
        # A batch admitted in one call: its entries go to the client, as retries do.
        items = list(range(self.next_item, self.next_item + k))
        if self.accepted_at_shut is not None:
            refusal = BufferClosed if self.closed else AdmissionShut
            with pytest.raises(BufferClosed) as caught:
                self.buf.admit_many(items, timeout=0)
            assert type(caught.value) is refusal
            return
        room = self.limit - len(self.client) - self.buf.failed_depth
        if room <= 0:
            with pytest.raises(InflowTimeout):
                self.buf.admit_many(items, timeout=0)
            return
        entries = self.buf.admit_many(items, timeout=0)
        assert [e.item for e in entries] == items[:room]
        for entry in entries:
            assert self._new() == entry.item
            self.client[entry.item] = entry

    @rule()
    def refused_at_once_waits(self) -> None:
        if not self.buf.has_room():
            return
        entry = self.buf.adopt(self._new())
        self.buf.failed(entry, "queue full", retriable=True)  # or finally, per the policy
        self._finals()

    # -- outcomes ------------------------------------------------------------------------------

    @rule(data=st.data())
    @precondition(lambda self: self.client)
    def deliver(self, data: st.DataObject) -> None:
        item = data.draw(st.sampled_from(sorted(self.client)))
        entry = self.client.pop(item)
        if entry is not None:
            self.buf.delivered(entry)
        self.ended.append(item)

    @rule(data=st.data(), retriable=st.booleans(), persisted=st.booleans())
    @precondition(lambda self: self.client and not self.closed)
    def fail(self, data: st.DataObject, retriable: bool, persisted: bool) -> None:
        item = data.draw(st.sampled_from(sorted(self.client)))
        entry = self.client[item]
        if entry is None:
            entry = self.buf.adopt(item)  # counted already: held by the client
        # The report is served while the client still counts the message.
        self.buf.failed(entry, "boom", retriable=retriable, possibly_persisted=persisted)
        del self.client[item]
        self._finals()

    @rule()
    def take_failed(self) -> None:
        entry = self.buf.take_failed()
        self._finals()
        if entry is not None:
            self.client[entry.item] = entry

    @rule(dt=st.sampled_from([0.05, 0.3, 1.0, 5.0]))
    def advance(self, dt: float) -> None:
        self.clock.now += dt

    @rule()
    def shut_admission(self) -> None:
        self.buf.shut_admission()
        assert self.buf.admission_shut
        assert not self.buf.has_room()
        if self.accepted_at_shut is None:
            self.accepted_at_shut = len(self.accepted)

    @rule()
    @precondition(lambda self: not self.client)
    def close(self) -> None:
        # The producer empties its client (flush, else purge: failure reports) first.
        left = self.buf.close()
        self.ended.extend(e.item for e in left)
        self.closed = True
        if self.accepted_at_shut is None:
            self.accepted_at_shut = len(self.accepted)
        with pytest.raises(BufferClosed):
            self.buf.adopt(self.next_item)

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def in_flight_within_the_limit(self) -> None:
        s = self.buf.statistics()
        assert s.in_flight == self.buf.in_flight == len(self.client) + s.failed_depth
        assert s.in_flight <= self.limit
        assert self.final == []

    @invariant()
    def entries_are_the_retries_out_and_the_waiting(self) -> None:
        if not self.closed:
            out = sum(1 for e in self.client.values() if e is not None)
            assert self.buf.entries == out + self.buf.failed_depth

    @invariant()
    def nothing_new_is_accepted_once_admission_is_shut(self) -> None:
        if self.accepted_at_shut is not None:
            assert len(self.accepted) == self.accepted_at_shut

    @invariant()
    def every_message_ends_exactly_once(self) -> None:
        assert len(self.ended) == len(set(self.ended)), "a message had two final outcomes"
        waiting = set(self.accepted) - set(self.ended)
        assert set(self.client) <= waiting
        assert len(waiting) == len(self.client) + self.buf.failed_depth


HeldMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
test_retry_buffer_held_state_machine = HeldMachine.TestCase


def test_adopt_needs_held() -> None:
    with pytest.raises(InvalidArgument, match="held="):
        RetryBuffer[int](max_in_flight=2).adopt(1)


def test_a_merger_refuses_a_held_buffer() -> None:
    with pytest.raises(InvalidArgument, match="held="):
        Merger(RetryBuffer[int](max_in_flight=2, held=lambda: 0), iter([1]))


def test_admit_many_counts_what_the_sender_holds() -> None:
    """With held=, in flight is what the sender holds plus the failed buffer: admit_many
    admits only what fits beside them, as try_admit does."""
    client = ["m"] * 3  # the sender's client holds three messages
    buf: RetryBuffer[str] = RetryBuffer(max_in_flight=4, held=lambda: len(client))
    got = buf.admit_many(["a", "b", "c"], timeout=0)
    assert [e.item for e in got] == ["a"]
    client.extend(e.item for e in got)  # sent
    with pytest.raises(InflowTimeout):
        buf.admit_many(["b", "c"], timeout=0)
    assert buf.in_flight == buf.limit == 4
    assert buf.statistics().peak_in_flight == 4
