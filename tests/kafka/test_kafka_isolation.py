"""A broker cut off from its peers while clients still reach it, on real Apache Kafka.

The cluster runs each node in a network namespace of its own (``KafkaCluster(namespaces=True)``)
so that one broker can be isolated from the controller and the other brokers: minibroker's
``isolate_broker``, on Kafka. Broker 1, leader of some partitions and follower of others, is cut
off mid-run under a FailoverProducer: Kafka fences it after the session timeout and moves its
leaderships; messages held on it time out and go elsewhere. Every message is consumed back and
no produce() call waits a second.
"""

from __future__ import annotations

from collections.abc import Callable

from failover_partitioner import FailoverProducer
from tests.kafka.support import copies, new_topic, produce_steadily, read_back, wait_for, whole
from tests.realkafka.cluster import KafkaCluster

MESSAGES = 40_000
RATE_PER_S = 4_000.0
ISOLATED = 1


def test_an_isolated_broker_is_routed_around_and_nothing_is_lost(
    kafka_cluster_factory: Callable[..., KafkaCluster],
) -> None:
    cluster = kafka_cluster_factory(5, min_insync_replicas=2, namespaces=True)
    topic, _ = new_topic(cluster, "isolated")
    led = {v.partition for v in cluster.describe(topic) if v.leader == ISOLATED}
    assert led
    p = FailoverProducer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    wait_for(lambda: p.health(topic).min_insync_replicas == 2, 20, "min ISR read from Kafka")
    longest = produce_steadily(
        p, topic, MESSAGES, RATE_PER_S, MESSAGES * 2 // 5, lambda: cluster.isolate(ISOLATED)
    )
    assert p.flush(90) == 0
    # Fenced and its leaderships moved, as the metadata from the other brokers shows.
    wait_for(
        lambda: all(v.leader != ISOLATED for v in cluster.describe(topic)),
        30,
        "the isolated broker's leaderships to move",
    )
    stats = p.statistics()
    assert p.close() == []
    assert (stats.delivered, stats.final_failures) == (MESSAGES, 0)
    assert longest < 1.0, f"a produce() call waited {longest:.2f} s"
    cluster.heal()
    wait_for(lambda: whole(cluster, topic), 90, "every ISR full again")
    records = read_back(cluster.bootstrap_servers, topic)
    assert {m.value() for m in records} == {b"m-%d" % i for i in range(MESSAGES)}
    elsewhere, alongside, _ = copies(records)
    assert elsewhere <= stats.ambiguous_failures, (elsewhere, alongside, stats)
