"""A crashed leader on real Apache Kafka: left as soon as the client fails to connect to it.

Kafka keeps a crashed broker the leader of its partitions until the controller fences it
(``broker.session.timeout.ms``: 4 s on the test cluster, 9 s by default), and a client queues
what it places there meanwhile, with nothing failed to say so. The FailoverProducer's client
reports the refused connection (error_cb) at once; the partitions the broker leads are then
quarantined until the metadata names another leader. Every message is delivered once the
broker is back.
"""

from __future__ import annotations

import time
from typing import Any

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
