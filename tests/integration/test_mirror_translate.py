"""``failover-mirror translate`` between minibroker clusters: it never commits an offset past a
message the group has not read.

1. A chain (A -> B -> C): B's messages already carry the upstream mirror's ``mirror.source``
   (offsets of A, which say nothing of B). Mirrored B -> C with separate provenance headers, or
   none, translate reads only the provenance this mirror wrote, as its offset syncs say.
2. Offset syncs into another target topic (the same source mirrored under a second name) or
   naming positions past the partition's end do not set where the group resumes.
3. A run that committed once (a small topic mirrored then stopped, or a mirror stopped after
   its first batch) leaves an offset sync: translate reads the mirror's provenance and re-reads
   nothing (with no sync it re-read all 450 messages).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from failover_partitioner.mirror import Mirror, MirrorOptions, MirrorStatus
from failover_partitioner.mirror.cli import main
from minibroker import Cluster

SYNCS = "failover-mirror.offset-syncs"
CONSUMER = {"session.timeout.ms": "1500", "heartbeat.interval.ms": "300"}


def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def committed(cluster: Cluster, group: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
    try:
        (tp,) = consumer.committed([TopicPartition(topic, 0)], 10)
        return int(tp.offset)
    finally:
        consumer.close()


def wait_committed(cluster: Cluster, group: str, at_least: int) -> None:
    wait_for(lambda: committed(cluster, group, "orders") >= at_least, 30, f"{group}'s commit")


def commit(cluster: Cluster, group: str, topic: str, offset: int) -> None:
    consumer = Consumer(
        {"bootstrap.servers": cluster.bootstrap_servers, "group.id": group, "log_level": 0}
    )
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        consumer.close()


def produce(cluster: Cluster, topic: str, records: list[tuple[bytes, list[Any]]]) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for value, headers in records:
        producer.produce(topic, value, partition=0, headers=headers)
    assert producer.flush(30) == 0


def translate(src: Cluster, dst: Cluster, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    capsys.readouterr()
    args = ["--source", src.bootstrap_servers, "--target", dst.bootstrap_servers]
    assert main(["translate", *args, "--group", "billing", "--include", "orders", "--json"]) == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert isinstance(row, dict)
    return row


@pytest.mark.parametrize(
    "hop",
    [{"provenance_format": "separate"}, {"provenance_headers": False}],
    ids=["separate", "none"],
)
def test_in_a_chain_translate_reads_this_mirrors_provenance_not_the_upstream_ones(
    hop: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    with Cluster(brokers=1) as b, Cluster(brokers=1) as c:
        b.create_topic("orders", partitions=1, replication_factor=1)
        options = MirrorOptions(
            source_bootstrap=b.bootstrap_servers,
            target_bootstrap=c.bootstrap_servers,
            group_id="mirror",
            consumer_config=CONSUMER,
            commit_interval_s=0.2,
            status_interval_s=0.2,
            topic_refresh_interval_s=0.5,
            **hop,
        )
        mirror = Mirror(options)
        thread = threading.Thread(target=mirror.run, daemon=True)
        thread.start()
        try:
            # B aggregates two upstream clusters' "orders" (A1 then A2, 50 each): the upstream
            # header of B's record i names offset i % 50 of an A, below 60 for all of them.
            for part in range(4):  # in steps, so that the mirror's commits write offset syncs
                upstream = [
                    (b"b-%d" % i, [("mirror.source", b"orders/0/%d" % (i % 50))])
                    for i in range(25 * part, 25 * part + 25)
                ]
                produce(b, "orders", upstream)
                wait_committed(b, "mirror", 25 * part + 25)
                time.sleep(0.5)
        finally:
            mirror.stop()
            thread.join(30)
        assert not thread.is_alive()

        commit(b, "billing", "orders", 60)  # the group read 60 of B's 100
        row = translate(b, c, capsys)

    # C holds B's records in order: the first the group has not read is at 60.
    assert row["offset"] <= 60, f"translate skipped {row['offset'] - 60} unread messages"
    if hop.get("provenance_headers", True):
        assert row == {**row, "offset": 60, "rereads": 0}


def _sync(source_offset: int, target_topic: str, end: int) -> tuple[bytes, list[Any]]:
    sync = {
        "source_topic": "orders",
        "source_partition": 0,
        "source_offset": source_offset,
        "target_topic": target_topic,
        "target_offsets": [end],
        "provenance": "compact",
    }
    return json.dumps(sync).encode(), []


@pytest.mark.parametrize("stale", ["another_target_topic", "past_the_end"])
def test_offset_syncs_of_another_topic_or_past_the_end_do_not_skip_unread_messages(
    stale: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with Cluster(brokers=1) as src, Cluster(brokers=1) as dst:
        src.create_topic("orders", partitions=1, replication_factor=1)
        produce(src, "orders", [(b"m-%d" % i, []) for i in range(100)])
        commit(src, "billing", "orders", 50)
        # The target as the mirror left it: source offset i at position i of orders.
        dst.create_topic("orders", partitions=1, replication_factor=1)
        produce(
            dst,
            "orders",
            [(b"m-%d" % i, [("mirror.source", b"orders/0/%d" % i)]) for i in range(100)],
        )
        dst.create_topic(SYNCS, partitions=1, replication_factor=1)
        # The latest sync at or below 50 names position 600: of backup.orders (a second
        # mirror of the same source, or a run with another --rename), or of an older orders.
        target = "backup.orders" if stale == "another_target_topic" else "orders"
        produce(dst, SYNCS, [_sync(10, "orders", 10), _sync(40, target, 600)])
        row = translate(src, dst, capsys)

    assert row["offset"] == 50, f"translated to {row['offset']}; the first unread is at 50"
    assert row["rereads"] == 0


@pytest.mark.parametrize("stop", ["once_committed", "after_its_first_batch"])
def test_a_run_that_committed_once_leaves_an_offset_sync_and_translate_rereads_nothing(
    stop: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with Cluster(brokers=1) as src, Cluster(brokers=1) as dst:
        src.create_topic("orders", partitions=1, replication_factor=1)
        produce(src, "orders", [(b"m-%d" % i, []) for i in range(450)])
        options = MirrorOptions(  # the default 5 s commit interval: the run is one sync time
            source_bootstrap=src.bootstrap_servers,
            target_bootstrap=dst.bootstrap_servers,
            group_id="mirror",
            consumer_config=CONSUMER,
            status_interval_s=0.01,
            topic_refresh_interval_s=0.5,
        )
        mirror = Mirror(options)

        def on_status(status: MirrorStatus) -> None:
            if stop == "after_its_first_batch" and status.consumed:
                mirror.stop()  # its shutdown commit is then its only one

        ended: list[MirrorStatus] = []
        thread = threading.Thread(target=lambda: ended.append(mirror.run(on_status)), daemon=True)
        thread.start()
        try:
            if stop == "once_committed":
                wait_committed(src, "mirror", 450)  # its idle commit; the shutdown's is empty
        finally:
            if stop == "once_committed":
                mirror.stop()
            thread.join(30)
        assert not thread.is_alive()
        (status,) = ended
        assert status.commits >= 1
        mirrored = status.delivered
        assert mirrored == committed(src, "mirror", "orders") > 0

        read = mirrored * 2 // 3  # the group read two thirds of what was mirrored
        commit(src, "billing", "orders", read)
        row = translate(src, dst, capsys)  # without --provenance-format: the syncs say it

    assert row == {**row, "offset": read, "rereads": 0}, f"no usable offset sync: {row}"
