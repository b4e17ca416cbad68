"""Shared shape of every benchmark: a figure, its reference from the same run, and a target.

Each ``bench/bench_*.py`` module defines ``run(quick: bool) -> list[Figure]``. ``bench/run.py``
imports them all and prints one table. Figures are ratios against a reference measured in the
same process and run, so a noisy or slow machine moves both sides together.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass


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
