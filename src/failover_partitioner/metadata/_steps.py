"""The refresher's steps on plain values, shared by the threaded refresher and its asyncio twin.

What differs between the two (a lock or none, a call or an await) stays in each class; what
they decide alike lives here once.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping

from tenacity import stop_after_attempt, stop_after_delay, wait_exponential
from tenacity.stop import stop_base

from failover_partitioner.errors import ConfigError, MetadataUnavailable
from failover_partitioner.health import TopicMetadata
from failover_partitioner.metadata._source import MinIsr, PartitionsAnswer

__all__ = [
    "FETCH_WAIT",
    "HEDGE_S",
    "AnswerOrder",
    "Hedge",
    "check_request_timeout_s",
    "default_min_isr",
    "doubling_s",
    "fetch_stop",
    "leaders_first",
    "log_fetch_failure",
    "no_metadata",
    "option_min_isr",
    "topic_metadata",
]

# Between a fetch's tries: 50 ms, doubling, at most 1 s.
FETCH_WAIT = wait_exponential(multiplier=0.05, max=1.0)


class AnswerOrder:
    """Keeps the answers of overlapping requests in order. Each request is numbered as it is
    sent (:meth:`sent`); its answer is taken (:meth:`take`) unless the answer to one sent
    later was taken already. A ``refresh()`` racing the background's fetch of the same topic
    would otherwise let the older answer, arriving last, replace the newer view. Plain
    state: the caller locks."""

    __slots__ = ("_sent", "_taken")

    def __init__(self) -> None:
        self._sent: dict[str, int] = {}
        self._taken: dict[str, int] = {}

    def sent(self, key: str) -> int:
        number = self._sent[key] = self._sent.get(key, 0) + 1
        return number

    def take(self, key: str, number: int) -> bool:
        if number <= self._taken.get(key, 0):
            return False
        self._taken[key] = number
        return True


# A lookup any of several brokers can answer, unanswered this long, also goes to the next.
HEDGE_S = 0.25


class Hedge:
    """When to send a lookup that any of several brokers can answer: the first request at
    once, the next when all sent so far failed or none answered for ``hedge_s`` (a stopped
    broker stays listed until the controller fences it, a paused one accepts connections and
    answers nothing), none from ``deadline`` on. The first answer counts. Plain state on the
    caller's clock: the caller sends, waits and tells."""

    __slots__ = ("_deadline", "_hedge_s", "_more", "_next_at")

    SEND = 0.0  # next_step's "send the next request now"

    def __init__(self, deadline: float, hedge_s: float = HEDGE_S) -> None:
        self._deadline = deadline
        self._hedge_s = hedge_s
        self._next_at = -math.inf
        self._more = True

    def next_step(self, now: float, pending: int) -> float | None:
        """With ``pending`` requests unanswered at ``now``: :attr:`SEND`, or how long to wait
        for an answer before asking again (> 0), or None: give up."""
        if now >= self._deadline:
            return None
        if self._more and (not pending or now >= self._next_at):
            return self.SEND
        if not pending:
            return None
        return (min(self._deadline, self._next_at) if self._more else self._deadline) - now

    def sent(self, now: float) -> None:
        self._next_at = now + self._hedge_s

    def exhausted(self) -> None:
        """No request left to send: only those sent may still answer."""
        self._more = False


def leaders_first(leaders: Iterable[int], brokers: Iterable[int]) -> tuple[int, ...]:
    """The ids of ``brokers``, those among ``leaders`` (a topic's partition leaders) first:
    they answered the controller lately (a stopped broker loses its leaderships once fenced)."""
    listed = tuple(brokers)
    first = tuple(dict.fromkeys(b for b in leaders if b in listed))
    return (*first, *(b for b in listed if b not in first))


def doubling_s(first_s: float, failures: int, cap_s: float) -> float:
    """The wait after ``failures`` failures in a row (>= 1): ``first_s``, doubling each
    time, at most ``cap_s``."""
    return min(cap_s, first_s * 2.0 ** min(failures - 1, 16))


def fetch_stop(deadline: float, now: float) -> stop_base:
    """When to give up a fetch that must end by ``deadline``: after four tries, or then."""
    return stop_after_attempt(4) | stop_after_delay(max(0.0, deadline - now))


def check_request_timeout_s(value: object, name: str) -> float:
    """``value`` as seconds > 0; ``name`` is what the error calls it (the caller's option)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(f"{name} must be a number of seconds > 0, got {value!r}")
    return float(value)


def option_min_isr(option: int | Mapping[str, int] | None, topic: str) -> MinIsr | None:
    """What ``min_insync_replicas=`` sets for ``topic``; None when the cluster must say."""
    if isinstance(option, int):
        return MinIsr(value=option, source="option")
    if option is not None and topic in option:
        return MinIsr(value=option[topic], source="option")
    return None


def default_min_isr(topic: str, warned: set[str], log: logging.Logger) -> MinIsr:
    """1, when neither the option nor the cluster says; ``log`` warns once per topic."""
    if topic not in warned:
        warned.add(topic)
        log.warning(
            "min.insync.replicas of topic %s is unknown (DescribeConfigs failed or is not "
            "allowed); assuming 1 until it can be read. Pass min_insync_replicas= to set it",
            topic,
        )
    return MinIsr(value=1, source="default")


def heed_min_isr(topic: str, answer: MinIsr, warned: set[str], log: logging.Logger) -> MinIsr:
    """``answer`` as read; a value assumed from the brokers' own is told once per topic."""
    if answer.source == "broker-default" and topic not in warned:
        warned.add(topic)
        log.warning(
            "min.insync.replicas of topic %s cannot be read (no DESCRIBE_CONFIGS right on the "
            "topic); assuming the brokers' default, %d. A value set on the topic itself would "
            "be missed: pass min_insync_replicas= to set it",
            topic,
            answer.value,
        )
    return answer


def topic_metadata(
    topic: str,
    answer: PartitionsAnswer,
    min_isr: MinIsr | None,
    now: float,
    warned: set[str],
    log: logging.Logger,
) -> TopicMetadata:
    """The view of ``topic`` that a successful fetch at ``now`` gives. ``min_isr``: as read,
    None when unknown: 1, with a warning (:func:`default_min_isr`) unless the cluster does not
    list the topic (nothing to read yet; the schedule asks again once it is listed)."""
    if min_isr is None:
        min_isr = (
            default_min_isr(topic, warned, log)
            if answer.exists
            else MinIsr(value=1, source="default")
        )
    return TopicMetadata(
        topic=topic,
        partitions=answer.partitions,
        min_insync_replicas=min_isr.value,
        min_isr_source=min_isr.source,
        exists=answer.exists,
        fetched_at=now,
        refused=answer.refused,
    )


def log_fetch_failure(
    log: logging.Logger,
    topic: str,
    exc: Exception,
    last: TopicMetadata | None,
    clock: Callable[[], float],
) -> None:
    """Say that the fetch failed and how old the view kept instead is."""
    log.warning(
        "metadata for topic %s could not be fetched (%s); keeping the last view, %s old",
        topic,
        exc,
        "never fetched" if last is None else f"{clock() - last.fetched_at:.1f} s",
    )


def no_metadata(topic: str, timeout_s: float, servers_option: str) -> MetadataUnavailable:
    """The error of a first fetch that found nothing in time (``servers_option``: the
    client's name for its bootstrap servers, which the user should check)."""
    return MetadataUnavailable(
        f"no metadata for topic {topic!r} within {timeout_s:g} s; check "
        f"{servers_option} and that the cluster is reachable (the producer keeps "
        "trying in the background)"
    )
