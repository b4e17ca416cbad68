"""The failover options, declared once (``_options``): their defaults, the one function both
producers check them through, and what it builds."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from failover_partitioner import (
    AsyncFailoverProducer,
    ChoiceOptions,
    ConfigError,
    FailoverProducer,
)
from failover_partitioner._options import (
    OPTION_DEFAULTS,
    OPTION_NAMES,
    ProducerOptions,
    producer_options,
)
from failover_partitioner.quarantine import QuarantinePolicy
from retry_buffer import RetryPolicy

BASE = {"bootstrap.servers": "127.0.0.1:1"}
BS = "127.0.0.1:1"

# Untyped handle: the calls below are wrong on purpose, and must reach the code to be refused.
FP: Any = FailoverProducer

# A value refused of every option (each is checked).
BAD: dict[str, Any] = {
    "min_insync_replicas": 0,
    "strategy": "random",
    "key_policy": "never",
    "headroom": "yes",
    "client_rack": "",
    "sticky_messages": 0,
    "sticky_bytes": -1,
    "max_in_flight": True,
    "produce_timeout_s": -1,
    "delivery_timeout_s": 0,
    "max_attempts": 0,
    "retry_backoff_s": 0,
    "retry_backoff_max_s": float("nan"),
    "metadata_refresh_s": 0,
    "metadata_fast_refresh_s": float("inf"),
    "min_isr_refresh_s": "300",
    "metadata_timeout_s": -5,
    "topic_propagation_max_s": -1,
    "quarantine_backoff_s": 0,
    "quarantine_max_s": None,
    "message_id_header": "",
    "dead_letter": "log",
    "metrics_port": 65536,
    "metrics_registry": "x",
    "metrics_addr": 123,
}


def test_every_declared_option_has_a_default_and_nothing_else_has_one() -> None:
    assert set(OPTION_DEFAULTS) == OPTION_NAMES
    assert set(BAD) == OPTION_NAMES


def test_the_defaults_give_the_documented_options() -> None:
    defaults = producer_options(dead_letter_args="message, err")
    assert defaults == producer_options(dead_letter_args="message, exc", **OPTION_DEFAULTS)
    assert defaults == ProducerOptions(
        choice=ChoiceOptions(),
        max_in_flight=50_000,
        produce_timeout_s=None,
        retry_policy=RetryPolicy(backoff_initial_s=0.01, backoff_max_s=1.0),
        metadata_timeout_s=5.0,
        topic_propagation_max_s=30.0,
        refresh_s=30.0,
        fast_refresh_s=0.5,
        min_isr_refresh_s=300.0,
        min_insync_replicas=None,
        quarantine=QuarantinePolicy(initial_s=0.5, max_s=30.0),
        message_id_header=None,
        dead_letter=None,
        metrics_port=None,
        metrics_registry=None,
        metrics_addr="0.0.0.0",
    )


def test_given_values_reach_the_retry_policy_and_the_refresher_settings_as_floats() -> None:
    args = {
        "max_in_flight": 7,
        "delivery_timeout_s": 60,
        "max_attempts": 3,
        "retry_backoff_s": 1,
        "retry_backoff_max_s": 4,
        "metadata_refresh_s": 10,
        "metadata_fast_refresh_s": 2,
        "min_isr_refresh_s": 100,
        "metadata_timeout_s": 3,
        "min_insync_replicas": {"orders": 2},
    }
    opts = producer_options(dead_letter_args="message, err", **args)
    assert opts.max_in_flight == 7
    assert opts.retry_policy == RetryPolicy(
        max_attempts=3, deadline_s=60.0, backoff_initial_s=1.0, backoff_max_s=4.0
    )
    assert (opts.refresh_s, opts.fast_refresh_s, opts.min_isr_refresh_s) == (10.0, 2.0, 100.0)
    assert all(
        type(v) is float
        for v in (opts.retry_policy.backoff_initial_s, opts.refresh_s, opts.metadata_timeout_s)
    )
    assert opts.min_insync_replicas == {"orders": 2}


def test_the_producers_own_options_come_out_as_given() -> None:
    def hook(message: object, err: object) -> None: ...

    registry = CollectorRegistry()
    opts = producer_options(
        dead_letter_args="message, err",
        client_rack="eu-1a",
        message_id_header="msg-id",
        dead_letter=hook,
        metrics_registry=registry,
        metrics_port=0,
        metrics_addr="127.0.0.1",
    )
    assert opts.choice.client_rack == "eu-1a"
    assert (opts.message_id_header, opts.dead_letter) == ("msg-id", hook)
    assert opts.metrics_registry is registry
    assert (opts.metrics_port, opts.metrics_addr) == (0, "127.0.0.1")


@pytest.mark.parametrize("hook_args", ["message, err", "message, exc"])
def test_a_bad_dead_letter_hook_is_refused_naming_the_producers_arguments(hook_args: str) -> None:
    with pytest.raises(ConfigError, match=rf"dead_letter must be callable\({hook_args}\), got 42"):
        producer_options(dead_letter_args=hook_args, dead_letter=42)


@pytest.mark.parametrize("name", sorted(BAD))
def test_both_producers_refuse_a_bad_value_of_every_option_alike(name: str) -> None:
    """Each option reaches the one check from both shells: none is dropped, and none of the
    asyncio producer's goes to aiokafka (which would refuse it as unknown)."""
    with pytest.raises(ConfigError) as sync:
        FP(BASE, **{name: BAD[name]})
    with pytest.raises(ConfigError) as aio:
        AsyncFailoverProducer(bootstrap_servers=BS, **{name: BAD[name]})
    assert name in str(sync.value)
    assert str(aio.value) == str(sync.value).replace("(message, err)", "(message, exc)")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"metrics_addr": 123, "metrics_port": 0},
            "metrics_addr must be the address the exporter listens on, a non-empty str "
            "(e.g. '127.0.0.1', or '0.0.0.0' for every interface), got 123",
        ),
        (
            {"metrics_addr": ""},
            "metrics_addr must be the address the exporter listens on, a non-empty str "
            "(e.g. '127.0.0.1', or '0.0.0.0' for every interface), got ''",
        ),
        (
            {"metrics_registry": "x"},
            "metrics_registry must be a prometheus_client.CollectorRegistry (prometheus_client."
            "REGISTRY for the process-wide one) or None for a private one, got 'x'",
        ),
        (
            {"quarantine_backoff_s": 60},
            "quarantine_max_s (30.0, the default) must be >= quarantine_backoff_s (60): "
            "raise quarantine_max_s or lower quarantine_backoff_s",
        ),
        (
            {"quarantine_max_s": 0.1},
            "quarantine_max_s (0.1) must be >= quarantine_backoff_s (0.5, the default): "
            "raise quarantine_max_s or lower quarantine_backoff_s",
        ),
        (
            {"quarantine_backoff_s": 5.0, "quarantine_max_s": 1.0},
            "quarantine_max_s (1.0) must be >= quarantine_backoff_s (5.0): "
            "raise quarantine_max_s or lower quarantine_backoff_s",
        ),
    ],
)
def test_both_producers_refuse_at_construction_naming_the_users_options(
    kwargs: dict[str, Any], message: str
) -> None:
    """Not a TypeError from the exporter at start, nor QuarantinePolicy's field names."""
    with pytest.raises(ConfigError) as sync:
        FP(BASE, **kwargs)
    with pytest.raises(ConfigError) as aio:
        AsyncFailoverProducer(bootstrap_servers=BS, **kwargs)
    assert str(sync.value) == str(aio.value) == message


def test_the_process_wide_registry_and_any_address_string_are_accepted() -> None:
    import prometheus_client

    opts = producer_options(
        dead_letter_args="message, err",
        metrics_registry=prometheus_client.REGISTRY,
        metrics_addr="::",
    )
    assert (opts.metrics_registry, opts.metrics_addr) == (prometheus_client.REGISTRY, "::")


@given(
    backoff=st.floats(min_value=1e-3, max_value=1e6),
    backoff_max=st.floats(min_value=1e-3, max_value=1e6),
)
def test_the_quarantine_pair_is_accepted_exactly_when_the_maximum_is_not_below_the_start(
    backoff: float, backoff_max: float
) -> None:
    args = {"quarantine_backoff_s": backoff, "quarantine_max_s": backoff_max}
    if backoff_max >= backoff:
        policy = producer_options(dead_letter_args="message, exc", **args).quarantine
        assert (policy.initial_s, policy.max_s) == (backoff, backoff_max)
    else:
        with pytest.raises(
            ConfigError, match=r"^quarantine_max_s \(.*\) must be >= quarantine_backoff_s"
        ):
            producer_options(dead_letter_args="message, exc", **args)


def test_an_unknown_option_is_refused_with_the_nearest_name_and_every_option() -> None:
    with pytest.raises(ConfigError) as info:
        FP(BASE, max_inflight=5)
    text = str(info.value)
    assert text.startswith(
        "unknown failover option 'max_inflight' (did you mean 'max_in_flight'?); "
        "the failover options are "
    )
    assert all(name in text for name in OPTION_NAMES)
    assert "docs/configuration.md" in text


def test_unknown_options_are_named_each_with_a_suggestion_only_where_one_is_near() -> None:
    with pytest.raises(
        ConfigError,
        match=r"^unknown failover options 'colour', 'strategi' \(did you mean 'strategy'\?\); ",
    ):
        producer_options(dead_letter_args="message, err", strategi="sticky", colour="red")


_seconds = st.floats(min_value=1e-3, max_value=1e6, allow_nan=False, allow_infinity=False)


@given(backoff=_seconds, backoff_max=_seconds)
def test_the_backoff_pair_is_accepted_exactly_when_the_maximum_is_not_below_the_start(
    backoff: float, backoff_max: float
) -> None:
    args = {"retry_backoff_s": backoff, "retry_backoff_max_s": backoff_max}
    if backoff_max >= backoff:
        policy = producer_options(dead_letter_args="message, exc", **args).retry_policy
        assert (policy.backoff_initial_s, policy.backoff_max_s) == (backoff, backoff_max)
    else:
        with pytest.raises(ConfigError, match=r"retry_backoff_max_s \(.*\) must be >= "):
            producer_options(dead_letter_args="message, exc", **args)
