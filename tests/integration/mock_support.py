"""Shared set-up for the tests that run FailoverProducer against librdkafka's mock cluster."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from failover_partitioner import FailoverProducer
from failover_partitioner.testing import MockCluster


@contextmanager
def mock_with_topic(topic: str, partitions: int) -> Iterator[MockCluster]:
    """A 3-broker mock cluster holding ``topic`` (RF 3), its leaders one per broker in turn.

    The mock places leaders as it likes, sometimes all on one broker; tests that make one
    broker refuse would then have no partition left to route to."""
    with MockCluster(brokers=3) as cluster:
        cluster.create_topic(topic, partitions, 3)
        for partition in range(partitions):
            cluster.set_leader(topic, partition, partition % 3 + 1)
        yield cluster


@contextmanager
def interrupted_as_it_returns(
    p: FailoverProducer, client_call: str, calls_before: int = 0
) -> Iterator[None]:
    """Inside the block, the producer's ``client_call`` (the client's produce or produce_batch,
    as the producer holds it) gets KeyboardInterrupt as it returns, having taken the message:
    where Python raises a Ctrl-C that comes during a C call. ``calls_before``: calls made
    first without one (a call that raises counts)."""
    import _thread

    call = getattr(p, client_call)
    made = 0

    def taken_then_interrupted(*args: Any, **kwargs: Any) -> Any:
        nonlocal made
        made += 1
        taken = call(*args, **kwargs)
        if made > calls_before:
            _thread.interrupt_main()  # the signal, as the client's call returns
        return taken

    setattr(p, client_call, taken_then_interrupted)
    try:
        yield
    finally:
        setattr(p, client_call, call)


def mock_producer(
    mock: MockCluster, *, ready: str | None = None, **kwargs: Any
) -> FailoverProducer:
    """A FailoverProducer on ``mock``; ``conf=`` adds client settings. The mock has no
    DescribeConfigs, so min ISR is given (2 unless the test says otherwise). ``ready``: a
    topic whose metadata the producer fetches before it is returned. The strategy is
    ``round_robin`` unless the test says otherwise: failures are injected per broker, and a
    test's keyless messages must meet every broker within a few messages, where ``sticky`` (the
    default) sends 1,000 in a row to one partition."""
    conf = {"bootstrap.servers": mock.bootstrap_servers, "acks": "all", "log_level": 0}
    conf.update(kwargs.pop("conf", {}))
    kwargs.setdefault("min_insync_replicas", 2)
    kwargs.setdefault("strategy", "round_robin")
    producer = FailoverProducer(conf, **kwargs)
    if ready is not None:
        producer.health(ready)
    return producer


def consume_topic(
    mock: MockCluster, topic: str, partitions: int, expected: int, timeout_s: float, group: str
) -> list[Any]:
    """Every record of ``topic``, read from the beginning until ``expected`` were seen, then
    half a second more: anything beyond ``expected`` would be a duplicate."""
    c = Consumer(
        {
            "bootstrap.servers": mock.bootstrap_servers,
            "group.id": group,
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[Any] = []
        deadline = time.monotonic() + timeout_s
        while len(out) < expected and time.monotonic() < deadline:
            out.extend(m for m in c.consume(1000, 0.2) if m.error() is None)
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            out.extend(m for m in c.consume(1000, 0.1) if m.error() is None)
        return out
    finally:
        c.close()
