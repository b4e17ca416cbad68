"""The failover demo behind ``failover-demo`` (:func:`main`, in ``cli``): pure pieces plus a thin
runner. The library never imports this package (it pulls in minibroker and matplotlib).

``pacing``, ``stats``, ``partitions``, ``render`` and ``report`` decide and format without
sockets or threads; ``runner`` starts the cluster and the producers and calls them.
"""

from __future__ import annotations

from failover_partitioner.demo.cli import main

__all__ = ["main"]
