"""failover-mirror on real Apache Kafka (must-show 4): SIGKILLed three times, target brokers paused.

One cluster, source and target topics side by side (``--rename 'copy.{topic}'``). The source
topic lives on brokers 1-3 only, so pausing brokers 4 and 5 degrades the target alone: three of
its twelve partitions fall below min.insync.replicas=2. A producer writes 50,000 unique messages
to the source at a steady rate while a ``failover-mirror`` process copies them; it is SIGKILLed
three times while it copies (each after it has delivered 3,000 messages; a new one is started
each time), and brokers 4 and 5 are paused for 15 s under the third. Afterwards
the target holds every source record (by the provenance header: each source partition and
offset at least once) and the copies stay within what docs/mirror.md states: at most
``--max-in-flight`` per crash, plus the possible duplicates the mirror counted.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from failover_partitioner.mirror import HEADER_SOURCE
from tests.integration.test_reliability_mirror_crash import MirrorProcess, SourceWriter
from tests.kafka.support import (
    FAULTY,
    PARTITIONS,
    committed,
    degraded,
    group_away_from_faults,
    high_watermarks,
    read_back,
    spread,
    wait_for,
    whole,
)
from tests.realkafka.cluster import KafkaCluster

pytestmark = pytest.mark.chaos

MESSAGES = 50_000
RATE_PER_S = 2_000.0  # 25 s of writing
MAX_IN_FLIGHT = 2_000
KILLS = 3
DELIVERED_BEFORE_KILL = 3_000
PAUSE_S = 15.0
# A killed member's session ends soon, so its successor gets the partitions within seconds.
CONSUMER_PROPERTIES = "session.timeout.ms=6000\nheartbeat.interval.ms=500\n"


def payload(i: int) -> bytes:
    return b"mirror-%08d-" % i + b"q" * 60


def delivered_at_least(mirror: MirrorProcess, count: int) -> bool:
    return int(mirror.latest.get("delivered", 0)) >= count


def test_mirror_killed_three_times_with_target_brokers_paused_loses_nothing(
    kafka_cluster: KafkaCluster, tmp_path: Path
) -> None:
    cluster = kafka_cluster
    suffix = uuid.uuid4().hex[:8]
    source = f"orders-{suffix}"
    target = f"copy.{source}"
    # Its coordinator's __consumer_offsets partition away from the paused brokers (the cause
    # of a CI failure: the member expired, nothing delivered for 90 s).
    group = group_away_from_faults(cluster, "mirror")
    on_three = [[(p + i) % 3 + 1 for i in range(3)] for p in range(PARTITIONS)]
    cluster.create_topic(source, assignment=on_three)
    cluster.create_topic(target, assignment=spread())
    props = tmp_path / "consumer.properties"
    props.write_text(CONSUMER_PROPERTIES)
    args = [
        "--source",
        cluster.bootstrap_servers,
        "--target",
        cluster.bootstrap_servers,
        "--group",
        group,
        "--include",
        source,
        "--rename",
        "copy.{topic}",
        "--consumer.config",
        str(props),
        "--commit-interval",
        "0.5",
        "--max-in-flight",
        str(MAX_IN_FLIGHT),
        "--json",
        "--status-interval",
        "0.2",
    ]
    processes: list[MirrorProcess] = []

    def start() -> MirrorProcess:
        mirror = MirrorProcess(
            f"mirror-{len(processes) + 1}", args, tmp_path / f"mirror-{len(processes) + 1}.log"
        )
        processes.append(mirror)
        return mirror

    writer = SourceWriter(
        cluster.bootstrap_servers,
        source,
        messages=MESSAGES,
        rate_per_s=RATE_PER_S,
        make_payload=payload,
    )
    kills: list[str] = []
    mirror = start()
    try:
        mirror.wait_logged("assigned " + source, 60)
        writer.start()
        for round_ in range(KILLS):
            # Each mirror is killed while it copies: after it has delivered some, mid-stream.
            wait_for(
                functools.partial(delivered_at_least, mirror, DELIVERED_BEFORE_KILL),
                90,
                f"{mirror.name} to deliver {DELIVERED_BEFORE_KILL}",
                mirror.tail,
            )
            status = dict(mirror.latest)
            mirror.kill()
            kills.append(
                f"{mirror.name}: delivered {status.get('delivered')}, "
                f"uncommitted {status.get('uncommitted')}"
            )
            mirror = start()
            if round_ == 1:  # the target degrades under the third mirror, then recovers
                mirror.wait_logged("assigned " + source, 60)
                for broker in FAULTY:
                    cluster.pause(broker)
                wait_for(lambda: degraded(cluster, target) != set(), 30, "the target to degrade")
                time.sleep(PAUSE_S)
                for broker in FAULTY:
                    cluster.resume(broker)
        writer.join(180)
        assert writer.errors == []
        mirror.wait_logged("assigned " + source, 60)  # the last one runs to the end
        cluster.heal()
        source_ends = high_watermarks(cluster.bootstrap_servers, source)
        assert sum(source_ends.values()) == MESSAGES
        wait_for(
            lambda: committed(cluster.bootstrap_servers, group, source, PARTITIONS) == source_ends,
            120,
            "the group to commit the whole source",
            lambda: (
                committed(cluster.bootstrap_servers, group, source, PARTITIONS),
                mirror.tail(),
            ),
        )
        assert mirror.terminate() == 0, mirror.tail()
    finally:
        for process in processes:
            if process.proc.poll() is None:
                process.kill()

    wait_for(lambda: whole(cluster, target), 60, "the target's ISRs to recover")
    copies_counted = sum(p.latest.get("possible_duplicates", 0) for p in processes)
    origins: Counter[tuple[int, int]] = Counter()
    values: set[bytes] = set()
    for record in read_back(cluster.bootstrap_servers, target):
        provenance = dict(record.headers() or [])[HEADER_SOURCE]  # b"topic/partition/offset"
        _, p, o = provenance.rsplit(b"/", 2)
        origins[int(p), int(o)] += 1
        values.add(record.value())
    expected = {(p, o) for p, end in source_ends.items() for o in range(end)}
    missing = expected - set(origins)
    assert not missing, f"{len(missing)} source records never reached the target"
    assert set(origins) == expected
    assert values == {payload(i) for i in range(MESSAGES)}
    copies = sum(n - 1 for n in origins.values())
    bound = len(kills) * MAX_IN_FLIGHT + copies_counted
    print(
        f"{MESSAGES} messages, {len(kills)} SIGKILLs, brokers {FAULTY} paused {PAUSE_S} s; "
        f"{copies} copies (bound {len(kills)} x {MAX_IN_FLIGHT} + {copies_counted} counted); "
        "lost 0\n" + "\n".join(kills)
    )
    assert copies <= bound
