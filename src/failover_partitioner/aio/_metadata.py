"""Knowing the cluster from asyncio: Metadata and DescribeConfigs over the producer's own client.

The source sends its own Metadata request (v5 with aiokafka 0.14) for the watched topics rather
than reading aiokafka's cache: the cache keeps no topic error codes (so "unknown topic" could
not be told from "not created yet") and its ISR sits in private fields. min.insync.replicas is
not in metadata responses (KIP-637 was never implemented); DescribeConfigs on the topic answers
it with where the value came from. Without DESCRIBE_CONFIGS on the topic, the brokers' own value
is asked of a broker that answers: those of the last metadata answer, partition leaders first,
the next whenever one fails or is silent for ``_steps.HEDGE_S`` (:class:`_steps.Hedge`).

The refresher is the asyncio twin of :class:`failover_partitioner.metadata.MetadataRefresher`,
on the same pure :class:`~failover_partitioner.metadata.RefreshSchedule`: every
``refresh_s``, every ``fast_refresh_s`` while a partition is quarantined, at once on request
(never more often than the schedule's minimum gap), retrying with back-off and keeping the last
answer, with its age, when the cluster cannot be reached. A ``refresh()`` may overlap the task's
own fetch of the topic: an answer to a request sent before the one the current view (or min ISR)
came from is dropped, whichever arrives last (:class:`_steps.AnswerOrder`).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from tenacity import AsyncRetrying

from failover_partitioner.aio._wake import Wakeup
from failover_partitioner.errors import MetadataUnavailable
from failover_partitioner.health import PartitionMetadata, TopicMetadata
from failover_partitioner.metadata import MinIsr, PartitionsAnswer, RefreshSchedule, _steps
from failover_partitioner.metadata._refresher import min_isr_option as check_min_isr_option

__all__ = [
    "AioMetadataRefresher",
    "AioMetadataSource",
    "ClientLike",
    "check_min_isr_option",
    "parse_min_isr",
    "parse_partitions",
]

logger = logging.getLogger(__name__)

_UNKNOWN_TOPIC_OR_PART = 3
_TOPIC_AUTHORIZATION_FAILED = 29
_TOPIC_RESOURCE = 2
_BROKER_RESOURCE = 4
_TOPIC_CONFIG_SOURCE = 1  # DescribeConfigs v1+: DYNAMIC_TOPIC_CONFIG


class ClientLike(Protocol):
    """What the source needs from ``AIOKafkaClient``: its brokers and a request channel."""

    @property
    def cluster(self) -> Any: ...

    async def send(self, node_id: Any, request: Any, *, group: Any) -> Any: ...


def parse_partitions(response: Any, topic: str) -> PartitionsAnswer:
    """``topic`` in a Metadata response (v1+ layout, as aiokafka decodes it).

    Raises :class:`MetadataUnavailable` for an answer worth asking again (leader election or
    topic creation in progress, a missing topic entry).
    """
    racks: dict[int, str | None] = {}
    for broker in response.brokers:
        node_id, _host, _port, rack = broker[:4]
        racks[int(node_id)] = rack
    for entry in response.topics:
        error_code, name = entry[0], entry[1]
        partitions = entry[-1]
        if name != topic:
            continue
        if error_code == _UNKNOWN_TOPIC_OR_PART:
            return PartitionsAnswer(partitions=(), exists=False)
        if error_code == _TOPIC_AUTHORIZATION_FAILED:
            return PartitionsAnswer(partitions=(), exists=False, refused=True)
        if not partitions:
            raise MetadataUnavailable(
                f"metadata for topic {topic!r} has no partitions (error code {error_code})"
            )
        by_id = {int(p[1]): p for p in partitions}
        parts = []
        for pid in range(max(by_id) + 1):
            p = by_id.get(pid)
            if p is None:  # a hole in the answer: leaderless until the next fetch
                parts.append(PartitionMetadata(partition=pid, leader=-1, replicas=(), isr=()))
                continue
            leader = int(p[2])
            parts.append(
                PartitionMetadata(
                    partition=pid,
                    leader=leader,
                    replicas=tuple(int(r) for r in p[3]),
                    isr=tuple(int(r) for r in p[4]),
                    leader_rack=racks.get(leader),
                )
            )
        return PartitionsAnswer(partitions=tuple(parts), exists=True)
    raise MetadataUnavailable(f"the metadata response has no entry for topic {topic!r}")


def parse_min_isr(response: Any, topic: str) -> MinIsr | None:
    """min.insync.replicas of ``topic`` in a DescribeConfigs response, or None if absent.

    A response for a broker resource (``topic`` is then the broker's id) gives the brokers'
    own value, marked ``"broker-default"``: what a topic without its own setting has.
    """
    for resource in response.resources:
        error_code, _message, resource_type, name, entries = resource[:5]
        if resource_type not in (_TOPIC_RESOURCE, _BROKER_RESOURCE) or name != topic:
            continue
        if error_code != 0:
            return None
        for e in entries:
            if e[0] != "min.insync.replicas" or e[1] is None:
                continue
            if resource_type == _BROKER_RESOURCE:
                source = "broker-default"
            # v0 only says whether the value is a default; v1+ names its source.
            elif not e[3] if response.API_VERSION == 0 else e[3] == _TOPIC_CONFIG_SOURCE:
                source = "topic"
            else:
                source = "broker"
            return MinIsr(value=max(1, int(e[1])), source=source)
    return None


def refused(response: Any) -> bool:
    """Whether a DescribeConfigs response refuses the topic for lack of rights."""
    return any(r[0] == _TOPIC_AUTHORIZATION_FAILED for r in response.resources)


class AioMetadataSource:
    """Partitions and min.insync.replicas of a topic, asked over ``client``.

    The requests go over connections of their own (aiokafka's coordination group, which a
    producer does not otherwise use), not the ones the produce requests take: a broker reads a
    connection's next request only once it has answered the one before, and it holds a produce
    request with an acks=all write it cannot complete (a follower hung, still in the ISR) up to
    ``request_timeout_ms``, so a Metadata request behind it would wait as long, just when the
    view matters. Each broker asked gets an equal share of the time left, so a hung one (a
    paused process still accepts connections) does not take all of it.
    """

    def __init__(self, client: ClientLike) -> None:
        from aiokafka.client import (  # type: ignore[import-untyped,unused-ignore]  # no py.typed
            ConnectionGroup,
        )

        self._client = client
        self._group = ConnectionGroup.COORDINATION
        # Per topic, the brokers of its last metadata answer, its partitions' leaders first;
        # and those of the last answer for any topic.
        self._brokers: dict[str, tuple[int, ...]] = {}
        self._listed: tuple[int, ...] = ()

    def _nodes(self) -> list[Any]:
        nodes = [b.nodeId for b in self._client.cluster.brokers()]
        random.shuffle(nodes)
        return nodes

    async def _send(self, node: Any, request: Any, timeout_s: float) -> Any:
        # Not asyncio.wait_for: before Python 3.12 it drops a cancel that arrives as the request
        # ends (CPython issue 86296), as when asyncio.run, ending with the producer running,
        # cancels every task and aiokafka's connections close at once; the refresher would
        # then run on, and asyncio.run wait for it forever.
        sent = asyncio.ensure_future(self._client.send(node, request, group=self._group))
        try:
            done, _ = await asyncio.wait((sent,), timeout=timeout_s)
        except BaseException:
            sent.cancel()
            sent.add_done_callback(_retrieve)
            raise
        if not done:
            sent.cancel()
            sent.add_done_callback(_retrieve)
            raise asyncio.TimeoutError(f"no answer within {timeout_s:g} s")
        return sent.result()

    async def _ask(self, request: Any, timeout_s: float) -> Any:
        """Send ``request`` to one broker after another until one answers within the time."""
        deadline = time.monotonic() + timeout_s
        last: BaseException | None = None
        nodes = self._nodes()
        for asked, node in enumerate(nodes):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                return await self._send(node, request, remaining / (len(nodes) - asked))
            except (OSError, asyncio.TimeoutError) as exc:
                last = exc
            except Exception as exc:  # aiokafka's connection errors: try the next broker
                last = exc
        raise MetadataUnavailable(f"no broker answered within {timeout_s:g} s (last: {last!r})")

    async def _first_answer(
        self, asks: Iterator[tuple[Any, Any]], deadline: float
    ) -> tuple[Any, Any]:
        """The first answer to the requests of ``asks`` (a broker and a request each), sent as
        :class:`_steps.Hedge` says until ``deadline``, and the broker that gave it."""
        plan = _steps.Hedge(deadline)
        pending: dict[asyncio.Future[Any], Any] = {}
        last: BaseException | None = None
        try:
            while (step := plan.next_step(time.monotonic(), len(pending))) is not None:
                if step == plan.SEND:
                    ask = next(asks, None)
                    if ask is None:
                        plan.exhausted()
                        continue
                    node, request = ask
                    remaining = max(0.05, deadline - time.monotonic())
                    pending[asyncio.ensure_future(self._send(node, request, remaining))] = node
                    plan.sent(time.monotonic())
                    continue
                done, _ = await asyncio.wait(
                    pending, timeout=step, return_when=asyncio.FIRST_COMPLETED
                )
                for sent in done:
                    node = pending.pop(sent)
                    if sent.exception() is None:
                        return node, sent.result()
                    last = sent.exception()
        finally:
            for sent in pending:
                sent.cancel()
                sent.add_done_callback(_retrieve)
        raise MetadataUnavailable(f"no broker answered in time (last: {last!r})")

    async def partitions(self, topic: str, timeout_s: float) -> PartitionsAnswer:
        from aiokafka.protocol.metadata import (  # type: ignore[import-untyped,unused-ignore]  # no py.typed
            MetadataRequest,
        )

        response = await self._ask(MetadataRequest([topic], True), timeout_s)
        self._listed = tuple(int(b[0]) for b in response.brokers)
        answer = parse_partitions(response, topic)
        leaders = (p.leader for p in answer.partitions)
        self._brokers[topic] = _steps.leaders_first(leaders, self._listed)
        return answer

    async def min_insync_replicas(self, topic: str, timeout_s: float) -> MinIsr | None:
        from aiokafka.protocol.admin import (  # type: ignore[import-untyped,unused-ignore]  # no py.typed
            DescribeConfigsRequest,
        )

        deadline = time.monotonic() + timeout_s
        request = DescribeConfigsRequest([(_TOPIC_RESOURCE, topic, ["min.insync.replicas"])])
        response = await self._ask(request, timeout_s)
        if not refused(response):
            return parse_min_isr(response, topic)

        # No DESCRIBE_CONFIGS on the topic: the brokers' own value is the better guess. A
        # broker's configs are asked of that broker (it needs DESCRIBE_CONFIGS on the cluster),
        # and any broker's will do: one that answers. aiokafka's list is the fallback's fallback
        # (the refresher looks min ISR up before its first Metadata request).
        def asks() -> Iterator[tuple[int, Any]]:
            for node in self._brokers.get(topic) or self._listed or self._nodes():
                resource = (_BROKER_RESOURCE, str(node), ["min.insync.replicas"])
                yield node, DescribeConfigsRequest([resource])

        node, response = await self._first_answer(asks(), deadline)
        return parse_min_isr(response, str(node))


def _retrieve(task: asyncio.Future[Any]) -> None:
    """A request given up on: its outcome, if it ends otherwise than cancelled, is not news."""
    if not task.cancelled():
        task.exception()


class SourceLike(Protocol):
    async def partitions(self, topic: str, timeout_s: float) -> PartitionsAnswer: ...

    async def min_insync_replicas(self, topic: str, timeout_s: float) -> MinIsr | None: ...


class AioMetadataRefresher:
    """Keeps every watched topic's metadata fresh from a task on the running loop.

    ``on_update(metadata)`` is called on the loop with each successful fetch. Every method
    must be called from the loop's thread.
    """

    def __init__(
        self,
        source: SourceLike,
        on_update: Callable[[TopicMetadata], None],
        *,
        min_insync_replicas: int | Mapping[str, int] | None = None,
        refresh_s: float = 30.0,
        fast_refresh_s: float = 0.5,
        min_isr_refresh_s: float = 300.0,
        request_timeout_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._source = source
        self._on_update = on_update
        self._option = check_min_isr_option(min_insync_replicas)
        self._timeout_s = _steps.check_request_timeout_s(request_timeout_s, "metadata_timeout_s")
        self._clock = clock
        self._schedule = RefreshSchedule(
            refresh_s=refresh_s, fast_refresh_s=fast_refresh_s, min_isr_refresh_s=min_isr_refresh_s
        )
        self._metadata: dict[str, TopicMetadata] = {}
        self._min_isr: dict[str, MinIsr] = {}
        # Requests numbered as sent, so an older answer never replaces a newer. No lock: a
        # number is taken, and a view applied and given to on_update, within one step.
        self._views_order = _steps.AnswerOrder()
        self._min_isr_order = _steps.AnswerOrder()
        self._warned_default: set[str] = set()
        self._wake = Wakeup()
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def watch(self, topic: str) -> None:
        self._schedule.add(topic, self._clock())
        self._wake.set()

    def request_refresh(self, topic: str) -> None:
        self._schedule.request(topic, self._clock())
        self._wake.set()

    def set_fast(self, topic: str, fast: bool) -> None:
        self._schedule.set_fast(topic, fast, self._clock())
        self._wake.set()

    def metadata(self, topic: str) -> TopicMetadata | None:
        return self._metadata.get(topic)

    def age_s(self, topic: str) -> float | None:
        md = self._metadata.get(topic)
        return None if md is None else max(0.0, self._clock() - md.fetched_at)

    async def fetch_now(self, topic: str, timeout_s: float) -> TopicMetadata:
        """Fetch ``topic`` now, retrying until ``timeout_s``; start watching it."""
        self.watch(topic)
        self._schedule.ask_min_isr(topic, self._clock())
        deadline = self._clock() + timeout_s
        md = await self._fetch(topic, deadline=deadline, min_isr_budget_s=min(1.0, timeout_s / 2))
        if md is None:
            raise _steps.no_metadata(topic, timeout_s, "bootstrap_servers")
        return md

    async def _run(self) -> None:
        schedule = self._schedule
        while not self._closed:
            for topic in schedule.due(self._clock()):
                await self._fetch(
                    topic, deadline=self._clock() + self._timeout_s, min_isr_budget_s=None
                )
            next_at = schedule.next_due_at()
            wait = 1.0 if next_at is None else max(0.0, min(1.0, next_at - self._clock()))
            if wait > 0:
                await self._wake.wait(wait)
                self._wake.clear()

    async def _fetch(
        self, topic: str, *, deadline: float, min_isr_budget_s: float | None
    ) -> TopicMetadata | None:
        min_isr = await self._resolve_min_isr(topic, min_isr_budget_s)
        try:
            number, answer = await self._partitions_with_retries(topic, deadline)
        except Exception as exc:
            self._schedule.fetched(topic, self._clock(), ok=False)
            _steps.log_fetch_failure(logger, topic, exc, self._metadata.get(topic), self._clock)
            return None
        now = self._clock()
        self._schedule.fetched(topic, now, ok=True, exists=answer.exists)
        if not self._views_order.take(topic, number):
            logger.debug("metadata for topic %s answered after a newer answer: dropped", topic)
            return self._metadata[topic]
        md = _steps.topic_metadata(topic, answer, min_isr, now, self._warned_default, logger)
        self._metadata[topic] = md
        self._on_update(md)
        return md

    async def _partitions_with_retries(
        self, topic: str, deadline: float
    ) -> tuple[int, PartitionsAnswer]:
        """The answer, and the number of the request that brought it (see AnswerOrder)."""
        retrying = AsyncRetrying(
            stop=_steps.fetch_stop(deadline, self._clock()), wait=_steps.FETCH_WAIT, reraise=True
        )
        async for attempt in retrying:
            with attempt:
                remaining = max(0.05, deadline - self._clock())
                number = self._views_order.sent(topic)
                return number, await self._source.partitions(topic, remaining)
        raise AssertionError("unreachable: AsyncRetrying re-raises the last error")

    async def _resolve_min_isr(self, topic: str, budget_s: float | None) -> MinIsr | None:
        chosen = _steps.option_min_isr(self._option, topic)
        if chosen is not None:
            return chosen
        cached = self._min_isr.get(topic)
        if self._schedule.min_isr_due(topic, self._clock()):
            timeout = self._timeout_s if budget_s is None else budget_s
            number = self._min_isr_order.sent(topic)
            try:
                answer = await self._source.min_insync_replicas(topic, timeout)
                if answer is not None:
                    _steps.heed_min_isr(topic, answer, self._warned_default, logger)
            except Exception as exc:
                logger.info("min.insync.replicas of topic %s not available: %s", topic, exc)
                answer = None
            self._schedule.min_isr_fetched(
                topic, self._clock(), ok=answer is not None, budgeted=budget_s is not None
            )
            if answer is not None and self._min_isr_order.take(topic, number):
                self._min_isr[topic] = answer
            # A lookup sent later may have answered first: its value is the one to use.
            cached = self._min_isr.get(topic, cached)
        return cached
