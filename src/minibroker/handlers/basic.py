"""ApiVersions, Metadata, DescribeTopicPartitions, DescribeCluster and InitProducerId."""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from minibroker.controller import INTERNAL_TOPICS
from minibroker.errors import TopicError
from minibroker.protocol.codec import build, encode_body, frame_with_body

if TYPE_CHECKING:
    from minibroker.replication import Partition
    from minibroker.server import ClusterRuntime, RequestContext

__all__ = [
    "broker_entries",
    "handle_api_versions",
    "handle_describe_cluster",
    "handle_describe_topic_partitions",
    "handle_init_producer_id",
    "handle_metadata",
]

logger = logging.getLogger(__name__)

_API_VERSIONS_WITH_CLIENT_SOFTWARE = 3
_CLIENT_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")

_NO_AUTHORIZED_OPERATIONS = -(2**31)
# Metadata names a topic by id from v12 on; v10 and v11 carry the field but must leave it unset.
_METADATA_TOPIC_IDS_VERSION = 12
# Kafka's max.request.partition.size.limit: the most partitions one DescribeTopicPartitions answers.
_DESCRIBE_PARTITION_LIMIT = 2000
_NO_TOPIC_ID = uuid.UUID(int=0)
_NO_PRODUCER_ID = -1
_NO_PRODUCER_EPOCH = -1


def handle_api_versions(ctx: RequestContext, request: Any) -> None:
    if ctx.api_version >= _API_VERSIONS_WITH_CLIENT_SOFTWARE and not (
        _CLIENT_SOFTWARE.fullmatch(request.client_software_name)
        and _CLIENT_SOFTWARE.fullmatch(request.client_software_version)
    ):
        # Kafka's ApiVersionsRequest.isValid (KIP-511): INVALID_REQUEST and no API list.
        ctx.respond({"error_code": ErrorCode.invalid_request, "api_keys": [], "throttle_time": 0})
        return
    ctx.respond(
        {
            "error_code": 0,
            "api_keys": [
                {"api_key": k, "min_version": lo, "max_version": hi}
                for k, (lo, hi) in sorted(ctx.cluster.available_versions.items())
            ],
            "throttle_time": 0,
        }
    )


def broker_entries(cluster: ClusterRuntime, id_key: str) -> list[dict[str, Any]]:
    """Registered (unfenced) brokers as Metadata/DescribeCluster list them."""
    return [
        {
            id_key: b,
            "host": cluster.brokers[b].host,
            "port": cluster.brokers[b].port,
            "rack": cluster.settings.rack(b),
            "is_fenced": False,
        }
        for b in cluster.controller.registered_brokers()
    ]


def handle_metadata(ctx: RequestContext, request: Any) -> None:
    cluster = ctx.cluster
    version = ctx.api_version
    requested = request.topics
    if (
        requested
        and version < _METADATA_TOPIC_IDS_VERSION
        and any(t.name is None or getattr(t, "topic_id", None) is not None for t in requested)
    ):
        _refuse_topic_ids(ctx, requested)
        return
    # A topic named by an id no topic has stays that id (answered UNKNOWN_TOPIC_ID).
    names: tuple[str | uuid.UUID | None, ...] | None
    if requested is None or (version == 0 and not requested):
        names = None
    else:
        names = tuple(_requested_name(cluster, t) for t in requested)
    allow_auto = bool(getattr(request, "allow_auto_topic_creation", True))
    key = (version, names, allow_auto)
    cls = ctx.response_class
    body = cluster.cached_metadata(key)
    if body is not None:
        ctx.respond_frame(frame_with_body(cls, ctx.correlation_id, body))
        return
    errors = {} if names is None else _create_missing_topics(cluster, names, allow_auto)
    topic_names = list(cluster.controller.topics) if names is None else names
    entity = build(
        cls,
        {
            "throttle_time": 0,
            "brokers": broker_entries(cluster, "node_id"),
            "cluster_id": cluster.cluster_id,
            "controller_id": cluster.controller.controller_id,
            "topics": [_metadata_topic(cluster, name, errors) for name in topic_names],
            "cluster_authorized_operations": _NO_AUTHORIZED_OPERATIONS,
            "error_code": 0,
        },
    )
    body = encode_body(cls, entity)
    if not errors:
        cluster.cache_metadata(key, body)
    ctx.respond_frame(frame_with_body(cls, ctx.correlation_id, body))


def _create_missing_topics(
    cluster: ClusterRuntime, names: Iterable[str | uuid.UUID | None], allow_auto: bool
) -> dict[str, tuple[ErrorCode, str]]:
    """Create the requested topics that do not exist, if auto-creation is on for this request
    and for the cluster; the error (code, message) of every named topic that still does not.

    Internal topic names stay UNKNOWN_TOPIC_OR_PARTITION, as on KRaft while such a topic is not
    there: minibroker never makes one a topic (``controller.INTERNAL_TOPICS``)."""
    controller = cluster.controller
    auto_create = allow_auto and cluster.settings.get_bool("auto.create.topics.enable")
    errors: dict[str, tuple[ErrorCode, str]] = {}
    for name in names:
        if not isinstance(name, str) or name in controller.topics:
            continue
        if not auto_create or name in INTERNAL_TOPICS:
            errors[name] = (ErrorCode.unknown_topic_or_partition, "unknown topic")
            continue
        try:
            controller.create_topic(name, -1, -1, None, cluster.now())
        except TopicError as exc:
            errors[name] = (ErrorCode(exc.error_code), str(exc))
    return errors


def _metadata_topic(
    cluster: ClusterRuntime,
    name: str | uuid.UUID | None,
    errors: Mapping[str, tuple[ErrorCode, str]],
) -> dict[str, Any]:
    """One topic of a Metadata response: ``name`` is a topic's name, or an id no topic has."""
    if not isinstance(name, str):
        return {
            "error_code": ErrorCode.unknown_topic_id,
            "name": None,
            "topic_id": name,
            "partitions": [],
        }
    topic = cluster.controller.topics.get(name)
    if topic is None:
        error = errors.get(name, (ErrorCode.unknown_topic_or_partition, ""))[0]
        return {
            "error_code": error,
            "name": name,
            "topic_id": None,
            "is_internal": name in INTERNAL_TOPICS,
            "partitions": [],
        }
    return {
        "error_code": 0,
        "name": name,
        "topic_id": topic.topic_id,
        "is_internal": False,
        "partitions": [
            {
                **_partition_entry(cluster, p),
                "error_code": 0 if p.leader >= 0 else ErrorCode.leader_not_available,
            }
            for p in topic.partitions
        ],
        "topic_authorized_operations": _NO_AUTHORIZED_OPERATIONS,
    }


def _partition_entry(cluster: ClusterRuntime, p: Partition) -> dict[str, Any]:
    """A partition's leader, epoch and replicas, as Metadata and DescribeTopicPartitions
    report them (without the error code, on which they differ)."""
    return {
        "partition_index": p.index,
        "leader_id": p.leader,
        "leader_epoch": p.leader_epoch,
        "replica_nodes": p.replicas,
        "isr_nodes": p.isr,
        "offline_replicas": [r for r in p.replicas if cluster.controller.is_fenced(r)],
    }


def handle_describe_topic_partitions(ctx: RequestContext, request: Any) -> None:
    """Metadata's view of each partition plus its eligible leader replicas (KIP-966), as
    Kafka's ``KRaftMetadataCache.describeTopicResponse`` answers: topics in name order from the
    cursor on, at most ``response_partition_limit`` partitions (then a next cursor), and no
    partition error even when a partition has no leader."""
    controller = ctx.cluster.controller
    cursor = request.cursor
    names = sorted({t.name for t in request.topics} if request.topics else set(controller.topics))
    if cursor is not None:
        names = [n for n in names if n >= cursor.topic_name]
    budget = min(int(request.response_partition_limit), _DESCRIBE_PARTITION_LIMIT)
    topics: list[dict[str, Any]] = []
    next_cursor = None
    for name in names:
        topic = controller.topics.get(name)
        if topic is None:
            topics.append(
                {
                    "error_code": ErrorCode.unknown_topic_or_partition,
                    "name": name,
                    "topic_id": _NO_TOPIC_ID,
                    "partitions": [],
                }
            )
            continue
        first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        chosen = topic.partitions[first : first + max(budget, 0)]
        budget -= len(chosen)
        if chosen:
            topics.append(
                {
                    "error_code": 0,
                    "name": name,
                    "topic_id": topic.topic_id,
                    "partitions": [_described_partition(ctx.cluster, p) for p in chosen],
                }
            )
        if first + len(chosen) < len(topic.partitions):
            next_cursor = {"topic_name": name, "partition_index": first + len(chosen)}
            break
    ctx.respond({"throttle_time": 0, "topics": topics, "next_cursor": next_cursor})


def _described_partition(cluster: ClusterRuntime, p: Partition) -> dict[str, Any]:
    return {
        **_partition_entry(cluster, p),
        "error_code": 0,
        "eligible_leader_replicas": p.elr,
        "last_known_elr": p.last_known_elr,
    }


def _requested_name(cluster: ClusterRuntime, topic: Any) -> str | uuid.UUID | None:
    """The topic's name, resolved from its id when named by id; else the unknown id."""
    name = getattr(topic, "name", None)
    if name is not None:
        return str(name)
    topic_id: uuid.UUID | None = getattr(topic, "topic_id", None)
    for candidate in cluster.controller.topics.values():
        if candidate.topic_id == topic_id:
            return candidate.name
    return topic_id


def _refuse_topic_ids(ctx: RequestContext, requested: Any) -> None:
    # As Kafka (KafkaApis.handleTopicMetadataRequest): v10 and v11 must name every topic and
    # leave its id unset; otherwise each topic is answered INVALID_REQUEST, a null name as "".
    logger.info(
        "Broker %d: Metadata v%d names a topic by id, which needs v%d",
        ctx.broker_id,
        ctx.api_version,
        _METADATA_TOPIC_IDS_VERSION,
    )
    ctx.respond(
        {
            "throttle_time": 0,
            "brokers": [],
            "cluster_id": None,
            "controller_id": -1,
            "topics": [
                {
                    "error_code": ErrorCode.invalid_request,
                    "name": t.name if t.name is not None else "",
                    "topic_id": t.topic_id,
                    "is_internal": False,
                    "partitions": [],
                    "topic_authorized_operations": _NO_AUTHORIZED_OPERATIONS,
                }
                for t in requested
            ],
            "cluster_authorized_operations": _NO_AUTHORIZED_OPERATIONS,
        }
    )


def handle_describe_cluster(ctx: RequestContext, request: Any) -> None:
    cluster = ctx.cluster
    ctx.respond(
        {
            "throttle_time": 0,
            "error_code": 0,
            "endpoint_type": 1,
            "cluster_id": cluster.cluster_id,
            "controller_id": cluster.controller.controller_id,
            "brokers": broker_entries(cluster, "broker_id"),
            "cluster_authorized_operations": _NO_AUTHORIZED_OPERATIONS,
        }
    )


def handle_init_producer_id(ctx: RequestContext, request: Any) -> None:
    def respond(
        error: int, producer_id: int = _NO_PRODUCER_ID, epoch: int = _NO_PRODUCER_EPOCH
    ) -> None:
        ctx.respond(
            {
                "throttle_time": 0,
                "error_code": error,
                "producer_id": producer_id,
                "producer_epoch": epoch,
            }
        )

    if request.transactional_id is not None:
        logger.warning(
            "InitProducerId for transactional id %r refused: transactions are not supported",
            request.transactional_id,
        )
        respond(ErrorCode.transactional_id_authorization_failed)
        return
    # Kafka's KafkaApis.handleInitProducerIdRequest: a producer id without an epoch (or the
    # reverse) is INVALID_REQUEST; otherwise, with no transactional id,
    # TransactionCoordinator.handleInitProducerId hands out a new producer id at epoch 0 whatever
    # id and epoch were given (KIP-360's epoch bump happens only for a transactional id; an
    # idempotent client that asks gets a fresh id).
    given_id = int(getattr(request, "producer_id", _NO_PRODUCER_ID))
    given_epoch = int(getattr(request, "producer_epoch", _NO_PRODUCER_EPOCH))
    if (given_id == _NO_PRODUCER_ID) != (given_epoch == _NO_PRODUCER_EPOCH):
        respond(ErrorCode.invalid_request)
        return
    respond(0, ctx.cluster.allocate_producer_id(), 0)
