"""Admin APIs: CreateTopics, CreatePartitions, DeleteTopics, DescribeConfigs, AlterConfigs,
IncrementalAlterConfigs."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from minibroker.config import (
    TOPIC_CONFIGS,
    ResolvedConfig,
    validate_topic_configs,
)
from minibroker.errors import ConfigError, TopicError

if TYPE_CHECKING:
    from minibroker.controller import Topic
    from minibroker.server import ClusterRuntime, RequestContext

__all__ = [
    "handle_alter_configs",
    "handle_create_partitions",
    "handle_create_topics",
    "handle_delete_topics",
    "handle_describe_configs",
    "handle_incremental_alter_configs",
]

_TOPIC = 2
_BROKER = 4
_SET, _DELETE, _APPEND, _SUBTRACT = 0, 1, 2, 3

# Every partition is built on the event loop: an absurd count would freeze every broker.
MAX_PARTITIONS_PER_TOPIC = 100_000


def _too_many_partitions(count: int) -> str | None:
    """The refusal of a partition count above the cap, or None if the count may go on."""
    if count <= MAX_PARTITIONS_PER_TOPIC:
        return None
    return (
        f"{count} partitions is more than minibroker's cap of {MAX_PARTITIONS_PER_TOPIC} per topic"
    )


def _config_entries(configs: Iterable[ResolvedConfig]) -> list[dict[str, Any]]:
    return [
        {
            "name": c.name,
            "value": c.value,
            "read_only": c.read_only,
            "config_source": int(c.source),
            "is_sensitive": False,
        }
        for c in configs
    ]


def _topic_leader_broker(topic: Topic) -> int:
    first = topic.partitions[0]
    return first.leader if first.leader >= 0 else first.replicas[0]


def handle_create_topics(ctx: RequestContext, request: Any) -> None:
    cluster = ctx.cluster
    controller = cluster.controller
    validate_only = bool(getattr(request, "validate_only", False))
    results = []
    seen: set[str] = set()
    for creatable in request.topics:
        name = creatable.name
        result: dict[str, Any] = {
            "name": name,
            "topic_id": None,
            "error_code": ErrorCode.none,
            "error_message": None,
            "configs": None,
        }
        results.append(result)
        if name in seen:
            result["error_code"] = ErrorCode.invalid_request
            result["error_message"] = f"topic {name!r} appears twice in the request"
            continue
        seen.add(name)
        configs = {c.name: c.value for c in creatable.configs}
        if any(value is None for value in configs.values()):
            result["error_code"] = ErrorCode.invalid_config
            result["error_message"] = "a topic config value is null"
            continue
        refusal = _too_many_partitions(creatable.num_partitions)
        if refusal is not None:
            result["error_code"] = ErrorCode.invalid_partitions
            result["error_message"] = refusal
            continue
        assignments = [a.broker_ids for a in sorted(creatable.assignments, key=_by_index)]
        try:
            topic = controller.create_topic(
                name,
                creatable.num_partitions,
                creatable.replication_factor,
                configs,
                cluster.now(),
                assignments=assignments or None,
                validate_only=validate_only,
            )
        except TopicError as exc:
            result["error_code"] = ErrorCode(exc.error_code)
            result["error_message"] = str(exc)
            continue
        if topic is not None:
            result["topic_id"] = topic.topic_id
            result["num_partitions"] = len(topic.partitions)
            result["replication_factor"] = len(topic.partitions[0].replicas)
            result["configs"] = _config_entries(
                cluster.configs.describe_topic(topic.configs, _topic_leader_broker(topic))
            )
    ctx.respond({"throttle_time": 0, "topics": results})


def _by_index(assignment: Any) -> int:
    return int(assignment.partition_index)


def handle_create_partitions(ctx: RequestContext, request: Any) -> None:
    cluster = ctx.cluster
    results = []
    for item in request.topics:
        result: dict[str, Any] = {"name": item.name, "error_code": ErrorCode.none}
        results.append(result)
        refusal = _too_many_partitions(item.count)
        if refusal is not None:
            result["error_code"] = ErrorCode.invalid_partitions
            result["error_message"] = refusal
            continue
        assignments = [a.broker_ids for a in item.assignments] if item.assignments else None
        try:
            cluster.controller.add_partitions(
                item.name,
                item.count,
                assignments,
                cluster.now(),
                validate_only=bool(request.validate_only),
            )
        except TopicError as exc:
            result["error_code"] = ErrorCode(exc.error_code)
            result["error_message"] = str(exc)
    ctx.respond({"throttle_time": 0, "results": results})


def handle_delete_topics(ctx: RequestContext, request: Any) -> None:
    controller = ctx.cluster.controller
    wanted: list[tuple[str | None, Any]]
    if hasattr(request, "topic_names"):
        wanted = [(str(name), None) for name in request.topic_names]
    else:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    responses = []
    for name, topic_id in wanted:
        if name is None and topic_id is not None:
            name = next(
                (t.name for t in controller.topics.values() if t.topic_id == topic_id), None
            )
        entry: dict[str, Any] = {"name": name, "topic_id": topic_id, "error_code": ErrorCode.none}
        responses.append(entry)
        if name is None:
            entry["error_code"] = ErrorCode.unknown_topic_id
            continue
        try:
            entry["topic_id"] = controller.topics[name].topic_id
            ctx.cluster.delete_topic(name)
        except (KeyError, TopicError):
            entry["error_code"] = ErrorCode.unknown_topic_or_partition
            entry["error_message"] = f"topic {name!r} does not exist"
    ctx.respond({"throttle_time": 0, "responses": responses})


def _broker_resource(cluster: ClusterRuntime, name: str) -> int | None:
    """The broker a BROKER resource names ("" is the cluster-wide default: answered by the
    controller)."""
    if name == "":
        return cluster.controller.controller_id
    try:
        broker_id = int(name)
    except ValueError:
        return None
    return broker_id if broker_id in cluster.brokers else None


def handle_describe_configs(ctx: RequestContext, request: Any) -> None:
    cluster = ctx.cluster
    include_synonyms = bool(getattr(request, "include_synonyms", False))
    include_docs = bool(getattr(request, "include_documentation", False))
    results = []
    for resource in request.resources:
        result: dict[str, Any] = {
            "error_code": ErrorCode.none,
            "error_message": None,
            "resource_type": resource.resource_type,
            "resource_name": resource.resource_name,
            "configs": [],
        }
        results.append(result)
        entries: list[ResolvedConfig]
        if resource.resource_type == _TOPIC:
            topic = cluster.controller.topics.get(resource.resource_name)
            if topic is None:
                result["error_code"] = ErrorCode.unknown_topic_or_partition
                result["error_message"] = f"topic {resource.resource_name!r} does not exist"
                continue
            entries = cluster.configs.describe_topic(topic.configs, _topic_leader_broker(topic))
        elif resource.resource_type == _BROKER:
            broker_id = _broker_resource(cluster, resource.resource_name)
            if broker_id is None:
                result["error_code"] = ErrorCode.invalid_request
                result["error_message"] = f"no broker {resource.resource_name!r}"
                continue
            entries = cluster.configs.describe_broker(broker_id)
        else:
            result["error_code"] = ErrorCode.invalid_request
            result["error_message"] = f"resource type {resource.resource_type} is not supported"
            continue
        keys = resource.configuration_keys
        if keys is not None:
            wanted = set(keys)
            entries = [e for e in entries if e.name in wanted]
        result["configs"] = [
            {
                "name": e.name,
                "value": e.value,
                "read_only": e.read_only,
                "config_source": int(e.source),
                "is_sensitive": False,
                "synonyms": [{"name": n, "value": v, "source": int(s)} for n, v, s in e.synonyms]
                if include_synonyms
                else [],
                "config_type": int(e.type),
                "documentation": e.doc if include_docs else None,
            }
            for e in entries
        ]
    ctx.respond({"throttle_time": 0, "results": results})


def _alter_topic(
    cluster: ClusterRuntime,
    name: str,
    changes: list[tuple[str, int, str | None]],
    *,
    incremental: bool,
    validate_only: bool,
) -> None:
    """Apply (config, operation, value) changes to a topic; raise TopicError on refusal."""
    topic = cluster.controller.topics.get(name)
    if topic is None:
        raise TopicError(
            f"topic {name!r} does not exist", error_code=ErrorCode.unknown_topic_or_partition
        )
    configs: dict[str, str] = dict(topic.configs) if incremental else {}
    for config, operation, value in changes:
        if config not in TOPIC_CONFIGS:
            raise TopicError(
                f"unknown topic setting {config!r}", error_code=ErrorCode.invalid_config
            )
        if operation == _DELETE:
            configs.pop(config, None)
        elif value is None:
            raise TopicError(f"{config}: a value is required", error_code=ErrorCode.invalid_config)
        elif operation == _SET:
            configs[config] = value
        elif operation in (_APPEND, _SUBTRACT) and config == "cleanup.policy":
            current = (configs.get(config) or "delete").split(",")
            items = value.split(",")
            merged = (
                current + [i for i in items if i not in current]
                if operation == _APPEND
                else [i for i in current if i not in items]
            )
            configs[config] = ",".join(merged)
        else:
            raise TopicError(
                f"{config}: operation {operation} is not valid for a non-list setting",
                error_code=ErrorCode.invalid_config,
            )
    try:
        checked = validate_topic_configs(configs)
    except ConfigError as exc:
        raise TopicError(str(exc), error_code=ErrorCode.invalid_config) from None
    if not validate_only:
        cluster.controller.alter_topic_configs(name, checked)


def _alter_broker(
    cluster: ClusterRuntime,
    name: str,
    changes: list[tuple[str, int, str | None]],
    *,
    validate_only: bool,
) -> None:
    broker_id: int | None
    if name == "":
        broker_id = None
    else:
        broker_id = _broker_resource(cluster, name)
        if broker_id is None:
            raise TopicError(f"no broker {name!r}", error_code=ErrorCode.invalid_request)
    checked = []
    for config, operation, value in changes:
        if operation not in (_SET, _DELETE):
            raise TopicError(
                f"{config}: only SET and DELETE apply to broker settings",
                error_code=ErrorCode.invalid_config,
            )
        try:
            normalized = cluster.configs.check_dynamic_broker_change(
                config, None if operation == _DELETE else value, cluster_wide=broker_id is None
            )
        except ConfigError as exc:
            raise TopicError(str(exc), error_code=ErrorCode.invalid_config) from None
        checked.append((config, normalized))
    if validate_only:
        return
    for config, normalized in checked:
        cluster.configs.set_dynamic_broker(broker_id, config, normalized)
    cluster.controller.refresh_all_configs()


def _alter(ctx: RequestContext, request: Any, *, incremental: bool) -> None:
    cluster = ctx.cluster
    validate_only = bool(request.validate_only)
    responses = []
    for resource in request.resources:
        entry: dict[str, Any] = {
            "error_code": ErrorCode.none,
            "error_message": None,
            "resource_type": resource.resource_type,
            "resource_name": resource.resource_name,
        }
        responses.append(entry)
        changes = [
            (c.name, int(c.config_operation) if incremental else _SET, c.value)
            for c in resource.configs
        ]
        try:
            if resource.resource_type == _TOPIC:
                _alter_topic(
                    cluster,
                    resource.resource_name,
                    changes,
                    incremental=incremental,
                    validate_only=validate_only,
                )
            elif resource.resource_type == _BROKER:
                _alter_broker(cluster, resource.resource_name, changes, validate_only=validate_only)
            else:
                raise TopicError(
                    f"resource type {resource.resource_type} is not supported",
                    error_code=ErrorCode.invalid_request,
                )
        except TopicError as exc:
            entry["error_code"] = ErrorCode(exc.error_code)
            entry["error_message"] = str(exc)
    ctx.respond({"throttle_time": 0, "responses": responses})


def handle_alter_configs(ctx: RequestContext, request: Any) -> None:
    _alter(ctx, request, incremental=False)


def handle_incremental_alter_configs(ctx: RequestContext, request: Any) -> None:
    _alter(ctx, request, incremental=True)
