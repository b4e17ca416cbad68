"""Bad use of running producers (against minibroker): wrong message types, reuse after close.

The construction-time checks are in tests/unit/test_reliability_misuse.py; these need a
producer that is connected, or was. Cases marked ``xfail`` are known bugs (the reason says what
should happen); they turn into failures the day the bug is fixed, to have the marker removed.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from failover_partitioner import ConfigError, FailoverError, FailoverProducer, ProducerClosed
from failover_partitioner.aio import AsyncFailoverProducer
from minibroker import Cluster

TOPIC = "orders"


def bug(reason: str) -> pytest.MarkDecorator:
    return pytest.mark.xfail(strict=True, reason=f"known bug: {reason}")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with Cluster(brokers=1) as c:
        c.create_topic(TOPIC, partitions=2, replication_factor=1)
        yield c


@pytest.fixture
def producer(cluster: Cluster) -> Iterator[Any]:
    """A connected FailoverProducer, typed Any so that wrong calls reach it."""
    p = FailoverProducer({"bootstrap.servers": cluster.bootstrap_servers}, produce_timeout_s=1.0)
    p.health(TOPIC, timeout=10)
    yield p
    p.close(0.5)


@pytest.mark.parametrize(
    ("kwargs", "error", "names"),
    [
        ({"value": 123}, TypeError, "'int'"),
        ({"value": b"x", "key": 1.5}, TypeError, "got float"),
        ({"value": b"x", "headers": "h"}, TypeError, "got str"),
        ({"value": b"x", "timestamp": "now"}, TypeError, "got 'now' (str)"),
        # The topic has 2 partitions: a partition past them was placed elsewhere unsaid.
        ({"value": b"x", "partition": 2}, ValueError, "partition 2 of topic 'orders'"),
        ({"value": b"x", "partition": -3}, ValueError, "partition -3 of topic 'orders'"),
        ({"value": b"x", "partition": "1"}, TypeError, "got '1' (str)"),
        ({"value": b"x", "partition": 1.0}, TypeError, "got 1.0 (float)"),
        ({"value": b"x", "partition": True}, TypeError, "got True (bool)"),
    ],
    ids=[
        "value int",
        "key float",
        "headers str",
        "timestamp str",
        "partition past the topic's",
        "partition negative",
        "partition str",
        "partition float",
        "partition bool",
    ],
)
def test_produce_refuses_wrong_types_and_accepts_nothing(
    producer: Any, kwargs: dict[str, Any], error: type[Exception], names: str
) -> None:
    with pytest.raises(error, match=re.escape(names)):
        producer.produce(TOPIC, **kwargs)
    assert producer.statistics().produced == 0
    assert producer.flush(5) == 0


@pytest.mark.parametrize(
    ("topic", "names"),
    [
        pytest.param(
            None,
            "None",
            id="None",
        ),
        pytest.param(
            5,
            "5",
            id="int",
        ),
        pytest.param(
            "",
            "''",
            id="empty",
        ),
    ],
)
def test_produce_refuses_a_topic_that_is_not_a_name(producer: Any, topic: Any, names: str) -> None:
    with pytest.raises((TypeError, ValueError), match=re.escape(names)):
        producer.produce(topic, b"x")
    assert producer.statistics().produced == 0


def test_a_partition_of_a_topic_seen_first_is_checked_against_its_metadata(
    cluster: Cluster,
) -> None:
    p: Any = FailoverProducer({"bootstrap.servers": cluster.bootstrap_servers})
    try:
        with pytest.raises(ValueError, match=re.escape("it has 2 as the producer last saw it")):
            p.produce(TOPIC, b"x", partition=7)
        p.produce(TOPIC, b"x", partition=1)
        assert p.flush(10) == 0
        assert p.statistics().produced == 1
    finally:
        assert p.close(1) == []


@pytest.mark.parametrize(
    ("call", "error", "names"),
    [
        (lambda p: p.health("bad name!"), ValueError, "'bad name!' is not a legal"),
        (lambda p: p.refresh("bad name!"), ValueError, "'bad name!' is not a legal"),
        (lambda p: p.refresh(TOPIC, "5"), ConfigError, "timeout must be a number"),
        (lambda p: p.refresh(TOPIC, -1), ConfigError, "got -1"),
        (lambda p: p.refresh(TOPIC, 0), ConfigError, "got 0"),
        (lambda p: p.health("other", float("nan")), ConfigError, "got nan"),
    ],
    ids=["health name", "refresh name", "timeout str", "timeout < 0", "timeout 0", "nan"],
)
def test_health_and_refresh_refuse_bad_input_and_watch_nothing_new(
    producer: Any, call: Callable[[Any], object], error: type[Exception], names: str
) -> None:
    """A name Kafka refuses was watched by the refresher for the producer's life (a warning
    every few seconds) and reported as an unreachable cluster; a timeout not a number raised
    a bare TypeError, and one of 0 or below fetched with no time for min ISR (assumed 1)."""
    with pytest.raises(error, match=re.escape(names)):
        call(producer)
    assert producer._watched == {TOPIC}


def test_produce_refuses_a_callback_that_cannot_be_called(cluster: Cluster) -> None:
    p: Any = FailoverProducer({"bootstrap.servers": cluster.bootstrap_servers})
    try:
        with pytest.raises(TypeError, match="'cb'"):
            p.produce(TOPIC, b"x", on_delivery="cb")
    finally:
        assert p.flush(5) == 0  # the refused message was not taken
        p.close(1)


def test_a_closed_producer_refuses_to_produce(cluster: Cluster) -> None:
    p = FailoverProducer({"bootstrap.servers": cluster.bootstrap_servers})
    p.produce(TOPIC, b"before close")
    assert p.close(10) == []
    with pytest.raises(ProducerClosed, match=re.escape("produce() after close()")):
        p.produce(TOPIC, b"after close")
    assert p.close() == []  # closing again is harmless and returns the same list
    assert p.statistics().delivered == 1


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda p: p.poll(0), id="poll"),
        pytest.param(lambda p: p.flush(0), id="flush"),
        pytest.param(lambda p: p.health(TOPIC + "-new"), id="health of a new topic"),
    ],
)
def test_a_closed_producer_refuses_every_other_call(cluster: Cluster, call: Any) -> None:
    p = FailoverProducer({"bootstrap.servers": cluster.bootstrap_servers})
    p.close(10)
    started = time.monotonic()
    with pytest.raises(ProducerClosed):
        call(p)
    assert time.monotonic() - started < 1.0


@pytest.mark.parametrize("quiet", [True, False], ids=["without a default callback", "with one"])
def test_poll_and_flush_from_inside_a_delivery_callback_are_refused(
    cluster: Cluster, quiet: bool
) -> None:
    """confluent-kafka cannot re-enter its client from a callback it serves: the producer says
    so, also on poll(0)'s short path (nothing due, no wait), and the message is delivered."""
    refused: list[str] = []

    def reenter(err: Any, report: Any) -> None:
        calls: list[Callable[[], int]] = [
            lambda: p.poll(0),
            lambda: p.poll(0.01),
            lambda: p.flush(0),
        ]
        for call in calls:
            try:
                call()
            except FailoverError as exc:
                refused.append(str(exc))

    conf: dict[str, Any] = {"bootstrap.servers": cluster.bootstrap_servers}
    if not quiet:
        conf["on_delivery"] = lambda err, report: None
    p = FailoverProducer(conf)
    try:
        p.health(TOPIC, timeout=10)
        p.poll(0)  # (the short path, outside a callback: served)
        p.produce(TOPIC, b"m", on_delivery=reenter)
        assert p.flush(10) == 0
        assert p.statistics().delivered == 1
    finally:
        p.close(10)
    assert [m.split("(")[0] for m in refused] == ["poll", "poll", "flush"], refused
    assert all("inside a delivery callback" in m for m in refused)


def test_close_with_a_bad_timeout_refuses_it_and_stays_open(cluster: Cluster) -> None:
    p = FailoverProducer({"bootstrap.servers": cluster.bootstrap_servers})
    try:
        with pytest.raises(ConfigError, match="got -1"):
            p.close(-1)
        p.produce(TOPIC, b"still open")
        assert p.flush(10) == 0
    finally:
        p.close(10)


@pytest.mark.parametrize(
    ("metrics_port", "names"),
    [
        pytest.param(
            -1,
            "metrics_port",
            id="negative",
        ),
        pytest.param(
            70_000,
            "metrics_port",
            id="above 65535",
        ),
    ],
)
def test_a_metrics_port_out_of_range_is_a_config_error(
    cluster: Cluster, metrics_port: int, names: str
) -> None:
    made: Any = None
    try:
        with pytest.raises(ConfigError, match=names):
            made = FailoverProducer(
                {"bootstrap.servers": cluster.bootstrap_servers}, metrics_port=metrics_port
            )
    finally:
        if made is not None:
            made.close(5)


def test_the_async_producer_refuses_wrong_types_and_reuse_after_stop(cluster: Cluster) -> None:
    async def run() -> None:
        ap: Any = AsyncFailoverProducer(bootstrap_servers=cluster.bootstrap_servers)
        await ap.start()
        try:
            cases: list[tuple[dict[str, Any], str]] = [
                ({"value": 123}, "got int"),
                ({"value": b"x", "key": 1.5}, "got float"),
                ({"value": b"x", "headers": "h"}, "got str"),
                ({"value": b"x", "timestamp_ms": "now"}, "got 'now'"),
            ]
            for kwargs, names in cases:
                with pytest.raises(TypeError, match=re.escape(names)):
                    await ap.send(TOPIC, **kwargs)
            # As FailoverProducer answers (tests/integration/test_shells_agree.py).
            with pytest.raises(ValueError, match="'' is not a legal Kafka topic name"):
                await ap.send("", b"x")
            with pytest.raises(ConfigError, match="got -1"):
                await ap.flush(-1)
            assert ap.statistics().produced == 0
            await ap.send_and_wait(TOPIC, b"fine")
        finally:
            assert await ap.stop(10) == []
        with pytest.raises(ProducerClosed, match=re.escape(f"send to {TOPIC!r} after stop()")):
            await ap.send(TOPIC, b"late")
        assert await ap.stop() == []
        assert ap.statistics().delivered == 1

    asyncio.run(run())
