"""An embedded multi-broker Kafka cluster that speaks the real wire protocol.

>>> from minibroker import Cluster
>>> with Cluster(brokers=3, config={"min.insync.replicas": "2"}) as cluster:  # doctest: +SKIP
...     cluster.create_topic("orders", partitions=6, replication_factor=3)
...     cluster.partition_state("orders", 0).isr
(1, 2, 3)
"""

from __future__ import annotations

from minibroker.cluster import AsyncCluster, BrokerState, Cluster, PartitionState
from minibroker.errors import (
    BrokerStateError,
    ClusterClosedError,
    ConfigError,
    MinibrokerError,
    TopicError,
)

__all__ = [
    "AsyncCluster",
    "BrokerState",
    "BrokerStateError",
    "Cluster",
    "ClusterClosedError",
    "ConfigError",
    "MinibrokerError",
    "PartitionState",
    "TopicError",
]
