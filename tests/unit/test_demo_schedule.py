"""The demo's timeline and its message ids."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from failover_partitioner.demo.messages import VALUE_BYTES, MessageId, decode, encode
from failover_partitioner.demo.schedule import Schedule


def test_fault_sits_in_the_middle_with_recovery_before_the_end() -> None:
    s = Schedule.plan(duration_s=40, with_fault=True)
    assert (s.fault_start_s, s.fault_end_s) == pytest.approx((12.0, 28.0))
    assert [s.phase_at(t) for t in (0, 11.9, 12, 27.9, 28, 39.9, 40)] == [
        "steady", "steady", "FAULT", "FAULT", "recovery", "recovery", "draining",
    ]  # fmt: skip


def test_without_a_fault_the_run_is_steady_until_it_drains() -> None:
    s = Schedule.plan(duration_s=10, with_fault=False)
    assert s.fault_start_s is None
    assert {s.phase_at(t) for t in (0, 3, 5, 9.99)} == {"steady"}
    assert s.phase_at(10) == "draining"


@pytest.mark.parametrize("duration", [0, -1, float("inf"), float("nan")])
def test_a_duration_must_be_positive(duration: float) -> None:
    with pytest.raises(ValueError, match="duration_s"):
        Schedule.plan(duration_s=duration, with_fault=True)


@given(
    run_id=st.text(alphabet="0123456789abcdef", min_size=1, max_size=16),
    producer=st.sampled_from(["plain", "failover", "x"]),
    seq=st.integers(min_value=0, max_value=10**12),
)
def test_ids_round_trip_through_the_value(run_id: str, producer: str, seq: int) -> None:
    value = encode(run_id, producer, seq)
    assert decode(value) == MessageId(run_id, producer, seq)
    assert len(value) >= VALUE_BYTES


@pytest.mark.parametrize(
    "value", [None, b"", b"hello", b"run plain notanumber .", b"\xff \xfe 1 ."]
)
def test_values_the_demo_did_not_write_are_ignored(value: bytes | None) -> None:
    assert decode(value) is None


@pytest.mark.parametrize(
    ("run_id", "producer", "seq"), [("", "plain", 0), ("ab", "has space", 0), ("ab", "p", -1)]
)
def test_encode_refuses_ids_it_could_not_read_back(run_id: str, producer: str, seq: int) -> None:
    with pytest.raises(ValueError, match=r"run_id|producer|seq"):
        encode(run_id, producer, seq)
