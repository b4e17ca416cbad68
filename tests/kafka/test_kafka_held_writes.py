"""A follower that stops copying but stays in the ISR, on real Apache Kafka: writes are held.

Broker 4 follows three partitions and leads none. Hung (SIGSTOP), it stays in their ISRs until
``replica.lag.time.max.ms`` (25 s here; 30 s is Kafka's default) and registered until
``broker.session.timeout.ms`` (40 s here), so for 25 s their leaders append every acks=all
write and hold it until the request's timeout, then answer REQUEST_TIMED_OUT (7), while the
metadata shows the partitions whole. A leader answers one request per connection at a time, so
every request the producer sent it meanwhile, for any partition, waits behind the held ones:
the producer's deliveries stall for about 11 s here, whatever it does, until those are answered.
Then, as the producer keeps each held partition out of use until its ISR changes, it delivers
at the offered rate. Released after a back-off instead, the held partitions took new writes and
stalled the connections again until the ISR shrank (about 150 messages a second delivered
between 15 and 24 s after the pause, against 1,950 offered).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable

import pytest

from failover_partitioner import FailoverProducer
from tests.integration.test_held_writes_minibroker import strikes
from tests.kafka.support import copies, read_back, wait_for, whole
from tests.realkafka.cluster import KafkaCluster

HUNG = 4
LAG_S = 25.0
RATE_PER_S = 2_000
WINDOW = (15.0, 24.0)  # seconds after the pause: the queued held requests answered, ISR full
# Broker 4 follows partitions 0-2 and leads none; partitions 3-7 do not involve it.
ASSIGNMENT = [
    [1, 2, 4],
    [2, 3, 4],
    [3, 1, 4],
    [1, 2, 3],
    [2, 3, 1],
    [3, 1, 2],
    [1, 3, 2],
    [2, 1, 3],
]
HELD = {0, 1, 2}


def produce_until(
    p: FailoverProducer, topic: str, until: float, sent: int, on_delivery: Callable[..., None]
) -> int:
    """Keyless messages ``m-N`` at RATE_PER_S until ``time.monotonic()`` passes ``until``;
    the count sent in all."""
    start = time.monotonic()
    first = sent
    while (now := time.monotonic()) < until:
        ahead = (sent - first) / RATE_PER_S - (now - start)
        if ahead > 0:
            time.sleep(ahead)
        for _ in range(50):
            p.produce(topic, b"m-%d" % sent, on_delivery=on_delivery)
            sent += 1
        p.poll(0)
    return sent


def test_partitions_holding_writes_stay_out_until_the_isr_drops_the_hung_follower(
    kafka_cluster_factory: Callable[..., KafkaCluster], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="failover_partitioner.core.engine")
    cluster = kafka_cluster_factory(
        4,
        min_insync_replicas=2,
        config={"replica.lag.time.max.ms": str(int(LAG_S * 1000))},
        controller_config={"broker.session.timeout.ms": "40000"},
    )
    topic = f"held-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, assignment=ASSIGNMENT)
    p = FailoverProducer(
        {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "request.timeout.ms": 2000},
        quarantine_backoff_s=0.2,
        metadata_fast_refresh_s=0.2,
    )
    delivered: list[float] = []

    def on_delivery(err: object, _: object) -> None:
        if err is None:
            delivered.append(time.monotonic())

    try:
        wait_for(lambda: p.health(topic).min_insync_replicas == 2, 20, "min ISR read from Kafka")
        sent = produce_until(p, topic, time.monotonic() + 1.0, 0, on_delivery)
        cluster.pause(HUNG)
        paused = time.monotonic()
        sent = produce_until(p, topic, paused + 7.0, sent, on_delivery)
        struck = strikes(caplog)
        # Held writes time out after 2 s; a back-off of 0.2 s, doubling, would have released
        # and struck each held partition about three times by now.
        assert struck.keys() & HELD, struck
        assert all(struck[q] <= 2 for q in HELD), struck
        assert HELD & set(p.health(topic).quarantined), p.health(topic)

        sent = produce_until(p, topic, paused + WINDOW[1], sent, on_delivery)
        views = cluster.describe(topic)
        assert all(len(v.isr) == 3 for v in views), f"an ISR shrank too soon: {views}"
        begin, end = paused + WINDOW[0], paused + WINDOW[1]
        rate = sum(1 for t in delivered if begin <= t < end) / (end - begin)
        assert rate >= 0.6 * RATE_PER_S, f"{rate:.0f} msg/s delivered while the writes were held"

        # The ISR drops broker 4 (2 left, the minimum): the partitions take writes again.
        wait_for(
            lambda: set(p.health(topic).usable) >= HELD,
            LAG_S,
            "the partitions broker 4 followed to be used again",
            lambda: (p.health(topic), cluster.describe(topic)),
        )
        sent = produce_until(p, topic, time.monotonic() + 1.0, sent, on_delivery)
        assert p.flush(60) == 0
        stats = p.statistics()
    finally:
        assert p.close() == []
    assert (stats.delivered, stats.final_failures) == (sent, 0)
    cluster.heal()
    wait_for(lambda: whole(cluster, topic), 90, "every ISR full again")
    records = read_back(cluster.bootstrap_servers, topic, len(ASSIGNMENT))
    assert {m.value() for m in records} == {b"m-%d" % i for i in range(sent)}
    elsewhere, alongside, _ = copies(records)
    assert elsewhere <= stats.ambiguous_failures, (elsewhere, alongside, stats)
