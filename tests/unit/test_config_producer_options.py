"""The failover options both producers check through one function: what it reads and builds."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from failover_partitioner import (
    AsyncFailoverProducer,
    ChoiceOptions,
    ConfigError,
    FailoverProducer,
)
from failover_partitioner._config import ProducerOptions, producer_options
from failover_partitioner.quarantine import QuarantinePolicy
from retry_buffer import RetryPolicy

# Options a producer passes on unchecked (to its metrics exporter).
_NOT_CHECKED = {"metrics_registry", "metrics_addr"}


def _defaults(cls: type) -> dict[str, Any]:
    """The failover options of a producer's constructor, with their defaults."""
    params = inspect.signature(cls).parameters.values()
    return {
        p.name: p.default
        for p in params
        if p.default is not inspect.Parameter.empty and p.name not in _NOT_CHECKED
    }


@pytest.mark.parametrize("cls", [FailoverProducer, AsyncFailoverProducer])
def test_it_takes_every_failover_option_of_each_producer_and_nothing_else(cls: type) -> None:
    taken = set(inspect.signature(producer_options).parameters) - {"dead_letter_args"}
    assert taken == set(_defaults(cls))


def test_both_producers_defaults_give_the_documented_options() -> None:
    sync = producer_options(**_defaults(FailoverProducer), dead_letter_args="message, err")
    aio = producer_options(**_defaults(AsyncFailoverProducer), dead_letter_args="message, exc")
    assert (
        sync
        == aio
        == ProducerOptions(
            choice=ChoiceOptions(),
            max_in_flight=50_000,
            produce_timeout_s=5.0,
            retry_policy=RetryPolicy(backoff_initial_s=0.01, backoff_max_s=1.0),
            metadata_timeout_s=5.0,
            refresh_s=30.0,
            fast_refresh_s=0.5,
            min_isr_refresh_s=300.0,
            min_insync_replicas=None,
            quarantine=QuarantinePolicy(initial_s=0.5, max_s=30.0),
        )
    )


def test_given_values_reach_the_retry_policy_and_the_refresher_settings_as_floats() -> None:
    args = {
        **_defaults(FailoverProducer),
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
    opts = producer_options(**args, dead_letter_args="message, err")
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


@pytest.mark.parametrize("hook_args", ["message, err", "message, exc"])
def test_a_bad_dead_letter_hook_is_refused_naming_the_producers_arguments(hook_args: str) -> None:
    args = {**_defaults(FailoverProducer), "dead_letter": 42}
    with pytest.raises(ConfigError, match=rf"dead_letter must be callable\({hook_args}\), got 42"):
        producer_options(**args, dead_letter_args=hook_args)


_seconds = st.floats(min_value=1e-3, max_value=1e6, allow_nan=False, allow_infinity=False)


@given(backoff=_seconds, backoff_max=_seconds)
def test_the_backoff_pair_is_accepted_exactly_when_the_maximum_is_not_below_the_start(
    backoff: float, backoff_max: float
) -> None:
    args = {
        **_defaults(AsyncFailoverProducer),
        "retry_backoff_s": backoff,
        "retry_backoff_max_s": backoff_max,
    }
    if backoff_max >= backoff:
        policy = producer_options(**args, dead_letter_args="message, exc").retry_policy
        assert (policy.backoff_initial_s, policy.backoff_max_s) == (backoff, backoff_max)
    else:
        with pytest.raises(ConfigError, match=r"retry_backoff_max_s \(.*\) must be >= "):
            producer_options(**args, dead_letter_args="message, exc")
