"""Quarantine back-off and release, driven by a fake clock."""

from __future__ import annotations

import pytest

from failover_partitioner.quarantine import Quarantine, QuarantinePolicy


def always(_: int) -> bool:
    return True


def never(_: int) -> bool:
    return False


def test_strike_quarantines_at_once_and_releases_after_backoff() -> None:
    q = Quarantine(QuarantinePolicy(initial_s=1.0, max_s=8.0))
    assert q.strike(3, now=10.0)
    assert 3 in q
    assert q.release_due(10.9, always) == []
    assert q.release_due(11.0, always) == [3]
    assert 3 not in q


def test_backoff_doubles_per_consecutive_strike_up_to_max() -> None:
    q = Quarantine(QuarantinePolicy(initial_s=1.0, max_s=5.0))
    now = 0.0
    backoffs = []
    for _ in range(5):
        q.strike(0, now)
        until = q.until(0)
        assert until is not None
        backoffs.append(until - now)
        now = until
        assert q.release_due(now, always) == [0]
    assert backoffs == [1.0, 2.0, 4.0, 5.0, 5.0]


def test_failures_already_in_flight_do_not_extend_the_backoff() -> None:
    q = Quarantine(QuarantinePolicy(initial_s=1.0))
    assert q.strike(0, 0.0)
    assert not q.strike(0, 0.5)
    assert q.strikes(0) == 1
    assert q.until(0) == 1.0


def test_release_waits_for_metadata_to_show_the_partition_usable() -> None:
    q = Quarantine(QuarantinePolicy(initial_s=1.0))
    q.strike(0, 0.0)
    assert q.release_due(5.0, never) == []
    assert 0 in q
    assert q.release_due(6.0, always) == [0]


def test_a_partition_quiet_for_max_s_after_release_is_forgiven() -> None:
    q = Quarantine(QuarantinePolicy(initial_s=1.0, max_s=4.0))
    q.strike(0, 0.0)
    q.release_due(1.0, always)
    q.strike(0, 2.0)  # soon after release: escalates
    assert q.until(0) == 4.0
    q.release_due(4.0, always)
    q.strike(0, 9.0)  # more than max_s after release: back to the initial back-off
    assert q.strikes(0) == 1
    assert q.until(0) == 10.0


def test_next_release_and_forget() -> None:
    q = Quarantine()
    assert q.next_release_at() is None
    q.strike(1, 0.0)
    q.strike(2, 1.0)
    assert q.next_release_at() == pytest.approx(0.5)
    q.forget([1])
    assert q.partitions == frozenset({2})
    assert len(q) == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"initial_s": 0}, "initial_s must be > 0 seconds, got 0"),
        ({"initial_s": 2.0, "max_s": 1.0}, r"max_s \(1.0\) must be >= initial_s \(2.0\)"),
        ({"multiplier": 0.5}, "multiplier must be >= 1, got 0.5"),
    ],
)
def test_bad_policy_is_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        QuarantinePolicy(**kwargs)


def test_huge_strike_counts_stay_capped() -> None:
    assert QuarantinePolicy(initial_s=1.0, max_s=30.0).backoff_s(10_000) == 30.0


def test_next_release_after_skips_backoffs_waiting_for_metadata() -> None:
    q = Quarantine(QuarantinePolicy(initial_s=1.0))
    q.strike(0, 0.0)
    q.strike(1, 5.0)
    assert q.release_due(2.0, never) == []
    assert q.next_release_at() == 1.0  # over, but the metadata still shows it unusable
    assert q.next_release_after(2.0) == 6.0
    assert q.next_release_after(7.0) is None


def test_a_held_write_keeps_its_partition_out_until_its_metadata_changes() -> None:
    """A partition that held a write until a timeout stays out after the back-off while its
    metadata is what it was at the strike (it would hold the next writes too), and returns
    once the metadata differs (the ISR shrank or the follower came back), or after max_s."""
    q = Quarantine(QuarantinePolicy(initial_s=1.0, max_s=30.0))
    seen = {0: "leader 1, isr 1 2 3"}
    assert q.strike(0, 0.0, held=seen[0])
    assert q.held(0)
    assert q.release_due(5.0, always, seen.get) == []  # back-off over, nothing changed
    assert q.next_release_after(5.0) == 30.0
    seen[0] = "leader 1, isr 1 2"  # the follower dropped out
    assert q.release_due(5.1, always, seen.get) == [0]
    assert not q.held(0)

    assert q.strike(0, 40.0, held=seen[0])
    assert q.release_due(69.9, always, seen.get) == []
    assert q.release_due(70.0, always, seen.get) == [0]  # max_s: tried again anyway


def test_a_changed_metadata_releases_a_held_write_only_after_its_backoff() -> None:
    q = Quarantine(QuarantinePolicy(initial_s=1.0, max_s=30.0))
    assert q.strike(0, 0.0, held="before")
    assert q.next_release_after(0.0) == 1.0
    assert q.release_due(0.5, always, lambda p: "after") == []
    assert q.release_due(1.0, always, lambda p: "after") == [0]


def test_a_held_write_on_the_last_partition_left_ends_after_its_backoff() -> None:
    """Nowhere else to go (``elsewhere=False``): keeping it out only stalls every message."""
    q = Quarantine(QuarantinePolicy(initial_s=1.0, max_s=30.0))
    assert q.strike(0, 0.0, held="same")
    assert q.release_due(1.0, always, lambda p: "same", elsewhere=False) == [0]
