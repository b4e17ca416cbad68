"""The metadata refreshers' shared steps, and the asyncio refresher built on them."""

from __future__ import annotations

import asyncio
import logging

import pytest
from tenacity import RetryError, Retrying, wait_none

from failover_partitioner import ConfigError, MetadataUnavailable, TopicMetadata
from failover_partitioner.aio._metadata import AioMetadataRefresher
from failover_partitioner.health import PartitionMetadata
from failover_partitioner.metadata import MinIsr, PartitionsAnswer, _steps

LOG = logging.getLogger("test_metadata_steps")
PARTS = tuple(
    PartitionMetadata(partition=p, leader=1, replicas=(1, 2, 3), isr=(1, 2)) for p in range(2)
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.calls = 0

    def __call__(self) -> float:
        self.calls += 1
        return self.now


@pytest.mark.parametrize("name", ["metadata_timeout_s", "metadata request_timeout_s"])
@pytest.mark.parametrize("value", [0, -1.5, True, "5", None])
def test_a_bad_request_timeout_is_refused_under_the_callers_name(name: str, value: object) -> None:
    with pytest.raises(ConfigError, match=f"^{name} must be a number of seconds > 0, got "):
        _steps.check_request_timeout_s(value, name)


def test_a_request_timeout_comes_back_as_float_seconds() -> None:
    timeout = _steps.check_request_timeout_s(3, "metadata_timeout_s")
    assert timeout == 3.0
    assert type(timeout) is float


def test_the_option_sets_min_isr_for_the_topics_it_names_only() -> None:
    assert _steps.option_min_isr(2, "orders") == MinIsr(value=2, source="option")
    assert _steps.option_min_isr({"orders": 3}, "orders") == MinIsr(value=3, source="option")
    assert _steps.option_min_isr({"orders": 3}, "payments") is None
    assert _steps.option_min_isr(None, "orders") is None


def test_the_default_min_isr_is_1_and_warned_once_per_topic(
    caplog: pytest.LogCaptureFixture,
) -> None:
    warned: set[str] = set()
    with caplog.at_level(logging.WARNING, logger=LOG.name):
        first = [_steps.default_min_isr(t, warned, LOG) for t in ("a", "a", "b", "a")]
    assert first == [MinIsr(value=1, source="default")] * 4
    assert [r.getMessage().split(" is ")[0] for r in caplog.records] == [
        "min.insync.replicas of topic a",
        "min.insync.replicas of topic b",
    ]
    assert warned == {"a", "b"}


def _view(
    at: float, min_isr: MinIsr | None, answer: PartitionsAnswer, warned: set[str]
) -> TopicMetadata:
    return _steps.topic_metadata("orders", answer, min_isr, at, warned, LOG)


def test_a_fetch_becomes_the_topics_view_with_its_min_isr_and_time() -> None:
    md = _view(12.5, MinIsr(value=2, source="topic"), PartitionsAnswer(partitions=PARTS), set())
    assert md == TopicMetadata(
        topic="orders",
        partitions=PARTS,
        min_insync_replicas=2,
        min_isr_source="topic",
        exists=True,
        fetched_at=12.5,
    )


def test_an_unknown_min_isr_is_1_warned_of_once_unless_the_topic_is_not_listed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    warned: set[str] = set()
    with caplog.at_level(logging.WARNING, logger=LOG.name):
        missing = _view(1.0, None, PartitionsAnswer(partitions=(), exists=False), warned)
        assert caplog.records == []  # nothing to read yet: no warning
        listed = _view(2.0, None, PartitionsAnswer(partitions=PARTS), warned)
    assert (missing.min_insync_replicas, listed.min_insync_replicas) == (1, 1)
    assert [r.getMessage()[:34] for r in caplog.records] == ["min.insync.replicas of topic order"]
    assert warned == {"orders"}


def test_a_failed_fetch_says_how_old_the_kept_view_is(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    last = _view(997.5, MinIsr(value=2, source="topic"), PartitionsAnswer(partitions=PARTS), set())
    with caplog.at_level(logging.WARNING, logger=LOG.name):
        _steps.log_fetch_failure(LOG, "orders", OSError("refused"), None, clock)
        assert clock.calls == 0  # nothing to age
        _steps.log_fetch_failure(LOG, "orders", OSError("refused"), last, clock)
    assert [r.getMessage() for r in caplog.records] == [
        "metadata for topic orders could not be fetched (refused); keeping the last view, "
        "never fetched old",
        "metadata for topic orders could not be fetched (refused); keeping the last view, "
        "2.5 s old",
    ]


def test_no_metadata_names_the_clients_own_servers_option() -> None:
    error = _steps.no_metadata("orders", 1.5, "bootstrap_servers")
    assert isinstance(error, MetadataUnavailable)
    assert str(error).startswith(
        "no metadata for topic 'orders' within 1.5 s; check bootstrap_servers and"
    )


@pytest.mark.parametrize(("time_left_s", "tries"), [(60.0, 4), (0.0, 1), (-5.0, 1)])
def test_a_fetch_is_tried_four_times_at_most_and_not_after_its_deadline(
    time_left_s: float, tries: int
) -> None:
    calls = 0

    def fail() -> None:
        nonlocal calls
        calls += 1
        raise OSError("refused")

    retrying = Retrying(stop=_steps.fetch_stop(100.0 + time_left_s, 100.0), wait=wait_none())
    with pytest.raises(RetryError):
        retrying(fail)
    assert calls == tries


class FakeAsyncSource:
    def __init__(self) -> None:
        self.fail = False
        self.min_isr: MinIsr | None = MinIsr(value=2, source="topic")

    async def partitions(self, topic: str, timeout_s: float) -> PartitionsAnswer:
        if self.fail:
            raise ConnectionError("broker unreachable")
        return PartitionsAnswer(partitions=PARTS)

    async def min_insync_replicas(self, topic: str, timeout_s: float) -> MinIsr | None:
        return self.min_isr


def test_the_asyncio_refresher_keeps_the_last_view_and_falls_back_to_min_isr_1(
    caplog: pytest.LogCaptureFixture,
) -> None:
    source, clock, updates = FakeAsyncSource(), Clock(), list[TopicMetadata]()

    async def main() -> None:
        r = AioMetadataRefresher(source, updates.append, clock=clock)
        md = await r.fetch_now("orders", 1.0)
        assert (md.min_insync_replicas, md.min_isr_source, md.fetched_at) == (2, "topic", 1000.0)
        source.fail = True
        clock.now += 30
        with pytest.raises(MetadataUnavailable, match="check bootstrap_servers"):
            await r.fetch_now("orders", 0.01)
        assert r.metadata("orders") == md
        assert r.age_s("orders") == 30.0
        source.fail, source.min_isr = False, None
        clock.now += 300
        assert (await r.fetch_now("payments", 1.0)).min_insync_replicas == 1
        await r.fetch_now("payments", 1.0)

    with caplog.at_level(logging.WARNING, logger="failover_partitioner.aio._metadata"):
        asyncio.run(main())
    messages = [r.getMessage() for r in caplog.records]
    assert any("orders could not be fetched" in m and "30.0 s old" in m for m in messages)
    assert sum("min.insync.replicas of topic payments" in m for m in messages) == 1
    assert len(updates) == 3


def test_the_asyncio_refresher_refuses_a_bad_timeout_under_the_producers_option() -> None:
    with pytest.raises(ConfigError, match=r"^metadata_timeout_s must be"):
        AioMetadataRefresher(FakeAsyncSource(), lambda md: None, request_timeout_s=0)


def test_an_answer_is_taken_unless_one_to_a_later_request_was() -> None:
    order = _steps.AnswerOrder()
    first, second = order.sent("orders"), order.sent("orders")
    other = order.sent("payments")
    assert order.take("orders", second)
    assert not order.take("orders", first)  # older, arriving last
    assert order.take("payments", other)  # topics apart
    third = order.sent("orders")
    assert order.take("orders", third)
    assert not order.take("orders", third)  # once


def test_a_hedge_sends_at_once_then_on_silence_or_failure_and_gives_up_at_the_deadline() -> None:
    plan = _steps.Hedge(deadline=10.0, hedge_s=0.25)
    assert plan.next_step(0.0, pending=0) == plan.SEND
    plan.sent(0.0)
    assert plan.next_step(0.1, pending=1) == pytest.approx(0.15)  # wait for the first
    assert plan.next_step(0.25, pending=1) == plan.SEND  # silent: ask the next too
    plan.sent(0.25)
    assert plan.next_step(0.3, pending=0) == plan.SEND  # both failed: the next at once
    plan.exhausted()
    assert plan.next_step(0.3, pending=0) is None  # none left, none pending
    assert plan.next_step(0.3, pending=1) == pytest.approx(9.7)  # the last may still answer
    assert plan.next_step(10.0, pending=1) is None


def test_leaders_first_puts_a_topics_leaders_first_and_drops_unlisted_ones() -> None:
    assert _steps.leaders_first([3, 3, 9, 2], [1, 2, 3, 4]) == (3, 2, 1, 4)
