"""The chaos schedule keeps every cluster recoverable, ends healed, and replays from its seed."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.chaos_plan import (
    ACTIONS,
    PROCESS_ACTIONS,
    ClusterShape,
    FaultEvent,
    FaultState,
    chaos_plan,
    process_plan,
)

SHAPES = {
    "source": ClusterShape(brokers=(1, 2, 3, 4, 5), max_faulted=2, weight=3),
    "target": ClusterShape(brokers=(1, 2, 3), max_faulted=1),
}


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**63), duration_s=st.floats(0.5, 300))
def test_a_plan_never_exceeds_the_fault_budget_and_ends_healed(
    seed: int, duration_s: float
) -> None:
    plan = chaos_plan(seed, duration_s, SHAPES)
    states = {name: FaultState() for name in SHAPES}
    last = 0.0
    for event in plan:
        assert event.action in ACTIONS
        assert event.broker in SHAPES[event.cluster].brokers
        assert last <= event.at_s <= duration_s
        last = event.at_s
        states[event.cluster].apply(event)  # raises for an event that does not fit
        assert len(states[event.cluster].faulted) <= SHAPES[event.cluster].max_faulted, event
        assert len(states[event.cluster].slowed) <= 1
    assert all(state.clean for state in states.values())


def test_the_same_seed_gives_the_same_plan_and_another_seed_another() -> None:
    assert chaos_plan(7, 60, SHAPES) == chaos_plan(7, 60, SHAPES)
    assert chaos_plan(7, 60, SHAPES) != chaos_plan(8, 60, SHAPES)


def test_a_minute_of_chaos_uses_every_kind_of_fault_on_both_clusters() -> None:
    plan = chaos_plan(20261122, 60, SHAPES)
    kinds = Counter(e.action for e in plan)
    assert set(kinds) == set(ACTIONS)
    assert {e.cluster for e in plan} == set(SHAPES)
    assert len(plan) >= 30
    # Two brokers of the source are hurt at the same time at some point.
    state = FaultState()
    most = 0
    for event in plan:
        if event.cluster == "source":
            state.apply(event)
            most = max(most, len(state.faulted))
    assert most == 2


def test_an_event_that_does_not_fit_the_state_is_refused() -> None:
    state = FaultState()
    with pytest.raises(ValueError, match="not in the state"):
        state.apply(FaultEvent(at_s=0, cluster="c", action="start", broker=1))
    state.apply(FaultEvent(at_s=0, cluster="c", action="stop", broker=1))
    with pytest.raises(ValueError, match="already"):
        state.apply(FaultEvent(at_s=1, cluster="c", action="stop", broker=1))
    with pytest.raises(ValueError, match="unknown action 'explode'"):
        state.apply(FaultEvent(at_s=1, cluster="c", action="explode", broker=1))
    with pytest.raises(ValueError, match="duration_s must be > 0"):
        chaos_plan(1, 0, SHAPES)


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**63), duration_s=st.floats(0.5, 600))
def test_a_process_plan_keeps_its_budget_undoes_only_what_it_did_and_ends_healed(
    seed: int, duration_s: float
) -> None:
    plan = process_plan(seed, duration_s, SHAPES)
    paused: dict[str, set[int]] = {name: set() for name in SHAPES}
    killed: dict[str, set[int]] = {name: set() for name in SHAPES}
    last = 0.0
    for event in plan:
        assert event.action in PROCESS_ACTIONS
        assert last <= event.at_s <= duration_s
        last = event.at_s
        p, k, b = paused[event.cluster], killed[event.cluster], event.broker
        if event.action == "pause":
            assert b not in p | k
            p.add(b)
        elif event.action == "resume":
            assert b in p
            p.discard(b)
        elif event.action == "kill":
            assert b not in k
            p.discard(b)
            k.add(b)
        else:
            assert b in k
            k.discard(b)
        assert len(p | k) <= SHAPES[event.cluster].max_faulted, event
    assert not any(paused.values())
    assert not any(killed.values())
    assert process_plan(3, 60, SHAPES) == process_plan(3, 60, SHAPES)
