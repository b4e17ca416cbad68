"""A broker the client could not connect to: which one the error names, and the quarantine of
the partitions it leads (:meth:`FailoverCore.unreachable`), released at the back-off's end or
at once when the metadata shows a new leader."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from failover_partitioner.confluent._delivering import unreachable_broker
from failover_partitioner.health import PartitionMetadata, TopicMetadata
from tests.unit.test_core_propagation import core


@pytest.mark.parametrize(
    ("code", "text", "broker"),
    [
        (
            KafkaError._TRANSPORT,
            "127.0.0.1:44935/4: Connect to ipv4#127.0.0.1:44935 failed: Connection refused "
            "(after 0ms in state CONNECT)",
            4,
        ),
        (
            KafkaError._TRANSPORT,
            "[::1]:9092/12: Connect to ipv6#[::1]:9092 failed: Connection timed out (after "
            "30000ms in state CONNECT, 3 identical error(s) suppressed)",
            12,
        ),
        # Not yet known by id: a bootstrap address.
        (
            KafkaError._TRANSPORT,
            "127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused",
            None,
        ),
        # A connection that was up and closed is not a failure to connect.
        (KafkaError._TRANSPORT, "127.0.0.1:9092/3: Disconnected (after 5ms in state UP)", None),
        (KafkaError._ALL_BROKERS_DOWN, "3/3 brokers are down", None),
        (KafkaError._AUTHENTICATION, "127.0.0.1:9092/3: Connect to x: SASL failed", None),
    ],
)
def test_the_error_names_the_broker_it_could_not_connect_to(
    code: int, text: str, broker: int | None
) -> None:
    assert unreachable_broker(KafkaError(code, text)) == broker


def _md(leaders: dict[int, int], topic: str = "t") -> TopicMetadata:
    return TopicMetadata(
        topic=topic,
        partitions=tuple(
            PartitionMetadata(partition=p, leader=b, replicas=(1, 2), isr=(1, 2))
            for p, b in leaders.items()
        ),
        min_insync_replicas=1,
        exists=True,
    )


def test_the_partitions_a_broker_leads_are_quarantined() -> None:
    c, _clock = core(0.0)
    c.metadata(_md({0: 1, 1: 2, 2: 2, 3: -1}))
    c.metadata(_md({0: 2}, topic="other"))
    c.metadata(TopicMetadata(topic="gone", partitions=(), min_insync_replicas=1, exists=False))
    assert c.unreachable(7) == []
    assert c.unreachable(2) == ["t", "other"]
    assert [c.usable("t", p) for p in range(4)] == [True, False, False, False]
    assert not c.usable("other", 0)
    assert c.quarantines == 3
    # A repeat of the same failure while they are out of use changes nothing.
    assert c.unreachable(2) == []
    assert c.quarantines == 3


def test_a_new_leader_in_the_metadata_releases_at_once() -> None:
    c, clock = core(0.0)
    c.metadata(_md({0: 1, 1: 2, 2: 2}))
    assert c.unreachable(2) == ["t"]
    backoff = c.topics["t"].quarantine.policy.backoff_s(1)
    # Before the back-off ends the metadata shows partition 1 with a new leader: released
    # then; partition 2 still names broker 2.
    clock.now += backoff / 5
    c.metadata(_md({0: 1, 1: 1, 2: 2}))
    assert [c.usable("t", p) for p in range(3)] == [True, True, False]
    # Past the back-off, the same metadata: kept out while others take writes (the client
    # reports a failed connection once, so nothing would say the broker is still away).
    clock.now += backoff
    assert c.tick().released == {}
    c.metadata(_md({0: 1, 1: 1, 2: 2}))
    assert not c.usable("t", 2)
    # A repeat of the failure changes nothing; the new leader releases it.
    assert c.unreachable(2) == []
    c.metadata(_md({0: 1, 1: 1, 2: 3}))
    assert c.usable("t", 2)


def test_with_nothing_else_usable_the_backoff_releases() -> None:
    """Every partition's leader unreachable: each is tried again at its back-off's end (the
    messages have nowhere else to go), and struck again for twice as long if still away."""
    c, clock = core(0.0)
    c.metadata(_md({0: 2, 1: 2}))
    assert c.unreachable(2) == ["t"]
    clock.now += c.topics["t"].quarantine.policy.backoff_s(1)
    assert c.tick().released == {"t": [0, 1]}
    assert c.unreachable(2) == ["t"]
    assert c.topics["t"].quarantine.strikes(0) == 2


def test_left_out_until_the_longest_quarantine_at_most() -> None:
    c, clock = core(0.0)
    c.metadata(_md({0: 1, 1: 2}))
    c.unreachable(2)
    clock.now += c.topics["t"].quarantine.policy.max_s
    assert c.tick().released == {"t": [1]}
