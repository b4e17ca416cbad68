"""min.insync.replicas and its errors as real Apache Kafka gives them (must-show 3).

The producer learns the minimum from the brokers (DescribeConfigs on the topic) wherever Kafka
lets it be set: the topic's config, the brokers' static config (server.properties), and a dynamic
cluster-wide default (IncrementalAlterConfigs on the default broker resource). And what a
partition below it answers: NOT_ENOUGH_REPLICAS (19) for a write refused before it is
appended; for one appended while the ISR was still large enough, not
NOT_ENOUGH_REPLICAS_AFTER_APPEND (20), which brokers before 3.7 gave once the ISR shrank, but
REQUEST_TIMED_OUT (7) at the request's timeout: the high watermark no longer advances below the
minimum (KIP-966), so the write is never acknowledged.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer

from failover_partitioner import FailoverProducer
from failover_partitioner.errors import classify
from tests.integration.test_minibroker_protocol import Wire
from tests.kafka.support import FAULTY, degraded, new_topic, wait_for
from tests.realkafka.cluster import KafkaCluster


def learnt(cluster: KafkaCluster, topic: str) -> tuple[int, str]:
    """What a new producer learns. Its first look gives DescribeConfigs at most a second (so
    a first produce() is not held up) and assumes 1 meanwhile; the refresher asks again at
    once, so the value read from Kafka follows within moments."""
    p = FailoverProducer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    try:
        wait_for(
            lambda: p.health(topic).min_isr_source != "default",
            20,
            f"the producer to read min.insync.replicas of {topic}",
        )
        view = p.health(topic)
        return view.min_insync_replicas, view.min_isr_source
    finally:
        p.close()


def set_cluster_default(cluster: KafkaCluster, value: str) -> None:
    """The dynamic cluster-wide default of min.insync.replicas, set with
    IncrementalAlterConfigs (v1) on the default broker resource, whose name is "". Sent as raw
    frames (minibroker's codec): confluent-kafka 2.16 and kafka-python 3.0 refuse a broker
    resource with an empty name, and aiokafka sends only the older AlterConfigs."""
    set_op = 0
    wire = Wire(cluster.address(cluster.broker_ids[0]))
    try:
        answer = wire.call(
            44,
            1,
            {
                "resources": [
                    {
                        "resource_type": 4,  # BROKER
                        "resource_name": "",
                        "configs": [
                            {
                                "name": "min.insync.replicas",
                                "config_operation": set_op,
                                "value": value,
                            }
                        ],
                    }
                ],
                "validate_only": False,
            },
        )
    finally:
        wire.close()
    (response,) = answer.responses
    assert response.error_code.value == 0, response


@pytest.fixture
def cluster_default_restored(kafka_cluster: KafkaCluster) -> Iterator[KafkaCluster]:
    yield kafka_cluster
    # Back to the static value. Deleting it is refused: "Cluster-level min.insync.replicas
    # cannot be removed while ELR is enabled" (INVALID_CONFIG, Kafka 4.4).
    set_cluster_default(kafka_cluster, "2")


def test_min_isr_is_learnt_from_topic_static_and_dynamic_configs(
    cluster_default_restored: KafkaCluster,
) -> None:
    cluster = cluster_default_restored
    plain, _ = new_topic(cluster, "min-isr-static")
    # The session cluster sets min.insync.replicas=2 in every server.properties.
    assert learnt(cluster, plain) == (2, "broker")

    own, _ = new_topic(cluster, "min-isr-topic", config={"min.insync.replicas": "3"})
    assert learnt(cluster, own) == (3, "topic")

    set_cluster_default(cluster, "1")
    # A dynamic cluster default overrides the static one; each broker learns it from the
    # metadata log, so allow it a moment.
    wait_for(lambda: learnt(cluster, plain) == (1, "broker"), 20, "the dynamic default")
    assert learnt(cluster, own) == (3, "topic")  # a topic's own setting still wins


def send_one(
    cluster: KafkaCluster, topic: str, partition: int, request_timeout_ms: int = 30_000
) -> KafkaError | None:
    """One acks=all write with the client's own retries off: the broker's first answer."""
    outcome: list[KafkaError | None] = []

    def on_delivery(err: KafkaError | None, msg: Any) -> None:
        outcome.append(err)

    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "acks": "all",
            "retries": 0,
            "enable.idempotence": False,
            "request.timeout.ms": request_timeout_ms,
            "message.timeout.ms": 60_000,
            "log_level": 0,
        }
    )
    producer.produce(topic, b"x", partition=partition, on_delivery=on_delivery)
    producer.flush(60)
    assert outcome, "no delivery report within 60 s"
    return outcome[0]


def test_error_19_at_once_and_7_not_20_for_a_write_held_when_the_isr_shrank(
    kafka_cluster: KafkaCluster,
) -> None:
    topic, bad = new_topic(kafka_cluster, "errors")
    # A doomed partition led by a broker that stays up (partition 9: replicas 3, 4, 5).
    partition = next(
        v.partition
        for v in kafka_cluster.describe(topic)
        if v.partition in bad and v.leader not in FAULTY
    )
    assert send_one(kafka_cluster, topic, partition) is None

    # Followers hung: the leader appends the write and waits for them. Before Kafka 3.7 the
    # ISR shrink (after replica.lag.time.max.ms) answered it with error 20. Since strict min
    # ISR (KIP-966) the high watermark does not advance while the ISR is below the minimum, so
    # the write is never acknowledged: it ends with the request's own timeout, REQUEST_TIMED_OUT
    # (7), stored above the high watermark and readable after recovery. Error 20 did not occur.
    began = time.monotonic()
    for broker in FAULTY:
        kafka_cluster.pause(broker)
    after_append = send_one(kafka_cluster, topic, partition, request_timeout_ms=8_000)
    waited = time.monotonic() - began
    assert after_append is not None
    assert after_append.code() == KafkaError.REQUEST_TIMED_OUT, after_append
    # The failover producer sends such a message again elsewhere and counts a possible copy.
    policy = classify(after_append.code())
    assert policy.retriable
    assert policy.possibly_persisted
    assert 7.0 < waited < 30.0, waited

    # Now below the minimum: refused at once, before the append: error 19.
    wait_for(lambda: partition in degraded(kafka_cluster, topic), 30, "the ISR to shrink")
    began = time.monotonic()
    refused = send_one(kafka_cluster, topic, partition)
    assert refused is not None
    assert refused.code() == KafkaError.NOT_ENOUGH_REPLICAS, refused
    policy = classify(refused.code())
    assert policy.retriable
    assert not policy.possibly_persisted
    assert time.monotonic() - began < 5.0
