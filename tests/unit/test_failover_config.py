"""The inner client's settings and the producer's options: defaults, warnings, bad values."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import pytest

from failover_partitioner import (
    AsyncFailoverProducer,
    ConfigError,
    FailoverConfigWarning,
    FailoverProducer,
)
from failover_partitioner._config import CLIENT_DEFAULTS, client_settings, companion_conf
from failover_partitioner._options import produce_timeout
from failover_partitioner.aio._settings import aio_client_settings

BASE = {"bootstrap.servers": "127.0.0.1:1", "acks": "all"}
BAD_KEYS: dict[Any, str] = {**BASE, 1: "x"}


def test_defaults_apply_when_the_user_set_nothing() -> None:
    s = client_settings(BASE)
    for key, value in CLIENT_DEFAULTS.items():
        assert s.client_conf[key] == value
    assert s.client_conf["acks"] == "all"
    assert s.warnings == ()


def test_user_settings_and_their_aliases_win() -> None:
    conf = {**BASE, "message.send.max.retries": 2, "delivery.timeout.ms": 20000}
    s = client_settings(conf)
    assert "retries" not in s.client_conf
    assert s.client_conf["message.send.max.retries"] == 2
    assert "message.timeout.ms" not in s.client_conf
    assert s.client_conf["delivery.timeout.ms"] == 20000
    assert s.warnings == ()


def test_the_callers_dict_is_never_changed() -> None:
    def cb(err: Any, msg: Any) -> None:
        pass

    conf = {**BASE, "on_delivery": cb}
    before = dict(conf)
    s = client_settings(conf)
    assert conf == before
    assert "on_delivery" not in s.client_conf
    assert s.default_on_delivery is cb


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        ({"message.timeout.ms": 300000}, "message.timeout.ms=300000 lets a failed"),
        ({"delivery.timeout.ms": 0}, "no limit"),
        ({"request.timeout.ms": 60000}, "request.timeout.ms=60000"),
        ({"socket.timeout.ms": 60000}, "socket.timeout.ms=60000 lets a hung broker"),
        ({"retries": 5, "message.timeout.ms": 120000}, "retries=5: librdkafka retries"),
    ],
)
def test_settings_that_delay_rerouting_past_30_s_warn(extra: dict[str, Any], fragment: str) -> None:
    s = client_settings({**BASE, **extra})
    assert any(fragment in w for w in s.warnings), s.warnings


@pytest.mark.parametrize(
    ("extra", "warned"),
    [
        ({"max.in.flight": 5}, "max.in.flight=5: a broker holding an acks=all write"),
        ({"max.in.flight.requests.per.connection": "2"}, "max.in.flight.requests.per"),
        ({"max.in.flight": 1}, None),
    ],
)
def test_more_than_one_request_in_flight_per_broker_warns(
    extra: dict[str, Any], warned: str | None
) -> None:
    warnings = client_settings({**BASE, **extra}).warnings
    if warned is None:
        assert warnings == ()
    else:
        (warning,) = warnings
        assert warning.startswith(warned), warning


def test_the_producer_turns_those_into_python_warnings() -> None:
    # The bad max_in_flight stops construction before any client exists.
    with (
        pytest.raises(ConfigError),
        pytest.warns(FailoverConfigWarning, match="request.timeout.ms=60000"),
    ):
        FailoverProducer({**BASE, "request.timeout.ms": 60000}, max_in_flight=0)


def test_report_only_errors_is_read_from_strings_too() -> None:
    assert client_settings({**BASE, "delivery.report.only.error": "true"}).report_only_errors
    assert not client_settings(BASE).report_only_errors


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ([("bootstrap.servers", "x")], "conf must be a dict of confluent-kafka settings, got list"),
        ({"acks": "all"}, "conf has no 'bootstrap.servers'"),
        (BAD_KEYS, "conf keys must be strings"),
        ({**BASE, "on_delivery": 5}, r"conf\['on_delivery'\] must be callable\(err, msg\), got 5"),
        ({**BASE, "transactional.id": "t"}, "conf sets 'transactional.id'"),
        ({**BASE, "enable.idempotence": True}, "conf sets 'enable.idempotence': True, which is"),
        ({**BASE, "enable.idempotence": "true"}, "message_id_header="),
        ({**BASE, "message.timeout.ms": "soon"}, "message.timeout.ms='soon' is not a number"),
    ],
)
def test_bad_client_config_is_refused_with_the_value(conf: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        client_settings(conf)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_in_flight": 0}, "max_in_flight must be an int >= 1, got 0"),
        ({"max_in_flight": True}, "max_in_flight must be an int >= 1, got True"),
        ({"produce_timeout_s": -1}, "produce_timeout_s must be a finite number of seconds >= 0"),
        ({"produce_timeout_s": "5"}, "produce_timeout_s must be a number of seconds, got '5'"),
        ({"delivery_timeout_s": 0}, "delivery_timeout_s must be a finite number of seconds > 0"),
        ({"max_attempts": 0}, "max_attempts must be None or an int >= 1, got 0"),
        ({"retry_backoff_s": 0}, "retry_backoff_s must be a finite number of seconds > 0"),
        (
            {"retry_backoff_s": 2.0, "retry_backoff_max_s": 1.0},
            r"retry_backoff_max_s \(1.0\) must be >= retry_backoff_s \(2.0\)",
        ),
        ({"quarantine_backoff_s": 0}, "quarantine_backoff_s must be a finite number of seconds"),
        (
            {"quarantine_backoff_s": 5.0, "quarantine_max_s": 1.0},
            r"^quarantine_max_s \(1.0\) must be >= quarantine_backoff_s \(5.0\): raise",
        ),
        ({"message_id_header": ""}, "message_id_header must be a non-empty header name or None"),
        ({"dead_letter": "log"}, "dead_letter must be callable"),
        ({"metrics_port": "9100"}, "metrics_port must be an int or None, got '9100'"),
        ({"strategy": "random"}, "strategy='random' is not supported"),
        ({"key_policy": "never"}, "key_policy='never' is not supported"),
        ({"min_insync_replicas": 0}, "min_insync_replicas must be an int >= 1, got 0"),
        ({"min_insync_replicas": {"t": "2"}}, r"min_insync_replicas\['t'\] must be an int >= 1"),
        ({"metadata_refresh_s": 0}, "metadata_refresh_s must be a finite number of seconds > 0"),
    ],
)
def test_bad_options_are_refused_with_the_value(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        FailoverProducer(BASE, **kwargs)


def test_the_java_key_placement_is_the_default_partitioner_and_the_users_wins() -> None:
    assert client_settings(BASE).client_conf["partitioner"] == "murmur2_random"
    mine = client_settings({**BASE, "partitioner": "consistent"})
    assert mine.client_conf["partitioner"] == "consistent"
    assert mine.warnings == ()


SECURED = {
    "bootstrap.servers": "b1:9093,b2:9093",
    "security.protocol": "SASL_SSL",
    "sasl.mechanisms": "SCRAM-SHA-512",
    "sasl.username": "alice",
    "sasl.password": "s3cret",
    "ssl.ca.location": "/etc/kafka/ca.pem",
    "ssl.endpoint.identification.algorithm": "https",
    "client.dns.lookup": "use_all_dns_ips",
    "socket.keepalive.enable": True,
    "client.id": "orders",
}


def test_every_client_beside_the_producer_keeps_how_to_reach_and_log_in() -> None:
    """The admin client, the client for records sent alone and the mirror's lane are all
    made by companion_conf: every connection and security setting reaches them unchanged."""
    from failover_partitioner.metadata.confluent import admin_config
    from failover_partitioner.mirror._lane import lane_config

    logins: list[object] = []

    def login(config: object) -> None:
        logins.append(config)

    callbacks = {"on_delivery": print, "error_cb": print, "stats_cb": print, "oauth_cb": login}
    conf: dict[str, Any] = {**SECURED, **callbacks, "acks": "all"}
    admin = admin_config(conf)
    assert admin is not None
    derived = {
        "admin": admin,
        "lane": lane_config(conf),
        "solo": companion_conf(conf, "solo", settings={"linger.ms": 0}),
    }
    for role, got in derived.items():
        for key, value in SECURED.items():
            if key != "client.id":
                assert got[key] == value, (role, key)
        assert got["client.id"] == f"orders-{role}"
        got["oauth_cb"](role)  # logging in needs it (wrapped: see _config.surfacing)
        assert logins[-1] == role
        for callback in ("on_delivery", "error_cb", "stats_cb"):
            assert callback not in got, (role, callback)  # the producer's own, called once
    assert derived["solo"]["linger.ms"] == 0
    assert conf["client.id"] == "orders"  # the user's dict is left as given


@pytest.mark.parametrize("off", [False, "false", "0"])
def test_idempotence_turned_off_is_accepted_and_handed_on(off: Any) -> None:
    # Only enabling it is refused (test_bad_client_config_is_refused_with_the_value), as the
    # asyncio shell refuses enable_idempotence=True (tests/unit/test_aio_adapters.py).
    s = client_settings({**BASE, "enable.idempotence": off})
    assert s.client_conf["enable.idempotence"] == off


@pytest.mark.parametrize(
    ("conf", "holds_s", "wait_s"),
    [
        ({}, 10.0, 15.0),  # message.timeout.ms 10 s here
        ({"message.timeout.ms": 30_000}, 30.0, 35.0),
        ({"delivery.timeout.ms": "4000"}, 4.0, 9.0),  # the alias, as a properties file gives it
        ({"message.timeout.ms": 0}, None, 15.0),  # no limit: the fallback
    ],
)
def test_produce_timeout_follows_how_long_the_client_holds_a_message(
    conf: dict[str, Any], holds_s: float | None, wait_s: float
) -> None:
    settings = client_settings({**BASE, **conf})
    assert settings.holds_message_s == holds_s
    assert produce_timeout(None, settings.holds_message_s) == wait_s
    assert produce_timeout(2.5, settings.holds_message_s) == 2.5  # given: as given
    with pytest.warns() if conf.get("message.timeout.ms") == 0 else nullcontext():
        p = FailoverProducer({**BASE, **conf})
    try:
        assert p._produce_timeout_s == wait_s
    finally:
        p.close()


@pytest.mark.parametrize(("request_ms", "wait_s"), [(None, 17.0), (1_000, 9.0), (20_000, 47.0)])
def test_the_asyncio_producer_waits_past_two_request_timeouts(
    request_ms: int | None, wait_s: float
) -> None:
    kwargs: dict[str, Any] = {"bootstrap_servers": "127.0.0.1:1"}
    if request_ms is not None:
        kwargs["request_timeout_ms"] = request_ms
    settings = aio_client_settings(kwargs)
    assert produce_timeout(None, settings.holds_message_s) == wait_s
    assert AsyncFailoverProducer(**kwargs)._produce_timeout_s == wait_s
