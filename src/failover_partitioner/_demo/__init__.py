"""The failover demo behind ``failover-demo``: pure pieces plus a thin runner.

``pacing``, ``stats``, ``partitions``, ``render`` and ``report`` decide and format without
sockets or threads; ``runner`` starts the cluster and the producers and calls them.
"""

from __future__ import annotations
