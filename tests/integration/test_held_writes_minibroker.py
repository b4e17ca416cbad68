"""A follower that stops copying but is still in the ISR: its partitions hold every write.

Broker 5 is cut from replication (clients still reach it). Until ``replica.lag.time.max.ms``
drops it from the ISRs, the leaders of its partitions append each acks=all write and hold it
until the request's timeout, then answer REQUEST_TIMED_OUT, while the metadata still shows
those partitions whole. Released after a short back-off, such a partition would take new
writes and hold them again, round after round; the producer keeps it out until its ISR changes.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator

import pytest

from failover_partitioner import FailoverProducer
from minibroker import Cluster
from tests.integration.test_failover_minibroker import consume_all, wait_for

PARTITIONS = 12
LAG_MS = 6_000  # replica.lag.time.max.ms: how long the partitions hold writes
RATE_PER_S = 4_000


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    config = {"min.insync.replicas": "2", "replica.lag.time.max.ms": str(LAG_MS)}
    with Cluster(brokers=5, config=config) as c:
        c.create_topic("orders", partitions=PARTITIONS, replication_factor=3)
        yield c


def produce_for(p: FailoverProducer, seconds: float, sent: int) -> int:
    """Keyless messages ``m-N`` at RATE_PER_S for ``seconds``; the count sent in all."""
    start = time.monotonic()
    first = sent
    while (elapsed := time.monotonic() - start) < seconds:
        ahead = (sent - first) / RATE_PER_S - elapsed
        if ahead > 0:
            time.sleep(ahead)
        for _ in range(100):
            p.produce("orders", b"m-%d" % sent)
            sent += 1
        p.poll(0)
    return sent


def test_a_partition_holding_writes_stays_out_until_its_isr_shrinks(cluster: Cluster) -> None:
    p = FailoverProducer(
        {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "request.timeout.ms": 1000},
        quarantine_backoff_s=0.2,
        metadata_fast_refresh_s=0.2,
    )
    try:
        assert p.health("orders").whole
        held = {s.partition for s in cluster.describe("orders") if 5 in s.replicas}
        sent = produce_for(p, 1.0, 0)
        cluster.isolate_broker(5)
        cut = time.monotonic()
        # Held writes time out after 1 s; a back-off of 0.2 s, doubling, would have released
        # and struck each held partition three or four times before the ISR shrinks at 6 s.
        sent = produce_for(p, 4.5, sent)
        view = p.health("orders")
        stats = p.statistics()
        assert len(view.usable) < PARTITIONS, view  # the metadata still shows all whole, but...
        assert set(view.quarantined) <= held, (view.quarantined, held)
        assert 1 <= stats.quarantines <= len(held), (stats.quarantines, held)
        assert all(len(s.isr) == 3 for s in cluster.describe("orders")), "ISR shrank too soon"

        # The ISR drops broker 5: the partitions it followed come back (ISR 2 = min ISR);
        # those it leads stay out (ISR 1).
        followed = {
            s.partition for s in cluster.describe("orders") if 5 in s.replicas and s.leader != 5
        }
        remaining = LAG_MS / 1000 - (time.monotonic() - cut)
        sent = produce_for(p, max(0.0, remaining), sent)
        wait_for(
            lambda: not (followed - set(p.health("orders").usable)),
            10,
            "the partitions broker 5 only followed to be used again",
            lambda: (p.health("orders"), cluster.describe("orders")),
        )
        sent = produce_for(p, 1.0, sent)
        assert p.flush(30) == 0
        stats = p.statistics()
        assert stats.final_failures == 0
        assert stats.delivered == sent
    finally:
        assert p.close() == []

    cluster.heal_broker(5)
    wait_for(
        lambda: all(len(s.isr) == 3 for s in cluster.describe("orders")),
        30,
        "broker 5 to catch up",
    )
    records = consume_all(cluster.bootstrap_servers, "orders", sent)
    values = Counter(m.value() for m in records)
    assert set(values) == {b"m-%d" % i for i in range(sent)}
    assert len(records) - len(values) <= stats.ambiguous_failures
