"""Metadata from confluent-kafka: ``Producer.list_topics`` and ``AdminClient.describe_configs``.

``list_topics`` is called on the producer's own handle (it shares its connections, and the
answer also refreshes librdkafka's cache), from the refresher's thread only: calling it from
inside a delivery callback re-enters the client (DESIGN.md section 4). librdkafka sends it to
the broker it sent to last, so a request a hung broker holds draws every later one there until
it expires: the handle's ``socket.timeout.ms`` bounds that (``_config.CLIENT_DEFAULTS``).
min.insync.replicas is
not in metadata responses (KIP-637 was never implemented), so it comes from DescribeConfigs on
the topic, which answers with the effective value and whether the topic or the broker set it.
A user without DESCRIBE_CONFIGS on the topic gets the brokers' own value instead (DescribeConfigs
on a broker, which needs DESCRIBE_CONFIGS on the cluster), marked ``"broker-default"``.

librdkafka sends a topic's DescribeConfigs to the broker its metadata names controller, and a
broker's to that broker; either may be a broker that stopped, still listed until the controller
fences it (``broker.session.timeout.ms``, 9 s), and the admin client's metadata may keep naming
it for minutes. The request would wait all its timeout for it. So a lookup not answered within
``_steps.HEDGE_S`` is also sent to brokers of the last metadata answer, those leading a partition of
the topic first (a request with a BROKER resource goes to that broker, and any broker answers
for a topic); the first answer counts.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from failover_partitioner._config import NOT_FOR_ADMIN, companion_conf
from failover_partitioner.errors import MetadataUnavailable
from failover_partitioner.health import PartitionMetadata
from failover_partitioner.metadata import _steps
from failover_partitioner.metadata._source import MinIsr, PartitionsAnswer

__all__ = ["ConfluentMetadataSource", "admin_config"]

logger = logging.getLogger(__name__)

_UNKNOWN_TOPIC_CODES = frozenset({3, -188})  # UNKNOWN_TOPIC_OR_PART, librdkafka's _UNKNOWN_TOPIC
# A DescribeConfigs not answered soon (_steps.HEDGE_S) is also sent to at most this many
# other brokers.
_OTHER_BROKERS = 3
# A failed rack lookup is tried again after this, doubling up to racks_refresh_s.
_RACKS_RETRY_S = 1.0


def admin_config(producer_conf: Mapping[str, Any]) -> dict[str, Any] | None:
    """The config for an AdminClient next to a producer with ``producer_conf``.

    None for librdkafka's mock cluster (``test.mock.num.brokers``): a second client would start
    a second mock cluster, and the mock has no DescribeConfigs anyway.
    """
    if "test.mock.num.brokers" in producer_conf:
        return None
    return companion_conf(producer_conf, "admin", drop=NOT_FOR_ADMIN)


# A way to ask: given the time left, start a request; its future gives the resource's configs.
_Start = Callable[[float], "Future[Any]"]


def _describe(admin: Any, wanted: Any, *others: Any) -> _Start:
    """Ask for ``wanted``'s configs, in one request with ``others`` (a BROKER resource among
    them sends it to that broker)."""

    def start(timeout_s: float) -> Future[Any]:
        futures = admin.describe_configs([wanted, *others], request_timeout=timeout_s)
        future: Future[Any] = futures[wanted]
        return future

    return start


def _local(exc: BaseException) -> bool:
    """Whether ``exc`` is librdkafka's own (no connection, timed out: another broker may
    answer), not a broker's answer (refused, unknown topic: the cluster's word)."""
    return not isinstance(exc, KafkaException) or exc.args[0].code() < 0


def _first_answer(starts: Iterator[_Start], deadline: float, what: str) -> Any:
    """The configs of the first request of ``starts`` to answer by ``deadline``, sent as
    :class:`_steps.Hedge` says (a request that failed locally, see :func:`_local`, counts as
    failed). A broker's error is the answer: raised."""
    plan = _steps.Hedge(deadline)
    pending: set[Future[Any]] = set()
    last = None
    while (step := plan.next_step(time.monotonic(), len(pending))) is not None:
        if step == plan.SEND:
            start = next(starts, None)
            if start is None:
                plan.exhausted()
                continue
            pending.add(start(max(0.05, deadline - time.monotonic())))
            plan.sent(time.monotonic())
            continue
        done, pending = wait(pending, timeout=step, return_when=FIRST_COMPLETED)
        for future in done:
            exc = future.exception()
            if exc is None:
                return future.result()
            if not _local(exc):
                raise exc
            last = exc
    raise MetadataUnavailable(f"no broker answered DescribeConfigs of {what} (last: {last})")


def _min_isr_entry(configs: Any) -> Any:
    """The ``min.insync.replicas`` entry of a resource's configs, or None if it has none."""
    entry = configs.get("min.insync.replicas")
    return None if entry is None or entry.value is None else entry


class ConfluentMetadataSource:
    """A :class:`~failover_partitioner.metadata.MetadataSource` over confluent-kafka."""

    def __init__(
        self,
        client: Any,
        admin_conf: Mapping[str, Any] | None,
        *,
        want_racks: bool = False,
        racks_refresh_s: float = 300.0,
    ) -> None:
        self._client = client
        self._admin_conf = None if admin_conf is None else dict(admin_conf)
        self._admin: Any = None
        self._admin_lock = threading.Lock()
        self._racks = _BrokerRacks(self._admin_client, racks_refresh_s) if want_racks else None
        # Per topic, the brokers of its last metadata answer, its partitions' leaders first;
        # and those of the last answer for any topic.
        self._brokers: dict[str, tuple[int, ...]] = {}
        self._listed: tuple[int, ...] = ()

    def _admin_client(self) -> Any:
        if self._admin_conf is None:
            return None
        with self._admin_lock:
            if self._admin is None:
                from confluent_kafka.admin import AdminClient

                self._admin = AdminClient(self._admin_conf)
            return self._admin

    def partitions(self, topic: str, timeout_s: float) -> PartitionsAnswer:
        md = self._client.list_topics(topic, timeout=timeout_s)
        t = md.topics.get(topic)
        if t is None:
            return PartitionsAnswer(partitions=(), exists=False)
        if t.error is not None and t.error.code() in _UNKNOWN_TOPIC_CODES:
            return PartitionsAnswer(partitions=(), exists=False)
        if t.error is not None and t.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            return PartitionsAnswer(partitions=(), exists=False, refused=True)
        if not t.partitions:
            raise MetadataUnavailable(
                f"metadata for topic {topic!r} has no partitions (error: {t.error})"
            )
        self._brokers[topic] = _leaders_first(t, md.brokers)
        self._listed = tuple(int(b) for b in md.brokers)
        racks = {} if self._racks is None else self._racks.get(topic, timeout_s)
        count = max(t.partitions) + 1
        parts = []
        for pid in range(count):
            pm = t.partitions.get(pid)
            if pm is None:  # a hole in the answer: treat as leaderless until the next fetch
                parts.append(PartitionMetadata(partition=pid, leader=-1, replicas=(), isr=()))
                continue
            leader = int(pm.leader)
            parts.append(
                PartitionMetadata(
                    partition=pid,
                    leader=leader,
                    replicas=tuple(int(r) for r in pm.replicas),
                    isr=tuple(int(r) for r in pm.isrs),
                    leader_rack=racks.get(leader),
                )
            )
        return PartitionsAnswer(partitions=tuple(parts), exists=True)

    def min_insync_replicas(self, topic: str, timeout_s: float) -> MinIsr | None:
        admin = self._admin_client()
        if admin is None:
            return None
        # The bundled stubs do not list these re-exports of confluent_kafka.admin.
        from confluent_kafka.admin import (  # type: ignore[attr-defined]
            ConfigResource,
            ConfigSource,
        )

        deadline = time.monotonic() + timeout_s
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)

        def brokers() -> Iterator[Any]:  # listed only once needed
            for b in self._brokers_to_ask(topic, deadline):
                yield ConfigResource(ConfigResource.Type.BROKER, str(b))

        def ways() -> Iterator[_Start]:
            yield _describe(admin, resource)  # to the controller
            for broker in brokers():
                yield _describe(admin, resource, broker)  # to that broker

        try:
            entry = _min_isr_entry(_first_answer(ways(), deadline, f"topic {topic}"))
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_AUTHORIZATION_FAILED:
                raise
            # No DESCRIBE_CONFIGS on the topic: the brokers' own value is the better guess.
            asks = (_describe(admin, broker) for broker in brokers())
            entry = _min_isr_entry(_first_answer(asks, deadline, "a broker"))
            if entry is None:
                return None
            return MinIsr(value=max(1, int(entry.value)), source="broker-default")
        if entry is None:
            return None
        topic_level = ConfigSource.DYNAMIC_TOPIC_CONFIG
        source = "topic" if entry.source in (topic_level, topic_level.value) else "broker"
        return MinIsr(value=max(1, int(entry.value)), source=source)

    def _brokers_to_ask(self, topic: str, deadline: float) -> tuple[int, ...]:
        """At most ``_OTHER_BROKERS`` brokers of ``topic``'s last metadata answer, those leading
        one of its partitions first; else of the last answer for any topic; else asked now (a
        request that may wait long: the client sends it where it sent the last one)."""
        known = self._brokers.get(topic) or self._listed
        if not known:
            try:
                md = self._client.list_topics(topic, timeout=max(0.05, deadline - time.monotonic()))
            except KafkaException as exc:
                logger.debug("no brokers to ask for topic %s's configs: %s", topic, exc)
                return ()
            t = md.topics.get(topic)
            known = _leaders_first(t, md.brokers) if t is not None else tuple(md.brokers)
        return known[:_OTHER_BROKERS]

    def close(self) -> None:
        self._admin = None


class _BrokerRacks:
    """Each broker's rack, for ``client_rack``'s choice: DescribeCluster, as the metadata that
    confluent-kafka gives has none. Asked every ``refresh_s``; after a failure (the broker
    the admin client takes for controller stopped, say) again in ``_RACKS_RETRY_S``, doubling
    up to ``refresh_s``, since until then no leader has a rack and ``client_rack`` has no
    effect. A lookup holds the fetch that starts it only while no rack is known (the first
    up to the fetch's timeout, later ones ``_RACKS_RETRY_S``); else, or if it is slower, a
    later fetch takes its answer."""

    def __init__(self, admin: Callable[[], Any], refresh_s: float) -> None:
        self._admin = admin
        self._refresh_s = refresh_s
        self._lock = threading.Lock()
        self._racks: dict[int, str | None] = {}
        self._due_at = 0.0
        self._failures = 0
        self._pending: Future[Any] | None = None
        self._asked = False

    def get(self, topic: str, timeout_s: float) -> dict[int, str | None]:
        """The racks known, after a fetch of ``topic`` (which a retry's metadata asks for)."""
        with self._lock:
            started = None
            if self._pending is None and time.monotonic() >= self._due_at:
                started = self._pending = self._ask(topic, timeout_s)
            pending = self._pending
            wait_s = 0.0
            if started is not None and not self._racks:
                wait_s = min(timeout_s, _RACKS_RETRY_S) if self._asked else timeout_s
            self._asked = self._asked or started is not None
        if pending is not None and wait_s > 0:
            wait([pending], timeout=wait_s)
        with self._lock:
            if pending is not None and pending is self._pending and pending.done():
                self._pending = None
                try:
                    nodes = pending.result().nodes
                except Exception as exc:
                    self._failed(exc)
                else:
                    self._racks = {int(n.id): n.rack for n in nodes}
                    self._failures = 0
                    self._due_at = time.monotonic() + self._refresh_s
            return self._racks

    def _ask(self, topic: str, timeout_s: float) -> Future[Any] | None:
        admin = self._admin()
        if admin is None:
            self._due_at = float("inf")
            return None
        if self._failures:
            # DescribeCluster goes to the broker the admin client's metadata names controller,
            # and nothing else refreshes that metadata for topic.metadata.refresh.interval.ms
            # (5 min): the same stopped broker would be asked again.
            try:
                admin.list_topics(topic, timeout=min(timeout_s, _RACKS_RETRY_S))
            except Exception as exc:
                logger.debug("the admin client's metadata was not refreshed: %s", exc)
        try:
            future: Future[Any] = admin.describe_cluster(request_timeout=timeout_s)
        except Exception as exc:
            self._failed(exc)
            return None
        return future

    def _failed(self, exc: Exception) -> None:
        self._failures += 1
        retry_s = _steps.doubling_s(_RACKS_RETRY_S, self._failures, self._refresh_s)
        self._due_at = time.monotonic() + retry_s
        logger.info(
            "broker racks not available (DescribeCluster failed: %s); asking again in %g s",
            exc,
            retry_s,
        )


def _leaders_first(topic_md: Any, brokers: Mapping[int, Any]) -> tuple[int, ...]:
    """:func:`_steps.leaders_first` of a topic's metadata (confluent-kafka's)."""
    leaders = (int(p.leader) for p in (topic_md.partitions or {}).values())
    return _steps.leaders_first(leaders, (int(b) for b in brokers))
