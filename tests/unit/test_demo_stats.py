"""The demo's accounting: loss from the consume-back, stalls, latencies, per-second bins."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from failover_partitioner.demo.stats import (
    DeliveryLog,
    Record,
    Status,
    per_second,
    percentile,
    summarize,
)


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def test_log_records_each_message_once_with_its_first_outcome() -> None:
    clock = FakeClock()
    log = DeliveryLog(clock=clock)
    a, b, c = log.begin(), log.begin(), log.begin()
    assert (a, b, c) == (0, 1, 2)
    clock.now_s = 0.25
    log.acked(a)
    log.failed(a, "late duplicate outcome")  # ignored: the first outcome stands
    log.failed(b, "NOT_ENOUGH_REPLICAS")
    assert log.counts() == (3, 1, 1)
    assert log.pending() == [2]
    clock.now_s = 2.0
    log.undelivered(c, "_PURGE_QUEUE")
    records = log.records()
    assert records[0] == Record(sent_s=0.0, status=Status.ACKED, done_s=0.25)
    assert records[1].error == "NOT_ENOUGH_REPLICAS"
    assert records[2].status is Status.UNDELIVERED
    assert log.pending() == []


def test_withdraw_only_the_latest_pending_message() -> None:
    log = DeliveryLog(clock=FakeClock())
    first, second = log.begin(), log.begin()
    with pytest.raises(ValueError, match="seq=0"):
        log.withdraw(first)
    log.withdraw(second)
    assert log.counts() == (1, 0, 0)
    assert log.begin() == 1  # the withdrawn number is handed out again


def test_loss_comes_from_the_topic_not_from_the_callbacks() -> None:
    records = [
        Record(sent_s=0.0, status=Status.ACKED, done_s=0.010),  # delivered, found
        Record(sent_s=0.0, status=Status.FAILED, done_s=0.5, error="X"),  # failed but in topic
        Record(sent_s=1.0, status=Status.UNDELIVERED, done_s=9.0),  # purged, not in topic
        Record(sent_s=1.0, status=Status.ACKED, done_s=1.020),  # acked yet missing: lost
        Record(sent_s=2.0),  # never reported, not in topic
    ]
    found = {0: 1, 1: 3}  # the failed one was written three times
    s = summarize(
        name="plain", records=records, found=found, end_s=10.0, rerouted=0, possible_duplicates=None
    )
    assert (s.sent, s.delivered, s.failed, s.undelivered) == (5, 2, 1, 2)
    assert (s.found, s.lost, s.lost_after_ack) == (2, 3, 1)
    assert (s.duplicates, s.duplicated_messages) == (2, 1)
    assert s.possible_duplicates is None
    # The purged message waited 8 s, and so did the never-reported one (until the deadline).
    assert s.longest_stall_s == pytest.approx(8.0)
    assert s.not_delivered_within_1s == 3
    assert s.p50_ms == pytest.approx(10.0)
    assert s.p99_ms == pytest.approx(20.0)
    assert s.delivered_per_s == (1, 1, 0, 0, 0, 0, 0, 0, 0, 0)


def test_a_run_with_nothing_acknowledged_has_no_latency() -> None:
    s = summarize(
        name="x",
        records=[Record(sent_s=0.0)],
        found={},
        end_s=0.5,
        rerouted=0,
        possible_duplicates=0,
    )
    assert (s.p50_ms, s.p99_ms, s.lost) == (None, None, 1)
    assert s.delivered_per_s == (0,)


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0
    assert percentile([7.0], 1) == 7.0
    assert percentile([], 50) is None
    with pytest.raises(ValueError, match="q=0"):
        percentile(values, 0)


@given(
    values=st.lists(st.floats(min_value=0, max_value=1e6), min_size=1, max_size=200),
    q=st.floats(min_value=0.1, max_value=100),
)
def test_percentile_is_a_value_with_at_least_q_percent_at_or_below(
    values: list[float], q: float
) -> None:
    p = percentile(values, q)
    assert p in values
    assert sum(1 for v in values if v <= p) >= q / 100 * len(values) - 1e-9


@given(
    times=st.lists(st.floats(min_value=-5, max_value=50, allow_nan=False), max_size=300),
    end_s=st.floats(min_value=0.1, max_value=40),
)
def test_per_second_counts_every_time_inside_the_run_once(times: list[float], end_s: float) -> None:
    bins = per_second(times, end_s=end_s)
    assert sum(bins) == sum(1 for t in times if 0 <= t < len(bins))
    assert len(bins) >= end_s


_statuses = st.sampled_from(list(Status))


@given(
    outcomes=st.lists(
        st.tuples(
            _statuses,
            st.floats(min_value=0, max_value=10),
            st.floats(min_value=0, max_value=10),
        ),
        max_size=60,
    ),
    copies=st.lists(st.integers(min_value=0, max_value=3), max_size=60),
)
def test_summary_figures_add_up(
    outcomes: list[tuple[Status, float, float]], copies: list[int]
) -> None:
    records = [
        Record(
            sent_s=sent,
            status=status,
            done_s=None if status is Status.PENDING else sent + wait,
        )
        for status, sent, wait in outcomes
    ]
    found = {seq: n for seq, n in enumerate(copies[: len(records)]) if n > 0}
    s = summarize(
        name="p", records=records, found=found, end_s=25.0, rerouted=3, possible_duplicates=2
    )
    assert s.delivered + s.failed + s.undelivered == s.sent == len(records)
    assert s.found + s.lost == s.sent
    assert s.lost_after_ack <= min(s.lost, s.delivered)
    assert s.duplicates == sum(n - 1 for n in found.values())
    assert s.duplicated_messages == sum(1 for n in found.values() if n > 1) <= s.duplicates
    assert sum(s.delivered_per_s) == s.delivered
    assert s.longest_stall_s >= 0
    if s.p50_ms is not None and s.p99_ms is not None:
        assert s.p50_ms <= s.p99_ms <= s.longest_stall_s * 1000 + 1e-6
