"""Shared shape of every benchmark: a figure, its reference from the same run, and a target.

Each ``bench/bench_*.py`` module defines ``run(quick: bool) -> list[Figure]``. ``bench/run.py``
imports them all and prints one table. Figures are ratios against a reference measured in the
same process and run, so a noisy or slow machine moves both sides together.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from failover_partitioner.errors import ProduceTimeout


@dataclass(frozen=True, slots=True, kw_only=True)
class Figure:
    """One measured figure.

    ``kind`` says how to read it: ``"ratio_min"`` means value/reference must be at least
    ``target``; ``"absolute_max"`` means value itself (in ``unit``) must be at most ``target``
    (reference is then informational, e.g. the cost of an empty loop).
    """

    issue: int
    name: str
    value: float
    reference: float
    unit: str
    target: float
    kind: str = "ratio_min"
    note: str = ""

    @property
    def ratio(self) -> float:
        return self.value / self.reference if self.reference else float("nan")

    @property
    def met(self) -> bool:
        if self.kind == "ratio_min":
            return self.ratio >= self.target
        if self.kind == "absolute_max":
            return self.value <= self.target
        raise ValueError(f"unknown figure kind {self.kind!r}")


def median_time(fn: Callable[[], object], *, repeat: int = 7) -> float:
    """Median wall time in seconds of ``fn()`` over ``repeat`` runs (after one warm-up)."""
    fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def _serve_minibroker(conn: Any, brokers: int, config: dict[str, str]) -> None:
    """Child process of :class:`MinibrokerProcess`: run the cluster, apply the parent's calls."""
    import logging

    from minibroker import Cluster

    logging.getLogger("minibroker").setLevel(logging.ERROR)
    with Cluster(brokers=brokers, config=config) as cluster:
        conn.send(cluster.bootstrap_servers)
        while True:
            command, args, kwargs = conn.recv()
            if command == "close":
                return
            getattr(cluster, command)(*args, **kwargs)
            conn.send(None)


class MinibrokerProcess:
    """A minibroker cluster in a process of its own, as a real broker would be.

    In the benchmark's process the brokers' Python code would share the GIL with the client
    being measured, and a client that does more Python work would be slowed twice. Use as a
    context manager; ``call("slow_broker", 2, 50.0)`` runs a ``Cluster`` method in the child
    (``create_topic`` and ``stop_broker`` have methods of their own).
    """

    def __init__(self, brokers: int, config: dict[str, str] | None = None) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(
            target=_serve_minibroker, args=(child, brokers, dict(config or {})), daemon=True
        )
        self._proc.start()
        self.bootstrap_servers: str = self._conn.recv()

    def call(self, command: str, *args: object, **kwargs: object) -> None:
        self._conn.send((command, args, kwargs))
        self._conn.recv()

    def create_topic(self, name: str, partitions: int) -> None:
        """``name`` with ``partitions`` partitions, three replicas each."""
        self.call("create_topic", name, partitions, 3)

    def stop_broker(self, broker_id: int) -> None:
        self.call("stop_broker", broker_id)

    def close(self) -> None:
        if self._proc.is_alive():
            self._conn.send(("close", (), {}))
            self._proc.join(30)
        if self._proc.is_alive():
            self._proc.terminate()
            self._proc.join(5)

    def __enter__(self) -> MinibrokerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# Minibroker settings for the fault figures: a stopped broker leaves the ISR and is fenced
# within a third of a second, so the runs after the stop measure the fault, not its onset.
FAULT_CONFIG = {
    "min.insync.replicas": "2",
    "replica.lag.time.max.ms": "300",
    "broker.session.timeout.ms": "300",
}


class FaultCluster(Protocol):
    """What :func:`runs_under_fault` needs of a cluster: minibroker's (MinibrokerProcess) or
    real Kafka's (``bench/fault_row.py --kafka``)."""

    @property
    def bootstrap_servers(self) -> str: ...

    def create_topic(self, name: str, partitions: int) -> None: ...

    def stop_broker(self, broker_id: int) -> None: ...


# What makes the healthy and the faulty cluster of a fault figure, as a context manager.
Twins = Callable[[], contextlib.AbstractContextManager[tuple[FaultCluster, FaultCluster]]]


@contextlib.contextmanager
def minibroker_twins() -> Iterator[tuple[FaultCluster, FaultCluster]]:
    """Two 5-broker minibroker clusters (FAULT_CONFIG), each in a process of its own."""
    with (
        MinibrokerProcess(5, FAULT_CONFIG) as healthy,
        MinibrokerProcess(5, FAULT_CONFIG) as faulty,
    ):
        yield healthy, faulty


@dataclass(frozen=True)
class FaultRuns:
    """Rates of one producer on a healthy cluster and on its twin with two brokers stopped."""

    transition: str  # the first run after the stop, or what stopped it
    healthy: list[float]
    faulty: list[float]
    # The reference's rates (``runs_under_fault``'s ``reference``), the same rounds; else empty.
    reference_healthy: list[float] = field(default_factory=list)
    reference_faulty: list[float] = field(default_factory=list)

    def spread(self) -> str:
        """:func:`per_round` of the faulty runs against the healthy ones."""
        return per_round(self.faulty, self.healthy)

    def reference_ratio(self) -> float:
        """The reference's median faulty rate over its median healthy rate."""
        return statistics.median(self.reference_faulty) / statistics.median(self.reference_healthy)


_T = TypeVar("_T")


def alternated(rounds: int, sides: Mapping[str, Callable[[], _T]]) -> dict[str, list[_T]]:
    """What each side returns over ``rounds`` rounds, run one after the other, the one that
    starts swapping every round: a machine that speeds up or slows down falls on both."""
    names = list(sides)
    results: dict[str, list[_T]] = {name: [] for name in names}
    for i in range(rounds):
        for name in names if i % 2 == 0 else names[::-1]:
            results[name].append(sides[name]())
    return results


def per_round(values: Sequence[float], references: Sequence[float]) -> str:
    """The ratio of each round (value / reference, measured back to back): how far one round
    strays from the medians' ratio on this machine now."""
    ratios = sorted(v / r for v, r in zip(values, references, strict=True))
    return (
        f"per-round ratios {ratios[0]:.2f} / {statistics.median(ratios):.2f} / "
        f"{ratios[-1]:.2f} (min / median / max)"
    )


def runs_under_fault(
    rate: Callable[[str], float],
    topic: str,
    partitions: int,
    repeat: int,
    reference: Callable[[str], float] | None = None,
    done: Callable[[], None] | None = None,
    twins: Twins = minibroker_twins,
) -> FaultRuns:
    """``rate(bootstrap)`` on two 5-broker clusters (RF 3, min ISR 2; ``twins`` makes them,
    minibroker's by default, each in a process of its own), after brokers 4 and 5 of one are
    stopped: first once right after the stop (the transition: failures, quarantines,
    elections), then ``repeat`` rounds alternating the two clusters, so that load from
    elsewhere on the machine falls on both. ``reference``: a rate
    measured in the same rounds after ``rate`` (e.g. a raw client doing the same), so that
    what the fault costs the cluster and the client shows beside what it costs ``rate``.
    ``done``: called after the rounds, before the clusters stop (to close what ``rate`` kept
    open)."""
    with twins() as (healthy, faulty):
        for cluster in (healthy, faulty):
            cluster.create_topic(topic, partitions)
            rate(cluster.bootstrap_servers)  # warm-up: connections, code paths
        faulty.stop_broker(4)
        faulty.stop_broker(5)
        # Writes held in a request with a partition that fell under min ISR are answered at
        # the request timeout (5 s), and the client's queue fills meanwhile: the producer waits
        # for room (produce_timeout_s, 15 s by default: 5 s longer than the client holds a
        # message) and would refuse a message only past that.
        try:
            transition = f"{rate(faulty.bootstrap_servers):.0f} msg/s"
        except ProduceTimeout as exc:
            transition = f"ProduceTimeout after {exc.timeout_s:g} s (queue full of held writes)"
        runs = FaultRuns(transition, [], [])
        for _ in range(repeat):
            runs.healthy.append(rate(healthy.bootstrap_servers))
            runs.faulty.append(rate(faulty.bootstrap_servers))
            if reference is not None:
                runs.reference_healthy.append(reference(healthy.bootstrap_servers))
                runs.reference_faulty.append(reference(faulty.bootstrap_servers))
        if done is not None:
            done()
    return runs
