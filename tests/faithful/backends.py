"""Two backends behind one interface: minibroker's ``Cluster`` and a real Apache Kafka cluster.

Both run 5 brokers with min.insync.replicas=2 and the same timing settings (the real-Kafka
harness's: replica lag 3 s, broker session 4 s; Kafka's defaults otherwise, which for minibroker
is ``profile="kafka-defaults"``), so a scenario's timings compare. Topics are created and
partition state is read the way a client does it (AdminClient, metadata); scenarios produce and
fetch with real clients.

Faults. Kafka's are signals to a broker's process; minibroker has no process per broker, so each
maps to its closest fault:

======================  ===========================================  ==========================
Backend method          Kafka (tests/realkafka)                      minibroker
======================  ===========================================  ==========================
``pause(b)``            SIGSTOP: hangs, sockets open, no heartbeats  ``isolate_broker``: no
                        (fenced after the session timeout)           replication; still serves
                                                                     clients and the controller
``resume(b)``           SIGCONT                                      ``heal_broker``
``kill(b)``             SIGKILL                                      ``stop_broker``
``restart(b)``          a new JVM on the same data, until unfenced   ``start_broker``, until
                                                                     running
======================  ===========================================  ==========================

A paused *follower* looks the same to a client on both once its leader has more than it last
fetched (it leaves the ISR after the lag time; on an idle partition Kafka's leaves only when
fenced, minibroker's never, so the scenarios write after a pause); a paused *leader* does not
(Kafka fences it and elects another, minibroker's keeps leading), so the scenarios pause only
followers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from typing import Protocol

from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, not in the stub
    AdminClient,
    NewTopic,
)

from minibroker import Cluster
from tests.realkafka.cluster import KafkaCluster, PartitionView

__all__ = [
    "BROKERS",
    "MIN_ISR",
    "Backend",
    "KafkaBackend",
    "MiniBackend",
    "client_view",
    "minibroker_backend",
    "wait_until",
]

BROKERS = 5
MIN_ISR = 2

# The real-Kafka harness's settings (tests/realkafka/cluster.py) that minibroker knows.
MINIBROKER_CONFIG: Mapping[str, str] = {
    "min.insync.replicas": str(MIN_ISR),
    "replica.lag.time.max.ms": "3000",
    "broker.session.timeout.ms": "4000",
    "group.initial.rebalance.delay.ms": "0",
    "auto.create.topics.enable": "false",
    "offsets.topic.num.partitions": "10",
}


class Backend(Protocol):
    """What a scenario may do to a cluster."""

    @property
    def name(self) -> str: ...

    @property
    def bootstrap_servers(self) -> str: ...

    def address(self, broker_id: int) -> str: ...

    def create_topic(
        self, name: str, assignment: list[list[int]], config: Mapping[str, str] | None = None
    ) -> None: ...

    def describe(self, topic: str) -> list[PartitionView]: ...

    def pause(self, broker_id: int) -> None: ...

    def resume(self, broker_id: int) -> None: ...

    def kill(self, broker_id: int) -> None: ...

    def restart(self, broker_id: int) -> None: ...

    def heal(self) -> None: ...


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Poll ``predicate`` every 0.1 s; the seconds it took, or AssertionError at the timeout."""
    began = time.monotonic()
    while not predicate():
        if time.monotonic() - began > timeout_s:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.1)
    return time.monotonic() - began


def client_view(bootstrap: str, topic: str) -> list[PartitionView]:
    """Leader, replicas and ISR (sorted) of each partition, from a client's metadata."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
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
                isr=tuple(sorted(p.isrs)),
            )
            for p in found.partitions.values()
        ),
        key=lambda view: view.partition,
    )


def create_with_admin(
    backend: Backend,
    name: str,
    assignment: list[list[int]],
    config: Mapping[str, str] | None,
) -> None:
    """CreateTopics with a replica assignment, then wait until every partition has a leader."""
    admin = AdminClient({"bootstrap.servers": backend.bootstrap_servers, "log_level": 0})
    topic = NewTopic(
        name,
        num_partitions=len(assignment),
        replica_assignment=assignment,
        config=dict(config or {}),
    )
    admin.create_topics([topic])[name].result(timeout=30)
    wait_until(
        lambda: sum(1 for v in backend.describe(name) if v.leader >= 0) == len(assignment),
        30,
        f"every partition of {name} to have a leader",
    )


class MiniBackend:
    """minibroker's ``Cluster``; faults mapped as the module docstring says."""

    name = "minibroker"

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    @property
    def bootstrap_servers(self) -> str:
        return self.cluster.bootstrap_servers

    def address(self, broker_id: int) -> str:
        (state,) = (b for b in self.cluster.brokers() if b.broker_id == broker_id)
        return f"{state.host}:{state.port}"

    def create_topic(
        self, name: str, assignment: list[list[int]], config: Mapping[str, str] | None = None
    ) -> None:
        create_with_admin(self, name, assignment, config)

    def describe(self, topic: str) -> list[PartitionView]:
        return client_view(self.bootstrap_servers, topic)

    def pause(self, broker_id: int) -> None:
        self.cluster.isolate_broker(broker_id)

    def resume(self, broker_id: int) -> None:
        self.cluster.heal_broker(broker_id)

    def kill(self, broker_id: int) -> None:
        self.cluster.stop_broker(broker_id)

    def restart(self, broker_id: int) -> None:
        self.cluster.start_broker(broker_id)
        wait_until(lambda: self._status(broker_id) == "running", 30, f"broker {broker_id} back")

    def heal(self) -> None:
        for state in self.cluster.brokers():
            if state.isolated:
                self.cluster.heal_broker(state.broker_id)
            if state.status != "running":
                self.restart(state.broker_id)

    def _status(self, broker_id: int) -> str:
        (state,) = (b for b in self.cluster.brokers() if b.broker_id == broker_id)
        return state.status


class KafkaBackend:
    """A real Kafka cluster of tests/realkafka (5 brokers, min.insync.replicas=2)."""

    name = "kafka"

    def __init__(self, cluster: KafkaCluster) -> None:
        self.cluster = cluster

    @property
    def bootstrap_servers(self) -> str:
        return self.cluster.bootstrap_servers

    def address(self, broker_id: int) -> str:
        return self.cluster.address(broker_id)

    def create_topic(
        self, name: str, assignment: list[list[int]], config: Mapping[str, str] | None = None
    ) -> None:
        create_with_admin(self, name, assignment, config)

    def describe(self, topic: str) -> list[PartitionView]:
        """The view every broker a client can ask agrees on, [] while they differ: a broker
        just resumed answers from its metadata of before the pause until it catches up, and a
        client asking it alone would see an ISR that is not (minibroker's brokers share one
        view)."""
        views = {
            tuple(replace(view, isr=tuple(sorted(view.isr))) for view in answer)
            for answer in self.cluster.describe_each(topic).values()
        }
        return list(views.pop()) if len(views) == 1 else []

    def pause(self, broker_id: int) -> None:
        self.cluster.pause(broker_id)

    def resume(self, broker_id: int) -> None:
        self.cluster.resume(broker_id)

    def kill(self, broker_id: int) -> None:
        self.cluster.kill(broker_id)

    def restart(self, broker_id: int) -> None:
        # Not cluster.restart's own wait: that waits for every broker, and others may be down.
        self.cluster.restart(broker_id, wait=False)
        wait_until(
            lambda: broker_id in self.cluster.live_brokers(), 120, f"broker {broker_id} unfenced"
        )

    def heal(self) -> None:
        self.cluster.heal()


@contextmanager
def minibroker_backend() -> Iterator[MiniBackend]:
    with Cluster(BROKERS, MINIBROKER_CONFIG, profile="kafka-defaults") as cluster:
        yield MiniBackend(cluster)
