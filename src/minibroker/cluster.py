"""The public faces of a running cluster: ``AsyncCluster`` on your loop, ``Cluster`` on its own.

``Cluster`` runs the event loop in a background thread so synchronous clients and tests can use
it; every method hops onto that loop and waits for the answer. ``AsyncCluster`` runs on the
caller's loop (``async with AsyncCluster(...) as cluster:``); its methods must be called from
that loop's thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import warnings
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TypeVar

from minibroker.config import normalize_value, parse_broker_settings
from minibroker.errors import ClusterClosedError, ConfigError, MinibrokerError, TopicError
from minibroker.replication import Partition
from minibroker.server import ClusterRuntime

__all__ = ["AsyncCluster", "BrokerState", "Cluster", "PartitionState"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionState:
    """A snapshot of one partition, as the controller and its leader see it."""

    topic: str
    partition: int
    leader: int
    """Leader broker id, -1 when the partition is offline."""
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    eligible_leader_replicas: tuple[int, ...]
    """Replicas that may lead although out of the ISR (KIP-966), while the ISR is short."""
    last_known_elr: tuple[int, ...]
    """The last leader of a partition whose ISR emptied, elected if it is the one to return."""
    leader_epoch: int
    high_watermark: int
    log_end_offset: int
    offline_replicas: tuple[int, ...]
    min_insync_replicas: int
    """min.insync.replicas in force for this partition (before capping by RF)."""
    replica_log_end_offsets: tuple[tuple[int, int], ...]
    """(broker id, log end offset) of every replica's own log."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerState:
    """A snapshot of one broker."""

    broker_id: int
    host: str
    port: int
    rack: str | None
    status: str
    """"running", "stopped" (the controller has not noticed yet) or "fenced"."""
    isolated: bool
    replication_delay_ms: float
    is_controller: bool


def _partition_state(runtime: ClusterRuntime, partition: Partition) -> PartitionState:
    controller = runtime.controller
    return PartitionState(
        topic=partition.topic,
        partition=partition.index,
        leader=partition.leader,
        replicas=partition.replicas,
        isr=partition.isr,
        eligible_leader_replicas=partition.elr,
        last_known_elr=partition.last_known_elr,
        leader_epoch=partition.leader_epoch,
        high_watermark=partition.high_watermark,
        log_end_offset=partition.log_end_offset,
        offline_replicas=tuple(r for r in partition.replicas if controller.is_fenced(r)),
        min_insync_replicas=partition.min_insync_replicas,
        replica_log_end_offsets=tuple(
            (r, partition.logs[r].log_end_offset) for r in partition.replicas
        ),
    )


def _parse_ports(ports: Sequence[int] | None, broker_ids: tuple[int, ...]) -> dict[int, int]:
    if ports is None:
        return {}
    if len(ports) != len(broker_ids):
        raise ConfigError(
            f"ports names {len(ports)} ports for {len(broker_ids)} brokers; give one per broker"
        )
    for port in ports:
        if not isinstance(port, int) or not 0 <= port <= 65535:
            raise ConfigError(f"port {port!r} is not a TCP port number (0-65535)")
    return dict(zip(broker_ids, ports, strict=True))


class AsyncCluster:
    """A minibroker cluster on the running asyncio loop.

    ``brokers`` brokers with ids 1..n listen on ``host`` (ephemeral ports unless ``ports`` gives
    one per broker). ``config`` takes Kafka broker setting names (see ``minibroker.config``);
    ``broker_config`` per-broker ones (``broker.rack``). ``profile`` picks the defaults of the
    settings left out: ``"fast"`` (react within a fraction of a second, for tests) or
    ``"kafka-defaults"`` (Apache Kafka's own; see ``minibroker.config.PROFILES``). Invalid
    settings raise ConfigError here.
    """

    def __init__(
        self,
        brokers: int = 3,
        config: Mapping[str, object] | None = None,
        *,
        broker_config: Mapping[int, Mapping[str, object]] | None = None,
        host: str = "127.0.0.1",
        ports: Sequence[int] | None = None,
        cluster_id: str | None = None,
        profile: str = "fast",
    ) -> None:
        if not isinstance(brokers, int) or brokers < 1:
            raise ConfigError(f"brokers must be a positive integer, got {brokers!r}")
        self.broker_ids = tuple(range(1, brokers + 1))
        settings = parse_broker_settings(config, broker_config, self.broker_ids, profile)
        self._runtime = ClusterRuntime(
            broker_ids=self.broker_ids,
            settings=settings,
            host=host,
            ports=_parse_ports(ports, self.broker_ids),
            cluster_id=cluster_id,
        )
        self._started = False
        self._closed = False

    async def start(self) -> None:
        if self._started:
            return
        await self._runtime.start()
        self._started = True

    async def close(self) -> None:
        if self._started and not self._closed:
            self._closed = True
            await self._runtime.close()

    async def __aenter__(self) -> AsyncCluster:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def _live(self) -> ClusterRuntime:
        if not self._started or self._closed:
            raise ClusterClosedError("the cluster is not running (start it, or it was closed)")
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not self._runtime.loop:
            raise MinibrokerError(
                "AsyncCluster methods must be called on the event loop it runs on; "
                "from other threads use Cluster, which runs its own loop"
            )
        return self._runtime

    @property
    def bootstrap_servers(self) -> str:
        """``"127.0.0.1:p1,127.0.0.1:p2,..."`` for every broker."""
        return self._live().bootstrap_servers

    @property
    def cluster_id(self) -> str:
        return self._runtime.cluster_id

    @property
    def controller_id(self) -> int:
        return self._live().controller.controller_id

    def create_topic(
        self,
        name: str,
        partitions: int = -1,
        replication_factor: int = -1,
        config: Mapping[str, object] | None = None,
    ) -> None:
        """Create a topic; -1 takes num.partitions / default.replication.factor.

        Raises TopicError (``error_code`` as a client would see it) on a bad name, count,
        replication factor or config.
        """
        runtime = self._live()
        configs = {k: normalize_value(k, v) for k, v in (config or {}).items()}
        runtime.controller.create_topic(
            name, partitions, replication_factor, configs, runtime.now()
        )

    def delete_topic(self, name: str) -> None:
        self._live().delete_topic(name)

    def topics(self) -> list[str]:
        return sorted(self._live().controller.topics)

    def partition_state(self, topic: str, partition: int) -> PartitionState:
        runtime = self._live()
        found = runtime.controller.partition(topic, partition)
        if found is None:
            raise TopicError(f"no partition {partition} of topic {topic!r}", error_code=3)
        return _partition_state(runtime, found)

    def describe(self, topic: str | None = None) -> list[PartitionState]:
        """Every partition of ``topic`` (or of every topic), in topic and partition order."""
        runtime = self._live()
        names = [topic] if topic is not None else sorted(runtime.controller.topics)
        states: list[PartitionState] = []
        for name in names:
            found = runtime.controller.topics.get(name)
            if found is None:
                raise TopicError(f"topic {name!r} does not exist", error_code=3)
            states.extend(_partition_state(runtime, p) for p in found.partitions)
        return states

    def group_coordinator(self, group_id: str) -> int:
        """The broker FindCoordinator names for ``group_id``: the leader of the group's
        ``__consumer_offsets`` partition (-1 while it has none)."""
        return self._live().groups.coordinator_for(group_id)

    def brokers(self) -> list[BrokerState]:
        runtime = self._live()
        controller = runtime.controller
        return [
            BrokerState(
                broker_id=b.broker_id,
                host=b.host,
                port=b.port,
                rack=runtime.settings.rack(b.broker_id),
                status=controller.brokers[b.broker_id].status.value,
                isolated=b.isolated,
                replication_delay_ms=b.replication_delay_s * 1000,
                is_controller=controller.controller_id == b.broker_id,
            )
            for b in runtime.brokers.values()
        ]

    # faults
    def stop_broker(self, broker_id: int) -> None:
        """Crash a broker: listener and client connections close, replication stops."""
        self._live().stop_broker(broker_id)

    async def start_broker(self, broker_id: int) -> None:
        """Bring a stopped broker back on its old port, with its log; it catches up."""
        await self._live().start_broker(broker_id)

    def isolate_broker(self, broker_id: int) -> None:
        """Cut replication to and from a broker; clients and the controller still reach it."""
        self._live().isolate_broker(broker_id)

    def heal_broker(self, broker_id: int) -> None:
        self._live().heal_broker(broker_id)

    def slow_broker(self, broker_id: int, delay_ms: float) -> None:
        """Delay a broker's replication by ``delay_ms`` per fetch (0 restores it)."""
        self._live().slow_broker(broker_id, delay_ms)


class Cluster:
    """A minibroker cluster whose event loop runs in a background thread.

    Use as a context manager, or call ``start()`` and ``close()``. Same arguments as
    ``AsyncCluster``; every method may be called from any thread.
    """

    def __init__(
        self,
        brokers: int = 3,
        config: Mapping[str, object] | None = None,
        *,
        broker_config: Mapping[int, Mapping[str, object]] | None = None,
        host: str = "127.0.0.1",
        ports: Sequence[int] | None = None,
        cluster_id: str | None = None,
        profile: str = "fast",
    ) -> None:
        self._cluster = AsyncCluster(
            brokers,
            config,
            broker_config=broker_config,
            host=host,
            ports=ports,
            cluster_id=cluster_id,
            profile=profile,
        )
        self.broker_ids = self._cluster.broker_ids
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None
        self._closed = False

    def start(self) -> Cluster:
        if self._thread is not None:
            return self
        if self._closed:
            raise ClusterClosedError("a closed cluster cannot be started again")
        loop = asyncio.new_event_loop()
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        # An Event, not loop.stop(): a stop requested while the boot coroutine is finishing
        # would be swallowed by run_until_complete and the thread would never end.
        stop = asyncio.Event()

        async def serve() -> None:
            try:
                await self._cluster.start()
            except BaseException as exc:
                ready.set_exception(exc)
                return
            ready.set_result(None)
            try:
                await stop.wait()
            finally:
                await self._cluster.close()

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(serve())
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()

        self._stop = stop
        self._loop = loop
        self._thread = threading.Thread(target=run, name="minibroker", daemon=True)
        self._thread.start()
        try:
            ready.result()
        except BaseException:
            self._thread.join()
            self._thread = None
            self._closed = True
            raise
        return self

    def close(self) -> None:
        """Stop every broker and the loop thread. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._loop is not None and self._thread is not None:
            stop = self._stop
            if stop is not None and self._thread.is_alive():
                # RuntimeError: the loop already ended (its thread is finishing)
                with contextlib.suppress(RuntimeError):
                    self._loop.call_soon_threadsafe(stop.set)
            self._thread.join()

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        # getattr: __init__ may have raised (bad config) before the attributes existed
        if getattr(self, "_thread", None) is not None and not getattr(self, "_closed", True):
            warnings.warn(
                "minibroker Cluster was never closed; use it as a context manager or call close()",
                ResourceWarning,
                stacklevel=1,
            )
            self.close()

    def _call(self, fn: Callable[[], T]) -> T:
        loop = self._loop
        if loop is None or self._closed:
            raise ClusterClosedError("the cluster is not running (start it, or it was closed)")
        if threading.current_thread() is self._thread:
            return fn()
        result: concurrent.futures.Future[T] = concurrent.futures.Future()

        def invoke() -> None:
            try:
                result.set_result(fn())
            except BaseException as exc:
                result.set_exception(exc)

        loop.call_soon_threadsafe(invoke)
        return result.result()

    def _await(self, make: Callable[[], Awaitable[T]]) -> T:
        loop = self._loop
        if loop is None or self._closed:
            raise ClusterClosedError("the cluster is not running (start it, or it was closed)")

        async def run() -> T:
            return await make()

        return asyncio.run_coroutine_threadsafe(run(), loop).result()

    @property
    def bootstrap_servers(self) -> str:
        """``"127.0.0.1:p1,127.0.0.1:p2,..."`` for every broker."""
        return self._call(lambda: self._cluster.bootstrap_servers)

    @property
    def cluster_id(self) -> str:
        return self._cluster.cluster_id

    @property
    def controller_id(self) -> int:
        return self._call(lambda: self._cluster.controller_id)

    def create_topic(
        self,
        name: str,
        partitions: int = -1,
        replication_factor: int = -1,
        config: Mapping[str, object] | None = None,
    ) -> None:
        """Create a topic; see ``AsyncCluster.create_topic``."""
        self._call(lambda: self._cluster.create_topic(name, partitions, replication_factor, config))

    def delete_topic(self, name: str) -> None:
        self._call(lambda: self._cluster.delete_topic(name))

    def topics(self) -> list[str]:
        return self._call(self._cluster.topics)

    def partition_state(self, topic: str, partition: int) -> PartitionState:
        return self._call(lambda: self._cluster.partition_state(topic, partition))

    def describe(self, topic: str | None = None) -> list[PartitionState]:
        return self._call(lambda: self._cluster.describe(topic))

    def group_coordinator(self, group_id: str) -> int:
        """See ``AsyncCluster.group_coordinator``."""
        return self._call(lambda: self._cluster.group_coordinator(group_id))

    def brokers(self) -> list[BrokerState]:
        return self._call(self._cluster.brokers)

    def stop_broker(self, broker_id: int) -> None:
        """Crash a broker: listener and client connections close, replication stops."""
        self._call(lambda: self._cluster.stop_broker(broker_id))

    def start_broker(self, broker_id: int) -> None:
        """Bring a stopped broker back on its old port, with its log; it catches up."""
        self._await(lambda: self._cluster.start_broker(broker_id))

    def isolate_broker(self, broker_id: int) -> None:
        """Cut replication to and from a broker; clients and the controller still reach it."""
        self._call(lambda: self._cluster.isolate_broker(broker_id))

    def heal_broker(self, broker_id: int) -> None:
        self._call(lambda: self._cluster.heal_broker(broker_id))

    def slow_broker(self, broker_id: int, delay_ms: float) -> None:
        """Delay a broker's replication by ``delay_ms`` per fetch (0 restores it)."""
        self._call(lambda: self._cluster.slow_broker(broker_id, delay_ms))

    def call(self, fn: Callable[[AsyncCluster], T]) -> T:
        """Run ``fn(async_cluster)`` on the cluster's loop and return its result."""
        return self._call(lambda: fn(self._cluster))
