"""Bad use of the library: each mistake raises at once, with an error that names the bad value.

One table per public entry point (FailoverProducer, AsyncFailoverProducer, retry_buffer, the
mirror's options and command line, the Spark writer): wrong types, unknown options, negative
limits, missing bootstrap servers, reuse after close. Nothing here opens a socket: every case
fails before a client exists. Cases marked ``xfail`` are known bugs (the reason says what should
happen); they turn into failures the day the bug is fixed, to have the marker removed.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaException

import retry_buffer
from failover_partitioner import ConfigError, FailoverError, FailoverProducer, ProducerClosed
from failover_partitioner.aio import AsyncFailoverProducer
from failover_partitioner.mirror import Mirror, MirrorConfigError, MirrorError, MirrorOptions
from failover_partitioner.mirror.cli import main as mirror_main

# Untyped handles: the calls below are wrong on purpose, and must reach the code to be refused.
FP: Any = FailoverProducer
AP: Any = AsyncFailoverProducer
RB: Any = retry_buffer.RetryBuffer
ARB: Any = retry_buffer.AsyncRetryBuffer
RP: Any = retry_buffer.RetryPolicy
MO: Any = MirrorOptions

BASE = {"bootstrap.servers": "127.0.0.1:1"}
BAD_KEYS: dict[Any, str] = {1: "x", **BASE}
BS = "127.0.0.1:1"
MIRROR = {"source_bootstrap": "a:1", "target_bootstrap": "b:1", "group_id": "g"}

Case = tuple[Callable[[], object], type[BaseException] | tuple[type[BaseException], ...], str]


def bug(reason: str) -> pytest.MarkDecorator:
    return pytest.mark.xfail(strict=True, reason=f"known bug: {reason}")


def check(make: Callable[[], object], error: Any, names: str) -> None:
    """``make()`` raises ``error`` and its message contains ``names`` (the value, quoted)."""
    made: object = None
    try:
        with pytest.raises(error) as info:
            made = make()
    finally:
        # Whatever was built against expectations must not leak its threads.
        close = getattr(made, "close", None)
        if callable(close) and not asyncio.iscoroutinefunction(close):
            close()
    assert names in str(info.value), f"{info.value!s} does not name {names}"


# -- FailoverProducer --------------------------------------------------------------------------

FAILOVER: dict[str, Case] = {
    "conf of the wrong type": (lambda: FP("host:9092"), ConfigError, "got str"),
    "conf key not a string": (lambda: FP(BAD_KEYS), ConfigError, "[1]"),
    "no bootstrap servers": (lambda: FP({"acks": "all"}), ConfigError, "'bootstrap.servers'"),
    "unknown option": (
        lambda: FP(BASE, max_inflight=5),
        ConfigError,
        "'max_inflight' (did you mean 'max_in_flight'?)",
    ),
    "negative max_in_flight": (lambda: FP(BASE, max_in_flight=-1), ConfigError, "got -1"),
    "max_in_flight as text": (lambda: FP(BASE, max_in_flight="100"), ConfigError, "got '100'"),
    "negative produce_timeout_s": (
        lambda: FP(BASE, produce_timeout_s=-0.5),
        ConfigError,
        "got -0.5",
    ),
    "negative sticky_messages": (lambda: FP(BASE, sticky_messages=-3), ConfigError, "got -3"),
    "zero sticky_bytes": (
        lambda: FP(BASE, sticky_bytes=0),
        ConfigError,
        "sticky_bytes must be an integer >= 1, got 0",
    ),
    "negative max_attempts": (lambda: FP(BASE, max_attempts=-2), ConfigError, "got -2"),
    "negative quarantine_max_s": (lambda: FP(BASE, quarantine_max_s=-1.0), ConfigError, "got -1.0"),
    "unknown strategy": (lambda: FP(BASE, strategy="random"), ConfigError, "'random'"),
    "headroom as text": (lambda: FP(BASE, headroom="yes"), ConfigError, "got 'yes'"),
    "client_rack as a number": (lambda: FP(BASE, client_rack=5), ConfigError, "got 5"),
    "min_insync_replicas as text": (
        lambda: FP(BASE, min_insync_replicas="2"),
        ConfigError,
        "got '2'",
    ),
    "dead_letter not callable": (lambda: FP(BASE, dead_letter="log"), ConfigError, "got 'log'"),
    "metrics_port as text": (lambda: FP(BASE, metrics_port="9100"), ConfigError, "got '9100'"),
    "transactional.id": (
        lambda: FP({**BASE, "transactional.id": "t"}),
        ConfigError,
        "'transactional.id'",
    ),
    "enable.idempotence": (
        lambda: FP({**BASE, "enable.idempotence": True}),
        ConfigError,
        "'enable.idempotence': True",
    ),
    "unknown client property": (
        lambda: FP({**BASE, "lingerr.ms": 5}),
        (ConfigError, KafkaException),
        '"lingerr.ms"',
    ),
}


@pytest.mark.parametrize("case", list(FAILOVER.values()), ids=list(FAILOVER))
def test_failover_producer_refuses_bad_use_naming_the_value(case: Case) -> None:
    check(*case)


@pytest.mark.parametrize(
    ("make", "names"),
    [
        pytest.param(
            lambda: FP({**BASE, "lingerr.ms": 5}),
            '"lingerr.ms"',
            id="unknown client property is a ConfigError",
        ),
        pytest.param(
            lambda: FP({"bootstrap.servers": ""}),
            "bootstrap.servers",
            id="empty bootstrap servers",
        ),
        pytest.param(
            lambda: FP({"bootstrap.servers": None}),
            "bootstrap.servers",
            id="bootstrap servers None",
        ),
    ],
)
def test_failover_producer_refuses_unusable_client_settings_with_config_error(
    make: Callable[[], object], names: str
) -> None:
    check(make, ConfigError, names)


# -- AsyncFailoverProducer ---------------------------------------------------------------------

ASYNC: dict[str, Case] = {
    "no bootstrap servers": (lambda: AP(), ConfigError, "bootstrap_servers=None"),
    "bootstrap servers as a number": (
        lambda: AP(bootstrap_servers=9092),
        ConfigError,
        "bootstrap_servers=9092",
    ),
    "unknown option": (
        lambda: AP(bootstrap_servers=BS, max_inflight=5),
        ConfigError,
        "['max_inflight']",
    ),
    "negative max_in_flight": (
        lambda: AP(bootstrap_servers=BS, max_in_flight=-1),
        ConfigError,
        "got -1",
    ),
    "negative sticky_bytes": (
        lambda: AP(bootstrap_servers=BS, sticky_bytes=-1),
        ConfigError,
        "got -1",
    ),
    "negative request_timeout_ms": (
        lambda: AP(bootstrap_servers=BS, request_timeout_ms=-5),
        ConfigError,
        "request_timeout_ms=-5",
    ),
    "request_timeout_ms as text": (
        lambda: AP(bootstrap_servers=BS, request_timeout_ms="5000"),
        ConfigError,
        "request_timeout_ms='5000'",
    ),
    "negative max_request_size": (
        lambda: AP(bootstrap_servers=BS, max_request_size=-1),
        ConfigError,
        "max_request_size=-1",
    ),
    "serializer not callable": (
        lambda: AP(bootstrap_servers=BS, value_serializer="json"),
        ConfigError,
        "got 'json'",
    ),
    "idempotence": (
        lambda: AP(bootstrap_servers=BS, enable_idempotence=True),
        ConfigError,
        "enable_idempotence=True",
    ),
    "transactions": (
        lambda: AP(bootstrap_servers=BS, transactional_id="tx"),
        ConfigError,
        "transactional_id='tx'",
    ),
    "unknown strategy": (
        lambda: AP(bootstrap_servers=BS, strategy="random"),
        ConfigError,
        "'random'",
    ),
}


@pytest.mark.parametrize("case", list(ASYNC.values()), ids=list(ASYNC))
def test_async_producer_refuses_bad_use_naming_the_value(case: Case) -> None:
    check(*case)


@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        pytest.param(
            {"acks": "most"},
            "'most'",
            id="acks",
        ),
        pytest.param(
            {"linger_ms": -1},
            "linger_ms",
            id="negative linger_ms",
        ),
    ],
)
def test_async_producer_checks_client_settings_at_construction(
    kwargs: dict[str, Any], names: str
) -> None:
    check(lambda: AP(bootstrap_servers=BS, **kwargs), ConfigError, names)


def test_async_producer_refuses_use_before_start_and_bad_timeouts() -> None:
    ap = AP(bootstrap_servers=BS)
    with pytest.raises(FailoverError, match=re.escape("send to 'orders' before start()")):
        asyncio.run(ap.send("orders", b"x"))
    with pytest.raises(
        ConfigError, match="timeout must be a finite number of seconds >= 0, got -1"
    ):
        asyncio.run(ap.flush(-1))
    with pytest.raises(ConfigError, match="got -1"):
        asyncio.run(ap.stop(-1))
    assert asyncio.run(ap.stop()) == []
    with pytest.raises(ProducerClosed, match=re.escape("send to 'orders' after stop()")):
        asyncio.run(ap.send("orders", b"x"))


# -- retry_buffer ------------------------------------------------------------------------------

RETRY: dict[str, Case] = {
    "negative limit": (lambda: RB(max_in_flight=-3), retry_buffer.InvalidArgument, "got -3"),
    "limit as text": (lambda: RB(max_in_flight="3"), retry_buffer.InvalidArgument, "got '3'"),
    "unknown option": (lambda: RB(maxinflight=3), TypeError, "'maxinflight'"),
    "async negative limit": (lambda: ARB(max_in_flight=0), retry_buffer.InvalidArgument, "got 0"),
    "negative max_attempts": (lambda: RP(max_attempts=-1), retry_buffer.InvalidArgument, "got -1"),
    "negative deadline": (lambda: RP(deadline_s=-5.0), retry_buffer.InvalidArgument, "-5.0"),
    "backoff as text": (lambda: RP(backoff_initial_s="0.1"), retry_buffer.InvalidArgument, "'0.1'"),
    "policy of the wrong type": (
        lambda: RB(policy={"max_attempts": 3}),
        retry_buffer.InvalidArgument,
        "policy must be a RetryPolicy",
    ),
}


@pytest.mark.parametrize("case", list(RETRY.values()), ids=list(RETRY))
def test_retry_buffer_refuses_bad_use_naming_the_value(case: Case) -> None:
    check(*case)


def test_retry_buffer_refuses_negative_timeouts_and_use_after_close() -> None:
    buf: retry_buffer.RetryBuffer[str] = RB(max_in_flight=2)
    with pytest.raises(retry_buffer.InvalidArgument, match="got -1"):
        buf.admit("m", timeout=-1)
    entry = buf.admit("m")
    assert buf.close() == [entry]
    with pytest.raises(retry_buffer.BufferClosed):
        buf.admit("late")
    with pytest.raises(
        retry_buffer.BufferClosed, match=r"delivered\(\) for entry seq=0 after close"
    ):
        buf.delivered(entry)


# -- the mirror --------------------------------------------------------------------------------

MIRROR_CASES: dict[str, Case] = {
    "no source": (
        lambda: MO(target_bootstrap="b:1", group_id="g"),
        MirrorConfigError,
        "--source",
    ),
    "no group": (
        lambda: MO(source_bootstrap="a:1", target_bootstrap="b:1"),
        MirrorConfigError,
        "--group",
    ),
    "unknown option": (lambda: MO(**MIRROR, max_inflight=5), TypeError, "'max_inflight'"),
    "negative max_in_flight": (lambda: MO(**MIRROR, max_in_flight=-1), MirrorConfigError, "not -1"),
    "max_in_flight as text": (
        lambda: MO(**MIRROR, max_in_flight="10"),
        MirrorConfigError,
        "not '10'",
    ),
    "negative commit interval": (
        lambda: MO(**MIRROR, commit_interval_s=-1.0),
        MirrorConfigError,
        "not -1.0",
    ),
    "negative status interval": (
        lambda: MO(**MIRROR, status_interval_s=-2.0),
        MirrorConfigError,
        "not -2.0",
    ),
    "bad include pattern": (lambda: MO(**MIRROR, include="("), MirrorConfigError, "'('"),
    "rename without {topic}": (lambda: MO(**MIRROR, rename="copy"), MirrorConfigError, "'copy'"),
    "illegal dead-letter topic": (
        lambda: MO(**MIRROR, dead_letter_topic="bad topic!"),
        MirrorConfigError,
        "'bad topic!'",
    ),
    "auto commit": (
        lambda: MO(**MIRROR, consumer_config={"enable.auto.commit": "true"}),
        MirrorConfigError,
        "enable.auto.commit=true",
    ),
    "same cluster, same names": (
        lambda: MO(source_bootstrap="a:1", target_bootstrap="a:1", group_id="g"),
        MirrorConfigError,
        "--rename",
    ),
}


@pytest.mark.parametrize("case", list(MIRROR_CASES.values()), ids=list(MIRROR_CASES))
def test_mirror_options_refuse_bad_use_naming_the_value(case: Case) -> None:
    check(*case)


@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        pytest.param(kwargs, names, id=name)
        for name, kwargs, names, _why in [
            (
                "commit interval as text",
                {"commit_interval_s": "5"},
                "commit_interval_s",
                "a str interval raises a bare TypeError ('>' not supported) naming neither",
            ),
            (
                "commit interval None",
                {"commit_interval_s": None},
                "commit_interval_s",
                "None raises a bare TypeError naming neither the option nor the value",
            ),
            (
                "status interval as text",
                {"status_interval_s": "1"},
                "status_interval_s",
                "a str interval raises a bare TypeError ('>=' not supported)",
            ),
            (
                "include as a number",
                {"include": 5},
                "include",
                "re.compile's TypeError ('first argument must be string') escapes",
            ),
            ("rename as a number", {"rename": 5}, "rename", "a bare TypeError escapes"),
            (
                "dead-letter topic as a number",
                {"dead_letter_topic": 5},
                "dead_letter_topic",
                "re's TypeError ('expected string') escapes",
            ),
            (
                "consumer config as a list",
                {"consumer_config": [("fetch.min.bytes", "1")]},
                "consumer_config",
                "an AttributeError ('list' object has no attribute 'items') escapes",
            ),
            (
                "provenance headers as text",
                {"provenance_headers": "no"},
                "provenance_headers",
                "the string 'no' is accepted and, being truthy, turns the headers on",
            ),
        ]
    ],
)
def test_mirror_options_refuse_wrong_types_with_a_mirror_config_error(
    kwargs: dict[str, Any], names: str
) -> None:
    check(lambda: MO(**MIRROR, **kwargs), MirrorConfigError, names)


def test_the_mirror_command_line_names_a_bad_value_and_exits_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--source", "a:1", "--target", "b:1", "--group", "g"]
    assert mirror_main([*argv, "--max-in-flight", "-5"]) == 2
    assert "--max-in-flight must be a positive integer, not -5" in capsys.readouterr().err
    assert mirror_main([*argv, "--rename", "copy"]) == 2
    assert "--rename 'copy'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        mirror_main([*argv, "--commit-interval", "soon"])
    assert exit_info.value.code == 2
    assert "invalid float value: 'soon'" in capsys.readouterr().err


class _Closable:
    def close(self, *args: object) -> list[object]:
        return []


def _closable(conf: dict[str, str]) -> Any:
    return _Closable()


def test_a_mirror_runs_once() -> None:
    mirror = Mirror(
        MO(**MIRROR, status_interval_s=0),
        consumer_factory=_closable,
        producer_factory=_closable,
    )
    mirror.stop()  # stops before consuming anything
    assert mirror.run().state == "stopped"
    with pytest.raises(MirrorError, match="a Mirror runs once"):
        mirror.run()


# -- the Spark writer --------------------------------------------------------------------------


def _writer(*args: Any, **kwargs: Any) -> object:
    spark = pytest.importorskip("failover_partitioner.spark")
    return spark.KafkaBatchWriter(*args, **kwargs)


SPARK: dict[str, Case] = {
    "no producer config": (lambda: _writer("t"), ConfigError, "producer_config is required"),
    "producer config as a list": (
        lambda: _writer("t", [("bootstrap.servers", BS)]),
        ConfigError,
        "got list",
    ),
    "no bootstrap servers": (
        lambda: _writer("t", {"acks": "all"}),
        ConfigError,
        "'bootstrap.servers'",
    ),
    "empty bootstrap servers": (
        lambda: _writer("t", {"bootstrap.servers": ""}),
        ConfigError,
        "'bootstrap.servers'",
    ),
    "unknown option": (
        lambda: _writer("t", BASE, max_inflight=5),
        ConfigError,
        "'max_inflight' (did you mean 'max_in_flight'?)",
    ),
    "negative max_in_flight": (lambda: _writer("t", BASE, max_in_flight=-1), ConfigError, "got -1"),
    "negative flush timeout": (
        lambda: _writer("t", BASE, flush_timeout_s=-1),
        ConfigError,
        "got -1",
    ),
    "flush timeout as text": (
        lambda: _writer("t", BASE, flush_timeout_s="soon"),
        ConfigError,
        "got 'soon'",
    ),
    "delivery callback": (
        lambda: _writer("t", {**BASE, "on_delivery": print}),
        ConfigError,
        "'on_delivery'",
    ),
    "unknown client property": (
        lambda: _writer("t", {**BASE, "lingerr.ms": 5}),
        ConfigError,
        '"lingerr.ms"',
    ),
    "metrics port": (lambda: _writer("t", BASE, metrics_port=9100), ConfigError, "'metrics_port'"),
}


@pytest.mark.parametrize("case", list(SPARK.values()), ids=list(SPARK))
def test_spark_writer_refuses_bad_settings_on_the_driver_naming_the_value(case: Case) -> None:
    check(*case)


def test_spark_batch_writer_checks_its_topic_at_construction() -> None:
    check(lambda: _writer(5, BASE), ConfigError, "5")
