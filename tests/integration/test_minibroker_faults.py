"""Replication faults seen by a real client (confluent-kafka): isolation, crash, elections.

Clusters here use short replica.lag.time.max.ms and broker.session.timeout.ms so the ISR and
the controller react within a fraction of a second.
"""

from __future__ import annotations

import gc
import socket
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from minibroker import Cluster, PartitionState
from tests.integration.test_minibroker_protocol import Wire

FAST = {"replica.lag.time.max.ms": "300", "broker.session.timeout.ms": "300"}


def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.02)


def produce_to(
    bootstrap: str,
    topic: str,
    partitions: list[int],
    count: int = 1,
    prefix: str = "",
    **config: object,
) -> dict[int, list[KafkaError | None]]:
    """Produce ``count`` messages to each partition; the delivery error per message."""
    outcomes: dict[int, list[KafkaError | None]] = {p: [] for p in partitions}

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        outcomes[msg.partition() or 0].append(err)

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", **config})
    for partition in partitions:
        for i in range(count):
            producer.produce(
                topic,
                value=f"{prefix}{partition}-{i}".encode(),
                partition=partition,
                on_delivery=on_delivery,
            )
    assert producer.flush(30) == 0
    return outcomes


def consume_all(bootstrap: str, topic: str, partition: int, expected: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "check",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(values) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.2):
                assert msg.error() is None, msg.error()
                values.append(msg.value() or b"")
        # give a late extra message the chance to show up
        for msg in consumer.consume(1000, 0.3):
            values.append(msg.value() or b"")
        return values
    finally:
        consumer.close()


def isr_seen_by_client(bootstrap: str, topic: str, partition: int) -> list[int]:
    producer = Producer({"bootstrap.servers": bootstrap})
    metadata = producer.list_topics(topic, timeout=10)
    return sorted(metadata.topics[topic].partitions[partition].isrs)


def test_isolated_leader_keeps_only_itself_in_sync_and_refuses_acks_all() -> None:
    with Cluster(brokers=3, config={"min.insync.replicas": "2", **FAST}) as cluster:
        cluster.create_topic("iso", partitions=3, replication_factor=3)
        leader = cluster.partition_state("iso", 0).leader
        others = [p for p in range(3) if cluster.partition_state("iso", p).leader != leader]
        started = time.monotonic()
        cluster.isolate_broker(leader)
        # As on Kafka, its followers leave the ISR once it has more than they last fetched.
        assert produce_to(cluster.bootstrap_servers, "iso", [0], acks="1") == {0: [None]}
        wait_for(
            lambda: cluster.partition_state("iso", 0).isr == (leader,),
            0.3 + 1.0,
            "the isolated leader's ISR to shrink to itself",
        )
        assert time.monotonic() - started <= 1.3
        # every broker's Metadata shows the shrunk ISR
        assert isr_seen_by_client(cluster.bootstrap_servers, "iso", 0) == [leader]

        outcomes = produce_to(cluster.bootstrap_servers, "iso", [0, *others], retries=0)
        assert [e.code() if e else None for e in outcomes[0]] == [KafkaError.NOT_ENOUGH_REPLICAS]
        for partition in others:
            assert outcomes[partition] == [None]

        cluster.heal_broker(leader)
        wait_for(
            lambda: len(cluster.partition_state("iso", 0).isr) == 3,
            5,
            "the ISR to expand again after healing",
        )
        assert produce_to(cluster.bootstrap_servers, "iso", [0], retries=0) == {0: [None]}


def test_acknowledged_writes_survive_a_leader_crash() -> None:
    with Cluster(brokers=3, config={"min.insync.replicas": "2", **FAST}) as cluster:
        cluster.create_topic("durable", partitions=1, replication_factor=3)
        leader = cluster.partition_state("durable", 0).leader
        acked: list[bytes] = []

        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            if err is None:
                acked.append(msg.value() or b"")

        producer = Producer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "acks": "all",
                "linger.ms": 2,
                "message.timeout.ms": 20000,
            }
        )
        for i in range(3000):
            producer.produce("durable", value=f"v{i}".encode(), on_delivery=on_delivery)
            if i == 1500:
                producer.poll(0)
                cluster.stop_broker(leader)
            if i % 100 == 0:
                producer.poll(0)
        assert producer.flush(30) == 0
        state = cluster.partition_state("durable", 0)
        assert state.leader not in (leader, -1)
        assert state.leader_epoch >= 1
        assert len(acked) > 1500
        consumed = consume_all(cluster.bootstrap_servers, "durable", 0, len(acked))
        assert set(acked) <= set(consumed)


def _unreplicated_suffix_setup(cluster: Cluster) -> tuple[int, int]:
    """RF=2: replicate 50 messages, cut the follower off, write 30 more, crash the leader."""
    cluster.create_topic("suffix", partitions=1, replication_factor=2)
    state = cluster.partition_state("suffix", 0)
    leader, follower = state.leader, next(r for r in state.replicas if r != state.leader)
    produce_to(cluster.bootstrap_servers, "suffix", [0], count=50)
    wait_for(lambda: cluster.partition_state("suffix", 0).high_watermark == 50, 5, "replication")
    cluster.isolate_broker(follower)
    extra = produce_to(cluster.bootstrap_servers, "suffix", [0], count=30, prefix="late", acks="1")
    assert extra[0] == [None] * 30
    # the follower has not fetched them: it leaves the ISR after the lag time
    wait_for(lambda: cluster.partition_state("suffix", 0).isr == (leader,), 2, "the ISR to shrink")
    assert cluster.partition_state("suffix", 0).log_end_offset == 80
    cluster.stop_broker(leader)
    cluster.heal_broker(follower)  # healing after the crash: the suffix never reached it
    return leader, follower


def test_unclean_election_loses_exactly_the_unreplicated_suffix() -> None:
    config = {"unclean.leader.election.enable": "true", **FAST}
    with Cluster(brokers=2, config=config) as cluster:
        old_leader, follower = _unreplicated_suffix_setup(cluster)
        wait_for(
            lambda: cluster.partition_state("suffix", 0).leader == follower,
            3,
            "the unclean election of the out-of-sync follower",
        )
        values = consume_all(cluster.bootstrap_servers, "suffix", 0, 50)
        assert sorted(values) == sorted(f"0-{i}".encode() for i in range(50))
        cluster.start_broker(old_leader)
        # the returning replica truncates to the new leader's log: the suffix is gone
        wait_for(
            lambda: (
                dict(cluster.partition_state("suffix", 0).replica_log_end_offsets)
                == {old_leader: 50, follower: 50}
            ),
            5,
            "the old leader to truncate its suffix",
        )


def test_without_unclean_election_the_partition_waits_offline_for_its_isr() -> None:
    with Cluster(brokers=2, config=FAST) as cluster:
        old_leader, _ = _unreplicated_suffix_setup(cluster)
        wait_for(
            lambda: cluster.partition_state("suffix", 0).leader == -1,
            3,
            "the partition to go offline",
        )
        time.sleep(0.5)  # the controller has had time to elect, and must not
        state = cluster.partition_state("suffix", 0)
        # Kafka 4.1+ (KIP-966): the ISR empties, the last member stays eligible (ELR) and is
        # remembered as the last leader.
        assert (state.leader, state.isr, state.eligible_leader_replicas) == (-1, (), (old_leader,))
        assert state.last_known_elr == (old_leader,)
        cluster.start_broker(old_leader)
        wait_for(
            lambda: cluster.partition_state("suffix", 0).leader == old_leader,
            3,
            "the last leader to be elected when it returns",
        )
        values = consume_all(cluster.bootstrap_servers, "suffix", 0, 80)
        assert len(values) == 80


def test_stopping_two_of_five_brokers_degrades_exactly_the_partitions_on_both() -> None:
    with Cluster(brokers=5, config={"min.insync.replicas": "2", **FAST}) as cluster:
        cluster.create_topic("wide", partitions=12, replication_factor=3)
        on_both = {
            p for p in range(12) if {4, 5} <= set(cluster.partition_state("wide", p).replicas)
        }
        assert on_both  # the placement puts some partitions on both brokers
        cluster.stop_broker(4)
        cluster.stop_broker(5)

        def states() -> list[PartitionState]:
            return [cluster.partition_state("wide", p) for p in range(12)]

        wait_for(
            lambda: all(not {4, 5} & set(s.isr) and s.leader > 0 for s in states()),
            3,
            "brokers 4 and 5 to be fenced out of every ISR",
        )
        assert {s.partition for s in states() if len(s.isr) == 1} == on_both
        outcomes = produce_to(cluster.bootstrap_servers, "wide", list(range(12)), retries=0)
        refused = {
            p
            for p, errors in outcomes.items()
            if errors[0] is not None and errors[0].code() == KafkaError.NOT_ENOUGH_REPLICAS
        }
        assert refused == on_both
        assert all(outcomes[p] == [None] for p in range(12) if p not in on_both)


def test_a_restarted_broker_catches_up_and_rejoins_the_isr() -> None:
    with Cluster(brokers=3, config={"min.insync.replicas": "2", **FAST}) as cluster:
        cluster.create_topic("back", partitions=1, replication_factor=3)
        follower = cluster.partition_state("back", 0).replicas[2]
        cluster.stop_broker(follower)
        wait_for(
            lambda: follower not in cluster.partition_state("back", 0).isr, 3, "the ISR to shrink"
        )
        assert produce_to(cluster.bootstrap_servers, "back", [0], count=200) == {0: [None] * 200}
        cluster.start_broker(follower)
        wait_for(lambda: follower in cluster.partition_state("back", 0).isr, 3, "the ISR to expand")
        state = cluster.partition_state("back", 0)
        assert dict(state.replica_log_end_offsets)[follower] == state.log_end_offset == 200


def test_a_slow_follower_drops_out_of_the_isr_under_load_and_returns_when_fast() -> None:
    with Cluster(brokers=3, config=FAST) as cluster:
        cluster.create_topic("slow", partitions=1, replication_factor=3)
        follower = cluster.partition_state("slow", 0).replicas[1]
        cluster.slow_broker(follower, 600)
        producer = Producer(
            {"bootstrap.servers": cluster.bootstrap_servers, "acks": "1", "linger.ms": 5}
        )
        deadline = time.monotonic() + 5
        while follower in cluster.partition_state("slow", 0).isr:
            assert time.monotonic() < deadline, "the slow follower never left the ISR"
            producer.produce("slow", b"x" * 100)
            producer.poll(0.01)
        assert producer.flush(10) == 0
        cluster.slow_broker(follower, 0)
        wait_for(lambda: follower in cluster.partition_state("slow", 0).isr, 3, "the follower back")


def group_coordinator_seen_by_client(bootstrap: str, group: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    described = admin.describe_consumer_groups([group], request_timeout=10)[group].result(10)
    coordinator: int = described.coordinator.id
    return coordinator


def test_a_group_survives_its_coordinator_crashing_and_returning() -> None:
    # Kafka moves a group only when its __consumer_offsets partition's leadership moves (here:
    # when the controller fences the crashed broker), never back to a broker merely because it
    # returned; loading the group restarts every member's session (onGroupLoaded). So a
    # consumer rides through its coordinator's crash and return without a rebalance.
    with Cluster(brokers=3, config=FAST) as cluster:
        bootstrap = cluster.bootstrap_servers
        cluster.create_topic("ride", partitions=3, replication_factor=3)
        produce_to(bootstrap, "ride", [0, 1, 2], count=20, prefix="a")
        assigned: list[int] = []
        revoked: list[int] = []
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "riders",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 200,
            }
        )
        consumer.subscribe(
            ["ride"],
            on_assign=lambda _, parts: assigned.append(len(parts)),
            on_revoke=lambda _, parts: revoked.append(len(parts)),
        )
        got: list[bytes] = []

        def poll_for(seconds: float, until: Callable[[], bool] = lambda: False) -> None:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline and not until():
                for msg in consumer.consume(100, 0.05):
                    assert msg.error() is None, msg.error()
                    got.append(msg.value() or b"")

        try:
            poll_for(30, lambda: len(got) >= 60)
            consumer.commit(asynchronous=False)
            crashed = group_coordinator_seen_by_client(bootstrap, "riders")
            cluster.stop_broker(crashed)
            poll_for(1.5)  # fenced after 300 ms; another replica leads the partition
            cluster.start_broker(crashed)
            poll_for(10)  # longer than the session and librdkafka's reconnect backoff
            produce_to(bootstrap, "ride", [0, 1, 2], count=20, prefix="b")
            poll_for(30, lambda: len(got) >= 120)
            consumer.commit(asynchronous=False)
            assert group_coordinator_seen_by_client(bootstrap, "riders") != crashed
        finally:
            consumer.close()
        assert (assigned, revoked) == ([3], [3])  # the one revocation is close()'s
        assert sorted(got) == sorted(
            f"{prefix}{p}-{i}".encode() for prefix in "ab" for p in range(3) for i in range(20)
        )


def describe_partitions(cluster: Cluster, topic: str) -> Any:
    """DescribeTopicPartitions v0 (KIP-966) for ``topic``: its partitions, ELR included."""
    wire = Wire(cluster.bootstrap_servers.split(",")[-1])
    try:
        response = wire.call(75, 0, {"topics": [{"name": topic}], "response_partition_limit": 10})
    finally:
        wire.close()
    (described,) = response.topics
    return described.partitions


def test_followers_out_of_the_isr_under_the_minimum_stay_eligible_and_one_takes_over() -> None:
    config = {"min.insync.replicas": "2", **FAST}
    with Cluster(brokers=3, config=config) as cluster:
        cluster.create_topic("elr", partitions=1, replication_factor=3)
        assert produce_to(cluster.bootstrap_servers, "elr", [0], count=20)[0] == [None] * 20
        for follower in (2, 3):
            cluster.isolate_broker(follower)  # alive, but out of the ISR after the lag time...
        # ... once the leader has more than they last fetched (acks=1: never acknowledged by
        # them, it stays out of the high watermark and is not on the ELR leader below)
        assert produce_to(cluster.bootstrap_servers, "elr", [0], acks="1")[0] == [None]
        wait_for(lambda: cluster.partition_state("elr", 0).isr == (1,), 3, "the ISR to shrink")
        (partition,) = describe_partitions(cluster, "elr")
        assert (partition.leader_id, partition.isr_nodes) == (1, (1,))
        # A replica joins the ELR when its leaving takes the ISR under the minimum: both
        # followers when the leader drops them in one check, else the one that left last
        # (which one depends on when each last fetched: one CI run dropped them apart).
        elr = partition.eligible_leader_replicas
        assert elr in ((2, 3), (2,), (3,)), elr
        # The high watermark stood still under the minimum, so the ELR holds every acknowledged
        # record: when the leader is fenced, the first ELR replica leads, alone in its ISR.
        cluster.stop_broker(1)
        first = elr[0]
        wait_for(lambda: cluster.partition_state("elr", 0).leader == first, 3, "an ELR leader")
        (partition,) = describe_partitions(cluster, "elr")
        rest = tuple(sorted({1, *elr} - {first}))
        assert (partition.isr_nodes, partition.eligible_leader_replicas) == ((first,), rest)
        for follower in (2, 3):
            cluster.heal_broker(follower)
        assert len(consume_all(cluster.bootstrap_servers, "elr", 0, 20)) == 20


def _connect_many(bootstrap: str, count: int, sockets: list[socket.socket]) -> None:
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    for _ in range(count):
        try:
            sockets.append(socket.create_connection((host, int(port)), timeout=1))
        except OSError:
            return  # the broker stopped listening


@pytest.mark.parametrize("how", ["stop_broker", "close"])
def test_a_broker_stopping_as_clients_connect_closes_every_socket_it_accepted(how: str) -> None:
    """Connections accepted just before a broker stops (``stop_broker``, or the cluster
    closing) are dropped with their sockets closed: asyncio makes an accepted connection's
    transport a loop pass later, which fails once the listener is closed, and the socket was
    left to the garbage collector (a ResourceWarning in whatever test ran next; 5 of 40 closes
    of a loop like this one, 20 sockets in one of them). The broker now stops accepting at
    once and closes its listener a pass later."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", ResourceWarning)
        for _ in range(25):
            cluster = Cluster(brokers=1 if how == "close" else 2).start()
            sockets: list[socket.socket] = []
            try:
                connecting = threading.Thread(
                    target=_connect_many, args=(cluster.bootstrap_servers, 20, sockets)
                )
                connecting.start()
                if how == "stop_broker":
                    cluster.stop_broker(cluster.broker_ids[0])
                    cluster.start_broker(cluster.broker_ids[0])  # (the port is free again)
                cluster.close()
                connecting.join()
            finally:
                cluster.close()
                for sock in sockets:
                    sock.close()
            gc.collect()
    assert [str(w.message) for w in seen if issubclass(w.category, ResourceWarning)] == []
