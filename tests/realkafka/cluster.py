"""A real Apache Kafka cluster here: one KRaft controller and N brokers, each its own JVM.

The controller is a process of its own (``process.roles=controller``), so pausing, killing or
stopping brokers never costs the Raft quorum. Every node's storage is formatted before it starts
(``kafka.tools.StorageTool format``), and the cluster is ready once every broker is registered and
unfenced: a fenced broker is left out of the metadata brokers a client sees, so "the metadata lists
N brokers" is that condition as a client can observe it.

Faults act on one broker's process by its id:

==========  =======  ==============================================================================
``pause``   SIGSTOP  a hung broker: it drops out of ISRs after ``replica.lag.time.max.ms``, and
                     the controller fences it after ``broker.session.timeout.ms``
``resume``  SIGCONT  it catches up and rejoins the ISRs
``kill``    SIGKILL  a crash; ``restart`` recovers its log and rejoins
``stop``    SIGTERM  controlled shutdown: leadership moves and it leaves the ISRs at once
==========  =======  ==============================================================================

Every process is started in a session of its own (so a Ctrl-C at the terminal reaches only the
Python process, which then stops them) and with ``PR_SET_PDEATHSIG`` set to SIGKILL, so the
kernel kills it if the thread that started it dies without closing the cluster. ``close()`` kills
each node by its process id and waits for it.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Self

from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, not in the stub
    AdminClient,
    NewTopic,
)

from tests.realkafka import security
from tests.realkafka.jars import KafkaJars, ensure_jars
from tests.realkafka.netns import Namespaces
from tests.realkafka.security import Tls, make_tls

log = logging.getLogger(__name__)

CONTROLLER_ID = 0

# Kafka's defaults except where a test would otherwise wait for minutes (replica lag 30 s, session
# timeout 9 s, initial rebalance delay 3 s) or a small machine would strain (threads, partitions
# of __consumer_offsets). docs/real-kafka.md lists them with the reason for each.
BROKER_DEFAULTS: Mapping[str, str] = {
    "replica.lag.time.max.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "group.initial.rebalance.delay.ms": "0",
    "auto.create.topics.enable": "false",
    "num.network.threads": "2",
    "num.io.threads": "4",
    "num.replica.fetchers": "1",
    "background.threads": "4",
    "num.recovery.threads.per.data.dir": "1",
    "log.cleaner.dedupe.buffer.size": str(2 * 1024 * 1024),
    "log.cleaner.threads": "1",
    "offsets.topic.num.partitions": "10",
    "replica.fetch.wait.max.ms": "100",
}
CONTROLLER_DEFAULTS: Mapping[str, str] = {
    "broker.session.timeout.ms": "4000",
    "broker.heartbeat.interval.ms": "500",
}
JVM_OPTIONS: tuple[str, ...] = (
    "-Xms96m",
    "-Xmx384m",
    "-XX:+UseSerialGC",
    "-XX:+ExitOnOutOfMemoryError",
    "-XX:-UsePerfData",
    "-Djava.awt.headless=true",
)
_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.reflections.name = org.reflections
logger.reflections.level = ERROR
"""

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _start(command: list[str], log_path: Path, mode: str) -> subprocess.Popen[bytes]:
    """A JVM in a session of its own (a terminal's Ctrl-C reaches only Python), killed by the
    kernel should its parent die, its output into ``log_path``."""
    with open(log_path, mode) as out:
        return subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )


def _free_ports(count: int) -> list[int]:
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _properties(values: Mapping[str, str]) -> str:
    return "".join(f"{key}={value}\n" for key, value in values.items())


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionView:
    partition: int
    leader: int  # -1: none
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


class ClusterError(RuntimeError):
    """The cluster did not do what was asked (a node died, never became ready, ...)."""


@dataclass(slots=True, kw_only=True)
class Node:
    node_id: int
    port: int
    folder: Path
    config: dict[str, str]
    host: str = "127.0.0.1"
    prefix: tuple[str, ...] = ()  # what its JVM runs under (``ip netns exec NS``)
    process: subprocess.Popen[bytes] | None = None
    paused: bool = False

    @property
    def log_path(self) -> Path:
        return self.folder / "node.log"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


@dataclass(slots=True, kw_only=True)
class _Live:
    """What close() needs, kept apart so the atexit/finalizer hook holds no cluster reference."""

    nodes: list[Node] = field(default_factory=list)
    folder: Path | None = None
    keep: bool = False
    namespaces: Namespaces | None = None

    def kill_all(self) -> None:
        for node in reversed(self.nodes):  # brokers first, the controller last
            process = node.process
            if process is None or process.poll() is not None:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=30)
        if self.namespaces is not None:
            self.namespaces.remove()
            self.namespaces = None
        if self.folder is not None and not self.keep:
            shutil.rmtree(self.folder, ignore_errors=True)


class KafkaCluster:
    """``brokers`` broker processes (ids 1..N) and one controller (id 0), all on 127.0.0.1.

    ``config`` is added to every broker's properties; ``min_insync_replicas`` sets the
    cluster-wide default on the brokers and on the controller (which reads it for eligible leader
    replicas, on by default since Kafka 4.1). ``secured=True`` adds a SASL_SSL listener
    (SCRAM-SHA-512 over TLS, certificates of the run) and the StandardAuthorizer; see
    tests/realkafka/security.py. ``namespaces=True`` runs each node in a network namespace of
    its own (tests/realkafka/netns.py), which makes ``isolate`` possible; the nodes then listen on
    10.201.X.Y instead of 127.0.0.1. Use as a context manager, or call ``start()`` and
    ``close()``.
    """

    def __init__(
        self,
        brokers: int = 5,
        *,
        config: Mapping[str, str] | None = None,
        controller_config: Mapping[str, str] | None = None,
        min_insync_replicas: int | None = None,
        jvm_options: tuple[str, ...] = JVM_OPTIONS,
        folder: Path | None = None,
        keep_files: bool = False,
        jars: KafkaJars | None = None,
        secured: bool = False,
        namespaces: bool = False,
    ) -> None:
        if brokers < 1:
            raise ValueError(f"brokers={brokers}: a cluster needs at least one broker")
        self._count = brokers
        self._extra = dict(config or {})
        self._extra_controller = dict(controller_config or {})
        self._min_isr = min_insync_replicas
        self._jvm_options = jvm_options
        self._folder = folder
        self._keep = keep_files
        self._jars = jars
        self._secured = secured
        self._want_namespaces = namespaces
        self.tls: Tls | None = None
        self._secured_ports: dict[int, int] = {}
        self._live = _Live()
        self._finalizer = weakref.finalize(self, self._live.kill_all)
        self._hosts: dict[int, str] = {}
        self.cluster_id = base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()
        self.started_s: float | None = None

    # -- life ---------------------------------------------------------------------------------

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def start(self, timeout_s: float = 180.0) -> None:
        began = time.monotonic()
        jars = self._jars or ensure_jars()
        self._jars = jars
        folder = self._folder or Path(tempfile.mkdtemp(prefix="realkafka-"))
        folder.mkdir(parents=True, exist_ok=True)
        self._live.folder = folder
        self._live.keep = self._keep or self._folder is not None
        (folder / "log4j2.properties").write_text(_LOG4J2)
        ports = _free_ports(2 * self._count + 1)
        hosts = dict.fromkeys(range(self._count + 1), "127.0.0.1")
        prefixes: dict[int, tuple[str, ...]] = dict.fromkeys(range(self._count + 1), ())
        if self._want_namespaces:
            spaces = Namespaces(list(range(self._count + 1)))
            self._live.namespaces = spaces
            spaces.create()
            hosts = {n: spaces.address(n) for n in hosts}
            prefixes = {n: tuple(spaces.prefix(n)) for n in hosts}
        self._hosts = hosts
        voters = f"{CONTROLLER_ID}@{hosts[CONTROLLER_ID]}:{ports[0]}"
        secure: dict[str, str] = {}
        protocols = "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
        if self._secured:
            self.tls = make_tls(folder / "tls")
            secure = security.node_settings()
            protocols += ",SASL_SSL:SASL_SSL"
            self._secured_ports = {i: ports[self._count + i] for i in range(1, self._count + 1)}
        min_isr = {} if self._min_isr is None else {"min.insync.replicas": str(self._min_isr)}
        controller = Node(
            node_id=CONTROLLER_ID,
            port=ports[0],
            host=hosts[CONTROLLER_ID],
            prefix=prefixes[CONTROLLER_ID],
            folder=folder / "controller",
            config={
                "process.roles": "controller",
                "node.id": str(CONTROLLER_ID),
                "controller.quorum.voters": voters,
                "listeners": f"CONTROLLER://{hosts[CONTROLLER_ID]}:{ports[0]}",
                "controller.listener.names": "CONTROLLER",
                "listener.security.protocol.map": protocols,
                "log.dirs": str(folder / "controller" / "data"),
                **secure,
                **CONTROLLER_DEFAULTS,
                # Topic defaults are the controller's since KRaft (brokers only warn of them).
                "default.replication.factor": str(min(3, self._count)),
                **min_isr,
                **self._extra_controller,
            },
        )
        replication = str(min(3, self._count))
        internal = {
            "offsets.topic.replication.factor": replication,
            "transaction.state.log.replication.factor": replication,
            "transaction.state.log.min.isr": str(min(2, self._count)),
            "share.coordinator.state.topic.replication.factor": replication,
            "share.coordinator.state.topic.min.isr": str(min(2, self._count)),
        }
        brokers = [
            Node(
                node_id=i,
                port=ports[i],
                host=hosts[i],
                prefix=prefixes[i],
                folder=folder / f"broker-{i}",
                config={
                    "process.roles": "broker",
                    "node.id": str(i),
                    "controller.quorum.voters": voters,
                    "controller.listener.names": "CONTROLLER",
                    "listeners": self._listeners(i, ports[i]),
                    "advertised.listeners": self._listeners(i, ports[i]),
                    "inter.broker.listener.name": "PLAINTEXT",
                    "listener.security.protocol.map": protocols,
                    "log.dirs": str(folder / f"broker-{i}" / "data"),
                    **secure,
                    **(security.listener_settings(self.tls) if self.tls else {}),
                    **BROKER_DEFAULTS,
                    **internal,
                    **min_isr,
                    **self._extra,
                },
            )
            for i in range(1, self._count + 1)
        ]
        self._live.nodes = [controller, *brokers]
        try:
            self._format_all()
            for node in self._live.nodes:
                self._spawn(node)
            self.wait_ready(timeout_s=max(10.0, timeout_s - (time.monotonic() - began)))
            if self._secured:
                self.add_user(security.ADMIN_USER, security.ADMIN_PASSWORD)
        except BaseException:
            self.close()
            raise
        self.started_s = time.monotonic() - began
        log.info(
            "Kafka %s: %d brokers ready in %.1f s at %s",
            jars.version,
            self._count,
            self.started_s,
            self.bootstrap_servers,
        )

    def close(self) -> None:
        self._finalizer()

    def _listeners(self, broker_id: int, port: int) -> str:
        host = self._hosts[broker_id]
        plain = f"PLAINTEXT://{host}:{port}"
        if not self._secured:
            return plain
        return f"{plain},SASL_SSL://{host}:{self._secured_ports[broker_id]}"

    # -- security (secured=True) ---------------------------------------------------------------

    @property
    def secured_bootstrap_servers(self) -> str:
        """The SASL_SSL listeners (SCRAM-SHA-512 over TLS)."""
        if not self._secured_ports:
            raise ClusterError("this cluster was started without secured=True")
        return ",".join(f"{self._hosts[b]}:{port}" for b, port in self._secured_ports.items())

    def client_settings(self, user: str, password: str) -> dict[str, str]:
        """confluent-kafka settings for ``user`` on the secured listener."""
        assert self.tls is not None, "start the cluster with secured=True"
        return {
            "bootstrap.servers": self.secured_bootstrap_servers,
            **security.confluent_settings(self.tls, user, password),
        }

    def add_user(self, user: str, password: str, timeout_s: float = 30.0) -> None:
        """A SCRAM-SHA-512 credential for ``user`` (AlterUserScramCredentials, as an operator)."""
        from confluent_kafka.admin import (  # type: ignore[attr-defined]
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialUpsertion,
        )

        upsert = UserScramCredentialUpsertion(
            user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password.encode()
        )
        admin = self.admin()
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(timeout=timeout_s)

    def allow(
        self, user: str, operation: str, *, topic: str | None = None, group: str | None = None
    ) -> None:
        """An ALLOW ACL for ``user`` on a topic, a group, or (neither) the cluster."""
        from confluent_kafka.admin import (  # type: ignore[attr-defined]
            AclBinding,
            AclOperation,
            AclPermissionType,
            ResourcePatternType,
            ResourceType,
        )

        kind, name = (
            (ResourceType.TOPIC, topic)
            if topic is not None
            else (ResourceType.GROUP, group)
            if group is not None
            else (ResourceType.BROKER, "kafka-cluster")
        )
        binding = AclBinding(
            kind,
            name,
            ResourcePatternType.LITERAL,
            f"User:{user}",
            "*",
            AclOperation[operation.upper()],
            AclPermissionType.ALLOW,
        )
        admin = self.admin()
        for future in admin.create_acls([binding]).values():
            future.result(timeout=30)

    # -- what a test reads --------------------------------------------------------------------

    @property
    def version(self) -> str:
        assert self._jars is not None, "start() the cluster first"
        return self._jars.version

    @property
    def folder(self) -> Path:
        assert self._live.folder is not None, "start() the cluster first"
        return self._live.folder

    @property
    def broker_ids(self) -> tuple[int, ...]:
        return tuple(range(1, self._count + 1))

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{n.host}:{n.port}" for n in self._brokers())

    def address(self, broker_id: int) -> str:
        node = self._node(broker_id)
        return f"{node.host}:{node.port}"

    def pid(self, node_id: int) -> int | None:
        return self._node(node_id).pid

    def pids(self) -> dict[int, int | None]:
        return {n.node_id: n.pid for n in self._live.nodes}

    def node(self, node_id: int) -> Node:
        return self._node(node_id)

    def running(self, broker_id: int) -> bool:
        node = self._node(broker_id)
        return node.running and not node.paused

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 0})

    def create_topic(
        self,
        name: str,
        *,
        partitions: int = 1,
        replication_factor: int | None = None,
        config: Mapping[str, str] | None = None,
        assignment: list[list[int]] | None = None,
        timeout_s: float = 60.0,
    ) -> None:
        """Create a topic and wait until every partition has a leader in the metadata that
        each running broker answers (a new topic reaches the brokers one by one: a client whose
        first look meets one that has not heard of it yet sees no topic)."""
        topic = (
            NewTopic(
                name,
                num_partitions=len(assignment),  # (-1 is refused by confluent-kafka 2.16)
                replica_assignment=assignment,
                config=dict(config or {}),
            )
            if assignment is not None
            else NewTopic(
                name,
                num_partitions=partitions,
                replication_factor=replication_factor or min(3, self._count),
                config=dict(config or {}),
            )
        )
        admin = self.admin()  # held until the result: a collected client cancels its requests
        admin.create_topics([topic])[name].result(timeout=timeout_s)
        count = len(assignment) if assignment is not None else partitions
        self.wait_for(
            lambda: sum(1 for s in self.describe(name) if s.leader >= 0) == count,
            timeout_s=timeout_s,
            what=f"every partition of {name} to have a leader",
        )
        self.wait_for(
            lambda: all(
                len(views) == count and all(v.leader >= 0 for v in views)
                for views in self.describe_each(name).values()
            ),
            timeout_s=timeout_s,
            what=f"every running broker to list {name} with a leader for each partition",
        )

    def describe_each(self, topic: str) -> dict[int, list[PartitionView]]:
        """What each broker that a client can ask answers for ``topic`` (:meth:`describe`,
        asked of that broker alone), by broker id. Brokers' metadata caches catch up one by
        one (a topic just created, a broker just resumed that still answers from its cache of
        before the pause), so they may differ for a moment. Stopped and paused brokers are
        left out (no client can ask them), and isolated ones (cut off from the controller, they
        hear of nothing new)."""
        isolated = self._live.namespaces.isolated if self._live.namespaces is not None else ()
        return {
            node.node_id: self.describe(topic, broker=node.node_id)
            for node in self._brokers()
            if node.running and not node.paused and node.node_id not in isolated
        }

    def describe(self, topic: str, *, broker: int | None = None) -> list[PartitionView]:
        """Leader, replicas and ISR of each partition, as the metadata a client reads says
        ([] when it has no answer or the topic is not listed). ``broker``: as that broker
        answers (a client asks its bootstrap broker first: a client of its own)."""
        admin = (
            self.admin()
            if broker is None
            else AdminClient({"bootstrap.servers": self.address(broker), "log_level": 0})
        )
        try:
            metadata = admin.list_topics(topic, timeout=5)
        except Exception:
            return []
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            return []
        return sorted(
            (
                PartitionView(
                    partition=p.id,
                    leader=p.leader,
                    replicas=tuple(p.replicas),
                    isr=tuple(p.isrs),
                )
                for p in found.partitions.values()
            ),
            key=lambda view: view.partition,
        )

    # -- faults -------------------------------------------------------------------------------

    def pause(self, broker_id: int) -> None:
        """SIGSTOP: the broker hangs, sockets open, nothing answered."""
        node = self._running_node(broker_id)
        os.kill(node.pid or 0, signal.SIGSTOP)
        node.paused = True

    def resume(self, broker_id: int) -> None:
        """SIGCONT after ``pause``."""
        node = self._node(broker_id)
        if node.running and node.paused:
            os.kill(node.pid or 0, signal.SIGCONT)
        node.paused = False

    def kill(self, broker_id: int) -> None:
        """SIGKILL: a crash. ``restart`` brings it back with log recovery."""
        node = self._running_node(broker_id, allow_paused=True)
        process = node.process
        assert process is not None
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        node.paused = False

    def stop(self, broker_id: int, timeout_s: float = 60.0) -> None:
        """SIGTERM: a controlled shutdown (leadership moves away first)."""
        node = self._running_node(broker_id)
        process = node.process
        assert process is not None
        process.terminate()
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)
            raise ClusterError(
                f"broker {broker_id} did not shut down within {timeout_s} s of SIGTERM; killed"
            ) from None

    def restart(self, broker_id: int, *, wait: bool = True, timeout_s: float = 120.0) -> None:
        """Start a killed or stopped broker again (its data kept); wait until it is unfenced."""
        node = self._node(broker_id)
        if node.running:
            raise ClusterError(f"broker {broker_id} is running (pid {node.pid}); kill or stop it")
        self._spawn(node)
        if wait:
            self.wait_ready(timeout_s=timeout_s)

    def isolate(self, broker_id: int) -> None:
        """Cut the broker off from the controller and every other broker; clients still reach
        it (needs ``namespaces=True``)."""
        self._namespaces().isolate(self._node(broker_id).node_id)

    def reconnect(self, broker_id: int) -> None:
        """Undo ``isolate``."""
        self._namespaces().reconnect(self._node(broker_id).node_id)

    def _namespaces(self) -> Namespaces:
        if self._live.namespaces is None:
            raise ClusterError("isolate needs a cluster started with namespaces=True")
        return self._live.namespaces

    def heal(self, timeout_s: float = 120.0) -> None:
        """Undo every fault: resume the paused, start the dead, reconnect the isolated, and
        wait until all are unfenced."""
        if self._live.namespaces is not None:
            for node_id in self._live.namespaces.isolated:
                self._live.namespaces.reconnect(node_id)
        for node in self._brokers():
            if node.paused:
                self.resume(node.node_id)
            if not node.running:
                self._spawn(node)
        self.wait_ready(timeout_s=timeout_s)

    # -- waiting ------------------------------------------------------------------------------

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        """Every broker registered and unfenced, as the metadata a client reads shows it."""
        self.wait_for(
            lambda: len(self.live_brokers()) == self._count,
            timeout_s=timeout_s,
            what=f"all {self._count} brokers registered and unfenced",
        )

    def live_brokers(self) -> set[int]:
        """The broker ids the cluster's metadata lists (registered, not fenced)."""
        servers = ",".join(
            f"{n.host}:{n.port}" for n in self._brokers() if n.running and not n.paused
        )
        if not servers:
            return set()
        admin = AdminClient({"bootstrap.servers": servers, "log_level": 0})
        try:
            metadata = admin.list_topics(timeout=2)
        except Exception:
            return set()
        return set(metadata.brokers)

    def wait_for(self, predicate: Callable[[], bool], *, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            self._check_alive()
            if predicate():
                return
            if time.monotonic() > deadline:
                raise ClusterError(f"timed out after {timeout_s} s waiting for {what}")
            time.sleep(0.2)

    # -- inside ---------------------------------------------------------------------------------

    def _brokers(self) -> list[Node]:
        return [n for n in self._live.nodes if n.node_id != CONTROLLER_ID]

    def _node(self, node_id: int) -> Node:
        for node in self._live.nodes:
            if node.node_id == node_id:
                return node
        raise ValueError(
            f"no node {node_id}: brokers are {list(self.broker_ids)}, the controller is "
            f"{CONTROLLER_ID}"
        )

    def _running_node(self, broker_id: int, *, allow_paused: bool = False) -> Node:
        node = self._node(broker_id)
        if not node.running:
            raise ClusterError(f"broker {broker_id} is not running")
        if node.paused and not allow_paused:
            raise ClusterError(f"broker {broker_id} is paused; resume it first")
        return node

    def _check_alive(self) -> None:
        for node in self._live.nodes:
            if node.process is not None and not node.running and node.node_id == CONTROLLER_ID:
                raise ClusterError(
                    f"the controller exited (code {node.process.returncode}); its log "
                    f"{node.log_path} ends:\n{node.log_tail()}"
                )

    def _java(self, main: str, *args: str) -> list[str]:
        assert self._jars is not None
        return [
            self._jars.java,
            *self._jvm_options,
            f"-Dlog4j2.configurationFile={self.folder / 'log4j2.properties'}",
            "-cp",
            self._jars.classpath,
            main,
            *args,
        ]

    def _format_all(self) -> None:
        """``StorageTool format`` on every node, in parallel (one short JVM each)."""
        running: list[tuple[Node, subprocess.Popen[bytes]]] = []
        for node in self._live.nodes:
            node.folder.mkdir(parents=True, exist_ok=True)
            properties = node.folder / "server.properties"
            properties.write_text(_properties(node.config))
            command = self._java(
                "kafka.tools.StorageTool",
                "format",
                # "=": an id may begin with "-", which would read as an option
                f"--cluster-id={self.cluster_id}",
                "--config",
                str(properties),
                "--ignore-formatted",
            )
            running.append((node, _start(command, node.folder / "format.log", "wb")))
        failed = []
        for node, process in running:
            try:
                code = process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                code = -9
            if code != 0:
                text = (node.folder / "format.log").read_text(errors="replace")
                failed.append(f"node {node.node_id} (exit {code}): {text[-2000:]}")
        if failed:
            raise ClusterError("formatting storage failed:\n" + "\n".join(failed))

    def _spawn(self, node: Node) -> None:
        command = [*node.prefix, *self._java("kafka.Kafka", str(node.folder / "server.properties"))]
        node.process = _start(command, node.log_path, "ab")
        node.paused = False
        log.debug("node %d started, pid %d", node.node_id, node.process.pid)
