"""The controller: placement, fencing after the session timeout, batch elections, epochs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from kio.schema.errors import ErrorCode

from minibroker.config import ConfigStore, parse_broker_settings
from minibroker.controller import BrokerStatus, Controller, assign_replicas
from minibroker.errors import TopicError
from minibroker.replication import Partition

SESSION_S = 0.3


class Quiet:
    def appended(self, partition: Partition) -> None: ...

    def high_watermark_advanced(self, partition: Partition) -> None: ...

    def state_changed(self, partition: Partition) -> None: ...


def new_controller(brokers: int = 3, config: dict[str, str] | None = None) -> Controller:
    ids = tuple(range(1, brokers + 1))
    settings_ = parse_broker_settings(
        {"broker.session.timeout.ms": "300", "replica.lag.time.max.ms": "500", **(config or {})},
        None,
        ids,
    )
    return Controller(broker_ids=ids, configs=ConfigStore(settings_), listener=Quiet(), now=0.0)


def state(partition: Partition) -> tuple[int, tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """Leader, ISR, ELR and last known ELR, as DescribeTopicPartitions shows them."""
    return partition.leader, partition.isr, partition.elr, partition.last_known_elr


def test_placement_rotates_leaders_and_spreads_followers() -> None:
    placement = assign_replicas(12, 3, (1, 2, 3, 4, 5))
    assert placement[:5] == [(1, 2, 3), (2, 3, 4), (3, 4, 5), (4, 5, 1), (5, 1, 2)]
    assert placement[5] == (1, 3, 4)  # the follower shift grows every n partitions
    leaders = [p[0] for p in placement]
    assert all(leaders.count(b) in (2, 3) for b in range(1, 6))


@settings(deadline=None)
@given(
    st.integers(1, 40),
    st.integers(1, 6).flatmap(lambda n: st.tuples(st.just(n), st.integers(1, n))),
)
def test_placement_gives_distinct_replicas(partitions: int, sizes: tuple[int, int]) -> None:
    brokers, factor = sizes
    for replicas in assign_replicas(partitions, factor, tuple(range(1, brokers + 1))):
        assert len(replicas) == factor
        assert len(set(replicas)) == factor


def test_create_topic_validation_carries_kafka_codes() -> None:
    controller = new_controller()
    controller.create_topic("ok", 2, 3, {"min.insync.replicas": "2"}, 0.0)
    cases = [
        (("ok", 1, 1, None), ErrorCode.topic_already_exists),
        (("bad name", 1, 1, None), ErrorCode.invalid_topic_exception),
        (("t", 0, 1, None), ErrorCode.invalid_partitions),
        (("t", 1, 4, None), ErrorCode.invalid_replication_factor),
        (("t", 1, 1, {"min.insync.replicas": "-1"}), ErrorCode.invalid_config),
        (("t", 1, 1, {"cleanup.policy": "shred"}), ErrorCode.invalid_config),
    ]
    for args, code in cases:
        with pytest.raises(TopicError) as refused:
            controller.create_topic(*args, 0.0)
        assert refused.value.error_code == code
    created = controller.partition("ok", 1)
    assert created is not None
    assert created.min_insync_replicas == 2


def test_defaults_come_from_broker_settings() -> None:
    controller = new_controller(config={"num.partitions": "4", "default.replication.factor": "2"})
    topic = controller.create_topic("auto", -1, -1, None, 0.0)
    assert topic is not None
    assert [p.replicas for p in topic.partitions] == [(1, 2), (2, 3), (3, 1), (1, 3)]


def test_stopped_broker_is_fenced_after_the_session_timeout_and_its_partitions_move() -> None:
    controller = new_controller(brokers=3)
    controller.create_topic("t", 3, 3, None, 0.0)
    version = controller.metadata_version
    controller.broker_stopped(1, 1.0)
    controller.tick(1.0 + SESSION_S - 0.01)
    assert controller.partition("t", 0).leader == 1  # type: ignore[union-attr]
    controller.tick(1.0 + SESSION_S)
    assert controller.brokers[1].status is BrokerStatus.FENCED
    for index in range(3):
        partition = controller.partition("t", index)
        assert partition is not None
        assert 1 not in partition.isr
        assert partition.leader in (2, 3)
    moved = controller.partition("t", 0)
    assert moved is not None
    assert (moved.leader, moved.leader_epoch) == (2, 1)
    assert controller.metadata_version > version
    assert controller.controller_id == 2


def test_without_unclean_election_the_last_isr_member_waits_for_its_return() -> None:
    controller = new_controller(brokers=2)
    controller.create_topic("t", 1, 2, None, 0.0)
    partition = controller.partition("t", 0)
    assert partition is not None
    partition.remove_from_isr(2, "lagging")
    controller.broker_stopped(1, 0.0)
    controller.tick(1.0)
    # Kafka 4.1+ (KIP-966): the ISR empties; the last leader is remembered, and eligible.
    assert state(partition) == (-1, (), (1,), (1,))
    controller.broker_started(1, 2.0)
    # Back from a crash it leaves the ELR; with the ISR and ELR empty, the last known leader
    # is elected.
    assert state(partition) == (1, (1,), (), ())
    assert partition.leader_epoch == 2  # offline and back: two leader changes


def test_replicas_that_left_the_isr_under_the_minimum_stay_eligible_to_lead() -> None:
    # KIP-966: the high watermark stood still once the ISR was under min.insync.replicas, so
    # the followers that fell out then hold every committed record and may lead.
    controller = new_controller(brokers=3, config={"min.insync.replicas": "2"})
    controller.create_topic("t", 1, 3, None, 0.0)
    partition = controller.partition("t", 0)
    assert partition is not None
    controller.tick(0.6)  # both followers lag (they never fetched): the leader drops them
    assert state(partition) == (1, (1,), (2, 3), ())
    controller.broker_stopped(1, 1.0)
    controller.tick(1.0 + SESSION_S)
    assert state(partition) == (2, (2,), (1, 3), ())


def test_a_replica_back_from_a_crash_is_no_longer_eligible_but_the_last_leader_is() -> None:
    """Scenario 4 of tests/faithful, as Kafka 4.4 ran it: the followers crash one by one, then
    the leader; they return in the same order."""
    controller = new_controller(brokers=3, config={"min.insync.replicas": "2"})
    controller.create_topic("t", 1, 3, None, 0.0)
    controller.create_topic("u", 1, 3, {"unclean.leader.election.enable": "true"}, 0.0)
    clean, unclean = controller.partition("t", 0), controller.partition("u", 0)
    assert clean is not None
    assert unclean is not None
    for at, broker in enumerate((3, 2, 1)):
        controller.broker_stopped(broker, float(at))
        controller.tick(at + SESSION_S + 0.01)
    assert state(clean) == state(unclean) == (-1, (), (1, 2), (1,))
    controller.broker_started(3, 4.0)  # never eligible: out of the ISR while it was whole
    assert state(clean) == (-1, (), (1, 2), (1,))
    assert state(unclean) == (3, (3,), (), ())  # unclean election: its log becomes the truth
    controller.broker_started(2, 5.0)  # back from a crash: no longer eligible
    assert state(clean) == (-1, (), (1,), (1,))
    controller.broker_started(1, 6.0)  # the ISR and ELR are empty: the last leader leads
    assert state(clean) == (1, (1,), (), ())
    assert clean.leader_epoch == 2


def test_unclean_election_takes_the_first_live_replica() -> None:
    controller = new_controller(brokers=2, config={"unclean.leader.election.enable": "true"})
    controller.create_topic("t", 1, 2, None, 0.0)
    partition = controller.partition("t", 0)
    assert partition is not None
    partition.remove_from_isr(2, "lagging")
    controller.broker_stopped(1, 0.0)
    controller.tick(1.0)
    assert (partition.leader, partition.isr) == (2, (2,))


def test_topic_level_unclean_setting_wins() -> None:
    controller = new_controller(brokers=2)
    controller.create_topic("t", 1, 2, {"unclean.leader.election.enable": "true"}, 0.0)
    partition = controller.partition("t", 0)
    assert partition is not None
    partition.remove_from_isr(2, "lagging")
    controller.broker_stopped(1, 0.0)
    controller.tick(1.0)
    assert partition.leader == 2


def test_quick_restart_is_fenced_and_unfenced_at_once() -> None:
    controller = new_controller(brokers=3)
    controller.create_topic("t", 1, 3, None, 0.0)
    controller.broker_stopped(1, 0.0)
    controller.broker_started(1, 0.1)
    partition = controller.partition("t", 0)
    assert partition is not None
    assert partition.leader == 2
    assert controller.brokers[1].status is BrokerStatus.RUNNING


def test_auto_rebalance_moves_leadership_back_to_the_preferred_replica() -> None:
    controller = new_controller(brokers=3, config={"auto.leader.rebalance.enable": "true"})
    controller.create_topic("t", 1, 3, None, 0.0)
    partition = controller.partition("t", 0)
    assert partition is not None
    controller.broker_stopped(1, 0.0)
    controller.tick(1.0)
    assert partition.leader == 2
    controller.broker_started(1, 1.1)
    controller.tick(1.2)
    assert partition.leader == 2  # not in sync yet
    fetched = partition.fetch_for_follower(1, 1.3)
    assert fetched is None
    assert 1 in partition.isr
    controller.tick(1.4)
    assert partition.leader == 1


def test_delete_and_grow_topics() -> None:
    controller = new_controller()
    controller.create_topic("t", 2, 2, None, 0.0)
    controller.add_partitions("t", 5, None, 0.0)
    topic = controller.topics["t"]
    assert [p.index for p in topic.partitions] == [0, 1, 2, 3, 4]
    with pytest.raises(TopicError) as refused:
        controller.add_partitions("t", 3, None, 0.0)
    assert refused.value.error_code == ErrorCode.invalid_partitions
    controller.delete_topic("t")
    with pytest.raises(TopicError):
        controller.delete_topic("t")


class ElectionMachine(RuleBasedStateMachine):
    """Brokers stop and start at random; elections keep Kafka's rules."""

    def __init__(self) -> None:
        super().__init__()
        # min.insync.replicas 2 of RF 3: the ELR forms as soon as the ISR has one member
        self.controller = new_controller(brokers=4, config={"min.insync.replicas": "2"})
        self.controller.create_topic("t", 6, 3, None, 0.0)
        self.now = 0.0
        self.epochs = {p.index: (p.leader_epoch, p.leader) for p in self.controller.partitions()}
        self.previous = {p.index: self._eligible(p) for p in self.controller.partitions()}

    @rule(broker=st.integers(1, 4))
    def stop(self, broker: int) -> None:
        if self.controller.is_running(broker):
            self.controller.broker_stopped(broker, self.now)
            self._check_elections()

    @rule(broker=st.integers(1, 4))
    def start(self, broker: int) -> None:
        if not self.controller.is_running(broker):
            self.controller.broker_started(broker, self.now)
            for partition in self.controller.partitions():
                # the returning replica catches up at once in this model, from a running leader
                if self._leader_serves(partition):
                    partition.fetch_for_follower(broker, self.now)
            self._check_elections()

    @rule(seconds=st.floats(0.0, 0.5))
    def advance(self, seconds: float) -> None:
        self.now += seconds
        for partition in self.controller.partitions():
            if not self._leader_serves(partition):
                continue
            for replica in partition.followers():
                if self.controller.is_running(replica):
                    partition.fetch_for_follower(replica, self.now)
        self.controller.tick(self.now)
        self._check_elections()

    def _leader_serves(self, partition: Partition) -> bool:
        """As the brokers' fetchers (can_replicate in server.py): a stopped leader serves no fetch,
        even before the controller fences it; else a follower could join its ISR meanwhile."""
        return partition.leader >= 0 and self.controller.is_running(partition.leader)

    def _check_elections(self) -> None:
        for partition in self.controller.partitions():
            epoch, leader = self.epochs[partition.index]
            if partition.leader != leader:
                assert partition.leader_epoch > epoch, "a leader change must bump the epoch"
            if partition.leader >= 0 and partition.leader != leader:
                # no unclean election: the new leader was eligible in the state it inherited
                assert partition.leader in self.previous[partition.index]
            self.epochs[partition.index] = (partition.leader_epoch, partition.leader)
            self.previous[partition.index] = self._eligible(partition)

    @staticmethod
    def _eligible(partition: Partition) -> set[int]:
        """Who may lead by Kafka's rules without an unclean election: the ISR; when it is empty,
        the ELR; when both are, the last known leader. (One step may empty the first two.)"""
        return {*partition.isr, *partition.elr, *partition.last_known_elr}

    @invariant()
    def leaders_are_unfenced_isr_members_and_an_empty_isr_means_offline(self) -> None:
        for partition in self.controller.partitions():
            if partition.leader >= 0:
                assert partition.leader in partition.isr
                assert not self.controller.is_fenced(partition.leader)
            else:
                assert partition.isr == ()
            assert not set(partition.isr) & set(partition.elr)
            if len(partition.isr) >= partition.effective_min_isr:
                assert partition.elr == ()


TestElectionMachine = ElectionMachine.TestCase
TestElectionMachine.settings = settings(max_examples=50, stateful_step_count=30, deadline=None)


def coordinators(controller: Controller) -> dict[int, int]:
    """How many __consumer_offsets partitions (group coordinators) each broker leads."""
    counts: dict[int, int] = {}
    for offsets in controller.offsets_partitions:
        counts[offsets.leader] = counts.get(offsets.leader, 0) + 1
    return counts


def test_group_coordinators_move_when_fenced_and_do_not_come_back_on_restart() -> None:
    controller = new_controller(config={"offsets.topic.num.partitions": "6"})
    assert [p.replicas for p in controller.offsets_partitions][:3] == [
        (1, 2, 3),
        (2, 3, 1),
        (3, 1, 2),
    ]
    assert coordinators(controller) == {1: 2, 2: 2, 3: 2}
    controller.broker_stopped(1, 0.0)
    controller.tick(0.1)
    assert coordinators(controller) == {1: 2, 2: 2, 3: 2}  # not fenced yet: still named
    controller.tick(SESSION_S)
    assert coordinators(controller) == {2: 3, 3: 3}
    controller.broker_started(1, 1.0)
    controller.tick(1.1)
    assert coordinators(controller) == {2: 3, 3: 3}  # Kafka does not move groups back


def test_group_coordinators_return_to_the_preferred_replica_with_auto_rebalance() -> None:
    controller = new_controller(
        config={"offsets.topic.num.partitions": "6", "auto.leader.rebalance.enable": "true"}
    )
    controller.broker_stopped(1, 0.0)
    controller.tick(SESSION_S)
    controller.broker_started(1, 1.0)
    controller.tick(1.1)
    assert coordinators(controller) == {1: 2, 2: 2, 3: 2}


def test_a_group_coordinator_partition_without_live_replicas_waits_for_one() -> None:
    controller = new_controller(
        brokers=3,
        config={"offsets.topic.num.partitions": "3", "offsets.topic.replication.factor": "1"},
    )
    controller.broker_stopped(2, 0.0)
    controller.tick(SESSION_S)
    assert [p.leader for p in controller.offsets_partitions] == [1, -1, 3]
    controller.broker_started(2, 1.0)
    assert [p.leader for p in controller.offsets_partitions] == [1, 2, 3]


def test_auto_rebalance_waits_for_the_imbalance_check_interval() -> None:
    controller = new_controller(
        brokers=3,
        config={
            "auto.leader.rebalance.enable": "true",
            "leader.imbalance.check.interval.seconds": "300",
        },
    )
    controller.create_topic("t", 1, 3, None, 0.0)
    partition = controller.partition("t", 0)
    assert partition is not None
    controller.broker_stopped(1, 0.0)
    controller.tick(1.0)
    controller.broker_started(1, 1.1)
    for now in (1.3, 150.0, 299.9):
        partition.fetch_for_follower(1, now)  # broker 1 is back in sync and stays so
        controller.tick(now)
        assert 1 in partition.isr
        assert partition.leader == 2  # Kafka checks every 300 s
    partition.fetch_for_follower(1, 300.0)
    controller.tick(300.0)
    assert partition.leader == 1
