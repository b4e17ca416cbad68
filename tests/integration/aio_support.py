"""What the asyncio producer's integration tests share."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from minibroker import Cluster


@contextlib.contextmanager
def outage_cluster() -> Iterator[Cluster]:
    """Every partition of topic ``o`` below min ISR: RF=3, min ISR 3, one broker down."""
    with Cluster(brokers=3, config={"min.insync.replicas": "3"}) as cluster:
        cluster.create_topic("o", partitions=3, replication_factor=3)
        cluster.stop_broker(3)
        deadline = time.monotonic() + 10
        while any(len(cluster.partition_state("o", p).isr) > 2 for p in range(3)):
            assert time.monotonic() < deadline, "the controller never noticed broker 3"
            time.sleep(0.05)
        yield cluster
