"""Crash safety of the mirror: SIGKILL during a rebalance of two mirrors in one group loses nothing.

Two ``failover-mirror`` processes share one consumer group over a 6-partition source topic that
a producer keeps writing. Four times a new member joins while another runs, and one of the two
is killed with SIGKILL in the middle of the rebalance that follows, each time at a different
moment:

1. the old member, right after it logged the revocation of its partitions (it has committed its
   delivered prefix and is rejoining);
2. the new member, right after it logged its assignment (before its first commit);
3. the old member, a seeded delay after the new one subscribed (it may be draining);
4. the new member, a seeded delay after it subscribed (it may be mid-join).

Afterwards one member finishes the stream. The target then holds every source record (by the
mirror's provenance headers: each source partition and offset at least once), exactly the
source's payloads, and the group's committed offsets equal the source's end offsets. Copies are
counted: at most ``--max-in-flight`` per kill. ``MIRROR_CRASH_SEED=N`` replays the delays.
"""

from __future__ import annotations

import functools
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from failover_partitioner.mirror import HEADER_SOURCE
from minibroker import Cluster
from tests.integration.reliability_support import read_topic, seed_from_env, wait_for

pytestmark = pytest.mark.chaos

TOPIC = "ledger"
PARTITIONS = 6
GROUP = "crash-mirror"
MESSAGES = 24_000
RATE_PER_S = 1200.0
MAX_IN_FLIGHT = 2000
DEFAULT_SEED = 20261123
# A killed member's session ends quickly, so the group moves on within a couple of seconds.
CONSUMER_PROPERTIES = "session.timeout.ms=1500\nheartbeat.interval.ms=300\n"


def payload(i: int) -> bytes:
    return b"ledger-%08d-" % i + b"p" * 60


class MirrorProcess:
    """One ``failover-mirror`` process: JSON status lines from stdout, its log in a file."""

    def __init__(self, name: str, args: list[str], log: Path) -> None:
        self.name = name
        self.log = log
        self._stderr = log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "failover_partitioner.mirror.cli", *args],
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        self.statuses: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.statuses.append(json.loads(line))

    @property
    def latest(self) -> dict[str, Any]:
        return self.statuses[-1] if self.statuses else {}

    def logged(self, fragment: str) -> bool:
        return fragment in self.log.read_text(errors="replace")

    def wait_logged(self, fragment: str, timeout_s: float) -> None:
        wait_for(
            lambda: self.logged(fragment) or self.proc.poll() is not None,
            timeout_s,
            f"{self.name} to log {fragment!r}",
            self.tail,
        )
        assert self.proc.poll() is None, f"{self.name} exited:\n{self.tail()}"

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.wait(30)

    def terminate(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.wait(60)

    def wait(self, timeout_s: float) -> int:
        try:
            rc = self.proc.wait(timeout_s)
        finally:
            self._reader.join(5)
            self._stderr.close()
            if self.proc.stdout is not None:
                self.proc.stdout.close()
        return rc

    def tail(self, lines: int = 25) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


class SourceWriter(threading.Thread):
    """Writes ``messages`` unique payloads to ``topic`` at a steady rate (a third keyless)."""

    def __init__(
        self,
        bootstrap: str,
        topic: str = TOPIC,
        *,
        messages: int = MESSAGES,
        rate_per_s: float = RATE_PER_S,
        make_payload: Callable[[int], bytes] = payload,
    ) -> None:
        super().__init__(name="source-writer", daemon=True)
        self.bootstrap = bootstrap
        self.topic = topic
        self.messages = messages
        self.rate_per_s = rate_per_s
        self.make_payload = make_payload
        self.errors: list[str] = []

    def run(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 5})

        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                self.errors.append(str(err))

        start = time.monotonic()
        for i in range(self.messages):
            key = b"k%d" % (i % 500) if i % 3 else None
            while True:
                try:
                    producer.produce(self.topic, self.make_payload(i), key, on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.05)
            if i % 100 == 0:
                producer.poll(0)
                ahead = start + i / self.rate_per_s - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
        if producer.flush(60):
            self.errors.append("the source writer could not flush")


def owns_everything(mirror: MirrorProcess) -> bool:
    status = mirror.latest
    return len(status.get("partitions", [])) == PARTITIONS and status.get("state") in (
        "running",
        "paused",
    )


def committed(bootstrap: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
    try:
        tps = consumer.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], 10)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        consumer.close()


@pytest.fixture
def clusters() -> Iterator[tuple[Cluster, Cluster]]:
    with Cluster(brokers=3) as src, Cluster(brokers=3) as dst:
        src.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
        dst.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
        yield src, dst


def test_sigkill_during_rebalances_of_two_mirrors_loses_nothing(
    clusters: tuple[Cluster, Cluster], tmp_path: Path
) -> None:
    src, dst = clusters
    seed = seed_from_env("MIRROR_CRASH_SEED", DEFAULT_SEED)
    rng = random.Random(seed)
    print(f"mirror crash seed {seed} (MIRROR_CRASH_SEED={seed} replays the delays)")
    props = tmp_path / "consumer.properties"
    props.write_text(CONSUMER_PROPERTIES)
    args = [
        "--source",
        src.bootstrap_servers,
        "--target",
        dst.bootstrap_servers,
        "--group",
        GROUP,
        "--include",
        TOPIC,
        "--consumer.config",
        str(props),
        "--commit-interval",
        "0.5",
        "--max-in-flight",
        str(MAX_IN_FLIGHT),
        "--topic-refresh-interval",
        "1",
        "--json",
        "--status-interval",
        "0.2",
    ]
    names = iter(f"mirror-{i}" for i in range(1, 100))
    processes: list[MirrorProcess] = []

    def start() -> MirrorProcess:
        name = next(names)
        mirror = MirrorProcess(name, args, tmp_path / f"{name}.log")
        processes.append(mirror)
        return mirror

    def delayed(fragment: str) -> Callable[[MirrorProcess, MirrorProcess], None]:
        """Wait until the new member logs ``fragment``, then a seeded 0-0.8 s."""

        def moment(old: MirrorProcess, new: MirrorProcess) -> None:
            new.wait_logged(fragment, 60)
            time.sleep(rng.uniform(0.0, 0.8))

        return moment

    def after_revocation(old: MirrorProcess, new: MirrorProcess) -> None:
        old.wait_logged("revoked", 60)

    def after_assignment(old: MirrorProcess, new: MirrorProcess) -> None:
        new.wait_logged("assigned " + TOPIC, 60)

    rounds: list[tuple[str, Callable[[MirrorProcess, MirrorProcess], None]]] = [
        ("old", after_revocation),
        ("new", after_assignment),
        ("old", delayed("subscribing")),
        ("new", delayed("subscribing")),
    ]
    writer = SourceWriter(src.bootstrap_servers)
    kills: list[str] = []
    try:
        writer.start()
        survivor = start()
        survivor.wait_logged("assigned " + TOPIC, 60)
        wait_for(lambda: survivor.latest.get("delivered", 0) > 1000, 60, "a first delivery")
        for victim_role, moment in rounds:
            joiner = start()
            moment(survivor, joiner)
            victim = survivor if victim_role == "old" else joiner
            at_kill = dict(victim.latest)
            victim.kill()
            kills.append(
                f"{victim.name} ({victim_role} member) delivered {at_kill.get('delivered')}, "
                f"uncommitted {at_kill.get('uncommitted')}, "
                f"partitions {len(at_kill.get('partitions') or [])}"
            )
            survivor = joiner if victim_role == "old" else survivor
            # The survivor takes over every partition once the victim's session has expired.
            wait_for(
                functools.partial(owns_everything, survivor),
                60,
                f"{survivor.name} to own all partitions",
                survivor.tail,
            )
        assert writer.is_alive(), "the kills should land while the source is still written"
        writer.join(120)
        assert writer.errors == []
        ends = {st.partition: st.high_watermark for st in src.describe(TOPIC)}
        assert sum(ends.values()) == MESSAGES
        wait_for(
            lambda: committed(src.bootstrap_servers) == ends,
            90,
            "the group to commit the whole source",
            lambda: (committed(src.bootstrap_servers), ends, survivor.tail()),
        )
        assert survivor.terminate() == 0, survivor.tail()
    finally:
        for mirror in processes:
            if mirror.proc.poll() is None:
                mirror.kill()

    source = read_topic(src, TOPIC)
    target = read_topic(dst, TOPIC)
    origins: Counter[tuple[int, int]] = Counter()
    for r in target:
        source_of = r.header(HEADER_SOURCE)  # b"topic/partition/offset"
        assert source_of is not None, r
        _, p, o = source_of.rsplit(b"/", 2)
        origins[int(p), int(o)] += 1
    source_records = {(r.partition, r.offset) for r in source}
    missing = source_records - set(origins)
    assert not missing, f"{len(missing)} source records never mirrored (seed {seed})"
    assert set(origins) == source_records
    assert {r.value for r in target} == {payload(i) for i in range(MESSAGES)}
    copies = sum(n - 1 for n in origins.values())
    print(
        f"{MESSAGES} messages, {len(kills)} SIGKILLs during rebalances, "
        f"{len(processes)} mirror processes; target {len(target)} records, {copies} copies "
        f"(bound {len(kills)} x {MAX_IN_FLIGHT}); lost 0\n" + "\n".join(kills)
    )
    assert copies <= len(kills) * MAX_IN_FLIGHT
