"""Accounting invariants of the retry buffer under any interleaving of operations.

A hypothesis state machine drives one buffer (the threaded flavour, from one thread, on a fake
clock) through admit / admit_many / deliver / fail / take_failed / clock advance /
shut_admission / close, and keeps a model of where every message is. Whatever the order: every
admitted message ends exactly once (delivered, finally failed, or handed back by close),
nothing is handed out twice, in flight never exceeds the limit and the failed buffer never
exceeds its capacity; once admission is shut nothing more is admitted, and what was in flight
still ends.
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from retry_buffer import (
    AdmissionShut,
    BufferClosed,
    Entry,
    InflowTimeout,
    RetryBuffer,
    RetryBufferError,
    RetryPolicy,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


policies = st.builds(
    RetryPolicy,
    max_attempts=st.none() | st.integers(1, 4),
    deadline_s=st.none() | st.floats(0.5, 20.0),
    backoff_initial_s=st.sampled_from([0.0, 0.1, 0.5]),
    backoff_max_s=st.sampled_from([0.5, 2.0]),
)


class OwnEntry(Entry[int]):
    """An entry the sender makes for its message (here an int it keeps), as a sender whose
    message object is its own entry does."""

    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        self.n = n

    @property
    def item(self) -> int:
        return self.n


class RetryBufferMachine(RuleBasedStateMachine):
    buf: RetryBuffer[int]

    @initialize(limit=st.integers(1, 6), policy=policies)
    def setup(self, limit: int, policy: RetryPolicy) -> None:
        self.clock = FakeClock()
        self.policy = policy
        self.limit = limit
        self.final: list[tuple[int, object]] = []
        self.buf = RetryBuffer(
            max_in_flight=limit,
            policy=policy,
            on_final_failure=lambda e, err: self.final.append((e.item, err)),
            clock=self.clock,
        )
        self.next_item = 0
        self.admitted: list[int] = []
        self.sent: dict[int, Entry[int]] = {}  # out with the producer
        self.queued: dict[int, tuple[Entry[int], float]] = {}  # in the failed buffer: due time
        self.delivered: list[int] = []
        self.returned: list[int] = []
        self.done: list[Entry[int]] = []  # entries that had their final outcome
        self.closed = False
        self.admitted_at_shut: int | None = None  # how many were admitted when it was shut

    # -- helpers -------------------------------------------------------------------------------

    def _take_final(self) -> list[int]:
        items = [item for item, _ in self.final]
        self.final.clear()
        return items

    def _expired(self, entry: Entry[int]) -> bool:
        """Past its deadline, which runs from its first failure (it waits failed: it has one)."""
        d, failed_at = self.policy.deadline_s, entry.first_failure_at
        assert failed_at is not None
        return d is not None and self.clock.now >= failed_at + d

    # -- rules ---------------------------------------------------------------------------------

    @rule(own=st.booleans())
    def admit(self, own: bool) -> None:
        """``own``: the sender makes the entry (``try_enter``), else the buffer (``try_admit``)."""
        item = self.next_item
        made = OwnEntry(item) if own else None
        if self.admitted_at_shut is not None:
            # Refused whatever the room: AdmissionShut, or after close() its parent.
            refusal = BufferClosed if self.closed else AdmissionShut
            with pytest.raises(BufferClosed) as caught:
                self.buf.try_admit(item) if made is None else self.buf.try_enter(made)
            assert type(caught.value) is refusal
            return
        if made is None:
            entry = self.buf.try_admit(item)
        else:
            entry = made if self.buf.try_enter(made) else None
        in_flight = len(self.sent) + len(self.queued)
        if in_flight >= self.limit:
            assert entry is None
            return
        assert entry is not None
        assert entry.item == item
        assert entry.attempts == 1
        assert entry.admitted_at == self.clock.now
        self.next_item += 1
        self.admitted.append(item)
        self.sent[item] = entry

    @rule(k=st.integers(1, 4))
    def admit_many(self, k: int) -> None:
        items = list(range(self.next_item, self.next_item + k))
        room = self.limit - len(self.sent) - len(self.queued)
        if self.admitted_at_shut is not None:
            refusal = BufferClosed if self.closed else AdmissionShut
            with pytest.raises(BufferClosed) as caught:
                self.buf.admit_many(items, timeout=0)
            assert type(caught.value) is refusal
            return
        if room <= 0:
            with pytest.raises(InflowTimeout):
                self.buf.admit_many(items, timeout=0)
            return
        entries = self.buf.admit_many(items, timeout=0)
        assert [e.item for e in entries] == items[:room]
        for entry in entries:
            assert entry.admitted_at == self.clock.now
            self.next_item += 1
            self.admitted.append(entry.item)
            self.sent[entry.item] = entry

    @rule(data=st.data())
    @precondition(lambda self: self.sent)
    def deliver(self, data: st.DataObject) -> None:
        item = data.draw(st.sampled_from(sorted(self.sent)))
        entry = self.sent.pop(item)
        self.buf.delivered(entry)
        self.delivered.append(item)
        self.done.append(entry)

    @rule(data=st.data(), retriable=st.booleans(), persisted=st.booleans())
    @precondition(lambda self: self.sent)
    def fail(self, data: st.DataObject, retriable: bool, persisted: bool) -> None:
        item = data.draw(st.sampled_from(sorted(self.sent)))
        entry = self.sent.pop(item)
        error = ("boom", item, entry.attempts)
        queued = self.buf.failed(entry, error, retriable=retriable, possibly_persisted=persisted)
        if persisted:
            assert entry.possibly_duplicated
        assert entry.last_error == error
        assert entry.first_failure_at is not None
        p = self.policy
        exhausted = p.max_attempts is not None and entry.attempts >= p.max_attempts
        due = self.clock.now + p.backoff_s(entry.attempts)
        first = entry.first_failure_at
        past_deadline = p.deadline_s is not None and due >= first + p.deadline_s
        assert queued == (retriable and not exhausted and not past_deadline)
        if queued:
            assert self.final == []
            self.queued[item] = (entry, due)
        else:
            assert self.final == [(item, error)]
            self.final.clear()
            self.done.append(entry)

    @rule()
    def take_failed(self) -> None:
        entry = self.buf.take_failed()
        now = self.clock.now
        expired = self._take_final()
        for item in expired:  # failed finally on the way: due and past the deadline
            e, due = self.queued.pop(item)
            assert due <= now
            assert self._expired(e)
            self.done.append(e)
        if entry is None:
            assert all(due > now for _, due in self.queued.values())
            return
        assert entry.item in self.queued, "handed out an entry that was not waiting"
        _, due = self.queued.pop(entry.item)
        assert due <= now
        assert not self._expired(entry)
        self.sent[entry.item] = entry

    @rule(dt=st.sampled_from([0.05, 0.3, 1.0, 5.0]))
    def advance(self, dt: float) -> None:
        self.clock.now += dt

    @rule()
    def shut_admission(self) -> None:
        self.buf.shut_admission()  # a second time changes nothing
        assert self.buf.admission_shut
        assert not self.buf.has_room()
        if self.admitted_at_shut is None:
            self.admitted_at_shut = len(self.admitted)

    @rule()
    def close(self) -> None:
        left = self.buf.close()
        expected = sorted([*self.sent, *self.queued]) if not self.closed else []
        assert [e.item for e in left] == expected
        self.returned.extend(e.item for e in left)
        self.sent.clear()
        self.queued.clear()
        self.closed = True
        if self.admitted_at_shut is None:  # close() shuts admission too
            self.admitted_at_shut = len(self.admitted)
        assert self.buf.admission_shut

    @rule(data=st.data())
    @precondition(lambda self: self.done)
    def misuse_finished_entry(self, data: st.DataObject) -> None:
        entry = data.draw(st.sampled_from(self.done))
        with pytest.raises(RetryBufferError):
            self.buf.delivered(entry)
        with pytest.raises(RetryBufferError):
            self.buf.failed(entry, "again")

    @rule(data=st.data())
    @precondition(lambda self: self.queued)
    def misuse_queued_entry(self, data: st.DataObject) -> None:
        item = data.draw(st.sampled_from(sorted(self.queued)))
        entry, _ = self.queued[item]
        with pytest.raises(RetryBufferError, match="failed buffer"):
            self.buf.delivered(entry)

    @rule(data=st.data())
    @precondition(lambda self: self.sent or self.queued)
    def misuse_enter_again(self, data: st.DataObject) -> None:
        # An entry in flight (out, or waiting in the failed buffer), entered again: refused,
        # and nothing changes (the invariants check the counts).
        entries = [*self.sent.values(), *(e for e, _ in self.queued.values())]
        entry = data.draw(st.sampled_from(entries))
        with pytest.raises(RetryBufferError, match="counts in flight already"):
            self.buf.try_enter(entry)

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def accounting_balances(self) -> None:
        s = self.buf.statistics()
        assert s.admitted == len(self.admitted)
        assert s.in_flight == len(self.sent) + len(self.queued) <= self.limit
        assert s.failed_depth == len(self.queued) <= s.limit == self.limit
        assert s.peak_in_flight <= self.limit
        assert s.peak_failed_depth <= self.limit
        assert s.delivered == len(self.delivered)
        assert s.returned_on_close == len(self.returned)
        assert s.admitted == s.delivered + s.final_failures + s.returned_on_close + s.in_flight
        assert self.final == []

    @invariant()
    def nothing_is_admitted_once_admission_is_shut(self) -> None:
        if self.admitted_at_shut is not None:
            assert len(self.admitted) == self.admitted_at_shut
            assert self.buf.statistics().admitted == self.admitted_at_shut

    @invariant()
    def every_message_ends_exactly_once(self) -> None:
        finals = [e.item for e in self.done if e.item not in self.delivered]
        ended = [*self.delivered, *finals, *self.returned]
        assert len(ended) == len(set(ended)), "an entry had two final outcomes"
        still = set(self.sent) | set(self.queued)
        assert set(ended).isdisjoint(still)
        assert set(ended) | still == set(self.admitted)


RetryBufferMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None
)
test_retry_buffer_state_machine = RetryBufferMachine.TestCase
