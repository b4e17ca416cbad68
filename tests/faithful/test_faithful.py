"""The scenarios of tests/faithful/scenarios.py, each on Kafka and on minibroker, asserting only
what Kafka guarantees (Kafka 4.4, min.insync.replicas=2, replica lag 3 s, broker session 4 s).
``python -m tests.faithful.compare`` prints both outcomes side by side."""

from __future__ import annotations

from tests.faithful.backends import Backend
from tests.faithful.scenarios import (
    CLIENT_APIS,
    admin_requests,
    advertised_versions,
    idempotent_across_leader_change,
    isr_shrink_and_rejoin,
    leader_killed,
    min_isr_writes,
)

REQUEST_TIMED_OUT = 7
NOT_ENOUGH_REPLICAS = 19


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
