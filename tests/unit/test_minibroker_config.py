"""Settings under Kafka's names: validated at construction, resolved in Kafka's order."""

from __future__ import annotations

import pytest

import minibroker
from minibroker import Cluster, ConfigError
from minibroker.config import (
    ConfigSource,
    ConfigStore,
    parse_broker_settings,
    validate_topic_configs,
    validate_topic_name,
)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"min.insync.replica": "2"}, "unknown broker setting 'min.insync.replica'"),
        ({"min.insync.replicas": "two"}, "min.insync.replicas='two' is invalid"),
        ({"min.insync.replicas": 0}, "must be between 1"),
        ({"auto.create.topics.enable": "yes"}, "expected true or false"),
        ({"message.max.bytes": 1.5}, "expected a string, int or bool"),
        (
            {"group.min.session.timeout.ms": "10", "group.max.session.timeout.ms": "5"},
            "must not exceed",
        ),
    ],
)
def test_bad_broker_settings_fail_at_construction_naming_the_key(
    config: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        Cluster(brokers=3, config=config)


def test_per_broker_settings_are_limited_to_the_rack() -> None:
    with pytest.raises(ConfigError, match="cannot differ between brokers"):
        Cluster(brokers=2, broker_config={1: {"min.insync.replicas": "2"}})
    with pytest.raises(ConfigError, match="names broker 7"):
        Cluster(brokers=2, broker_config={7: {"broker.rack": "a"}})
    with pytest.raises(ConfigError, match="brokers must be a positive integer"):
        Cluster(brokers=0)
    with pytest.raises(ConfigError, match="one per broker"):
        Cluster(brokers=2, ports=[9092])


def test_caller_dict_is_not_modified_and_python_values_are_normalized() -> None:
    config: dict[str, object] = {"auto.create.topics.enable": False, "min.insync.replicas": 2}
    settings = parse_broker_settings(config, {2: {"broker.rack": "r2"}}, (1, 2))
    assert config == {"auto.create.topics.enable": False, "min.insync.replicas": 2}
    assert settings.text("auto.create.topics.enable") == "false"
    assert settings.get_int("min.insync.replicas") == 2
    assert (settings.rack(1), settings.rack(2)) == (None, "r2")


def test_topic_settings_resolve_in_kafkas_order_and_report_their_source() -> None:
    store = ConfigStore(parse_broker_settings({"min.insync.replicas": "2"}, None, (1, 2)))

    def source(overrides: dict[str, str], broker: int = 1) -> tuple[str | None, ConfigSource]:
        entry = next(
            e for e in store.describe_topic(overrides, broker) if e.name == "min.insync.replicas"
        )
        return entry.value, entry.source

    # Kafka 4.1+ with eligible leader replicas: the controller copies the static value into a
    # cluster-level dynamic default at bootstrap (KIP-966), and refuses to delete it.
    assert source({}) == ("2", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    with pytest.raises(ConfigError, match="cannot be removed while ELR is enabled"):
        store.check_dynamic_broker_change("min.insync.replicas", None, cluster_wide=True)
    assert store.check_dynamic_broker_change("min.insync.replicas", None) is None  # per broker
    store.set_dynamic_broker(None, "min.insync.replicas", "3")
    assert source({}) == ("3", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    store.set_dynamic_broker(2, "min.insync.replicas", "1")
    assert source({}, broker=2) == ("1", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert source({"min.insync.replicas": "4"}) == ("4", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    retention = next(e for e in store.describe_topic({}, 1) if e.name == "retention.ms")
    assert (retention.value, retention.source) == ("604800000", ConfigSource.DEFAULT_CONFIG)
    with pytest.raises(ConfigError, match="read-only"):
        store.check_dynamic_broker_change("num.partitions", "3")


def test_topic_config_and_name_validation() -> None:
    assert validate_topic_configs({"cleanup.policy": "compact,delete"}) == {
        "cleanup.policy": "compact,delete"
    }
    with pytest.raises(ConfigError, match="LogAppendTime is not supported"):
        validate_topic_configs({"message.timestamp.type": "LogAppendTime"})
    assert validate_topic_name("orders.v1_x-y") is None
    for bad in ("", ".", "..", "a" * 250, "a b", "caf\u00e9"):
        assert validate_topic_name(bad) is not None


def test_documented_names_are_exported() -> None:
    for name in minibroker.__all__:
        assert hasattr(minibroker, name)
    assert issubclass(minibroker.ConfigError, minibroker.MinibrokerError)
    assert issubclass(minibroker.TopicError, minibroker.MinibrokerError)


def test_kafka_defaults_profile_takes_kafkas_timings_and_config_still_wins() -> None:
    ids = (1, 2, 3)
    fast = parse_broker_settings(None, None, ids)
    kafka = parse_broker_settings({"broker.session.timeout.ms": "500"}, None, ids, "kafka-defaults")
    assert fast.get_int("replica.lag.time.max.ms") == 1000
    assert kafka.get_int("replica.lag.time.max.ms") == 30000
    assert kafka.get_int("group.initial.rebalance.delay.ms") == 3000
    assert kafka.get_int("group.min.session.timeout.ms") == 6000
    assert kafka.get_bool("auto.leader.rebalance.enable")
    assert kafka.get_int("leader.imbalance.check.interval.seconds") == 300
    assert kafka.get_int("broker.session.timeout.ms") == 500  # given: wins over the profile
    # DescribeConfigs reports a profile value as a default, as Kafka reports its own.
    described = {c.name: c for c in ConfigStore(kafka).describe_broker(1)}
    lag = described["replica.lag.time.max.ms"]
    assert (lag.value, lag.source) == ("30000", ConfigSource.DEFAULT_CONFIG)
    session = described["broker.session.timeout.ms"]
    assert (session.value, session.source) == ("500", ConfigSource.STATIC_BROKER_CONFIG)


def test_unknown_profile_is_refused_at_construction() -> None:
    with pytest.raises(ConfigError, match="unknown profile 'kafka'"):
        Cluster(brokers=1, profile="kafka")
