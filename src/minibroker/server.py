"""The asyncio shell: listeners, connections, follower fetchers and the housekeeping tick.

Everything runs on one event loop. Each broker is a TCP listener whose connections decode
requests with kio and hand them to the handlers, one at a time per connection: as Kafka's socket
server, a connection's next request is read only once the previous one is answered (clients
match responses by order). The replication model's follower fetch is in-process: when a
leader appends, every follower broker that can reach it gets a fetch scheduled on the loop (the
in-process equivalent of a fetcher thread's long poll returning), copies the new batches into its
own ``ReplicaLog`` and reports its new log end, which advances the high watermark. A periodic
tick re-fetches idle partitions (so caught-up followers stay in the ISR), lets the controller
notice stopped brokers, shrinks ISRs, expires waiting writes and drives the group coordinator.

Faults act on this shell: a stopped broker's listener and connections close and its fetcher
stops; an isolated broker's fetches to and from other brokers are cut (clients still reach it,
and the controller still hears from it, as in the seed scenario where one leader keeps running
with an ISR of itself); a slow broker applies each fetch ``delay`` after making it. A new delay,
a stop or a start drops the fetch still delayed (a lost response: the follower asks again from
the same offset), so the change applies at once.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import struct
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from minibroker.config import BrokerSettings, ConfigStore
from minibroker.controller import Controller
from minibroker.errors import BrokerStateError
from minibroker.protocol.codec import (
    MalformedRequest,
    build,
    decode_request,
    encode_response,
    peek_header,
    response_class,
)
from minibroker.protocol.versions import API_NAMES, SUPPORTED_VERSIONS, is_supported
from minibroker.replication import FollowerFetch, Partition

__all__ = ["BrokerRuntime", "ClusterRuntime", "RequestContext"]

logger = logging.getLogger(__name__)

_LENGTH = struct.Struct(">i")
_API_VERSIONS = 18
# Loop passes a stopped broker waits for the sockets it accepted to close (each takes one to
# three: a transport made, connection_made, connection_lost).
_SETTLE_PASSES = 20


class RequestContext:
    """One request being served: who asked, and how to answer (at most once, in order)."""

    __slots__ = (
        "_slot",
        "api_key",
        "api_version",
        "broker",
        "client_id",
        "cluster",
        "connection",
        "correlation_id",
    )

    def __init__(
        self,
        connection: Connection,
        api_key: int,
        api_version: int,
        correlation_id: int,
        client_id: str | None,
    ) -> None:
        self.connection = connection
        self.broker = connection.broker
        self.cluster = connection.broker.cluster
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id
        self._slot = connection.reserve_slot()

    @property
    def broker_id(self) -> int:
        return self.broker.broker_id

    @property
    def response_class(self) -> type[Any]:
        return response_class(self.api_key, self.api_version)

    @property
    def closed(self) -> bool:
        return self.connection.closed

    def respond(self, values: Mapping[str, Any]) -> None:
        """Answer with ``values``. A response that cannot be encoded (a string over its int16
        length, a bug) closes this connection alone, as Kafka's network thread does: the
        caller may be answering many connections at once (a group's rebalance completing)."""
        cls = self.response_class
        try:
            frame = encode_response(cls, self.correlation_id, build(cls, values))
        except Exception:
            logger.exception(
                "Broker %d could not encode its %s v%d response",
                self.broker_id,
                API_NAMES.get(self.api_key, self.api_key),
                self.api_version,
            )
            self.close_connection("could not encode the response")
            return
        self.respond_frame(frame)

    def respond_frame(self, frame: bytes) -> None:
        self.connection.fill_slot(self._slot, frame)

    def no_response(self) -> None:
        """acks=0 Produce: Kafka sends nothing back."""
        self.connection.release_slot(self._slot)

    def close_connection(self, reason: str) -> None:
        self.connection.close(reason)


class _Slot:
    __slots__ = ("frame",)

    def __init__(self) -> None:
        self.frame: bytes | None = None


class Connection(asyncio.Protocol):
    """One client connection to one broker."""

    def __init__(self, broker: BrokerRuntime) -> None:
        self.broker = broker
        self.closed = False
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._slots: deque[_Slot] = deque()
        self._peer = "?"
        self.peer_host = ""
        self._refused = False
        self._serving = False  # inside _serve_buffer, whose loop goes on by itself
        broker.unclosed.add(self)  # until its socket is closed (connection_lost)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        peer = transport.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.peer_host = f"/{peer[0]}" if peer else ""
        if not self.broker.running:
            # Accepted just before the broker stopped (the listener's last): dropped as the
            # stop dropped the others, not left open for the garbage collector.
            self.closed = True
            transport.abort()
            return
        self.broker.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._slots.clear()
        self.broker.connections.discard(self)
        self.broker.unclosed.discard(self)  # the transport closes the socket as this returns

    def close(self, reason: str) -> None:
        if not self.closed:
            logger.warning(
                "Broker %d closes the connection from %s: %s",
                self.broker.broker_id,
                self._peer,
                reason,
            )
            self.abort()

    def refuse(self, reason: str) -> None:
        """Bad input: read nothing more and close once earlier requests are answered.

        Kafka reads a connection's next request only after it has answered the previous one
        (the socket server mutes the channel meanwhile), so a bad frame is met after every
        earlier response went out, and then the connection closes (``InvalidRequestException``
        while parsing, ``InvalidReceiveException`` for the size).
        """
        if self.closed or self._refused:
            return
        logger.warning(
            "Broker %d closes the connection from %s: %s",
            self.broker.broker_id,
            self._peer,
            reason,
        )
        self._refused = True
        self._buffer.clear()
        self._close_when_answered()

    def _close_when_answered(self) -> None:
        if self._refused and not self._slots and not self.closed:
            self.closed = True
            if self._transport is not None:
                self._transport.close()  # unlike abort(), sends what is written first

    def abort(self) -> None:
        self.closed = True
        self._slots.clear()
        if self._transport is not None:
            self._transport.abort()

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        self._buffer += data
        self._serve_buffer()

    def _serve_buffer(self) -> None:
        """Serve the buffered requests one at a time, as Kafka's socket server does: it mutes
        a connection once a request is read and reads the next only after the response went
        out (or at once when there is none: acks=0). A request a broker holds (an acks=all
        write waiting for the ISR, a Fetch long poll) so holds every request behind it on the
        connection, whatever its partition; reading pauses meanwhile, and the client's writes
        wait in the socket's buffers. Never re-entered: a response sent while it serves only
        lets its loop go on (``_flush``), and the loop calls it from the top."""
        self._serving = True
        buffer = self._buffer
        position = 0
        limit = self.broker.cluster.socket_request_max_bytes
        try:
            available = len(buffer)
            while (
                available - position >= 4
                and not self._slots
                and not self.closed
                and not self._refused
            ):
                size = _LENGTH.unpack_from(buffer, position)[0]
                if size < 0 or size > limit:
                    self.refuse(
                        f"request frame of {size} bytes exceeds socket.request.max.bytes {limit}"
                        if size > limit
                        else f"negative frame length {size}"
                    )
                    return
                end = position + 4 + size
                if end > available:
                    break
                frame = bytes(buffer[position + 4 : end])
                position = end
                self._dispatch(frame)
        finally:
            self._serving = False
        if self.closed or self._refused:
            return
        if position:
            del buffer[:position]
        self._set_reading(not self._slots)

    def _set_reading(self, reading: bool) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if reading:
            transport.resume_reading()  # does nothing when not paused
        else:
            transport.pause_reading()

    def _dispatch(self, frame: bytes) -> None:
        cluster = self.broker.cluster
        try:
            api_key, api_version, correlation_id = peek_header(frame)
        except MalformedRequest as exc:
            self.refuse(str(exc))
            return
        if not is_supported(api_key, api_version, cluster.available_versions):
            if api_key == _API_VERSIONS:
                # KIP-511: answer in v0 format, listing what we do support
                self.fill_slot(
                    self.reserve_slot(), cluster.unsupported_api_versions_frame(correlation_id)
                )
                return
            name = API_NAMES.get(api_key, f"unknown api key {api_key}")
            self.refuse(f"{name} v{api_version} is not supported")
            return
        try:
            request = decode_request(frame)
        except MalformedRequest as exc:
            self.refuse(f"malformed request: {exc}")
            return
        context = RequestContext(self, api_key, api_version, correlation_id, request.client_id)
        try:
            cluster.handlers[api_key](context, request.body)
        except Exception:
            logger.exception(
                "Broker %d failed serving %s v%d from %s",
                self.broker.broker_id,
                API_NAMES.get(api_key, api_key),
                api_version,
                self._peer,
            )
            self.close("internal error while serving the request")

    # responses leave in request order
    def reserve_slot(self) -> _Slot:
        slot = _Slot()
        self._slots.append(slot)
        return slot

    def release_slot(self, slot: _Slot) -> None:
        try:
            self._slots.remove(slot)
        except ValueError:
            return
        self._flush()

    def fill_slot(self, slot: _Slot, frame: bytes) -> None:
        if self.closed:
            return
        slot.frame = frame
        if self._slots and self._slots[0] is slot:
            self._flush()

    def _flush(self) -> None:
        slots = self._slots
        if self._transport is None:
            return
        ready: list[bytes] = []
        while slots and slots[0].frame is not None:
            ready.append(slots.popleft().frame)  # type: ignore[arg-type]
        if ready:
            self._transport.writelines(ready)
        self._close_when_answered()
        if not slots and not self._serving and not self.closed and not self._refused:
            # Answered: the next request may be read, from the loop (not inside the handler
            # that answered, which may be in the middle of changing a partition's state).
            asyncio.get_running_loop().call_soon(self._serve_buffer)


class BrokerRuntime:
    """One broker: its listener, its connections, and the faults applied to it."""

    def __init__(self, cluster: ClusterRuntime, broker_id: int, host: str, port: int) -> None:
        self.cluster = cluster
        self.broker_id = broker_id
        self.host = host
        self.port = port
        self.connections: set[Connection] = set()
        # Every connection the listener accepted whose socket is not closed yet (those above,
        # and those accepted as the broker stops, which close themselves on connection_made).
        self.unclosed: set[Connection] = set()
        self.isolated = False
        self.replication_delay_s = 0.0
        self._server: asyncio.Server | None = None
        self._listener_closed: asyncio.Future[None] | None = None

    @property
    def running(self) -> bool:
        return self._server is not None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self._listener_closed is not None:
            await self._listener_closed  # the port is free again
        self._server = await loop.create_server(
            lambda: Connection(self), self.host, self.port, reuse_address=True, backlog=128
        )
        if self.port == 0:
            self.port = self._server.sockets[0].getsockname()[1]

    def stop(self) -> None:
        """Stop accepting at once and drop every connection. The listener closes in the
        loop's next pass: asyncio makes an accepted connection's transport in a task of its own,
        which fails if the listener closed in between and leaves the socket to the garbage
        collector; accepted before the stop, such a connection gets its transport first and
        then closes itself (``Connection.connection_made``)."""
        server, self._server = self._server, None
        if server is not None:
            loop = self.cluster.loop
            for sock in server.sockets:
                loop.remove_reader(sock.fileno())  # (also cancels an accept already due)
            closed: asyncio.Future[None] = loop.create_future()

            def close_listener() -> None:
                server.close()
                closed.set_result(None)

            self._listener_closed = closed
            loop.call_soon(close_listener)
        for connection in list(self.connections):
            connection.abort()
        self.connections.clear()

    async def stopped(self) -> None:
        """Wait, after ``stop()``, until the listener is closed and so is every socket it
        accepted (a few passes of the loop)."""
        if self._listener_closed is not None:
            await self._listener_closed
        for _ in range(_SETTLE_PASSES):
            if not self.unclosed:
                return
            await asyncio.sleep(0)
        logger.warning(
            "Broker %d: %d connections still open after it stopped",
            self.broker_id,
            len(self.unclosed),
        )


class FetchWaiter:
    """A Fetch long poll waiting for data (woken when a watched partition changes)."""

    __slots__ = ("wake",)

    def __init__(self, wake: Callable[[], None]) -> None:
        self.wake = wake


class ClusterRuntime:
    """The running cluster on its event loop: brokers, controller, replication, groups."""

    def __init__(
        self,
        *,
        broker_ids: tuple[int, ...],
        settings: BrokerSettings,
        host: str,
        ports: Mapping[int, int],
        cluster_id: str | None = None,
    ) -> None:
        from minibroker.handlers import HANDLERS  # handlers import this module's types
        from minibroker.handlers.consumer_groups import GroupService

        self.settings = settings
        self.configs = ConfigStore(settings)
        self.cluster_id = cluster_id or uuid.uuid4().hex[:22]
        self.controller = Controller(
            broker_ids=broker_ids, configs=self.configs, listener=self, now=time.monotonic()
        )
        self.brokers = {b: BrokerRuntime(self, b, host, ports.get(b, 0)) for b in broker_ids}
        self.handlers = HANDLERS
        self.available_versions = {k: v for k, v in SUPPORTED_VERSIONS.items() if k in HANDLERS}
        self.socket_request_max_bytes = settings.get_int("socket.request.max.bytes")
        self.metadata_cache: dict[object, bytes] = {}
        self._metadata_cache_version = -1
        self._producer_ids = itertools.count(1000)
        self._dirty: dict[int, set[Partition]] = {b: set() for b in broker_ids}
        self._fetch_scheduled: set[int] = set()
        self._fetch_in_flight: set[int] = set()
        # Bumped when a broker's fetcher restarts (slowed, stopped, started): a delayed fetch
        # made before lands as a lost response, so the new setting applies at once.
        self._fetch_generation: dict[int, int] = dict.fromkeys(broker_ids, 0)
        self._watchers: dict[Partition, set[FetchWaiter]] = {}
        lag_s = settings.get_int("replica.lag.time.max.ms") / 1000
        session_s = settings.get_int("broker.session.timeout.ms") / 1000
        self._tick_s = max(0.005, min(0.1, lag_s / 4, session_s / 4))
        self._tick_handle: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self.groups = GroupService(self)

    # ----------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        try:
            await asyncio.gather(*(b.start() for b in self.brokers.values()))
        except BaseException:
            for broker in self.brokers.values():
                broker.stop()
            raise
        self._schedule_tick()
        logger.info("minibroker cluster %s up: %s", self.cluster_id, self.bootstrap_servers)

    async def close(self) -> None:
        self._closed = True
        if self._tick_handle is not None:
            self._tick_handle.cancel()
        for broker in self.brokers.values():
            broker.stop()
        for partition in list(self.controller.partitions()):
            partition.close(ErrorCode.not_leader_or_follower)
        self.groups.close()
        await asyncio.gather(*(broker.stopped() for broker in self.brokers.values()))
        await asyncio.sleep(0)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None
        return self._loop

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{b.host}:{b.port}" for b in self.brokers.values())

    def now(self) -> float:
        return time.monotonic()

    # ----------------------------------------------------------------- PartitionListener

    def appended(self, partition: Partition) -> None:
        leader = partition.leader
        for follower in partition.replicas:
            if follower != leader and self.can_replicate(follower, leader):
                self._dirty[follower].add(partition)
                self._schedule_fetch(follower)

    def high_watermark_advanced(self, partition: Partition) -> None:
        watchers = self._watchers.get(partition)
        if watchers:
            for waiter in list(watchers):
                waiter.wake()

    def state_changed(self, partition: Partition) -> None:
        self.high_watermark_advanced(partition)  # fetch waiters re-check (errors now apply)
        for follower in partition.followers():
            if self.can_replicate(follower, partition.leader):
                self._dirty[follower].add(partition)
                self._schedule_fetch(follower)

    # ----------------------------------------------------------------- metadata cache

    def cached_metadata(self, key: object) -> bytes | None:
        if self._metadata_cache_version != self.controller.metadata_version:
            self.metadata_cache.clear()
            self._metadata_cache_version = self.controller.metadata_version
            return None
        return self.metadata_cache.get(key)

    def cache_metadata(self, key: object, body: bytes) -> None:
        if self._metadata_cache_version == self.controller.metadata_version:
            self.metadata_cache[key] = body

    def unsupported_api_versions_frame(self, correlation_id: int) -> bytes:
        cls = response_class(_API_VERSIONS, 0)
        values = {
            "error_code": 35,
            "api_keys": [
                {"api_key": k, "min_version": lo, "max_version": hi}
                for k, (lo, hi) in sorted(self.available_versions.items())
            ],
        }
        return encode_response(cls, correlation_id, build(cls, values))

    def allocate_producer_id(self) -> int:
        return next(self._producer_ids)

    # ----------------------------------------------------------------- fetch long polls

    def watch(self, partitions: Iterable[Partition], waiter: FetchWaiter) -> None:
        for partition in partitions:
            self._watchers.setdefault(partition, set()).add(waiter)

    def unwatch(self, partitions: Iterable[Partition], waiter: FetchWaiter) -> None:
        for partition in partitions:
            watchers = self._watchers.get(partition)
            if watchers is not None:
                watchers.discard(waiter)
                if not watchers:
                    del self._watchers[partition]

    # ----------------------------------------------------------------- replication

    def can_replicate(self, follower: int, leader: int) -> bool:
        if leader < 0 or follower == leader:
            return False
        source, target = self.brokers[leader], self.brokers[follower]
        return source.running and target.running and not source.isolated and not target.isolated

    def _schedule_fetch(self, follower: int) -> None:
        if follower in self._fetch_scheduled or follower in self._fetch_in_flight:
            return
        self._fetch_scheduled.add(follower)
        self.loop.call_soon(self._run_fetch, follower)

    def _run_fetch(self, follower: int) -> None:
        """One fetcher round for ``follower``: fetch every dirty partition, apply, report."""
        self._fetch_scheduled.discard(follower)
        broker = self.brokers[follower]
        while not self._closed:
            dirty = self._dirty[follower]
            if not dirty:
                return
            self._dirty[follower] = set()
            if not broker.running:
                return
            now = time.monotonic()
            fetched: list[tuple[Partition, FollowerFetch]] = []
            for partition in dirty:
                if self.can_replicate(follower, partition.leader):
                    result = partition.fetch_for_follower(follower, now)
                    if result is not None:
                        fetched.append((partition, result))
            if not fetched:
                return
            if broker.replication_delay_s > 0:
                self._fetch_in_flight.add(follower)
                self.loop.call_later(
                    broker.replication_delay_s,
                    self._apply_delayed,
                    follower,
                    self._fetch_generation[follower],
                    fetched,
                )
                return
            self._apply(follower, fetched)

    def _apply(self, follower: int, fetched: list[tuple[Partition, FollowerFetch]]) -> None:
        dirty = self._dirty[follower]
        for partition, result in fetched:
            if partition.apply_fetch(follower, result):
                dirty.add(partition)  # the next fetch reports the new log end

    def _apply_delayed(
        self, follower: int, generation: int, fetched: list[tuple[Partition, FollowerFetch]]
    ) -> None:
        if generation != self._fetch_generation[follower]:
            return  # made before the fetcher restarted: its replacement is already running
        self._fetch_in_flight.discard(follower)
        if self._closed or not self.brokers[follower].running:
            return
        self._apply(follower, fetched)
        self._run_fetch(follower)

    def _restart_fetcher(self, follower: int) -> None:
        """Forget ``follower``'s delayed fetch: the fetch it made is lost (the follower asks
        again from the same offset), so a new delay, or none, applies from its next fetch."""
        self._fetch_generation[follower] += 1
        self._fetch_in_flight.discard(follower)

    def refresh_followers(self, only: int | None = None) -> None:
        """Mark every followed partition for a fetch (idle followers report they are caught up)."""
        for partition in self.controller.partitions():
            leader = partition.leader
            if leader < 0:
                continue
            for follower in partition.replicas:
                if (only is None or only in (follower, leader)) and self.can_replicate(
                    follower, leader
                ):
                    self._dirty[follower].add(partition)
        for follower, dirty in self._dirty.items():
            if dirty:
                if self.brokers[follower].replication_delay_s > 0:
                    self._schedule_fetch(follower)
                elif follower not in self._fetch_in_flight:
                    self._run_fetch(follower)

    # ----------------------------------------------------------------- housekeeping

    def _schedule_tick(self) -> None:
        if not self._closed:
            self._tick_handle = self.loop.call_later(self._tick_s, self._tick)

    def _tick(self) -> None:
        try:
            self.refresh_followers()
            now = time.monotonic()
            self.controller.tick(now)
            self.groups.tick(now)
        except Exception:
            logger.exception("minibroker housekeeping failed")
        finally:
            self._schedule_tick()

    def delete_topic(self, name: str) -> None:
        """Delete a topic and every group's committed offsets for it."""
        self.controller.delete_topic(name)
        self.groups.coordinator.remove_topic_offsets(name)

    # ----------------------------------------------------------------- faults

    def broker(self, broker_id: int) -> BrokerRuntime:
        broker = self.brokers.get(broker_id)
        if broker is None:
            raise BrokerStateError(
                f"there is no broker {broker_id!r}; the brokers are {sorted(self.brokers)}"
            )
        return broker

    def stop_broker(self, broker_id: int) -> None:
        broker = self.broker(broker_id)
        if not broker.running:
            raise BrokerStateError(f"broker {broker_id} is already stopped")
        broker.stop()
        self._dirty[broker_id].clear()
        self._restart_fetcher(broker_id)
        self.controller.broker_stopped(broker_id, time.monotonic())
        self.groups.place_groups()
        logger.warning("Broker %d stopped (listener closed, connections dropped)", broker_id)

    async def start_broker(self, broker_id: int) -> None:
        broker = self.broker(broker_id)
        if broker.running:
            raise BrokerStateError(f"broker {broker_id} is already running")
        await broker.start()
        self._restart_fetcher(broker_id)
        self.controller.broker_started(broker_id, time.monotonic())
        self.groups.place_groups()
        logger.warning("Broker %d started on %s:%d", broker_id, broker.host, broker.port)
        self.refresh_followers(only=broker_id)

    def isolate_broker(self, broker_id: int) -> None:
        broker = self.broker(broker_id)
        broker.isolated = True
        logger.warning("Broker %d isolated: replication to and from it is cut", broker_id)

    def heal_broker(self, broker_id: int) -> None:
        broker = self.broker(broker_id)
        broker.isolated = False
        logger.warning("Broker %d healed: replication resumes", broker_id)
        self.refresh_followers(only=broker_id)

    def slow_broker(self, broker_id: int, delay_ms: float) -> None:
        broker = self.broker(broker_id)
        if delay_ms < 0:
            raise BrokerStateError(f"delay_ms must be >= 0, got {delay_ms}")
        broker.replication_delay_s = delay_ms / 1000
        self._restart_fetcher(broker_id)
        logger.warning("Broker %d replication delayed by %s ms", broker_id, delay_ms)
        self.refresh_followers(only=broker_id)
