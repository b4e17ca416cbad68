"""Request handlers: one function per API, ``handler(context, request) -> None``.

A handler reads the decoded kio request (any supported version, so it reads fields that exist
only in some versions with ``getattr`` and a default), acts on the pure cores, and answers through
``context.respond`` now or later (acks=all writes and Fetch long polls answer later).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from minibroker.handlers import admin, basic, consumer_groups, data

if TYPE_CHECKING:
    from minibroker.server import RequestContext

__all__ = ["HANDLERS"]

Handler = Callable[["RequestContext", Any], None]

HANDLERS: Mapping[int, Handler] = {
    0: data.handle_produce,
    1: data.handle_fetch,
    2: data.handle_list_offsets,
    3: basic.handle_metadata,
    8: consumer_groups.handle_offset_commit,
    9: consumer_groups.handle_offset_fetch,
    10: consumer_groups.handle_find_coordinator,
    11: consumer_groups.handle_join_group,
    12: consumer_groups.handle_heartbeat,
    13: consumer_groups.handle_leave_group,
    14: consumer_groups.handle_sync_group,
    15: consumer_groups.handle_describe_groups,
    16: consumer_groups.handle_list_groups,
    18: basic.handle_api_versions,
    19: admin.handle_create_topics,
    20: admin.handle_delete_topics,
    22: basic.handle_init_producer_id,
    32: admin.handle_describe_configs,
    33: admin.handle_alter_configs,
    37: admin.handle_create_partitions,
    42: consumer_groups.handle_delete_groups,
    44: admin.handle_incremental_alter_configs,
    60: basic.handle_describe_cluster,
    75: basic.handle_describe_topic_partitions,
}
