"""The demo's token bucket: a steady rate, a bounded catch-up, nothing invented."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from failover_partitioner.demo.pacing import TokenBucket


def test_first_message_goes_out_at_once_then_one_per_interval() -> None:
    bucket = TokenBucket(rate_per_s=10, burst=5, now_s=0.0)
    assert bucket.take(0.0) == 1
    assert bucket.take(0.05) == 0
    assert bucket.wait_s() == pytest.approx(0.05)
    assert bucket.take(0.1) == 1
    assert bucket.take(1.1) == 5  # 10 were due, the burst caps the catch-up


def test_time_going_backwards_adds_nothing() -> None:
    bucket = TokenBucket(rate_per_s=100, burst=10, now_s=5.0)
    bucket.take(5.0)
    assert bucket.take(4.0) == 0
    assert bucket.take(5.0) == 0


@pytest.mark.parametrize(("rate", "burst"), [(0, 1), (-1, 1), (float("nan"), 1), (10, 0)])
def test_bad_settings_are_refused_with_the_value(rate: float, burst: int) -> None:
    with pytest.raises(ValueError, match=r"rate_per_s|burst"):
        TokenBucket(rate_per_s=rate, burst=burst, now_s=0.0)


@given(
    rate=st.floats(min_value=0.5, max_value=5000),
    steps=st.lists(st.floats(min_value=0, max_value=1), min_size=1, max_size=50),
)
def test_never_more_than_the_rate_allows(rate: float, steps: list[float]) -> None:
    bucket = TokenBucket(rate_per_s=rate, burst=1_000_000, now_s=0.0)
    now, taken = 0.0, bucket.take(0.0)
    for dt in steps:
        now += dt
        taken += bucket.take(now)
    assert taken <= 1 + rate * now + 1e-6
    # With a burst large enough to save everything, nothing due is withheld either.
    assert taken >= rate * now


@given(
    rate=st.floats(min_value=1, max_value=1000),
    burst=st.integers(min_value=1, max_value=50),
    gap_s=st.floats(min_value=0, max_value=100),
)
def test_catch_up_after_a_pause_is_bounded_by_the_burst(
    rate: float, burst: int, gap_s: float
) -> None:
    bucket = TokenBucket(rate_per_s=rate, burst=burst, now_s=0.0)
    bucket.take(0.0)
    assert bucket.take(gap_s) <= burst
