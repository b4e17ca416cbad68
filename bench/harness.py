"""Shared shape of every benchmark: a figure, its reference from the same run, and a target.

Each ``bench/bench_*.py`` module defines ``run(quick: bool) -> list[Figure]``. ``bench/run.py``
imports them all and prints one table. Figures are ratios against a reference measured in the
same process and run, so a noisy or slow machine moves both sides together.
"""

from __future__ import annotations

import multiprocessing
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


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
    context manager; ``call("create_topic", ...)`` runs a ``Cluster`` method in the child.
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
