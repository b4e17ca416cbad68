"""Chaos on real Apache Kafka (must-show 6): minutes of random broker faults under both producers
and the mirror.

A 5-broker source cluster (12 partitions, RF 3, min.insync.replicas=2) and a 3-broker target take
random pause (SIGSTOP) / resume / kill (SIGKILL) / restart events from a seeded plan
(``tests/chaos_plan.py``, ``process_plan``: never more than two source brokers and one target
broker hurt at once, everything undone at the end). Throughout, the workers of the minibroker
chaos test (tests/integration/test_reliability_chaos.py) run against them: a FailoverProducer and
an AsyncFailoverProducer write unique values to the source, and a Mirror (fast lane on) copies
the topic to the target. At the end, with every ISR full again: every acknowledged message is in
the source and nothing else; every source record is on the target by provenance; every
duplicate is one the producers or the mirror counted.

``CHAOS_SEED=N`` replays a plan; the default run lasts ``KAFKA_CHAOS_SECONDS`` (180), the long one
(``--run-slow``) ``KAFKA_CHAOS_SLOW_SECONDS`` (900).
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from collections.abc import Callable

import pytest

from tests.chaos_plan import ClusterShape, FaultEvent, process_plan
from tests.integration.reliability_support import read_until, seed_from_env, wait_for
from tests.integration.test_reliability_chaos import (
    MIRROR_MAX_IN_FLIGHT,
    PARTITIONS,
    TOPIC,
    AsyncLoad,
    MirrorRun,
    RebalanceLog,
    SyncLoad,
    check_outcome,
)
from tests.kafka.support import high_watermarks, whole
from tests.realkafka.cluster import KafkaCluster

pytestmark = pytest.mark.chaos

SHAPES = {
    "source": ClusterShape(brokers=(1, 2, 3, 4, 5), max_faulted=2, weight=3),
    "target": ClusterShape(brokers=(1, 2, 3), max_faulted=1, weight=1),
}
DEFAULT_SEED = 20261124
DEFAULT_SECONDS = float(os.environ.get("KAFKA_CHAOS_SECONDS", "180"))
SLOW_SECONDS = float(os.environ.get("KAFKA_CHAOS_SLOW_SECONDS", "900"))


def apply(cluster: KafkaCluster, event: FaultEvent) -> None:
    b = event.broker
    if event.action == "pause":
        cluster.pause(b)
    elif event.action == "resume":
        cluster.resume(b)
    elif event.action == "kill":
        cluster.kill(b)
    elif event.action == "restart":
        cluster.restart(b, wait=False)  # it rejoins on its own; the plan goes on meanwhile
    else:
        raise ValueError(f"unknown action {event.action!r}")


def run(
    factory: Callable[..., KafkaCluster], seed: int, seconds: float
) -> tuple[Counter[str], str]:
    plan = process_plan(seed, seconds, SHAPES)
    print(f"chaos seed {seed} ({len(plan)} events over {seconds:g} s); CHAOS_SEED={seed} replays")
    src = factory(5, min_insync_replicas=2)
    dst = factory(3, min_insync_replicas=2)
    clusters = {"source": src, "target": dst}
    src.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
    dst.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
    rebalances = RebalanceLog()
    mirror_log = logging.getLogger("failover_partitioner.mirror")
    mirror_log.addHandler(rebalances)
    sync = SyncLoad(src.bootstrap_servers)
    aio = AsyncLoad(src.bootstrap_servers)
    mirror = MirrorRun(src.bootstrap_servers, dst.bootstrap_servers)
    workers: list[SyncLoad | AsyncLoad | MirrorRun] = [sync, aio, mirror]
    applied: list[str] = []
    try:
        for worker in workers:
            worker.start()
        start = time.monotonic()
        for event in plan:
            while (wait := start + event.at_s - time.monotonic()) > 0:
                time.sleep(min(wait, 0.2))
                error = next((w.error for w in workers if w.error is not None), None)
                if error is not None:
                    raise AssertionError(f"a worker failed (seed {seed})") from error
            apply(clusters[event.cluster], event)
            applied.append(f"{time.monotonic() - start:7.2f}s  {event}")
        print("faults applied:\n" + "\n".join(applied))
        for load in (sync, aio):
            load.stopping.set()
        for load in (sync, aio):
            load.join(300)
            assert not load.is_alive(), f"{load.name} did not finish (seed {seed})"
            assert load.error is None, f"{load.name} failed (seed {seed}): {load.error!r}"
        src.wait_ready()
        dst.wait_ready()
        wait_for(lambda: whole(src, TOPIC), 120, "the source ISRs to be full")
        wait_for(lambda: whole(dst, TOPIC), 120, "the target ISRs to be full")
        ends = high_watermarks(src.bootstrap_servers, TOPIC)
        wait_for(
            lambda: mirror.committed() == ends,
            180,
            "the mirror to commit the whole source",
            lambda: (mirror.committed(), ends, mirror.error),
        )
    finally:
        mirror.mirror.stop()
        mirror.join(120)
        for load in (sync, aio):
            load.stopping.set()
            load.join(30)
        mirror_log.removeHandler(rebalances)
    assert mirror.error is None, f"the mirror failed (seed {seed}): {mirror.error!r}"
    assert mirror.producer is not None
    source = read_until(src.bootstrap_servers, TOPIC, ends)
    target = read_until(dst.bootstrap_servers, TOPIC, high_watermarks(dst.bootstrap_servers, TOPIC))

    source_duplicates, mirror_duplicates = check_outcome(
        seed, sync, aio, mirror, source, target, rebalances.lines, client_resends=True
    )
    assert sync.stats is not None
    assert aio.stats is not None
    assert mirror.final is not None
    counted = (
        mirror.producer.statistics().ambiguous_failures
        + mirror.final.possible_duplicates
        + MIRROR_MAX_IN_FLIGHT * len(rebalances.lines)
    )
    line = (
        f"chaos seed {seed}, {seconds:g} s, {len(plan)} events "
        f"({', '.join(f'{k} {n}' for k, n in sorted(Counter(e.action for e in plan).items()))}); "
        f"acknowledged {len(sync.acked)} sync + {len(aio.acked)} async; source {len(source)} "
        f"records ({source_duplicates} duplicates, counted {sync.stats.ambiguous_failures} + "
        f"{aio.stats.ambiguous_failures} ambiguous); target {len(target)} records "
        f"({mirror_duplicates} copied twice, bound {counted}); lost 0"
    )
    print(line)
    return Counter(e.action for e in plan), line


@pytest.mark.parametrize(
    "seconds",
    [
        pytest.param(DEFAULT_SECONDS, marks=pytest.mark.timeout(DEFAULT_SECONDS + 900)),
        pytest.param(
            SLOW_SECONDS, marks=[pytest.mark.slow, pytest.mark.timeout(SLOW_SECONDS + 900)]
        ),
    ],
    ids=["default", "long"],
)
def test_random_broker_faults_lose_no_acknowledged_message(
    kafka_cluster_factory: Callable[..., KafkaCluster], seconds: float
) -> None:
    seed = seed_from_env("CHAOS_SEED", DEFAULT_SEED)
    events, _ = run(kafka_cluster_factory, seed, seconds)
    assert sum(events.values()) >= seconds / 7  # the plan did inject faults
