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

    assert source({}) == ("2", ConfigSource.STATIC_BROKER_CONFIG)
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
