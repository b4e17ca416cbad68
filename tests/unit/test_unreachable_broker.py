"""A broker the client could not connect to: which one the error names, and the partitions it
leads in the core's views (heeded by the confluent shell as transport failures)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from failover_partitioner.confluent._delivering import unreachable_broker
from failover_partitioner.errors import classify
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


def test_the_partitions_a_broker_leads_are_quarantined_as_by_a_transport_failure() -> None:
    c, _clock = core(0.0)
    leaders = {0: 1, 1: 2, 2: 2, 3: -1}
    c.metadata(
        TopicMetadata(
            topic="t",
            partitions=tuple(
                PartitionMetadata(partition=p, leader=b, replicas=(1, 2), isr=(1, 2))
                for p, b in leaders.items()
            ),
            min_insync_replicas=1,
            exists=True,
        )
    )
    c.metadata(TopicMetadata(topic="gone", partitions=(), min_insync_replicas=1, exists=False))
    assert c.led_by(2) == [("t", 1), ("t", 2)]
    assert c.led_by(7) == []
    transport = classify(KafkaError._TRANSPORT, "_TRANSPORT")
    for topic, partition in c.led_by(2):
        assert c.heed(topic, partition, transport).quarantined
    assert [c.usable("t", p) for p in range(4)] == [True, False, False, False]
