"""The commit tracker: what may be committed when deliveries finish in any order."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from failover_partitioner.mirror import CommitLedger, PartitionTracker


@st.composite
def handed_offsets(draw: st.DrawFn) -> list[int]:
    """Increasing offsets with gaps (compaction, transaction markers)."""
    start = draw(st.integers(min_value=0, max_value=1_000))
    gaps = draw(st.lists(st.integers(min_value=1, max_value=3), min_size=1, max_size=60))
    offsets = []
    current = start
    for gap in gaps:
        offsets.append(current)
        current += gap
    return offsets


@given(data=st.data(), offsets=handed_offsets())
def test_committable_is_first_unfinished_offset_in_any_completion_order(
    data: st.DataObject, offsets: list[int]
) -> None:
    tracker = PartitionTracker("t", 0)
    for offset in offsets:
        tracker.handed(offset)
    order = data.draw(st.permutations(offsets))
    done: set[int] = set()
    previous = tracker.committable
    assert previous == offsets[0]
    for offset in order:
        tracker.finished(offset)
        done.add(offset)
        unfinished = [o for o in offsets if o not in done]
        expected = unfinished[0] if unfinished else offsets[-1] + 1
        assert tracker.committable == expected
        assert tracker.committable is not None
        assert previous is not None
        assert tracker.committable >= previous  # monotonic
        previous = tracker.committable
        assert tracker.in_flight == len(unfinished)
    assert tracker.committable == offsets[-1] + 1


@given(data=st.data(), offsets=handed_offsets())
def test_never_commits_past_a_failed_message(data: st.DataObject, offsets: list[int]) -> None:
    tracker = PartitionTracker("t", 3)
    for offset in offsets:
        tracker.handed(offset)
    failing = data.draw(st.sampled_from(offsets))
    order = data.draw(st.permutations(offsets))
    for offset in order:
        if offset == failing:
            tracker.failed(offset)
        else:
            tracker.finished(offset)
        committable = tracker.committable
        assert committable is not None
        assert committable <= failing
    # Everything before the failed message finished: the commit lands exactly on it.
    assert tracker.committable == failing
    assert tracker.failed_offset == failing
    assert tracker.in_flight == 0


@given(data=st.data(), offsets=handed_offsets())
def test_interleaved_commits_count_the_uncommitted_window(
    data: st.DataObject, offsets: list[int]
) -> None:
    tracker = PartitionTracker("t", 0)
    for offset in offsets:
        tracker.handed(offset)
    committed_at: int | None = None
    for offset in data.draw(st.permutations(offsets)):
        tracker.finished(offset)
        if data.draw(st.booleans()):
            to_commit = tracker.to_commit()
            if to_commit is not None:
                assert committed_at is None or to_commit > committed_at
                tracker.committed(to_commit)
                committed_at = to_commit
        expected = sum(1 for o in offsets if committed_at is None or o >= committed_at)
        assert tracker.uncommitted == expected
    final = tracker.to_commit()
    if final is not None:
        tracker.committed(final)
    assert tracker.uncommitted == 0
    assert tracker.committed_offset == offsets[-1] + 1
    assert tracker.to_commit() is None


def test_offsets_must_increase_and_end_once() -> None:
    tracker = PartitionTracker("orders", 2)
    tracker.handed(5)
    with pytest.raises(ValueError, match=r"orders\[2\]: offset 4 handed after 5"):
        tracker.handed(4)
    tracker.handed(6)
    tracker.finished(6)
    with pytest.raises(ValueError, match="ended twice"):
        tracker.finished(6)
    with pytest.raises(ValueError, match="not in flight"):
        tracker.finished(9)
    tracker.failed(5)
    with pytest.raises(ValueError, match="ended twice"):
        tracker.finished(5)


def test_withdrawn_message_is_where_the_commit_stops() -> None:
    tracker = PartitionTracker("t", 0)
    for offset in (10, 11, 12):
        tracker.handed(offset)
    tracker.withdraw(12)
    tracker.finished(10)
    tracker.finished(11)
    assert tracker.committable == 12
    with pytest.raises(ValueError, match="only the last handed offset"):
        tracker.withdraw(11)


def test_a_stored_offset_past_the_log_end_is_committed_down_to_what_was_read() -> None:
    # The group stores 100 but the log ends at 10 (truncated, recreated, reset): the consumer
    # reads from 0, and the commits must store that, or the next run skips 10..99.
    tracker = PartitionTracker("t", 0)
    tracker.committed(100)
    assert tracker.to_commit() is None  # nothing handed yet
    for offset in range(3):
        tracker.handed(offset)
        tracker.finished(offset)
    assert tracker.to_commit() == 3
    tracker.committed(3)
    assert tracker.committed_offset == 3
    assert tracker.uncommitted == 0
    assert tracker.to_commit() is None  # stored already: not committed again


def test_ledger_counts_abandoned_messages_until_they_come_back() -> None:
    ledger = CommitLedger()
    a = ledger.assign("t", 0)
    b = ledger.assign("t", 1)
    for offset in range(4):
        a.handed(offset)
        b.handed(offset)
    a.finished(0)
    b.finished(1)
    assert ledger.in_flight == 6
    assert ledger.window == 8
    assert sorted(ledger.to_commit()) == [("t", 0, 1), ("t", 1, 0)]
    ledger.committed([("t", 0, 1)])
    assert ledger.window == 7
    dropped = ledger.drop("t", 1)
    assert dropped is b
    assert b.dropped
    assert ledger.abandoned == 3
    assert ledger.in_flight == 6  # 3 in a, 3 of b still in the producer
    assert ledger.to_commit([("t", 1)]) == []
    for _ in range(3):
        ledger.abandoned_finished()
    assert ledger.in_flight == 3
    assert ledger.window == 3
    # 3 in flight in t[0], and the 3 abandoned of t[1]: never delivered as far as t goes.
    assert ledger.unfinished_by_topic() == {"t": 6}


class LedgerMachine(RuleBasedStateMachine):
    """Any interleaving of hand / finish / fail / commit / revoke keeps the invariants."""

    def __init__(self) -> None:
        super().__init__()
        self.ledger = CommitLedger()
        self.next_offset: dict[int, int] = {}
        self.out: dict[int, list[int]] = {}  # partition -> handed, not ended
        self.ended: dict[int, dict[int, bool]] = {}  # partition -> offset -> delivered?
        self.committed: dict[int, int] = {}  # partition -> last commit, any assignment
        self.committed_now: dict[int, int] = {}  # partition -> last commit, this assignment
        self.abandoned = 0
        self.abandoned_ever = 0

    @rule(partition=st.integers(0, 2))
    def assign(self, partition: int) -> None:
        if self.ledger.get("t", partition) is not None:
            return
        self.ledger.assign("t", partition)
        self.out[partition] = []
        self.ended[partition] = {}
        self.next_offset.setdefault(partition, 0)

    @rule(partition=st.integers(0, 2), gap=st.integers(1, 3))
    def hand(self, partition: int, gap: int) -> None:
        tracker = self.ledger.get("t", partition)
        if tracker is None:
            return
        offset = self.next_offset[partition]
        tracker.handed(offset)
        self.out[partition].append(offset)
        self.next_offset[partition] = offset + gap

    @rule(data=st.data(), delivered=st.booleans())
    def end(self, data: st.DataObject, delivered: bool) -> None:
        candidates = [(p, o) for p, offs in self.out.items() for o in offs]
        if not candidates:
            return
        partition, offset = data.draw(st.sampled_from(candidates))
        tracker = self.ledger.get("t", partition)
        assert tracker is not None
        if delivered:
            tracker.finished(offset)
        else:
            tracker.failed(offset)
        self.out[partition].remove(offset)
        self.ended[partition][offset] = delivered

    @rule()
    def commit(self) -> None:
        offsets = self.ledger.to_commit()
        for _, partition, offset in offsets:
            # Never past a message that is out or failed.
            assert all(o >= offset for o in self.out[partition])
            failed = [o for o, ok in self.ended[partition].items() if not ok]
            assert all(o >= offset for o in failed)
            # Never back; and within one assignment, a commit moves on. A partition assigned
            # again may commit once where the group stands (its first handed offset): harmless.
            assert offset >= self.committed.get(partition, -1)
            assert offset > self.committed_now.get(partition, -1)
            self.committed[partition] = offset
            self.committed_now[partition] = offset
        self.ledger.committed(offsets)

    @precondition(lambda self: self.out)
    @rule(partition=st.integers(0, 2))
    def revoke(self, partition: int) -> None:
        if self.ledger.drop("t", partition) is None:
            return
        self.committed_now.pop(partition, None)
        out = len(self.out.pop(partition))
        self.abandoned += out
        self.abandoned_ever += out
        self.ended.pop(partition)

    @rule()
    def abandoned_comes_back(self) -> None:
        if self.abandoned:
            self.ledger.abandoned_finished()
            self.abandoned -= 1

    @invariant()
    def in_flight_is_exact(self) -> None:
        assert self.ledger.in_flight == sum(len(o) for o in self.out.values()) + self.abandoned

    @invariant()
    def unfinished_counts_every_abandoned_message_for_good(self) -> None:
        # The mirror derives its delivered count from this: it must not drop as they come back.
        unfinished = sum(len(o) for o in self.out.values()) + self.abandoned_ever
        assert self.ledger.unfinished_by_topic().get("t", 0) == unfinished


TestLedgerMachine = LedgerMachine.TestCase
TestLedgerMachine.settings = settings(max_examples=50, stateful_step_count=40, deadline=None)
