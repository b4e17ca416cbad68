"""A crashed leader on real Apache Kafka: left as soon as the client fails to connect to it.

Kafka keeps a crashed broker the leader of its partitions until the controller fences it
(``broker.session.timeout.ms``: 4 s on the test cluster, 9 s by default), and a client queues
what it places there meanwhile, with nothing failed to say so. The FailoverProducer's client
reports the refused connection (error_cb) at once; the partitions the broker leads are then
quarantined until the metadata names another leader. Every message is delivered once the
broker is back. A broker started again before it is fenced cannot register until it is (slow
variant): its partitions stay out until then.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaError

from failover_partitioner import FailoverProducer
from tests.kafka.support import new_topic, read_back, wait_for, whole
from tests.realkafka.cluster import KafkaCluster

CRASHED = 3


def test_a_crashed_leader_is_left_before_the_controller_fences_it(
    kafka_cluster: KafkaCluster,
) -> None:
    cluster = kafka_cluster
    topic, _ = new_topic(cluster, "crashed")
    led = {v.partition for v in cluster.describe(topic) if v.leader == CRASHED}
    assert led
    outcomes: list[KafkaError | None] = []

    def on_delivery(err: KafkaError | None, _msg: Any) -> None:
        outcomes.append(err)

    p = FailoverProducer(
        {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 5}
    )
    sent = 0
    try:
        wait_for(lambda: p.health(topic).min_insync_replicas == 2, 20, "min ISR read from Kafka")
        for _ in range(200):
            p.produce(topic, b"m-%d" % sent, on_delivery=on_delivery)
            sent += 1
        assert p.flush(30) == 0
        cluster.kill(CRASHED)
        killed = time.monotonic()
        while any(p.usable(topic, q) for q in led):
            # The session timeout is 4 s: before 2 s only the failed connection can have told.
            assert time.monotonic() - killed < 2.0, f"still placing messages on {sorted(led)}"
            p.produce(topic, b"m-%d" % sent, on_delivery=on_delivery)
            sent += 1
            p.poll(0.005)
        left_after = time.monotonic() - killed
        for _ in range(200):  # all of them to the partitions of live leaders
            p.produce(topic, b"m-%d" % sent, on_delivery=on_delivery)
            sent += 1
        cluster.restart(CRASHED)
        assert p.flush(60) == 0
        stats = p.statistics()
    finally:
        left = p.close()
    assert left == []
    assert (stats.delivered, stats.final_failures) == (sent, 0)
    assert outcomes == [None] * sent
    wait_for(lambda: whole(cluster, topic), 90, "every ISR full again")
    assert {m.value() for m in read_back(cluster.bootstrap_servers, topic)} == {
        b"m-%d" % i for i in range(sent)
    }
    print(f"partitions {sorted(led)} of broker {CRASHED} left {left_after:.3f} s after the kill")


SESSION_S = 15


@pytest.mark.slow  # a cluster of its own and a 15 s session timeout: about a minute
def test_a_leader_restarted_before_it_is_fenced_stays_out_until_it_is(
    kafka_cluster_factory: Callable[..., KafkaCluster],
) -> None:
    """A broker killed and started again at once, long before its session timeout: Kafka
    refuses its registration (DUPLICATE_BROKER_REGISTRATION) until the old session expires, so
    the partitions it led take nothing meanwhile, and their metadata does not change. They stay
    quarantined all that time (no message waits there), and come back once the controller has
    fenced the old registration and the metadata names new leaders."""
    cluster = kafka_cluster_factory(
        3, controller_config={"broker.session.timeout.ms": str(SESSION_S * 1000)}
    )
    topic = f"restarted-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=6, replication_factor=3)
    led = {v.partition for v in cluster.describe(topic) if v.leader == CRASHED}
    assert led
    outcomes: list[KafkaError | None] = []

    def on_delivery(err: KafkaError | None, _msg: Any) -> None:
        outcomes.append(err)

    p = FailoverProducer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    sent = 0
    try:
        for _ in range(100):
            p.produce(topic, b"m-%d" % sent, on_delivery=on_delivery)
            sent += 1
        assert p.flush(30) == 0
        cluster.kill(CRASHED)
        killed = time.monotonic()
        cluster.restart(CRASHED, wait=False)
        looked = 0.0
        while (since := time.monotonic() - killed) < SESSION_S - 2:
            p.produce(topic, b"m-%d" % sent, on_delivery=on_delivery)
            sent += 1
            p.poll(0.01)
            if since > 1.0 and since - looked > 1.0:
                looked = since
                assert not any(p.usable(topic, q) for q in led), f"{since:.1f} s after the kill"
                leaders = {v.partition: v.leader for v in cluster.describe(topic)}
                assert all(leaders[q] == CRASHED for q in led), "fenced before its session ended"
        wait_for(lambda: all(p.usable(topic, q) for q in led), 30, "the new leaders used")
        back_after = time.monotonic() - killed
        assert p.flush(60) == 0
        stats = p.statistics()
    finally:
        left = p.close()
    assert left == []
    assert (stats.delivered, stats.final_failures) == (sent, 0)
    assert outcomes == [None] * sent
    assert {m.value() for m in read_back(cluster.bootstrap_servers, topic, 6)} == {
        b"m-%d" % i for i in range(sent)
    }
    print(f"partitions {sorted(led)} out until {back_after:.1f} s after the kill ({SESSION_S} s)")
