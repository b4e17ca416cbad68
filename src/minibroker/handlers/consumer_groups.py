"""Consumer-group APIs over the pure ``GroupCoordinator``: FindCoordinator, JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, DescribeGroups, ListGroups, DeleteGroups.

One coordinator object holds every group of the cluster (the in-process stand-in for the
replicated ``__consumer_offsets`` log, so a group survives its coordinator broker stopping).
Each group is *served* by the leader of its ``__consumer_offsets`` partition, as in Kafka; any
other broker answers NOT_COORDINATOR and the client looks the coordinator up again. While that
leader is stopped and not yet fenced, FindCoordinator still names it (clients cannot connect and
retry) and the group's timers stand still; when a running broker takes the partition over, the
group is loaded there and every member's session restarts (``GroupCoordinator.onGroupLoaded``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from minibroker.groups import (
    Completion,
    GroupConfig,
    GroupCoordinator,
    JoinGroupResult,
    LeavingMember,
    OffsetToCommit,
    SyncGroupResult,
    Ticket,
    coordinator_partition,
)

if TYPE_CHECKING:
    from minibroker.server import ClusterRuntime, RequestContext

__all__ = [
    "GroupService",
    "handle_delete_groups",
    "handle_describe_groups",
    "handle_find_coordinator",
    "handle_heartbeat",
    "handle_join_group",
    "handle_leave_group",
    "handle_list_groups",
    "handle_offset_commit",
    "handle_offset_fetch",
    "handle_sync_group",
]

logger = logging.getLogger(__name__)

_GROUP_KEY = 0
_TRANSACTION_KEY = 1
_NO_TRANSACTIONS = (
    "minibroker does not support transactions; produce without transactional.id "
    "(an idempotent producer works)"
)
_BATCHED_FIND_COORDINATOR = 4
_BATCHED_LEAVE_GROUP = 3
_NULLABLE_PROTOCOL_NAME = 7
_TOP_LEVEL_FETCH_ERROR = 2  # OffsetFetch's group-level error_code field
_GROUP_SETTINGS = (
    "group.initial.rebalance.delay.ms",
    "group.min.session.timeout.ms",
    "group.max.session.timeout.ms",
    "offsets.topic.num.partitions",
)
# Turns a parked JoinGroup's or SyncGroup's result into its response's values.
_ToValues = Callable[[Any], dict[str, Any]]


class GroupService:
    """Parks long-polling group requests and re-arms the coordinator's timer on the loop."""

    def __init__(self, cluster: ClusterRuntime) -> None:
        self.cluster = cluster
        settings = {k: cluster.settings.text(k) or "" for k in _GROUP_SETTINGS}
        self.coordinator = GroupCoordinator(
            GroupConfig.from_broker_config(settings), clock=time.monotonic
        )
        # A parked request: its context and how to turn its result into response values.
        self._waiting: dict[Ticket, tuple[RequestContext, _ToValues]] = {}
        self._timer: Any = None
        self._closed = False
        # Which running broker serves each __consumer_offsets partition (-1: none), as the
        # coordinator last heard; place_groups() compares it with the controller's state.
        self._serving = [p.leader for p in cluster.controller.offsets_partitions]
        self._offsets_partitions = self.coordinator.config.offsets_partitions

    def coordinator_for(self, group_id: str) -> int:
        """The broker FindCoordinator names for ``group_id``: its ``__consumer_offsets``
        partition's leader (possibly stopped and not yet fenced), or -1 if it has none."""
        partition = coordinator_partition(group_id, self._offsets_partitions)
        return self.cluster.controller.offsets_partitions[partition].leader

    def place_groups(self) -> None:
        """Unload the groups of partitions whose leader stopped or moved, load those a running
        broker now leads. Called whenever brokers stop or start and after the controller's
        tick (fencing and elections happen there)."""
        if self._closed:
            return
        controller = self.cluster.controller
        for offsets in controller.offsets_partitions:
            leader = offsets.leader
            serving = leader if leader >= 0 and controller.is_running(leader) else -1
            was = self._serving[offsets.index]
            if serving == was:
                continue
            self._serving[offsets.index] = serving
            if was >= 0:
                self.coordinator.unload(offsets.index)
            if serving >= 0:
                self.coordinator.load(offsets.index)
        self.settle()

    def park(self, ticket: Ticket, ctx: RequestContext, to_values: _ToValues) -> None:
        self._waiting[ticket] = (ctx, to_values)

    def settle(self) -> None:
        if self._closed:
            return
        try:
            self._deliver(self.coordinator.tick())
        finally:
            # Re-armed whatever happened: a rebalance nobody sends requests to ends by a timer.
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            deadline = self.coordinator.next_deadline()
            if deadline is not None:
                delay = max(0.0, deadline - time.monotonic())
                self._timer = self.cluster.loop.call_later(delay, self.settle)

    def _deliver(self, completions: list[Completion]) -> None:
        """Answer the parked requests in ``completions``. One failing answer closes its own
        connection and costs the others nothing: the coordinator hands each completion out
        only once."""
        for done in completions:
            parked = self._waiting.pop(done.ticket, None)
            if parked is None:
                continue
            ctx, to_values = parked
            if ctx.closed:
                continue
            try:
                ctx.respond(to_values(done.result))
            except Exception:
                logger.exception("Answering a parked %s request failed", done.ticket.kind)
                ctx.close_connection("internal error while answering a parked request")

    def tick(self, now: float) -> None:
        if not self._closed:
            self.place_groups()

    def close(self) -> None:
        """The cluster is stopping: answer parked requests and stop the timer."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._deliver(self.coordinator.shutdown())


def _service(ctx: RequestContext) -> GroupService:
    service = ctx.cluster.groups
    assert isinstance(service, GroupService)
    return service


def _not_coordinator(ctx: RequestContext, group_id: str) -> bool:
    return _service(ctx).coordinator_for(group_id) != ctx.broker_id


def handle_find_coordinator(ctx: RequestContext, request: Any) -> None:
    cluster = ctx.cluster
    service = _service(ctx)
    key_type = getattr(request, "key_type", _GROUP_KEY)

    def refused(key: str, error: ErrorCode, message: str) -> dict[str, Any]:
        return {
            "key": key,
            "error_code": error,
            "error_message": message,
            "node_id": -1,
            "host": "",
            "port": -1,
        }

    def answer(key: str) -> dict[str, Any]:
        if key_type == _TRANSACTION_KEY:
            # No transactions here. COORDINATOR_NOT_AVAILABLE would be retried for the whole
            # init timeout and then reported as a missing coordinator; the error Kafka gives a
            # client that may not use a transactional id is fatal at once, and librdkafka
            # prints our message with it.
            logger.warning("FindCoordinator for transactional id %r refused", key)
            return refused(key, ErrorCode.transactional_id_authorization_failed, _NO_TRANSACTIONS)
        if key_type != _GROUP_KEY:  # Kafka's CoordinatorType.forId refuses it
            return refused(
                key, ErrorCode.invalid_request, f"unknown coordinator key type {key_type}"
            )
        broker_id = service.coordinator_for(key)
        if broker_id < 0:
            return refused(
                key,
                ErrorCode.coordinator_not_available,
                "no replica of the group's __consumer_offsets partition is alive",
            )
        broker = cluster.brokers[broker_id]
        return {
            "key": key,
            "error_code": ErrorCode.none,
            "error_message": None,
            "node_id": broker_id,
            "host": broker.host,
            "port": broker.port,
        }

    if ctx.api_version >= _BATCHED_FIND_COORDINATOR:
        ctx.respond(
            {
                "throttle_time": 0,
                "coordinators": [answer(key) for key in request.coordinator_keys],
            }
        )
    else:
        ctx.respond({"throttle_time": 0, **answer(request.key)})


def _join_values(result: JoinGroupResult, version: int) -> dict[str, Any]:
    protocol_name = result.protocol_name
    if protocol_name is None and version < _NULLABLE_PROTOCOL_NAME:
        protocol_name = ""
    return {
        "throttle_time": 0,
        "error_code": result.error_code,
        "generation_id": result.generation_id,
        "protocol_type": result.protocol_type,
        "protocol_name": protocol_name,
        "leader": result.leader,
        "member_id": result.member_id,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "metadata": m.metadata,
            }
            for m in result.members
        ],
    }


def _sync_values(result: SyncGroupResult) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "error_code": result.error_code,
        "protocol_type": result.protocol_type,
        "protocol_name": result.protocol_name,
        "assignment": result.assignment,
    }


def handle_join_group(ctx: RequestContext, request: Any) -> None:
    version = ctx.api_version
    if _not_coordinator(ctx, request.group_id):
        ctx.respond(
            _join_values(
                JoinGroupResult(error_code=ErrorCode.not_coordinator, member_id=request.member_id),
                version,
            )
        )
        return
    service = _service(ctx)
    session_ms = round(request.session_timeout.total_seconds() * 1000)
    rebalance = getattr(request, "rebalance_timeout", None)
    outcome = service.coordinator.join_group(
        group_id=request.group_id,
        member_id=request.member_id,
        protocol_type=request.protocol_type,
        protocols=[(p.name, p.metadata) for p in request.protocols],
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=(
            round(rebalance.total_seconds() * 1000) if rebalance is not None else session_ms
        ),
        require_known_member_id=version >= 4,
        group_instance_id=getattr(request, "group_instance_id", None),
        client_id=ctx.client_id or "",
        client_host=ctx.connection.peer_host,
        reason=getattr(request, "reason", None),
    )
    if isinstance(outcome, Ticket):
        service.park(outcome, ctx, lambda r: _join_values(r, version))
    else:
        ctx.respond(_join_values(outcome, version))
    service.settle()


def handle_sync_group(ctx: RequestContext, request: Any) -> None:
    if _not_coordinator(ctx, request.group_id):
        ctx.respond(_sync_values(SyncGroupResult(error_code=ErrorCode.not_coordinator)))
        return
    service = _service(ctx)
    outcome = service.coordinator.sync_group(
        group_id=request.group_id,
        member_id=request.member_id,
        generation_id=request.generation_id,
        assignments=[(a.member_id, a.assignment) for a in request.assignments],
        group_instance_id=getattr(request, "group_instance_id", None),
        protocol_type=getattr(request, "protocol_type", None),
        protocol_name=getattr(request, "protocol_name", None),
    )
    if isinstance(outcome, Ticket):
        service.park(outcome, ctx, _sync_values)
    else:
        ctx.respond(_sync_values(outcome))
    service.settle()


def handle_heartbeat(ctx: RequestContext, request: Any) -> None:
    if _not_coordinator(ctx, request.group_id):
        error: int = ErrorCode.not_coordinator
    else:
        service = _service(ctx)
        error = service.coordinator.heartbeat(
            group_id=request.group_id,
            member_id=request.member_id,
            generation_id=request.generation_id,
            group_instance_id=getattr(request, "group_instance_id", None),
        )
        service.settle()
    ctx.respond({"throttle_time": 0, "error_code": error})


def handle_leave_group(ctx: RequestContext, request: Any) -> None:
    batched = ctx.api_version >= _BATCHED_LEAVE_GROUP
    if _not_coordinator(ctx, request.group_id):
        ctx.respond({"throttle_time": 0, "error_code": ErrorCode.not_coordinator, "members": []})
        return
    if batched:
        leaving = [
            LeavingMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                reason=getattr(m, "reason", None),
            )
            for m in request.members
        ]
    else:
        leaving = [LeavingMember(member_id=request.member_id)]
    service = _service(ctx)
    result = service.coordinator.leave_group(group_id=request.group_id, members=leaving)
    service.settle()
    if batched:
        ctx.respond(
            {
                "throttle_time": 0,
                "error_code": result.error_code,
                "members": [
                    {
                        "member_id": m.member_id,
                        "group_instance_id": m.group_instance_id,
                        "error_code": m.error_code,
                    }
                    for m in result.members
                ],
            }
        )
    else:
        ctx.respond({"throttle_time": 0, "error_code": result.members[0].error_code})


def handle_offset_commit(ctx: RequestContext, request: Any) -> None:
    controller = ctx.cluster.controller
    group_id = request.group_id
    not_coordinator = _not_coordinator(ctx, group_id)
    errors: dict[tuple[str, int], int] = {}
    offsets: list[OffsetToCommit] = []
    for topic in request.topics:
        known = controller.topics.get(topic.name)
        for p in topic.partitions:
            key = (topic.name, p.partition_index)
            if not_coordinator:
                errors[key] = ErrorCode.not_coordinator
            elif known is None or not 0 <= p.partition_index < len(known.partitions):
                errors[key] = ErrorCode.unknown_topic_or_partition
            else:
                offsets.append(
                    OffsetToCommit(
                        topic=topic.name,
                        partition=p.partition_index,
                        offset=p.committed_offset,
                        leader_epoch=getattr(p, "committed_leader_epoch", -1),
                        metadata=p.committed_metadata,
                    )
                )
    if offsets:
        service = _service(ctx)
        for result in service.coordinator.commit_offsets(
            group_id=group_id,
            member_id=request.member_id,
            generation_id=request.generation_id_or_member_epoch,
            offsets=offsets,
            group_instance_id=getattr(request, "group_instance_id", None),
            api_version=ctx.api_version,
        ):
            errors[(result.topic, result.partition)] = result.error_code
        service.settle()
    ctx.respond(
        {
            "throttle_time": 0,
            "topics": [
                {
                    "name": topic.name,
                    "partitions": [
                        {
                            "partition_index": p.partition_index,
                            "error_code": errors[(topic.name, p.partition_index)],
                        }
                        for p in topic.partitions
                    ],
                }
                for topic in request.topics
            ],
        }
    )


def _fetch_group(ctx: RequestContext, group_id: str, topics: Any) -> tuple[int, list[Any]]:
    """(group error, topics) of one OffsetFetch group."""
    if _not_coordinator(ctx, group_id):
        return ErrorCode.not_coordinator, []
    coordinator = _service(ctx).coordinator
    wanted = (
        None if topics is None else [(t.name, int(p)) for t in topics for p in t.partition_indexes]
    )
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for committed in coordinator.fetch_offsets(group_id, wanted):
        by_topic.setdefault(committed.topic, []).append(
            {
                "partition_index": committed.partition,
                "committed_offset": committed.offset,
                "committed_leader_epoch": committed.leader_epoch,
                "metadata": committed.metadata,
                "error_code": ErrorCode.none,
            }
        )
    return ErrorCode.none, [
        {"name": name, "partitions": partitions} for name, partitions in by_topic.items()
    ]


def handle_offset_fetch(ctx: RequestContext, request: Any) -> None:
    if hasattr(request, "groups"):
        groups = []
        for group in request.groups:
            error, topics = _fetch_group(ctx, group.group_id, group.topics)
            groups.append({"group_id": group.group_id, "topics": topics, "error_code": error})
        ctx.respond({"throttle_time": 0, "groups": groups})
        return
    error, topics = _fetch_group(ctx, request.group_id, request.topics)
    if error != ErrorCode.none and ctx.api_version < _TOP_LEVEL_FETCH_ERROR:
        # v0/v1 have no group-level error: Kafka (OffsetFetchRequest.getErrorResponse) puts it
        # on every partition asked for, with no offset.
        topics = [
            {
                "name": topic.name,
                "partitions": [
                    {
                        "partition_index": int(p),
                        "committed_offset": -1,
                        "committed_leader_epoch": -1,
                        "metadata": "",
                        "error_code": error,
                    }
                    for p in topic.partition_indexes
                ],
            }
            for topic in request.topics
        ]
    ctx.respond({"throttle_time": 0, "topics": topics, "error_code": error})


def handle_describe_groups(ctx: RequestContext, request: Any) -> None:
    service = _service(ctx)
    described = []
    for group_id in request.groups:
        if _not_coordinator(ctx, group_id):
            described.append(
                {
                    "error_code": ErrorCode.not_coordinator,
                    "group_id": group_id,
                    "group_state": "",
                    "protocol_type": "",
                    "protocol_data": "",
                    "members": [],
                }
            )
            continue
        group = service.coordinator.describe_group(group_id)
        described.append(
            {
                "error_code": group.error_code,
                "group_id": group.group_id,
                "group_state": group.state.value,
                "protocol_type": group.protocol_type,
                "protocol_data": group.protocol_name,
                "members": [
                    {
                        "member_id": m.member_id,
                        "group_instance_id": m.group_instance_id,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "member_metadata": m.metadata,
                        "member_assignment": m.assignment,
                    }
                    for m in group.members
                ],
                "authorized_operations": -(2**31),
            }
        )
    service.settle()
    ctx.respond({"throttle_time": 0, "groups": described})


def handle_list_groups(ctx: RequestContext, request: Any) -> None:
    service = _service(ctx)
    states = set(getattr(request, "states_filter", ()) or ())
    listed = [
        {
            "group_id": g.group_id,
            "protocol_type": g.protocol_type,
            "group_state": g.state.value,
        }
        for g in service.coordinator.list_groups()
        if service.coordinator_for(g.group_id) == ctx.broker_id
        and (not states or g.state.value in states)
    ]
    ctx.respond({"throttle_time": 0, "error_code": ErrorCode.none, "groups": listed})


def handle_delete_groups(ctx: RequestContext, request: Any) -> None:
    """As Kafka's ``KafkaApis.handleDeleteGroupsRequest`` and
    ``GroupCoordinatorShard.deleteGroups``: each group named once (repeats are dropped),
    NOT_COORDINATOR where this broker does not lead the group's ``__consumer_offsets``
    partition; the coordinator deletes an Empty group with its committed offsets and answers
    NON_EMPTY_GROUP for one with members or rebalancing, GROUP_ID_NOT_FOUND for one it does not
    know (the empty name too, which Kafka accepts here for backward compatibility)."""
    service = _service(ctx)
    names = list(dict.fromkeys(request.groups_names))
    outcome = service.coordinator.delete_groups(g for g in names if not _not_coordinator(ctx, g))
    service.settle()
    ctx.respond(
        {
            "throttle_time": 0,
            "results": [
                {"group_id": g, "error_code": outcome.get(g, ErrorCode.not_coordinator)}
                for g in names
            ],
        }
    )
