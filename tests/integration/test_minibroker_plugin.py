"""The pytest plugin's ``minibroker_cluster`` fixture, as another project would use it."""

from __future__ import annotations

from confluent_kafka import Producer

from minibroker import Cluster


def test_fixture_gives_a_running_three_broker_cluster(minibroker_cluster: Cluster) -> None:
    minibroker_cluster.create_topic("plugin", partitions=1, replication_factor=3)
    producer = Producer({"bootstrap.servers": minibroker_cluster.bootstrap_servers, "acks": "all"})
    producer.produce("plugin", b"x")
    assert producer.flush(10) == 0
    state = minibroker_cluster.partition_state("plugin", 0)
    assert (state.isr, state.high_watermark, state.min_insync_replicas) == ((1, 2, 3), 1, 2)
