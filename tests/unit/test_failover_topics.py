"""A topic's state: strikes, metadata updates and releases kept consistent with the chooser."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from failover_partitioner._topics import TopicState
from failover_partitioner.choose import ChoiceOptions
from failover_partitioner.health import PartitionMetadata, TopicMetadata, TopicView
from failover_partitioner.quarantine import QuarantinePolicy


def md(isr_of_1: int = 3, n: int = 3) -> TopicMetadata:
    return TopicMetadata(
        topic="t",
        partitions=tuple(
            PartitionMetadata(
                partition=p,
                leader=1,
                replicas=(1, 2, 3),
                isr=tuple(range(1, (isr_of_1 if p == 1 else 3) + 1)),
            )
            for p in range(n)
        ),
        min_insync_replicas=2,
    )


def state() -> TopicState:
    return TopicState(md(), QuarantinePolicy(initial_s=1.0), ChoiceOptions(strategy="round_robin"))


def test_a_strike_takes_the_partition_out_of_choice_at_once() -> None:
    s = state()
    assert s.strike([1], now=0.0)
    assert not s.strike([1], now=0.1)
    assert s.view.usable == (0, 2)
    assert {s.chooser.next_keyless() for _ in range(10)} == {0, 2}
    assert s.wants_fast_refresh
    assert s.quarantines == 1
    assert not s.strike([7], now=0.0)  # no such partition


def test_the_partitions_of_one_strike_take_one_new_view(monkeypatch: pytest.MonkeyPatch) -> None:
    s = state()
    views: list[TopicView] = []
    build = TopicView.build

    def counted(*args: Any) -> TopicView:
        views.append(build(*args))
        return views[-1]

    monkeypatch.setattr(TopicView, "build", counted)
    assert s.strike([0, 2, 7], now=0.0) == [0, 2]  # 7: no such partition
    assert s.strike([0, 2], now=0.1) == []
    assert len(views) == 1
    assert views[0].usable == (1,) == s.view.usable
    assert s.quarantines == 2


def test_release_needs_the_backoff_over_and_metadata_usable() -> None:
    s = state()
    s.strike([1], 0.0)
    s.apply_metadata(md(isr_of_1=1), now=0.5)
    assert s.release_due(2.0) == ([], None)  # back-off over, but metadata shows ISR 1 < 2
    assert 1 in s.view.unavailable
    s.apply_metadata(md(isr_of_1=3), now=2.5)  # recovered: the update itself releases it
    assert s.view.usable == (0, 1, 2)
    assert not s.wants_fast_refresh


def test_release_by_time_when_metadata_never_showed_a_problem() -> None:
    s = state()
    s.strike([1], 0.0)
    assert s.release_due(0.5) == ([], 1.0)
    assert s.release_due(1.0) == ([1], None)
    assert s.view.usable == (0, 1, 2)


def test_unchanged_metadata_keeps_the_rotation_and_updates_the_age() -> None:
    s = state()
    first = [s.chooser.next_keyless() for _ in range(2)]
    s.apply_metadata(dataclasses.replace(md(), fetched_at=9.0), now=9.0)
    assert s.view.metadata_fetched_at == 9.0
    following = s.chooser.next_keyless()
    assert following not in first  # the cycle went on rather than restarting


def test_a_shrunk_topic_forgets_quarantines_of_vanished_partitions() -> None:
    s = state()
    s.strike([2], 0.0)
    s.apply_metadata(md(n=2), now=0.1)
    assert s.quarantine.partitions == frozenset()
    assert s.view.num_partitions == 2


def test_a_held_write_returns_when_the_isr_changes_not_after_the_backoff() -> None:
    s = state()
    assert s.strike([1], 0.0, held=True)
    assert s.release_due(1.0) == ([], 30.0)  # back-off over, metadata unchanged: still out
    s.apply_metadata(md(), now=2.0)  # the same facts again
    assert 1 not in s.view.usable
    s.apply_metadata(md(isr_of_1=2), now=3.0)  # the ISR shrank to 2 = min: usable, changed
    assert s.view.usable == (0, 1, 2)
    assert not s.wants_fast_refresh


def test_a_held_write_on_every_partition_is_released_after_the_backoff() -> None:
    s = state()
    for p in range(3):
        assert s.strike([p], 0.0, held=True)
    assert s.release_due(0.5) == ([], 1.0)
    assert s.release_due(1.0) == ([0, 1, 2], None)  # nothing else takes writes
