"""The target-topic plan (``mirror._topics.plan_topic``): what a sync would do, no cluster;
and how ``TopicSync`` reads the clusters' ids, against fake admin clients."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from failover_partitioner.mirror import MirrorConfigError, MirrorOptions
from failover_partitioner.mirror._topics import (
    EXCLUDED_CONFIGS,
    TopicShape,
    TopicSync,
    admin_config,
    exclusion_pattern,
    plan_topic,
)
from failover_partitioner.mirror.cli import _options, _parser

pytestmark = pytest.mark.unit

SOURCE = TopicShape(
    partitions=6,
    configs={
        "retention.ms": "3600000",
        "cleanup.policy": "compact",
        "min.insync.replicas": "3",
        "message.timestamp.type": "LogAppendTime",
        "unclean.leader.election.enable": "true",
        "leader.replication.throttled.replicas": "*",
        "follower.replication.throttled.replicas": "*",
        "message.timestamp.difference.max.ms": "1000",
    },
)


def test_a_missing_target_is_created_with_the_partitions_and_the_copyable_configs() -> None:
    plan = plan_topic("orders", "copy.orders", SOURCE, None, manage=True, configs=False)
    assert plan.create
    assert plan.partitions == 6
    assert dict(plan.set_configs) == {"retention.ms": "3600000", "cleanup.policy": "compact"}


def test_mirrormaker_2_default_exclusions_are_the_six_names() -> None:
    pattern = exclusion_pattern(EXCLUDED_CONFIGS)
    assert {k for k in SOURCE.configs if pattern.fullmatch(k)} == set(EXCLUDED_CONFIGS)
    assert not pattern.fullmatch("retention.ms")
    assert not pattern.fullmatch("min.insync.replicas.extra")  # whole names only


def test_extra_configs_win_and_user_exclusions_add_to_the_defaults() -> None:
    plan = plan_topic(
        "orders",
        "orders",
        SOURCE,
        None,
        manage=True,
        configs=False,
        extra_configs={"retention.ms": "60000", "min.insync.replicas": "2"},
        excluded=exclusion_pattern((*EXCLUDED_CONFIGS, "cleanup\\..*")),
    )
    assert dict(plan.set_configs) == {"retention.ms": "60000", "min.insync.replicas": "2"}


def test_a_grown_source_grows_the_target_and_never_shrinks_it() -> None:
    grown = plan_topic("t", "t", SOURCE, TopicShape(partitions=4), manage=True, configs=False)
    assert grown.grow_to == 6
    larger = plan_topic("t", "t", SOURCE, TopicShape(partitions=9), manage=True, configs=False)
    assert larger.empty


def test_an_unmanaged_target_is_left_alone() -> None:
    assert plan_topic("t", "t", SOURCE, TopicShape(partitions=4), manage=False, configs=True).empty
    assert plan_topic("t", "t", SOURCE, None, manage=False, configs=True).empty


def test_config_sync_sets_what_differs_and_returns_the_rest_to_the_targets_default() -> None:
    target = TopicShape(
        partitions=6,
        configs={
            "retention.ms": "1000",  # differs: set
            "cleanup.policy": "compact",  # same: left alone
            "segment.bytes": "1048576",  # not set on the source: back to the target's default
            "min.insync.replicas": "2",  # excluded: the target's business
        },
    )
    plan = plan_topic("t", "t", SOURCE, target, manage=True, configs=True)
    assert plan.set_configs == (("retention.ms", "3600000"),)
    assert plan.delete_configs == ("segment.bytes",)
    # Not a config round: partitions only.
    assert plan_topic("t", "t", SOURCE, target, manage=True, configs=False).empty


def test_admin_clients_take_connection_and_security_settings_only() -> None:
    conf = {
        "bootstrap.servers": "b:9092",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "ssl.ca.location": "/ca.pem",
        "group.id": "mirror",
        "enable.auto.commit": "false",
        "linger.ms": "5",
    }
    assert admin_config(conf) == {
        "bootstrap.servers": "b:9092",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "ssl.ca.location": "/ca.pem",
    }


def test_cli_flags_reach_the_options() -> None:
    args = _parser().parse_args(
        [
            "--source=s:1",
            "--target=t:1",
            "--group=g",
            "--partitioning=preserve",
            "--no-sync-topics",
            "--topic-replication-factor=3",
            "--topic-config",
            "retention.ms=60000",
            "--topic-config=compression.type=zstd",
            "--config-exclude=segment\\..*",
            "--config-sync-interval=5",
        ]
    )
    opts = _options(args)
    assert opts.partitioning == "preserve"
    assert not opts.sync_topics
    assert opts.topic_replication_factor == 3
    assert dict(opts.topic_configs) == {"retention.ms": "60000", "compression.type": "zstd"}
    assert opts.config_exclude == ("segment\\..*",)
    assert opts.config_sync_interval_s == 5


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("partitioning", "sticky", "--partitioning must be one of auto, preserve, key"),
        ("topic_replication_factor", 0, "--topic-replication-factor must be a positive"),
        ("config_exclude", ("(",), "--config-exclude '(' is not a valid regular expression"),
        ("config_sync_interval_s", 0, "--config-sync-interval must be a positive number"),
    ],
)
def test_bad_topic_options_are_refused_naming_the_value(
    field: str, value: object, says: str
) -> None:
    given: dict[str, Any] = {field: value}
    with pytest.raises(MirrorConfigError, match=says.replace("(", r"\(")):
        MirrorOptions(source_bootstrap="s:1", target_bootstrap="t:1", group_id="g", **given)


def test_a_topic_config_without_a_value_is_refused() -> None:
    with pytest.raises(MirrorConfigError, match="give NAME=VALUE"):
        _options(
            _parser().parse_args(
                ["--source=s", "--target=t", "--group=g", "--topic-config=retention.ms"]
            )
        )


@dataclass
class _Described:
    cluster_id: str | None


@dataclass
class _ClusterMetadata:
    cluster_id: str | None


class FakeAdmin:
    """An admin client's describe_cluster and list_topics for one cluster; ``refusal``: the
    error describe_cluster's answer carries instead (as a KafkaException)."""

    def __init__(self, cluster_id: str | None, refusal: KafkaError | None = None) -> None:
        self.cluster_id = cluster_id
        self.refusal = refusal
        self.listed = 0
        self.described = 0

    def describe_cluster(self, request_timeout: float = -1) -> Future[_Described]:
        self.described += 1
        answer: Future[_Described] = Future()
        if self.refusal is not None:
            answer.set_exception(KafkaException(self.refusal))
        else:
            answer.set_result(_Described(self.cluster_id))
        return answer

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> _ClusterMetadata:
        self.listed += 1
        return _ClusterMetadata(self.cluster_id)


def test_cluster_ids_are_described_without_listing_every_topic() -> None:
    source, target = FakeAdmin("src-id"), FakeAdmin("dst-id")
    sync = TopicSync(source, target, manage=True)
    assert sync.cluster_ids() == ("src-id", "dst-id")
    assert (source.described, target.described) == (1, 1)
    assert (source.listed, target.listed) == (0, 0)


def test_a_cluster_that_cannot_be_described_is_told_by_its_metadata() -> None:
    # An older broker refuses DescribeCluster (Kafka 2.8, KIP-700): its metadata has the id.
    unsupported = KafkaError(KafkaError._UNSUPPORTED_FEATURE, "DescribeCluster not supported")
    source, target = FakeAdmin("src-id"), FakeAdmin("dst-id", refusal=unsupported)
    assert TopicSync(source, target, manage=True).cluster_ids() == ("src-id", "dst-id")
    assert (source.listed, target.listed) == (0, 1)


def test_a_cluster_that_cannot_be_read_raises_as_before() -> None:
    # Not a refusal to describe: the caller warns and tells the clusters by bootstrap.
    timed_out = KafkaError(KafkaError._TIMED_OUT, "Local: Timed out")
    source, target = FakeAdmin("src-id", refusal=timed_out), FakeAdmin("dst-id")
    with pytest.raises(KafkaException):
        TopicSync(source, target, manage=True).cluster_ids()
    assert (source.listed, target.listed) == (0, 0)
