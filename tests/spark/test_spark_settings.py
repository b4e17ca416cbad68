"""The driver-side settings check refuses exactly what FailoverProducer itself would refuse.

The driver must not build a producer (it would connect and start threads), so the Spark
writer checks the settings with the producer's own validators. These tests pin the two
together: a new producer option, or a value one of them refuses and the other accepts, fails
here.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import pytest

from failover_partitioner import FailoverProducer
from failover_partitioner._options import OPTION_DEFAULTS, OPTION_NAMES
from failover_partitioner.errors import ConfigError
from failover_partitioner.spark import factory, spec

CONF = {"bootstrap.servers": "127.0.0.1:1"}

BAD_OPTIONS: list[dict[str, Any]] = [
    {"strategy": "random"},
    {"key_policy": "sometimes"},
    {"headroom": "yes"},
    {"sticky_messages": 0},
    {"sticky_bytes": -1},
    {"max_in_flight": 0},
    {"max_in_flight": 1.5},
    {"produce_timeout_s": -1},
    {"delivery_timeout_s": 0},
    {"max_attempts": 0},
    {"retry_backoff_s": 0},
    {"retry_backoff_s": 2.0, "retry_backoff_max_s": 1.0},
    {"metadata_refresh_s": 0},
    {"metadata_fast_refresh_s": float("nan")},
    {"min_isr_refresh_s": -5},
    {"metadata_timeout_s": 0},
    {"quarantine_backoff_s": 0},
    {"quarantine_backoff_s": 5.0, "quarantine_max_s": 1.0},
    {"min_insync_replicas": 0},
    {"min_insync_replicas": {"orders": 0}},
    {"message_id_header": ""},
    {"dead_letter": "not callable"},
]

BAD_CONFIGS: list[dict[str, Any]] = [
    {},
    {"bootstrap.servers": "127.0.0.1:1", "transactional.id": "t"},
    {"bootstrap.servers": "127.0.0.1:1", "message.timeout.ms": "soon"},
]


@pytest.mark.parametrize("options", BAD_OPTIONS, ids=lambda o: ",".join(o))
def test_a_bad_option_is_refused_on_the_driver_as_by_the_producer(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigError) as producer_error:
        FailoverProducer(CONF, **options)
    with pytest.raises(ConfigError) as driver_error:
        factory.validate(CONF, options)
    assert str(driver_error.value) == str(producer_error.value)


@pytest.mark.parametrize("conf", BAD_CONFIGS, ids=str)
def test_a_bad_client_config_is_refused_on_the_driver_as_by_the_producer(
    conf: dict[str, Any],
) -> None:
    with pytest.raises(ConfigError) as producer_error:
        FailoverProducer(conf)
    with pytest.raises(ConfigError) as driver_error:
        factory.validate(conf, {})
    assert str(driver_error.value) == str(producer_error.value)


def test_librdkafka_rejections_are_config_errors_on_the_driver() -> None:
    with pytest.raises(ConfigError, match="No such configuration property"):
        factory.validate({"bootstrap.servers": "127.0.0.1:1", "no.such.property": 1}, {})
    with pytest.raises(ConfigError, match="Invalid value"):
        factory.validate({"bootstrap.servers": "127.0.0.1:1", "acks": "sometimes"}, {})


def test_every_producer_option_is_taken_by_the_driver_check_or_refused_with_why() -> None:
    """The driver knows the producer's options from their one declaration: each is checked
    there (taken at its default), or refused as unsupported with the reason."""
    assert set(factory.UNSUPPORTED_OPTIONS) <= OPTION_NAMES
    for name in OPTION_NAMES - set(factory.UNSUPPORTED_OPTIONS):
        factory.validate(CONF, {name: dict(OPTION_DEFAULTS)[name]})
    for name, why in factory.UNSUPPORTED_OPTIONS.items():
        said = f"{name!r} is not supported by the Spark writer: {why}"
        with pytest.raises(ConfigError, match=re.escape(said)):
            factory.validate(CONF, {name: dict(OPTION_DEFAULTS)[name]})


def test_an_unknown_option_is_refused_on_the_driver_naming_the_known_ones() -> None:
    with pytest.raises(ConfigError) as info:
        factory.validate(CONF, {"strtegy": "sticky"})
    text = str(info.value)
    assert "'strtegy' (did you mean 'strategy'?)" in text
    assert all(name in text for name in OPTION_NAMES)


def test_good_settings_pass_without_a_client() -> None:
    factory.validate(
        CONF | {"acks": "all", "linger.ms": 5},
        {"strategy": "sticky", "max_in_flight": 1000, "min_insync_replicas": 2},
    )


def test_the_cache_key_names_a_configuration_without_a_plain_hash_of_its_password() -> None:
    """Workers log the key: a plain SHA-256 of the settings let anyone who read the logs and
    knew the other settings test password guesses offline."""
    secured = {**CONF, "sasl.username": "u", "sasl.password": "summer2024"}
    key = spec.check_settings(secured, {}).cache_key
    assert spec.check_settings(dict(secured), {}).cache_key == key  # one name, one config
    other = {**secured, "sasl.password": "winter2024"}
    assert spec.check_settings(other, {}).cache_key != key
    plain = hashlib.sha256(spec._shippable(dict(secured), {})).hexdigest()[:24]
    assert key != plain
