"""What the mirror relies on in librdkafka's pause, held to the real client on minibroker.

A paused partition stays paused across a rebalance (revoked, then assigned again), so resuming
"the assignment" while it is empty resumes nothing. Resuming a partition in the revoke callback,
while it is still assigned, clears the pause: that is what the mirror does
(``mirror/_rebalance.py``, ``Rebalance._unpause``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from uuid import uuid4

from confluent_kafka import Consumer, Producer, TopicPartition

from minibroker import Cluster

MESSAGES = 40


def _topic(cluster: Cluster) -> str:
    topic = f"pause-{uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=2, replication_factor=1)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for i in range(MESSAGES):
        producer.produce(topic, b"m%d" % i, partition=i % 2)
    assert producer.flush(10) == 0
    return topic


def _read_after_rejoin(
    cluster: Cluster, on_revoke: Callable[[Consumer, list[TopicPartition]], None]
) -> int:
    """Subscribe, pause everything, leave the group and join again; count what is read then."""
    topic = _topic(cluster)
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": f"g-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic], on_revoke=on_revoke)
        deadline = time.monotonic() + 15
        while len(consumer.assignment()) < 2 and time.monotonic() < deadline:
            assert not consumer.consume(1, 0.1)  # nothing read before the pause: none fetched yet
        consumer.pause(consumer.assignment())
        consumer.unsubscribe()
        while consumer.assignment() and time.monotonic() < deadline:
            consumer.consume(1, 0.1)
        consumer.resume(consumer.assignment())  # what a loop leaving its pause now would do
        consumer.subscribe([topic], on_revoke=on_revoke)
        read = 0
        deadline = time.monotonic() + 6
        while read < MESSAGES and time.monotonic() < deadline:
            read += sum(1 for m in consumer.consume(10, 0.1) if m.error() is None)
        return read
    finally:
        consumer.close()


def test_librdkafka_keeps_a_pause_across_a_rebalance(minibroker_cluster: Cluster) -> None:
    assert _read_after_rejoin(minibroker_cluster, lambda c, p: None) == 0


def test_resuming_in_the_revoke_callback_clears_it(minibroker_cluster: Cluster) -> None:
    assert _read_after_rejoin(minibroker_cluster, lambda c, p: c.resume(p)) == MESSAGES
