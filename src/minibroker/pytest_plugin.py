"""pytest plugin: a ``minibroker_cluster`` fixture for projects that test against Kafka.

Registered through the ``pytest11`` entry point, so installing the distribution is enough.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from minibroker import Cluster


@pytest.fixture
def minibroker_cluster() -> Iterator[Cluster]:
    """A fresh 3-broker cluster (min.insync.replicas=2) for one test, stopped afterwards."""
    from minibroker import Cluster  # imported late: plugin load must stay cheap

    with Cluster(brokers=3, config={"min.insync.replicas": "2"}) as cluster:
        yield cluster
