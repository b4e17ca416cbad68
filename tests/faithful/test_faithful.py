"""The scenarios of tests/faithful/scenarios.py, each on Kafka and on minibroker, asserting only
what Kafka guarantees (Kafka 4.4, min.insync.replicas=2, replica lag 3 s, broker session 4 s).
``python -m tests.faithful.compare`` prints both outcomes side by side."""

from __future__ import annotations

import pytest

from tests.faithful.backends import Backend
from tests.faithful.elections import PartitionElr, last_isr_member_lost
from tests.faithful.groups import group_of_client
from tests.faithful.member import CLIENTS
from tests.faithful.scenarios import (
    CLIENT_APIS,
    admin_requests,
    advertised_versions,
    idempotent_across_leader_change,
    isr_shrink_and_rejoin,
    leader_killed,
    min_isr_writes,
    requests_in_turn,
)

LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
NOT_ENOUGH_REPLICAS = 19
MESSAGE_TIMED_OUT = -192  # librdkafka's own: no leader to send to before message.timeout.ms


def test_writes_below_min_isr(backend: Backend) -> None:
    outcome = min_isr_writes(backend)
    assert outcome["acks=all before"] == (0,)
    # Appended while the ISR was whole; the high watermark stands still under the minimum
    # (KIP-966), so the write ends at its 6 s request timeout, not with error 20.
    assert outcome["acks=all appended, then ISR shrank"] == REQUEST_TIMED_OUT
    assert 5.0 < outcome.timing("pending write answered") < 20.0
    assert outcome["acks=all under min ISR"] == NOT_ENOUGH_REPLICAS
    assert outcome["acks=1 under min ISR"] == 0
    assert outcome["acks=0 under min ISR"] == 0
    # Nothing appended under the minimum is visible until the ISR is back.
    assert outcome["watermarks under min ISR"] == (0, 1)
    assert outcome["readable under min ISR"] == (b"first",)
    assert outcome["watermarks after recovery"] == (0, 4)
    assert outcome["readable after recovery"] == (b"first", b"pending", b"acks-1", b"acks-0")


def test_isr_shrinks_and_rejoins(backend: Backend) -> None:
    outcome = isr_shrink_and_rejoin(backend)
    whole, shrunk = (1, 2, 3), (1, 2)
    assert outcome["ISRs seen"] == (whole, shrunk, whole, shrunk, whole)
    assert outcome["leader"] == 1
    assert outcome["acks=all as broker 3 leaves the ISR"] == 0
    assert outcome["acks=all with ISR 2 of 3"] == 0
    # Out after the replica lag (3 s) or the broker session (4 s), whichever comes first.
    assert 2.0 < outcome.timing("shrink after pause") < 15.0
    assert 2.0 < outcome.timing("shrink after kill") < 15.0


def test_leader_killed(backend: Backend) -> None:
    outcome = leader_killed(backend)
    assert outcome["acks=all acknowledged before the kill"] == 200
    assert outcome["new leader"] in (2, 3)
    assert outcome["ISR after the kill"] == (2, 3)
    assert outcome["acknowledged writes readable"] is True
    assert outcome["acks=all on the new leader"] == (0,)
    # No preferred-leader election within leader.imbalance.check.interval.seconds (300 s).
    assert outcome["leader after the old one returned"] == outcome["new leader"]
    assert outcome["everything readable in order"] is True
    assert 2.0 < outcome.timing("new leader") < 15.0


def elr(
    leader: int, isr: tuple[int, ...], eligible: tuple[int, ...], last: tuple[int, ...]
) -> PartitionElr:
    """Leader, ISR, ELR and last known ELR, as DescribeTopicPartitions shows them."""
    return PartitionElr(leader=leader, isr=isr, elr=eligible, last_known_elr=last)


def test_last_isr_member_lost(backend: Backend) -> None:
    outcome = last_isr_member_lost(backend, every_return=False)
    assert outcome["acks=all with ISR 1,2"] == (0,)
    # Under the minimum the high watermark stands still, so broker 2, out of the ISR since
    # then, holds every acknowledged record: eligible to lead (KIP-966).
    assert outcome["leader alone"] == elr(1, (1,), (2,), ())
    assert outcome["acks=1 with ISR 1"] == (0,)
    assert outcome["acks=all with ISR 1"] == (NOT_ENOUGH_REPLICAS,)
    # The last member is fenced out of the ISR too; the ELR and the last leader are kept.
    assert outcome["offline"] == elr(-1, (), (1, 2), (1,))
    assert outcome["offline: Metadata (leader, ISR, error)"] == (-1, (), LEADER_NOT_AVAILABLE)
    assert outcome["offline: Produce, Fetch at a non-replica"] == (NOT_LEADER_OR_FOLLOWER,) * 2
    assert outcome["offline: acks=1 delivery report"] == (MESSAGE_TIMED_OUT,)
    assert 2.0 < outcome.timing("offline after the leader's crash") < 15.0
    # Broker 3 left the ISR while it was whole: never eligible; it leads only by an unclean
    # election, alone in the ISR, which loses what only 1 and 2 had.
    assert outcome["3 back: unclean.leader.election.enable=true"] == elr(3, (3,), (), ())
    assert outcome["3 back: default"] == elr(-1, (), (1, 2), (1,))


@pytest.mark.slow  # three broker restarts: 70 s on Kafka
def test_last_isr_member_lost_and_every_replica_back(backend: Backend) -> None:
    outcome = last_isr_member_lost(backend)
    assert outcome["3 back: default"] == elr(-1, (), (1, 2), (1,))
    # Back from a crash (an unclean shutdown) a replica is no longer eligible, so the last
    # leader waits offline while the ELR still names broker 2 ...
    assert outcome["1 back: default"] == elr(-1, (), (2,), (1,))
    # ... and leads once 2 is back too and the ELR is empty (Kafka's last-known-leader rule).
    assert outcome["2 back: default, leader"] == 1
    assert outcome["all back: default, readable"] == (b"a", b"b", b"c")
    # The unclean election lost b (acknowledged to acks=all) and c: the returning replicas
    # truncated their logs to broker 3's.
    assert outcome["all back: unclean topic, readable"] == (b"a",)


@pytest.mark.parametrize("client", CLIENTS)
def test_consumer_group(backend: Backend, client: str) -> None:
    outcome = group_of_client(backend, client)
    # A alone, then A and B split 2 and 2; A leaves, B takes all 4; C, after B's crash, all 4.
    assert outcome["assignment sizes seen by A, B, C"] == ((4, 2), (2, 4), (4,))
    told = None if client == "confluent-kafka" else True  # librdkafka does not tell it
    assert outcome["generations: A and B split in one, each rising"] is told
    assert outcome["generations: C's first after B's last"] is told
    assert outcome["records read by A, B before A closed"] == (20, 20)
    assert outcome["the first 40 read once"] is True
    assert outcome["committed before B crashed"] == (10, 10, 10, 10)
    assert outcome["C read exactly the uncommitted records"] is True
    assert outcome["committed after C"] == (15, 15, 15, 15)
    # B's session (6 s) must expire before C is assigned; A's LeaveGroup is at once.
    assert 5.0 < outcome.timing("B crashed: C owns every partition") < 20.0
    assert outcome.timing("A closed: B owns every partition") < 5.0
    # KIP-345: a static member's replacement takes its partitions without a rebalance.
    assert outcome["static: the new S2 got S2's partitions"] is True
    assert outcome["static: assignment sizes seen by S1, S2, new S2"] == ((4, 2), (2,), (2,))
    # No generation after S2's: S1's last is one of S2's, S2's last one of the new S2's
    # (kafka-python's leader may miss the generation S2 joined in and split in the next: S1 1
    # and 3, S2 2 and 3; tests/faithful/groups.py, in_order).
    assert outcome["static: generations of S1, S2, new S2 in one"] is told


def test_idempotent_producer_across_a_leader_change(backend: Backend) -> None:
    outcome = idempotent_across_leader_change(backend)
    assert outcome["delivered"] == 4_000
    assert outcome["delivery errors"] == ()
    assert outcome["records in the log"] == 4_000
    assert outcome["duplicates"] == 0
    assert outcome["in send order"] is True


def test_admin_requests(backend: Backend) -> None:
    outcome = admin_requests(backend)
    assert outcome["create: 0 partitions"] == 37  # INVALID_PARTITIONS
    assert outcome["create: RF 6 on 5 brokers"] == 38  # INVALID_REPLICATION_FACTOR
    assert outcome["create: min.insync.replicas=abc"] == 40  # INVALID_CONFIG
    assert outcome["create: unknown config"] == 40
    assert outcome["create: existing topic"] == 36  # TOPIC_ALREADY_EXISTS
    # Kafka 4.1+ with eligible leader replicas keeps the cluster's value as a dynamic default.
    assert outcome["min.insync.replicas (value, source): broker default"] == (
        "2",
        "DYNAMIC_DEFAULT_BROKER_CONFIG",
    )
    assert outcome["min.insync.replicas (value, source): topic's own"] == (
        "3",
        "DYNAMIC_TOPIC_CONFIG",
    )
    assert outcome["IncrementalAlterConfigs retention.ms"] == 0
    assert outcome["retention.ms (value, source) after"] == ("3600000", "DYNAMIC_TOPIC_CONFIG")
    assert outcome["CreatePartitions 1 -> 3"] == 0
    assert outcome["CreatePartitions 3 -> 2"] == 37
    assert outcome["DescribeCluster brokers"] == 5
    assert outcome["ListOffsets earliest, latest"] == (0, 3)
    assert outcome["ListOffsets by time t0+5 s, t0+20 s, t0+90 s"] == (1, 2, -1)
    assert outcome["DeleteTopics"] == 0
    assert outcome["DeleteTopics again"] == 3  # UNKNOWN_TOPIC_OR_PARTITION


def test_every_client_api_is_advertised(backend: Backend) -> None:
    outcome = advertised_versions(backend)
    missing = [f"{key} {name}" for key, name in CLIENT_APIS.items()]
    assert [api for api in missing if outcome[api] == "not served"] == []


def test_a_connection_is_served_one_request_at_a_time(backend: Backend) -> None:
    outcome = requests_in_turn(backend)
    assert outcome["second long poll waited its own max_wait"] is True
    assert 0.4 < outcome.timing("first answered") < 3.0
    assert 0.8 < outcome.timing("second answered") < 6.0
