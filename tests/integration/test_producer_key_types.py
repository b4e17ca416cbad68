"""String keys are placed like their UTF-8 bytes on every path of ``produce``."""

from __future__ import annotations

from confluent_kafka import KafkaError, murmur2

from failover_partitioner import DeliveryReport, FailoverProducer
from minibroker import Cluster


def test_string_keys_land_where_their_utf8_bytes_would() -> None:
    placed: dict[str, int] = {}
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg: DeliveryReport) -> None:
        if err is not None:
            errors.append(err)
            return
        key = msg.key()  # the key as the caller gave it
        assert isinstance(key, str)
        placed[key] = msg.partition()

    with Cluster(brokers=1) as cluster:
        cluster.create_topic("keys", partitions=6, replication_factor=1)
        with FailoverProducer({"bootstrap.servers": cluster.bootstrap_servers}) as producer:
            # The first produce learns the topic's metadata; later ones take the fast path.
            for i in range(200):
                producer.produce("keys", value=b"v", key=f"clé-{i}", on_delivery=on_delivery)
                producer.produce("keys", value=b"v", key=f"plain-{i}")
            assert producer.flush(30) == 0
    assert errors == []
    assert len(placed) == 200
    assert placed == {k: murmur2(k.encode(), 6) for k in placed}
