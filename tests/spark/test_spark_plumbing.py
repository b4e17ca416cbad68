"""Executor-side plumbing without a cluster: the producer cache and the summary's arithmetic."""

from __future__ import annotations

import os
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from failover_partitioner.spark.cache import ProducerCache
from failover_partitioner.spark.summary import SummaryParam, WriteSummary


class FakeProducer:
    def __init__(self, undelivered: int = 0) -> None:
        self.closed = 0
        self.undelivered = undelivered

    def close(self) -> list[int]:
        self.closed += 1
        return list(range(self.undelivered))


def test_cache_builds_once_per_key_and_reuses() -> None:
    cache: ProducerCache[FakeProducer] = ProducerCache()
    first, built = cache.get("a", FakeProducer)
    assert built
    assert cache.get("a", FakeProducer) == (first, False)
    other, built = cache.get("b", FakeProducer)
    assert built
    assert other is not first
    assert cache.built == 2
    assert cache.producers() == {"a": first, "b": other}


def test_discard_closes_and_the_next_get_builds_fresh() -> None:
    cache: ProducerCache[FakeProducer] = ProducerCache()
    first, _ = cache.get("a", lambda: FakeProducer(undelivered=3))
    cache.discard("a")
    assert first.closed == 1
    second, built = cache.get("a", FakeProducer)
    assert built
    assert second is not first
    cache.discard("missing")  # nothing to close, no error


def test_take_forgets_without_closing() -> None:
    cache: ProducerCache[FakeProducer] = ProducerCache()
    first, _ = cache.get("a", FakeProducer)
    assert cache.take("a") is first
    assert first.closed == 0  # the caller closes it, as it needs
    assert cache.take("a") is None
    assert cache.get("a", FakeProducer)[1]


def test_close_all_closes_every_producer_once() -> None:
    cache: ProducerCache[FakeProducer] = ProducerCache()
    producers = [cache.get(k, FakeProducer)[0] for k in "abc"]
    cache.close_all()
    cache.close_all()
    assert [p.closed for p in producers] == [1, 1, 1]
    assert cache.producers() == {}


def test_producers_idle_too_long_are_closed_when_another_is_asked_for() -> None:
    now = [0.0]
    cache: ProducerCache[FakeProducer] = ProducerCache(max_idle_s=600, clock=lambda: now[0])
    old, _ = cache.get("old", FakeProducer)
    recent, _ = cache.get("recent", FakeProducer)
    now[0] = 599.0
    cache.get("recent", FakeProducer)
    assert old.closed == 0
    now[0] = 600.0
    current, _ = cache.get("recent", FakeProducer)
    assert current is recent
    assert old.closed == 1
    assert recent.closed == 0
    assert cache.producers() == {"recent": recent}


def test_a_forked_process_never_uses_its_parents_producer(monkeypatch: pytest.MonkeyPatch) -> None:
    cache: ProducerCache[FakeProducer] = ProducerCache()
    parents, _ = cache.get("a", FakeProducer)
    monkeypatch.setattr(os, "getpid", lambda: -1)
    childs, built = cache.get("a", FakeProducer)
    assert built
    assert childs is not parents
    assert parents.closed == 0  # its threads live in the parent; closing here would be wrong


counts = st.integers(min_value=0, max_value=10**9)
summaries = st.builds(
    WriteSummary,
    rows=counts,
    delivered=counts,
    rerouted=counts,
    possible_duplicates=counts,
    failed=counts,
    tasks=counts,
    producers_built=counts,
)


@given(summaries, summaries, summaries)
def test_summaries_add_field_by_field_in_any_order(
    a: WriteSummary, b: WriteSummary, c: WriteSummary
) -> None:
    assert (a + b) + c == a + (b + c)
    assert a + b == b + a
    assert (a + b).rerouted == a.rerouted + b.rerouted
    assert a + WriteSummary() == a


@given(summaries)
def test_accumulator_param_and_pickling_keep_the_counts(a: WriteSummary) -> None:
    param = SummaryParam()
    assert param.addInPlace(param.zero(a), a) == a
    assert pickle.loads(pickle.dumps(a)) == a
