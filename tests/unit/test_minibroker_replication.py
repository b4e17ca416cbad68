"""The partition core: HWM, time-based ISR, min ISR and the acks=all purgatory, on a fake clock."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from kio.schema.errors import ErrorCode

from minibroker.replication import Partition
from tests.unit.test_minibroker_log import header_of, make_batch

LAG_S = 0.5


class Recorder:
    """A PartitionListener that counts what it is told."""

    def __init__(self) -> None:
        self.appends = 0
        self.advanced = 0
        self.changed = 0

    def appended(self, partition: Partition) -> None:
        self.appends += 1

    def high_watermark_advanced(self, partition: Partition) -> None:
        self.advanced += 1

    def state_changed(self, partition: Partition) -> None:
        self.changed += 1


def new_partition(
    replicas: tuple[int, ...] = (1, 2, 3), min_isr: int = 2
) -> tuple[Partition, Recorder]:
    recorder = Recorder()
    partition = Partition(
        topic="t",
        index=0,
        replicas=replicas,
        min_insync_replicas=min_isr,
        replica_lag_time_max_s=LAG_S,
        listener=recorder,
        now=0.0,
    )
    return partition, recorder


def append(partition: Partition, count: int = 1, acks: int = -1, now: float = 0.0) -> ErrorCode:
    data = make_batch(count)
    return partition.append(bytearray(data), header_of(data), acks=acks, now=now).error


def replicate(partition: Partition, replica: int, now: float) -> None:
    """A follower fetch applied at once, then the fetch that reports the new position."""
    fetched = partition.fetch_for_follower(replica, now)
    if fetched is not None:
        assert partition.apply_fetch(replica, fetched)
        partition.fetch_for_follower(replica, now)


def test_high_watermark_is_the_minimum_log_end_over_the_isr() -> None:
    partition, recorder = new_partition()
    assert append(partition, 3) == ErrorCode.none
    assert partition.high_watermark == 0
    replicate(partition, 2, 0.0)
    assert partition.high_watermark == 0  # replica 3 is in the ISR and has nothing
    replicate(partition, 3, 0.0)
    assert partition.high_watermark == 3
    assert recorder.advanced == 1


def test_a_new_leader_knows_the_high_watermark_only_as_its_followers_last_told_it() -> None:
    # Kafka's new leader starts from its own (follower) high watermark; until that reaches the
    # epoch's start offset, ListOffsets latest answers OFFSET_NOT_AVAILABLE (KIP-207).
    partition, _ = new_partition()
    assert append(partition, 3) == ErrorCode.none
    replicate(partition, 2, 0.0)  # replica 2 reported before 3: it last heard HWM 0
    replicate(partition, 3, 0.0)
    assert partition.high_watermark == 3
    partition.elect(2, (2, 3), 1.0, "leader 1 fenced")
    assert partition.epoch_start_offset == 3
    assert partition.high_watermark == 0
    replicate(partition, 3, 1.1)
    assert partition.high_watermark == 3


def test_lagging_follower_leaves_the_isr_after_the_lag_time_and_returns_once_caught_up() -> None:
    partition, recorder = new_partition()
    append(partition, 2)
    replicate(partition, 2, 0.1)
    partition.tick(0.4)
    assert 3 in partition.isr
    partition.tick(0.6)
    assert list(partition.isr) == [1, 2]
    assert partition.high_watermark == 2  # the lagging replica no longer holds it back
    replicate(partition, 3, 0.7)
    assert partition.isr == (1, 2, 3)
    assert recorder.changed == 2


def test_idle_followers_that_keep_fetching_stay_in_sync() -> None:
    partition, _ = new_partition()
    for step in range(1, 20):
        now = step * 0.3
        replicate(partition, 2, now)
        replicate(partition, 3, now)
        partition.tick(now)
    assert partition.isr == (1, 2, 3)


def test_a_follower_at_the_leaders_log_end_stays_however_long_ago_it_fetched() -> None:
    # Kafka's Replica.isCaughtUp: leaderEndOffset == logEndOffset, or caught up recently.
    partition, _ = new_partition()
    append(partition, 2)
    replicate(partition, 2, 0.1)
    replicate(partition, 3, 0.1)
    partition.tick(10.0)  # neither fetched since; nothing appended
    assert partition.isr == (1, 2, 3)
    append(partition, 1, acks=1, now=10.0)
    partition.tick(10.0)  # the leader has more than they last fetched, 9.9 s ago
    assert list(partition.isr) == [1]


def test_a_new_partition_is_led_by_the_first_replica_of_its_isr() -> None:
    partition = Partition(
        topic="t",
        index=0,
        replicas=(1, 2, 3),
        isr=(2, 3),
        min_insync_replicas=2,
        replica_lag_time_max_s=LAG_S,
        listener=Recorder(),
        now=0.0,
    )
    assert (partition.leader, partition.isr) == (2, (2, 3))
    assert append(partition, 1) == ErrorCode.none
    replicate(partition, 3, 0.0)
    assert partition.high_watermark == 1  # replica 1 is not in the ISR: it holds nothing back
    with pytest.raises(ValueError, match="subset"):
        Partition(
            topic="t",
            index=0,
            replicas=(1, 2),
            isr=(3,),
            min_insync_replicas=1,
            replica_lag_time_max_s=LAG_S,
            listener=Recorder(),
            now=0.0,
        )


def test_slow_follower_catches_up_only_to_what_it_saw_before() -> None:
    partition, _ = new_partition(min_isr=1)
    append(partition, 1, now=0.0)
    fetched = partition.fetch_for_follower(2, 0.0)
    assert fetched is not None
    append(partition, 1, now=0.1)  # arrives while the slow fetch is in flight
    assert partition.apply_fetch(2, fetched)
    partition.fetch_for_follower(2, 0.45)  # reports offset 1, the leader is at 2
    partition.tick(0.45)
    assert 2 in partition.isr  # caught up as of its previous fetch, at 0.0
    partition.tick(0.51)
    assert 2 not in partition.isr


def test_acks_all_is_refused_before_append_under_min_isr() -> None:
    partition, _ = new_partition(min_isr=2)
    partition.tick(0.6)
    assert partition.isr == (1,)
    assert append(partition, acks=-1) == ErrorCode.not_enough_replicas
    assert partition.log_end_offset == 0
    assert append(partition, acks=1) == ErrorCode.none
    assert partition.log_end_offset == 1
    # strict min ISR (KIP-966): nothing becomes visible while under the minimum
    assert partition.high_watermark == 0


def test_effective_minimum_is_capped_by_the_replication_factor() -> None:
    partition, _ = new_partition(replicas=(1,), min_isr=2)
    assert append(partition, acks=-1) == ErrorCode.none
    assert partition.high_watermark == 1


def test_waiting_write_completes_when_the_hwm_covers_it() -> None:
    partition, _ = new_partition()
    append(partition, 2)
    outcomes: list[ErrorCode] = []
    assert partition.await_commit(2, 10.0, outcomes.append) is None
    replicate(partition, 2, 0.0)
    assert outcomes == []
    replicate(partition, 3, 0.0)
    assert outcomes == [ErrorCode.none]


def waiting_under_the_minimum() -> tuple[Partition, list[ErrorCode]]:
    """An acks=all write waiting on a partition whose ISR then shrank below min ISR 2."""
    partition, _ = new_partition(replicas=(1, 2), min_isr=2)
    append(partition)
    outcomes: list[ErrorCode] = []
    partition.await_commit(1, 10.0, outcomes.append)
    partition.tick(0.6)
    assert partition.isr == (1,)
    return partition, outcomes


def test_waiting_write_under_the_minimum_times_out_as_on_kafka() -> None:
    # Kafka 4.4 answers REQUEST_TIMED_OUT here, not NOT_ENOUGH_REPLICAS_AFTER_APPEND: the HWM
    # stands still under min ISR (KIP-966), so the write is never acknowledged
    # (tests/kafka/test_kafka_min_isr.py measures it).
    partition, outcomes = waiting_under_the_minimum()
    assert outcomes == []  # still waiting: the ISR shrank, the deadline has not come
    partition.tick(10.0)
    assert outcomes == [ErrorCode.request_timed_out]
    assert partition.log_end_offset == 1  # the data stays in the leader's log
    assert partition.high_watermark == 0


def test_waiting_write_under_the_minimum_completes_when_the_follower_returns() -> None:
    partition, outcomes = waiting_under_the_minimum()
    replicate(partition, 2, 1.0)
    assert list(partition.isr) == [1, 2]
    assert outcomes == [ErrorCode.none]


def test_waiting_write_times_out_and_fails_on_leader_change() -> None:
    partition, _ = new_partition(replicas=(1, 2, 3), min_isr=1)
    append(partition)
    timed: list[ErrorCode] = []
    partition.await_commit(1, 0.2, timed.append)
    partition.tick(0.3)
    assert timed == [ErrorCode.request_timed_out]
    moved: list[ErrorCode] = []
    partition.await_commit(1, 10.0, moved.append)
    partition.elect(2, (2, 3), 0.3, "test")
    assert moved == [ErrorCode.not_leader_or_follower]
    assert partition.leader_epoch == 1


def test_raising_min_isr_at_runtime_fails_waiters_and_blocks_acks_all() -> None:
    partition, _ = new_partition(replicas=(1, 2, 3), min_isr=1)
    partition.tick(0.6)
    append(partition)
    outcomes: list[ErrorCode] = []
    assert partition.await_commit(1, 10.0, outcomes.append) == ErrorCode.none
    append(partition)
    partition.set_min_insync_replicas(2)
    assert append(partition, acks=-1) == ErrorCode.not_enough_replicas


def test_follower_of_a_new_leader_truncates_its_divergent_suffix() -> None:
    partition, _ = new_partition(min_isr=1)
    append(partition, 2)
    replicate(partition, 2, 0.0)
    replicate(partition, 3, 0.0)
    append(partition, 3, acks=1)  # only on the old leader 1
    partition.elect(2, (2, 3), 0.1, "leader 1 fenced")
    append(partition, 1, now=0.1)
    assert partition.logs[1].log_end_offset == 5
    partition.restart_follower(1, 0.2)
    replicate(partition, 1, 0.2)
    assert partition.logs[1].log_end_offset == 3
    assert [b.base_offset for b in partition.logs[1].batches] == [0, 2]
    assert partition.logs[1].batches[-1] is partition.logs[2].batches[-1]


def test_stale_fetch_is_discarded_after_an_election() -> None:
    partition, _ = new_partition()
    append(partition)
    fetched = partition.fetch_for_follower(3, 0.0)
    assert fetched is not None
    partition.elect(2, (2, 3), 0.1, "test")
    assert not partition.apply_fetch(3, fetched)


def test_partition_rejects_duplicate_replicas() -> None:
    with pytest.raises(ValueError, match="distinct"):
        new_partition(replicas=(1, 1))


class PartitionMachine(RuleBasedStateMachine):
    """Random appends, fetches, slow fetches and time: the replication invariants hold."""

    def __init__(self) -> None:
        super().__init__()
        self.partition, _ = new_partition(replicas=(1, 2, 3), min_isr=2)
        self.now = 0.0
        self.high_watermark = 0
        self.completed: dict[int, ErrorCode] = {}
        self.required: dict[int, int] = {}
        self.hwm_at_completion: dict[int, int] = {}
        self.next_id = 0
        self.in_flight: dict[int, object] = {}

    @rule(count=st.integers(1, 4), acks=st.sampled_from([1, -1]))
    def produce(self, count: int, acks: int) -> None:
        before = self.partition.log_end_offset
        error = append(self.partition, count, acks=acks, now=self.now)
        if error == ErrorCode.not_enough_replicas:
            assert acks == -1
            assert len(self.partition.isr) < 2
            assert self.partition.log_end_offset == before
            return
        assert error == ErrorCode.none
        if acks == -1:
            ident = self.next_id
            self.next_id += 1
            self.required[ident] = self.partition.log_end_offset

            def done(code: ErrorCode, ident: int = ident) -> None:
                assert ident not in self.completed, "completed twice"
                self.completed[ident] = code
                self.hwm_at_completion[ident] = self.partition.high_watermark

            outcome = self.partition.await_commit(self.partition.log_end_offset, self.now + 2, done)
            if outcome is not None:
                done(outcome)

    @rule(replica=st.sampled_from([2, 3]))
    def fetch(self, replica: int) -> None:
        replicate(self.partition, replica, self.now)

    @rule(replica=st.sampled_from([2, 3]))
    def start_slow_fetch(self, replica: int) -> None:
        if replica not in self.in_flight:
            fetched = self.partition.fetch_for_follower(replica, self.now)
            if fetched is not None:
                self.in_flight[replica] = fetched

    @precondition(lambda self: bool(self.in_flight))
    @rule(data=st.data())
    def finish_slow_fetch(self, data: st.DataObject) -> None:
        replica = data.draw(st.sampled_from(sorted(self.in_flight)))
        fetched = self.in_flight.pop(replica)
        self.partition.apply_fetch(replica, fetched)  # type: ignore[arg-type]

    @rule(seconds=st.floats(0.0, 0.4))
    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.partition.tick(self.now)

    @invariant()
    def isr_is_never_empty_and_holds_the_leader(self) -> None:
        assert self.partition.leader in self.partition.isr
        assert set(self.partition.isr) <= {1, 2, 3}

    @invariant()
    def hwm_is_monotonic_and_bounded_by_every_isr_log(self) -> None:
        hwm = self.partition.high_watermark
        assert hwm >= self.high_watermark
        for replica in self.partition.isr:
            assert hwm <= self.partition.logs[replica].log_end_offset
        self.high_watermark = hwm

    @invariant()
    def followers_hold_a_prefix_of_the_leader_log(self) -> None:
        leader_batches = self.partition.logs[1].batches
        for replica in (2, 3):
            batches = self.partition.logs[replica].batches
            assert batches == leader_batches[: len(batches)]

    @invariant()
    def successful_acks_all_writes_are_committed(self) -> None:
        for ident, code in self.completed.items():
            if code == ErrorCode.none:
                assert self.hwm_at_completion[ident] >= self.required[ident]
            else:
                assert code in (
                    ErrorCode.not_enough_replicas_after_append,
                    ErrorCode.request_timed_out,
                )


TestPartitionMachine = PartitionMachine.TestCase
TestPartitionMachine.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
