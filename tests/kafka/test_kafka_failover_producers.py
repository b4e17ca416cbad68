"""Both failover producers on real Apache Kafka: 5 brokers, 12 partitions, RF 3, min ISR 2.

Must-show 1: 100,000 keyless messages at a steady rate; brokers 4 and 5 paused (SIGSTOP) or
killed (SIGKILL) mid-run. Every message is consumed back, duplicates come only from ambiguous
failures and are counted, no produce()/send() call waits a second, and a plain confluent-kafka
Producer on the same degraded cluster is stuck on the degraded partitions (the fault bites).

Must-show 2: keyed messages under key_policy="failover" keep their murmur2 partition while it is
usable; only the keys of degraded partitions move, and they come back after recovery.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer

from failover_partitioner import DeliveryReport, FailoverProducer, ProducerStatistics
from failover_partitioner._murmur2 import partition_for_key
from failover_partitioner.aio import AsyncFailoverProducer
from tests.kafka.support import (
    FAULTY,
    PARTITIONS,
    copies,
    degraded,
    new_topic,
    produce_steadily,
    read_back,
    spread,
    wait_for,
    whole,
)
from tests.realkafka.cluster import KafkaCluster

MESSAGES = 100_000
SYNC_RATE_PER_S = 4_000.0  # about 25 s of producing (see the note on the rate below)
ASYNC_RATE_PER_S = 4_000.0
FAULT_AT = MESSAGES * 2 // 5
ID_HEADER = "failover-id"


def inject(cluster: KafkaCluster, fault: str) -> None:
    for broker in FAULTY:
        if fault == "pause":
            cluster.pause(broker)
        else:
            cluster.kill(broker)


def plain_producer_stalls(cluster: KafkaCluster, topic: str, bad: set[int]) -> None:
    """A stock confluent-kafka Producer, same traffic: stuck on the degraded partitions."""
    assert bad
    failed: Counter[int] = Counter()

    def on_delivery(err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            failed[msg.partition()] += 1

    plain = Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "acks": "all",
            "on_delivery": on_delivery,
            "log_level": 0,
        }
    )
    start = time.monotonic()
    for i in range(int(SYNC_RATE_PER_S * 1.5)):
        if i % 100 == 0:
            ahead = start + i / SYNC_RATE_PER_S - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
            plain.poll(0)
        plain.produce(topic, b"p%d" % i)
    # librdkafka retries a refused partition until the message times out (300 s by default):
    # within the time the failover producer needed for everything, those are still stuck.
    stuck = plain.flush(5)
    assert stuck > 0, "the plain producer delivered everything: the fault did not bite"
    plain.purge()
    plain.flush(5)
    assert set(failed) <= bad, (failed, bad)
    assert sum(failed.values()) >= stuck


def check_consumed(
    cluster: KafkaCluster, topic: str, stats: ProducerStatistics, with_ids: bool = False
) -> None:
    wait_for(
        lambda: whole(cluster, topic), 90, "every ISR full again", lambda: cluster.describe(topic)
    )
    records = read_back(cluster.bootstrap_servers, topic)
    values = Counter(m.value() for m in records)
    sent = {b"m-%d" % i for i in range(MESSAGES)}
    missing = sent - set(values)
    assert not missing, f"{len(missing)} messages not consumed back, e.g. {sorted(missing)[:5]}"
    assert set(values) == sent  # nothing foreign
    # A copy in another partition comes only from an attempt that failed ambiguously (may have
    # been written), counted; one in the same partition may also be the client's own resend
    # after a leader move, which nothing reports (support.copies).
    elsewhere, alongside, moved = copies(records)
    print(f"copies: {elsewhere} in another partition, {alongside} in the same one")
    assert elsewhere <= stats.ambiguous_failures, (elsewhere, alongside, stats)
    assert moved <= stats.possible_duplicates, (moved, stats)
    if with_ids:  # a duplicate is the same message sent again, never a second one
        ids: dict[bytes, set[bytes]] = {}
        for m in records:
            ids.setdefault(m.value(), set()).add(dict(m.headers() or [])[ID_HEADER])
        assert all(len(s) == 1 for s in ids.values())


@pytest.mark.parametrize("fault", ["pause", "kill"])
def test_failover_producer_loses_nothing_when_two_brokers_go(
    kafka_cluster: KafkaCluster, fault: str
) -> None:
    topic, bad = new_topic(kafka_cluster, f"sync-{fault}")
    plain_topic, _ = new_topic(kafka_cluster, f"plain-{fault}")
    p = FailoverProducer({"bootstrap.servers": kafka_cluster.bootstrap_servers, "acks": "all"})
    # Learnt from the brokers (DescribeConfigs); the first look may have had to assume 1.
    wait_for(lambda: p.health(topic).min_insync_replicas == 2, 20, "min ISR read from Kafka")
    longest = produce_steadily(
        p, topic, MESSAGES, SYNC_RATE_PER_S, FAULT_AT, lambda: inject(kafka_cluster, fault)
    )
    assert p.flush(90) == 0
    assert longest < 1.0, f"a produce() call waited {longest:.2f} s"
    wait_for(
        lambda: degraded(kafka_cluster, topic) == bad,
        30,
        f"partitions {sorted(bad)} under min ISR",
        lambda: kafka_cluster.describe(topic),
    )
    plain_producer_stalls(kafka_cluster, plain_topic, bad)
    stats = p.statistics()
    assert p.close() == []
    assert (stats.produced, stats.delivered, stats.final_failures) == (MESSAGES, MESSAGES, 0)
    assert stats.quarantines + stats.rerouted > 0, stats
    kafka_cluster.heal()
    check_consumed(kafka_cluster, topic, stats)


@dataclass
class AsyncOutcome:
    stats: ProducerStatistics
    longest_s: float
    errors: list[BaseException]
    late_partitions: set[int]


async def async_run(cluster: KafkaCluster, topic: str, bad: set[int], fault: str) -> AsyncOutcome:
    futures: list[asyncio.Future[Any]] = []
    longest = 0.0
    known_at = -1
    async with AsyncFailoverProducer(
        bootstrap_servers=cluster.bootstrap_servers, message_id_header=ID_HEADER
    ) as ap:
        await ap.refresh(topic)
        start = time.monotonic()
        for i in range(MESSAGES):
            ahead = start + i / ASYNC_RATE_PER_S - time.monotonic()
            if ahead > 0:
                await asyncio.sleep(ahead)
            elif i % 100 == 0:
                await asyncio.sleep(0)
            if i == FAULT_AT:
                inject(cluster, fault)
            if (
                i > FAULT_AT
                and known_at < 0
                and i % 500 == 0
                and bad <= set(ap.health(topic).unavailable)
            ):
                known_at = i
            t = time.monotonic()
            futures.append(await ap.send(topic, b"m-%d" % i))
            longest = max(longest, time.monotonic() - t)
        assert await ap.flush(90) == 0
        results = await asyncio.gather(*futures, return_exceptions=True)
        stats = ap.statistics()
    errors = [r for r in results if isinstance(r, BaseException)]
    late = {md.partition for md in results[max(known_at, 0) :] if not isinstance(md, BaseException)}
    assert known_at >= 0, "the producer never marked the degraded partitions unavailable"
    return AsyncOutcome(stats=stats, longest_s=longest, errors=errors, late_partitions=late)


@pytest.mark.parametrize("fault", ["pause", "kill"])
def test_async_failover_producer_loses_nothing_when_two_brokers_go(
    kafka_cluster: KafkaCluster, fault: str
) -> None:
    topic, bad = new_topic(kafka_cluster, f"async-{fault}")
    outcome = asyncio.run(async_run(kafka_cluster, topic, bad, fault))
    assert outcome.errors == []
    stats = outcome.stats
    assert (stats.produced, stats.delivered, stats.final_failures) == (MESSAGES, MESSAGES, 0)
    assert outcome.longest_s < 1.0, f"a send() call waited {outcome.longest_s:.2f} s"
    # Once the producer saw the fault, nothing new went to the degraded partitions.
    assert not outcome.late_partitions & bad
    assert degraded(kafka_cluster, topic) == bad
    kafka_cluster.heal()
    check_consumed(kafka_cluster, topic, stats, with_ids=True)


def test_only_keys_of_degraded_partitions_move_and_they_come_back(
    kafka_cluster: KafkaCluster,
) -> None:
    topic, bad = new_topic(kafka_cluster, "keys")
    p = FailoverProducer(
        {"bootstrap.servers": kafka_cluster.bootstrap_servers, "acks": "all"},
        key_policy="failover",
        metadata_refresh_s=0.5,
        metadata_fast_refresh_s=0.2,
    )
    keys = [b"customer-%d" % i for i in range(600)]
    home = {k: partition_for_key(k, PARTITIONS) for k in keys}

    def placement() -> dict[bytes, set[int]]:
        seen: dict[bytes, set[int]] = {}

        def cb(err: Any, report: DeliveryReport) -> None:
            assert err is None, err
            key = report.key()
            assert isinstance(key, bytes)
            seen.setdefault(key, set()).add(report.partition())

        for k in keys:
            p.produce(topic, b"v", key=k, on_delivery=cb)
        assert p.flush(60) == 0
        return seen

    assert placement() == {k: {home[k]} for k in keys}
    assert any(home[k] in bad for k in keys)
    inject(kafka_cluster, "pause")
    wait_for(lambda: degraded(kafka_cluster, topic) == bad, 30, "partitions under min ISR")
    # Its metadata fetches wait behind requests the paused brokers hold: allow it a while.
    wait_for(
        lambda: set(p.health(topic).unavailable) == bad,
        60,
        "the producer to see the fault",
        lambda: p.health(topic),
    )
    during = placement()
    for k in keys:
        if home[k] in bad:
            assert len(during[k]) == 1, (k, during[k])
            assert not during[k] & bad, (k, during[k])
        else:
            assert during[k] == {home[k]}, (k, home[k], during[k])
    kafka_cluster.heal()
    wait_for(lambda: whole(kafka_cluster, topic), 60, "the ISRs to recover")
    wait_for(lambda: not p.health(topic).unavailable, 20, "the producer to see the recovery")
    assert placement() == {k: {home[k]} for k in keys}
    p.close()


def test_both_producers_wait_for_a_topic_created_after_their_first_message(
    kafka_cluster: KafkaCluster,
) -> None:
    """A topic the cluster does not list yet (as when the broker asked has not heard of a topic
    just created) holds its messages within ``topic_propagation_max_s``: created a moment
    later, it takes every one of them, keyed ones at their murmur2 partition."""
    topic = f"late-{uuid.uuid4().hex[:8]}"
    keys = [None if i % 2 else b"k%d" % i for i in range(200)]
    p = FailoverProducer(
        {"bootstrap.servers": kafka_cluster.bootstrap_servers, "acks": "all"},
        metadata_fast_refresh_s=0.2,
    )
    errors: list[Any] = []
    placed: dict[bytes, int] = {}

    def on_delivery(err: KafkaError | None, msg: DeliveryReport) -> None:
        got = msg.key()
        if err is not None:
            errors.append(err)
        elif isinstance(got, bytes):
            placed[got] = msg.partition()

    for i, key in enumerate(keys):
        p.produce(topic, b"s%d" % i, key=key, on_delivery=on_delivery)

    async def run() -> list[Any]:
        async with AsyncFailoverProducer(
            bootstrap_servers=kafka_cluster.bootstrap_servers, metadata_fast_refresh_s=0.2
        ) as ap:
            futures = [await ap.send(topic, b"a%d" % i, key=k) for i, k in enumerate(keys)]
            p.poll(0.5)
            assert p.statistics().failed_buffer_depth == len(keys)
            assert ap.statistics().failed_buffer_depth == len(keys)
            await asyncio.to_thread(kafka_cluster.create_topic, topic, assignment=spread())
            assert await asyncio.to_thread(p.flush, 30) == 0
            return await asyncio.wait_for(asyncio.gather(*futures), 30)

    try:
        sent = asyncio.run(run())
    finally:
        p.close()
    assert errors == []
    for key, md in zip(keys, sent, strict=True):
        if key is not None:
            assert md.partition == partition_for_key(key, PARTITIONS)
            assert placed[key] == md.partition
    records = read_back(kafka_cluster.bootstrap_servers, topic)
    assert len({m.value() for m in records}) == 2 * len(keys)
