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
SESSION_S = 15


class Sending:
    """A FailoverProducer writing ``m-0``, ``m-1``, ... to ``topic``; each outcome kept."""

    def __init__(self, cluster: KafkaCluster, topic: str, **conf: Any) -> None:
        self.cluster = cluster
        self.topic = topic
        self.producer = FailoverProducer(
            {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", **conf}
        )
        self.sent = 0
        self.outcomes: list[KafkaError | None] = []

    def led(self) -> set[int]:
        return {v.partition for v in self.cluster.describe(self.topic) if v.leader == CRASHED}

    def send(self, count: int = 1) -> None:
        for _ in range(count):
            self.producer.produce(self.topic, b"m-%d" % self.sent, on_delivery=self._outcome)
            self.sent += 1

    def _outcome(self, err: KafkaError | None, _msg: Any) -> None:
        self.outcomes.append(err)

    def usable(self, partitions: set[int]) -> bool:
        """Whether any of ``partitions`` takes messages in the producer's view."""
        return any(self.producer.usable(self.topic, q) for q in partitions)

    def all_delivered(self, partitions: int) -> None:
        """Flush and close: every message delivered once, none failed, all read back."""
        flushed = self.producer.flush(60)
        stats = self.producer.statistics()
        left = self.producer.close()
        assert flushed == 0
        assert left == []
        assert (stats.delivered, stats.final_failures) == (self.sent, 0)
        assert self.outcomes == [None] * self.sent
        wait_for(lambda: whole(self.cluster, self.topic), 90, "every ISR full again")
        read = read_back(self.cluster.bootstrap_servers, self.topic, partitions)
        assert {m.value() for m in read} == {b"m-%d" % i for i in range(self.sent)}


def test_a_crashed_leader_is_left_before_the_controller_fences_it(
    kafka_cluster: KafkaCluster,
) -> None:
    cluster = kafka_cluster
    topic, _ = new_topic(cluster, "crashed")
    s = Sending(cluster, topic, **{"linger.ms": 5})
    led = s.led()
    assert led
    try:
        wait_for(
            lambda: s.producer.health(topic).min_insync_replicas == 2, 20, "min ISR read from Kafka"
        )
        s.send(200)
        assert s.producer.flush(30) == 0
        cluster.kill(CRASHED)
        killed = time.monotonic()
        while s.usable(led):
            # The session timeout is 4 s: before 2 s only the failed connection can have told.
            assert time.monotonic() - killed < 2.0, f"still placing messages on {sorted(led)}"
            s.send()
            s.producer.poll(0.005)
        left_after = time.monotonic() - killed
        s.send(200)  # all of them to the partitions of live leaders
        cluster.restart(CRASHED)
    except BaseException:
        s.producer.close()
        raise
    s.all_delivered(12)
    print(f"partitions {sorted(led)} of broker {CRASHED} left {left_after:.3f} s after the kill")


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
    s = Sending(cluster, topic)
    led = s.led()
    assert led
    try:
        s.send(100)
        assert s.producer.flush(30) == 0
        cluster.kill(CRASHED)
        killed = time.monotonic()
        cluster.restart(CRASHED, wait=False)
        looked = 0.0
        while (since := time.monotonic() - killed) < SESSION_S - 2:
            s.send()
            s.producer.poll(0.01)
            if since > 1.0 and since - looked > 1.0:
                looked = since
                assert not s.usable(led), f"{since:.1f} s after the kill"
                assert s.led() == led, "fenced before its session ended"
        wait_for(lambda: all(s.producer.usable(topic, q) for q in led), 30, "new leaders used")
        back_after = time.monotonic() - killed
    except BaseException:
        s.producer.close()
        raise
    s.all_delivered(6)
    print(f"partitions {sorted(led)} out until {back_after:.1f} s after the kill ({SESSION_S} s)")
