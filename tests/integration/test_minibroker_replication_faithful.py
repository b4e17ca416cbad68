"""Replication rules minibroker takes from Kafka, seen by real clients (confluent-kafka).

* A new partition's ISR is its assignment's active (unfenced) replicas and the first of them
  leads (``ReplicationControlManager.createTopic`` / ``createPartitions``); an assignment with
  none active is INVALID_REPLICA_ASSIGNMENT (39).
* A follower whose last reported log end is the leader's is caught up however long ago it
  fetched (``Replica.isCaughtUp``): an idle partition keeps a follower that stopped fetching
  until its leader appends; a crashed follower leaves when the controller fences it.
* ``slow_broker(b, 0)`` restores replication at once, a fetch delayed before or not.
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # the stubs lag the package
    AdminClient,
    NewPartitions,
    NewTopic,
)

from minibroker import Cluster
from tests.integration.test_minibroker_faults import isr_seen_by_client, produce_to, wait_for

LAG_MS = 300
FAST = {"replica.lag.time.max.ms": str(LAG_MS), "broker.session.timeout.ms": "300"}


def status(cluster: Cluster, broker_id: int) -> str:
    (state,) = (b for b in cluster.brokers() if b.broker_id == broker_id)
    return state.status


def fenced_broker_1(cluster: Cluster) -> AdminClient:
    cluster.stop_broker(1)
    wait_for(lambda: status(cluster, 1) == "fenced", 5, "the controller to fence broker 1")
    return AdminClient({"bootstrap.servers": cluster.bootstrap_servers})


def error_code(future: Future[Any]) -> int | None:
    """The Kafka error code an admin request's future ends with (None: success)."""
    try:
        future.result(10)
    except KafkaException as exc:
        return int(exc.args[0].code())
    return None


# -- a new partition's leader and ISR ------------------------------------------------------------


def test_an_assignment_naming_a_fenced_broker_first_is_led_by_its_first_active_replica() -> None:
    with Cluster(brokers=3, config={"min.insync.replicas": "2", **FAST}) as cluster:
        admin = fenced_broker_1(cluster)
        created = admin.create_topics([NewTopic("t", 1, replica_assignment=[[1, 2, 3]])])
        assert error_code(created["t"]) is None
        state = cluster.partition_state("t", 0)
        assert (state.leader, state.isr, state.offline_replicas) == (2, (2, 3), (1,))
        partition = admin.list_topics("t", timeout=10).topics["t"].partitions[0]
        assert (partition.leader, sorted(partition.isrs)) == (2, [2, 3])
        assert produce_to(cluster.bootstrap_servers, "t", [0], retries=0) == {0: [None]}

        grown = admin.create_partitions([NewPartitions("t", 2, replica_assignment=[[1, 3, 2]])])
        assert error_code(grown["t"]) is None
        state = cluster.partition_state("t", 1)
        assert (state.leader, state.isr) == (3, (3, 2))
        assert produce_to(cluster.bootstrap_servers, "t", [1], retries=0) == {1: [None]}

        # Back, broker 1 follows: it catches up and joins both ISRs (no election).
        cluster.start_broker(1)
        wait_for(
            lambda: all(1 in cluster.partition_state("t", p).isr for p in (0, 1)),
            10,
            "broker 1 in both ISRs",
        )
        assert [cluster.partition_state("t", p).leader for p in (0, 1)] == [2, 3]
        assert dict(cluster.partition_state("t", 0).replica_log_end_offsets)[1] == 1


def test_an_assignment_naming_only_fenced_brokers_is_refused() -> None:
    with Cluster(brokers=3, config=FAST) as cluster:
        admin = fenced_broker_1(cluster)
        for validate_only in (True, False):
            created = admin.create_topics(
                [NewTopic("t", 1, replica_assignment=[[1]])], validate_only=validate_only
            )
            assert error_code(created["t"]) == KafkaError.INVALID_REPLICA_ASSIGNMENT
        assert "t" not in cluster.topics()
        cluster.create_topic("u", partitions=1, replication_factor=2)
        grown = admin.create_partitions([NewPartitions("u", 2, replica_assignment=[[1]])])
        assert error_code(grown["u"]) == KafkaError.INVALID_REPLICA_ASSIGNMENT
        assert len(admin.list_topics("u", timeout=10).topics["u"].partitions) == 1


def test_replicas_placed_by_the_controller_are_on_unfenced_brokers_only() -> None:
    with Cluster(brokers=3, config=FAST) as cluster:
        admin = fenced_broker_1(cluster)
        created = admin.create_topics([NewTopic("t", num_partitions=4, replication_factor=2)])
        assert error_code(created["t"]) is None
        grown = admin.create_partitions([NewPartitions("t", 6)])
        assert error_code(grown["t"]) is None
        states = cluster.describe("t")
        assert len(states) == 6
        for state in states:
            assert set(state.replicas) == {2, 3}
            assert state.isr == state.replicas
            assert state.leader == state.replicas[0]
        too_many = admin.create_topics([NewTopic("v", num_partitions=1, replication_factor=3)])
        assert error_code(too_many["v"]) == KafkaError.INVALID_REPLICATION_FACTOR


# -- who stays in the ISR of an idle partition -----------------------------------------------


def test_an_idle_partition_keeps_a_follower_that_stopped_fetching_until_its_leader_appends() -> (
    None
):
    config = {"min.insync.replicas": "3", **FAST}
    with Cluster(brokers=3, config=config) as cluster:
        cluster.create_topic("idle", partitions=1, replication_factor=3)
        # acknowledged once both followers reported log end 1: the leader's
        assert produce_to(cluster.bootstrap_servers, "idle", [0]) == {0: [None]}
        state = cluster.partition_state("idle", 0)
        follower = next(r for r in state.replicas if r != state.leader)
        cluster.isolate_broker(follower)
        time.sleep(4 * LAG_MS / 1000)  # many lag times and ISR checks, nothing appended
        state = cluster.partition_state("idle", 0)
        assert state.isr == (1, 2, 3), state
        assert isr_seen_by_client(cluster.bootstrap_servers, "idle", 0) == [1, 2, 3]
        # Once the leader has more than it last fetched, it leaves after the lag time.
        assert produce_to(cluster.bootstrap_servers, "idle", [0], acks="1") == {0: [None]}
        wait_for(
            lambda: follower not in cluster.partition_state("idle", 0).isr, 5, "the ISR to shrink"
        )
        cluster.heal_broker(follower)
        wait_for(lambda: len(cluster.partition_state("idle", 0).isr) == 3, 5, "the ISR whole")


def test_a_crashed_follower_of_an_idle_partition_leaves_the_isr_when_fenced() -> None:
    config = {"replica.lag.time.max.ms": str(LAG_MS), "broker.session.timeout.ms": "3000"}
    with Cluster(brokers=3, config=config) as cluster:
        cluster.create_topic("idle", partitions=1, replication_factor=3)
        assert produce_to(cluster.bootstrap_servers, "idle", [0]) == {0: [None]}
        cluster.stop_broker(3)
        time.sleep(4 * LAG_MS / 1000)
        isr = cluster.partition_state("idle", 0).isr
        # Read after the ISR: not fenced then either (the session is 10 lag times).
        assert status(cluster, 3) == "stopped"
        assert isr == (1, 2, 3)
        wait_for(lambda: status(cluster, 3) == "fenced", 10, "the controller to fence broker 3")
        assert cluster.partition_state("idle", 0).isr == (1, 2)


# -- slow_broker(b, 0) -----------------------------------------------------------------------


@pytest.mark.parametrize("restored_ms", [0, 50])
def test_a_new_replication_delay_applies_at_once_to_a_fetch_already_delayed(
    restored_ms: int,
) -> None:
    config = {"replica.lag.time.max.ms": "1000", "broker.session.timeout.ms": "300"}
    with Cluster(brokers=3, config=config) as cluster:
        cluster.create_topic("slow", partitions=1, replication_factor=3)
        cluster.slow_broker(3, 60_000)
        # broker 3's fetch of these lands a minute late
        assert produce_to(cluster.bootstrap_servers, "slow", [0], count=10, acks="1") == {
            0: [None] * 10
        }
        assert dict(cluster.partition_state("slow", 0).replica_log_end_offsets)[3] == 0
        cluster.slow_broker(3, restored_ms)
        wait_for(
            lambda: dict(cluster.partition_state("slow", 0).replica_log_end_offsets)[3] == 10,
            5,
            "broker 3 to replicate with the new delay",
        )
        wait_for(lambda: 3 in cluster.partition_state("slow", 0).isr, 5, "broker 3 in the ISR")


def test_a_broker_restarted_during_a_delayed_fetch_catches_up_at_once() -> None:
    config = {"replica.lag.time.max.ms": "1000", "broker.session.timeout.ms": "300"}
    with Cluster(brokers=3, config=config) as cluster:
        cluster.create_topic("slow", partitions=1, replication_factor=3)
        cluster.slow_broker(3, 60_000)
        assert produce_to(cluster.bootstrap_servers, "slow", [0], count=10, acks="1") == {
            0: [None] * 10
        }
        cluster.stop_broker(3)
        cluster.slow_broker(3, 0)
        cluster.start_broker(3)
        wait_for(
            lambda: (
                dict(cluster.partition_state("slow", 0).replica_log_end_offsets)[3] == 10
                and 3 in cluster.partition_state("slow", 0).isr
            ),
            5,
            "the restarted broker 3 to catch up and rejoin the ISR",
        )
