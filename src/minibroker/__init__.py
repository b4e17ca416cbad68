"""An embedded multi-broker Kafka cluster that speaks the real wire protocol.

>>> from minibroker import Cluster
>>> with Cluster(brokers=3, config={"min.insync.replicas": "2"}) as cluster:  # doctest: +SKIP
...     cluster.create_topic("orders", partitions=6, replication_factor=3)
...     cluster.partition_state("orders", 0).isr
(1, 2, 3)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.errors import (
    BrokerStateError,
    ClusterClosedError,
    ConfigError,
    MinibrokerError,
    TopicError,
)

if TYPE_CHECKING:
    from minibroker.cluster import AsyncCluster, BrokerState, Cluster, PartitionState

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

_LAZY = {"AsyncCluster", "BrokerState", "Cluster", "PartitionState"}


def __getattr__(name: str) -> Any:
    # The cluster pulls in kio's protocol tables; import it on first use so that the pytest
    # plugin and ``minibroker ctl`` start fast.
    if name in _LAZY:
        from minibroker import cluster

        return getattr(cluster, name)
    raise AttributeError(f"module 'minibroker' has no attribute {name!r}")
