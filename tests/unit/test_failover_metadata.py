"""Metadata refresh: schedule, min.insync.replicas resolution, retries, keeping the last view."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import ConfigResource  # type: ignore[attr-defined]  # stubs lag

from failover_partitioner import ConfigError, MetadataUnavailable, TopicMetadata
from failover_partitioner.health import PartitionMetadata
from failover_partitioner.metadata import (
    MetadataRefresher,
    MinIsr,
    PartitionsAnswer,
    RefreshSchedule,
)
from failover_partitioner.metadata.confluent import ConfluentMetadataSource, admin_config


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeSource:
    def __init__(self) -> None:
        self.isr: tuple[int, ...] = (1, 2, 3)
        self.fail_partitions = 0  # how many next partitions() calls raise
        self.min_isr: MinIsr | None = MinIsr(value=2, source="topic")
        self.min_isr_raises = False
        self.exists = True
        self.calls = 0
        self.min_isr_calls = 0

    def partitions(self, topic: str, timeout_s: float) -> PartitionsAnswer:
        self.calls += 1
        if self.fail_partitions:
            self.fail_partitions -= 1
            raise ConnectionError("broker unreachable")
        if not self.exists:
            return PartitionsAnswer(partitions=(), exists=False)
        parts = tuple(
            PartitionMetadata(partition=p, leader=1, replicas=(1, 2, 3), isr=self.isr)
            for p in range(3)
        )
        return PartitionsAnswer(partitions=parts)

    def min_insync_replicas(self, topic: str, timeout_s: float) -> MinIsr | None:
        self.min_isr_calls += 1
        if self.min_isr_raises:
            raise TimeoutError("DescribeConfigs timed out")
        return self.min_isr

    def close(self) -> None:
        pass


def refresher(
    source: FakeSource, clock: Clock, **kwargs: object
) -> tuple[MetadataRefresher, list[TopicMetadata]]:
    updates: list[TopicMetadata] = []
    r = MetadataRefresher(source, updates.append, clock=clock, **kwargs)  # type: ignore[arg-type]  # test kwargs
    return r, updates


def test_fetch_now_builds_metadata_with_the_topics_min_isr() -> None:
    source, clock = FakeSource(), Clock()
    r, updates = refresher(source, clock)
    md = r.fetch_now("orders", 1.0)
    assert md.min_insync_replicas == 2
    assert md.min_isr_source == "topic"
    assert [p.isr for p in md.partitions] == [(1, 2, 3)] * 3
    assert updates == [md]
    assert r.age_s("orders") == 0.0
    clock.now += 7
    assert r.age_s("orders") == 7.0


def test_explicit_option_wins_over_the_cluster() -> None:
    source, clock = FakeSource(), Clock()
    r, _ = refresher(source, clock, min_insync_replicas={"orders": 3})
    assert r.fetch_now("orders", 1.0).min_insync_replicas == 3
    assert r.fetch_now("orders", 1.0).min_isr_source == "option"
    assert r.fetch_now("other", 1.0).min_isr_source == "topic"
    r2, _ = refresher(source, clock, min_insync_replicas=1)
    calls = source.min_isr_calls
    assert r2.fetch_now("orders", 1.0).min_insync_replicas == 1
    assert source.min_isr_calls == calls


def test_unknown_min_isr_falls_back_to_1_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    source, clock = FakeSource(), Clock()
    source.min_isr_raises = True
    r, _ = refresher(source, clock)
    with caplog.at_level(logging.WARNING):
        assert r.fetch_now("orders", 1.0).min_insync_replicas == 1
        r.fetch_now("orders", 1.0)
    warnings = [rec for rec in caplog.records if "min.insync.replicas" in rec.getMessage()]
    assert len(warnings) == 1
    assert r.metadata("orders") is not None


def test_min_isr_is_asked_only_now_and_then() -> None:
    s = RefreshSchedule(refresh_s=30.0, fast_refresh_s=0.5, min_isr_refresh_s=300.0)
    s.add("orders", 0.0)
    assert s.min_isr_due("orders", 0.0)
    s.min_isr_fetched("orders", 0.0, ok=True)
    assert not s.min_isr_due("orders", 299.0)
    assert s.min_isr_due("orders", 300.0)
    s.min_isr_fetched("orders", 300.0, ok=True)
    # A partition out of use: an operator may lower min ISR to bring it back (or raise it),
    # and until the topic is whole again the value is read every 5 s.
    s.set_fast("orders", True, 301.0)
    assert not s.min_isr_due("orders", 305.9)
    assert s.min_isr_due("orders", 306.0)
    s.min_isr_fetched("orders", 306.0, ok=True)
    assert s.min_isr_due("orders", 311.0)
    s.set_fast("orders", False, 311.0)
    s.min_isr_fetched("orders", 311.0, ok=True)
    assert not s.min_isr_due("orders", 610.0)
    s.ask_min_isr("orders", 312.0)  # an explicit fetch reads it again
    assert s.min_isr_due("orders", 312.0)


def test_an_explicit_fetch_reads_min_isr_again() -> None:
    source, clock = FakeSource(), Clock()
    r, _ = refresher(source, clock, min_isr_refresh_s=300.0)
    assert r.fetch_now("orders", 1.0).min_insync_replicas == 2
    source.min_isr = MinIsr(value=1, source="topic")  # lowered by an operator
    clock.now += 1
    assert r.fetch_now("orders", 1.0).min_insync_replicas == 1
    assert source.min_isr_calls == 2


def test_transient_failures_are_retried() -> None:
    source, clock = FakeSource(), Clock()
    source.fail_partitions = 2
    r, updates = refresher(source, clock)
    md = r.fetch_now("orders", 5.0)
    assert source.calls == 3
    assert updates == [md]


def test_when_metadata_cannot_be_had_the_last_view_stays_and_ages() -> None:
    source, clock = FakeSource(), Clock()
    r, updates = refresher(source, clock)
    r.fetch_now("orders", 1.0)
    source.fail_partitions = 100
    clock.now += 60
    with pytest.raises(MetadataUnavailable, match="no metadata for topic 'orders'"):
        r.fetch_now("orders", 0.01)
    assert len(updates) == 1
    assert r.age_s("orders") == 60.0
    last = r.metadata("orders")
    assert last is not None
    assert last.partitions[0].isr == (1, 2, 3)


def test_unknown_topic_is_reported_as_not_existing() -> None:
    source, clock = FakeSource(), Clock()
    source.exists = False
    r, _ = refresher(source, clock)
    assert not r.fetch_now("nope", 1.0).exists


def test_a_topic_listed_later_has_its_min_isr_read_at_once_and_none_assumed_meanwhile(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A topic the cluster does not list has no min ISR to read: no "assuming 1" warning; the
    first fetch that lists it asks for its min ISR, not the schedule's 30 s later."""
    source, clock = FakeSource(), Clock()
    source.exists = False
    source.min_isr_raises = True  # DescribeConfigs of a missing topic fails
    r, _ = refresher(source, clock)
    with caplog.at_level(logging.INFO):
        assert not r.fetch_now("late", 1.0).exists
        clock.now += 0.5
        assert not r.fetch_now("late", 1.0).exists
    assert "assuming 1" not in caplog.text
    source.exists = True
    source.min_isr_raises = False
    clock.now += 0.5
    md = r.fetch_now("late", 1.0)
    assert (md.exists, md.min_insync_replicas, md.min_isr_source) == (True, 2, "topic")


def test_schedule_refreshes_faster_while_quarantined_and_on_request() -> None:
    s = RefreshSchedule(refresh_s=30.0, fast_refresh_s=0.5, min_isr_refresh_s=300.0)
    s.add("t", 0.0)
    assert s.due(0.0) == ["t"]
    s.fetched("t", 0.0, ok=True)
    assert s.due(29.0) == []
    assert s.due(30.0) == ["t"]
    s.set_fast("t", True, 1.0)
    assert s.due(1.5) == ["t"]
    s.fetched("t", 1.5, ok=True)
    assert s.next_due_at() == 2.0
    s.set_fast("t", False, 1.6)
    s.fetched("t", 2.0, ok=True)
    assert s.next_due_at() == 32.0
    s.request("t", 2.01)
    assert s.next_due_at() == pytest.approx(2.05)  # not sooner than min_gap_s after the last


def test_schedule_keeps_a_fetch_asked_for_at_a_time_across_earlier_fetches() -> None:
    """A quarantine's back-off end asks for a fetch then: fetches before it (periodic, failed)
    do not replace it; once it is done the schedule is the periodic one again."""
    s = RefreshSchedule(refresh_s=30.0, fast_refresh_s=10.0, min_isr_refresh_s=300.0)
    s.add("t", 0.0)
    s.fetched("t", 0.0, ok=True)
    s.request_at("t", 25.0)
    s.request_at("t", 15.0)  # the earlier one counts
    s.request_at("unknown", 1.0)  # a topic not watched: nothing
    assert s.next_due_at() == 15.0
    s.set_fast("t", True, 2.0)
    s.fetched("t", 12.0, ok=True)
    assert s.next_due_at() == 15.0  # not 22.0
    s.fetched("t", 14.0, ok=False)
    assert s.next_due_at() == pytest.approx(14.1)  # the failure's own back-off is sooner
    s.fetched("t", 14.1, ok=True)
    assert s.next_due_at() == 15.0
    s.fetched("t", 15.0, ok=True)
    assert s.next_due_at() == 25.0  # the fast interval's
    s.fetched("t", 25.0, ok=True)
    assert s.next_due_at() == 35.0


def test_schedule_backs_off_after_failures() -> None:
    s = RefreshSchedule(refresh_s=30.0, fast_refresh_s=0.5, min_isr_refresh_s=300.0)
    s.add("t", 0.0)
    s.fetched("t", 0.0, ok=False)
    first = s.next_due_at()
    s.fetched("t", 0.0, ok=False)
    second = s.next_due_at()
    assert first is not None
    assert second is not None
    assert 0 < first < second <= 5.0
    assert s.last_success_at("t") is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"refresh_s": 0}, "metadata_refresh_s must be a number of seconds > 0, got 0"),
        ({"fast_refresh_s": -1}, "fast_refresh_s must be a number of seconds > 0, got -1"),
        ({"min_isr_refresh_s": "x"}, "min_isr_refresh_s must be a number of seconds > 0"),
    ],
)
def test_bad_schedule_values(kwargs: dict[str, object], message: str) -> None:
    base: dict[str, object] = {"refresh_s": 1.0, "fast_refresh_s": 1.0, "min_isr_refresh_s": 1.0}
    with pytest.raises(ConfigError, match=message):
        RefreshSchedule(**{**base, **kwargs})  # type: ignore[arg-type]  # deliberately wrong


def test_admin_config_drops_python_callbacks_and_refuses_the_mock() -> None:
    conf = {"bootstrap.servers": "b:9092", "on_delivery": print, "sasl.username": "u"}
    assert admin_config(conf) == {"bootstrap.servers": "b:9092", "sasl.username": "u"}
    assert admin_config({"test.mock.num.brokers": 3}) is None


def test_a_min_isr_lookup_cut_short_is_asked_again_at_once() -> None:
    s = RefreshSchedule(refresh_s=30.0, fast_refresh_s=0.5, min_isr_refresh_s=300.0)
    s.add("t", 0.0)
    # The first fetch's lookup ran out of its short budget: the next fetch comes at once and
    # asks again (with the fetch's full timeout).
    s.min_isr_fetched("t", 0.0, ok=False, budgeted=True)
    s.fetched("t", 0.0, ok=True)
    assert s.next_due_at() == pytest.approx(0.05)
    assert s.min_isr_due("t", 0.05)
    # Failing again with the full timeout: the usual pace (30 s), not a busy loop.
    s.min_isr_fetched("t", 0.05, ok=False)
    s.fetched("t", 0.05, ok=True)
    assert s.next_due_at() == pytest.approx(30.05)
    assert not s.min_isr_due("t", 30.0)
    assert s.min_isr_due("t", 30.05)


class SlowMinIsrSource(FakeSource):
    """DescribeConfigs answers, but not within the first fetch's short budget."""

    def min_insync_replicas(self, topic: str, timeout_s: float) -> MinIsr | None:
        if timeout_s < 1.0:
            self.min_isr_calls += 1
            raise TimeoutError("DescribeConfigs timed out")
        return super().min_insync_replicas(topic, timeout_s)


def test_the_assumed_min_isr_of_a_first_fetch_is_replaced_within_a_second() -> None:
    source = SlowMinIsrSource()
    updates: list[TopicMetadata] = []
    r = MetadataRefresher(source, updates.append, request_timeout_s=2.0)
    try:
        # fetch_now gives the lookup min(1 s, half its timeout): 0.5 s, not enough here.
        assert r.fetch_now("orders", 1.0).min_insync_replicas == 1
        r.start()
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and updates[-1].min_insync_replicas != 2:
            time.sleep(0.01)
        assert (updates[-1].min_insync_replicas, updates[-1].min_isr_source) == (2, "topic")
    finally:
        r.close()


class BlockedSource(FakeSource):
    """A request that does not return until released: one to an unreachable cluster."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def partitions(self, topic: str, timeout_s: float) -> PartitionsAnswer:
        self.entered.set()
        self.release.wait(10)
        return super().partitions(topic, timeout_s)


def test_close_does_not_wait_out_a_request_in_flight_its_last_step_runs_after_it() -> None:
    source = BlockedSource()
    r = MetadataRefresher(source, lambda md: None, request_timeout_s=5.0)
    r.start()
    r.watch("t")
    assert source.entered.wait(5)
    closed: list[str] = []
    start = time.monotonic()
    r.close(0.1, then=lambda: closed.append("client"))
    assert time.monotonic() - start < 1.0
    assert closed == []  # the request still runs on what ``then`` closes
    source.release.set()
    deadline = time.monotonic() + 5
    while not closed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert closed == ["client"]
    r.close(0.1, then=lambda: closed.append("again"))  # closing again: run at once, once
    assert closed == ["client", "again"]


def test_close_of_an_idle_refresher_runs_its_last_step_before_it_returns() -> None:
    r = MetadataRefresher(FakeSource(), lambda md: None)
    r.start()
    closed: list[str] = []
    r.close(5.0, then=lambda: closed.append("client"))
    assert closed == ["client"]


class LateFirstAnswerSource(FakeSource):
    """The first request (the thread's) is answered late, with the cluster as it was when
    the request was sent; a refresh() sent after it is answered at once."""

    def __init__(self, *, hold: str) -> None:
        super().__init__()
        self.hold = hold  # "partitions" or "min_isr": which first request is held
        self.entered = threading.Event()
        self.release = threading.Event()
        self._held = False

    def _wait_if_first(self, what: str) -> None:
        if what == self.hold and not self._held:
            self._held = True
            self.entered.set()
            self.release.wait(10)

    def partitions(self, topic: str, timeout_s: float) -> PartitionsAnswer:
        answer = super().partitions(topic, timeout_s)
        self._wait_if_first("partitions")
        return answer

    def min_insync_replicas(self, topic: str, timeout_s: float) -> MinIsr | None:
        answer = super().min_insync_replicas(topic, timeout_s)
        self._wait_if_first("min_isr")
        return answer


def test_an_older_answer_arriving_last_does_not_replace_a_refreshed_view() -> None:
    source = LateFirstAnswerSource(hold="partitions")
    source.isr = (1,)  # degraded when the thread asks
    updates: list[TopicMetadata] = []
    r = MetadataRefresher(source, updates.append, refresh_s=30.0)
    r.start()
    try:
        r.watch("orders")
        assert source.entered.wait(5)
        source.isr = (1, 2, 3)  # recovered; the user's refresh() sees it
        assert r.fetch_now("orders", 1.0).partitions[0].isr == (1, 2, 3)
        source.release.set()
    finally:
        r.close(5.0)  # the thread's fetch is over once close() returns
    assert source.calls == 2
    view = r.metadata("orders")
    assert view is not None
    assert view.partitions[0].isr == (1, 2, 3)
    assert [u.partitions[0].isr for u in updates] == [(1, 2, 3)]


def test_an_older_min_isr_answer_arriving_last_is_not_used() -> None:
    source = LateFirstAnswerSource(hold="min_isr")
    updates: list[TopicMetadata] = []
    r = MetadataRefresher(source, updates.append, refresh_s=30.0)
    r.start()
    try:
        r.watch("orders")
        assert source.entered.wait(5)
        source.min_isr = MinIsr(value=1, source="topic")  # lowered by an operator
        assert r.fetch_now("orders", 1.0).min_insync_replicas == 1
        source.release.set()
    finally:
        r.close(5.0)
    # The thread's own partitions request went out after the refresh()'s: its view is the
    # newest, with the newest min ISR (1), not the 2 its own lookup brought late.
    assert [u.min_insync_replicas for u in updates] == [1, 1]
    view = r.metadata("orders")
    assert view is not None
    assert view.min_insync_replicas == 1


class FakeClusterClient:
    """A producer's list_topics: topic "orders", partitions led by brokers 3, 2, 3."""

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        parts = {
            p: SimpleNamespace(leader=leader, replicas=[1, 2, 3], isrs=[1, 2, 3])
            for p, leader in enumerate((3, 2, 3))
        }
        orders = SimpleNamespace(partitions=parts, error=None)
        return SimpleNamespace(topics={"orders": orders}, brokers={1: None, 2: None, 3: None})


class FakeAdmin:
    """DescribeConfigs as librdkafka routes it: to the controller (here a stopped broker that
    never answers) unless a BROKER resource names the broker; ``refuse``: what brokers answer."""

    def __init__(self, refuse: int | None = None) -> None:
        self.refuse = refuse
        self.asked: list[str] = []

    def describe_configs(self, resources: list[Any], request_timeout: float) -> dict[Any, Any]:
        brokers = [r.name for r in resources if r.restype == ConfigResource.Type.BROKER]
        self.asked.append(brokers[0] if brokers else "controller")
        futures: dict[Any, Future[Any]] = {r: Future() for r in resources}
        if brokers:
            for future in futures.values():
                if self.refuse is not None:
                    future.set_exception(KafkaException(KafkaError(self.refuse)))
                else:
                    entry = SimpleNamespace(value="2", source=5)  # DEFAULT_CONFIG
                    future.set_result({"min.insync.replicas": entry})
        return futures


class FakeAdminSource(ConfluentMetadataSource):
    def __init__(self, admin: FakeAdmin) -> None:
        super().__init__(FakeClusterClient(), {})
        self.admin = admin

    def _admin_client(self) -> Any:
        return self.admin


def test_a_min_isr_lookup_the_controller_does_not_answer_goes_to_a_leader() -> None:
    source = FakeAdminSource(FakeAdmin())
    source.partitions("orders", 1.0)
    assert source.min_insync_replicas("orders", 2.0) == MinIsr(value=2, source="broker")
    assert source.admin.asked == ["controller", "3"]  # the first leader, after _HEDGE_S


def test_a_brokers_error_is_the_answer_not_a_reason_to_ask_another() -> None:
    source = FakeAdminSource(FakeAdmin(refuse=KafkaError.UNKNOWN_TOPIC_OR_PART))
    source.partitions("orders", 1.0)
    with pytest.raises(KafkaException, match="UNKNOWN_TOPIC_OR_PART"):
        source.min_insync_replicas("orders", 2.0)
    assert source.admin.asked == ["controller", "3"]
