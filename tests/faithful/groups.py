"""Scenario 6, consumer groups: two members of each Python client, each member a process of its
own (tests/faithful/member.py), so a crash is a SIGKILL to its process id.

For each client, on a topic of 4 partitions:

1. A joins, then B: the partitions split 2 and 2; 40 records produced then are each read once.
2. A closes (LeaveGroup): B takes all 4. 20 more records, which B reads without committing.
3. B crashes: C joins, and is assigned once B's session (6 s) has expired; C resumes from the
   committed offsets: it reads exactly the 20 uncommitted records again, and commits them.
4. Static membership (KIP-345, which minibroker implements): S1 and S2 with group.instance.id;
   S2 crashes and a new process takes its instance id at once: it gets S2's partitions back
   and S1 sees no rebalance.

Assignors and member ids differ between runs, so a member's partitions are recorded as counts;
generations, where the client tells them (aiokafka, kafka-python), as how they relate (the same
generation for members that split the partitions, a later one after a rebalance), since a client
may rejoin once more by timing.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from tests.faithful.backends import Backend, wait_until
from tests.faithful.member import CLIENTS
from tests.faithful.scenarios import Outcome, produce, unique

__all__ = ["Member", "consumer_groups", "group_of_client"]

PARTITIONS = 4
LATE = "late-"  # records no member but the last one commits


class Member:
    """A member process and everything it printed."""

    def __init__(
        self,
        client: str,
        backend: Backend,
        group: str,
        topic: str,
        *,
        instance_id: str | None = None,
        skip_commit: str | None = None,
    ) -> None:
        command = [sys.executable, "-m", "tests.faithful.member", client]
        command += [backend.bootstrap_servers, group, topic]
        if instance_id is not None:
            command += ["--instance-id", instance_id]
        if skip_commit is not None:
            command += ["--skip-commit", skip_commit]
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
            text=True,
        )
        self._reader = threading.Thread(target=self._read, name=f"member {client}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with contextlib.suppress(json.JSONDecodeError):
                event = json.loads(line)
                with self._lock:
                    self.events.append(event)

    def _of(self, key: str) -> list[Any]:
        with self._lock:
            return [e[key] for e in self.events if key in e]

    @property
    def assignments(self) -> list[tuple[int, ...]]:
        return [tuple(a) for a in self._of("assigned")]

    @property
    def assignment(self) -> tuple[int, ...]:
        """What the member owns now: eager rebalancing revokes everything, then assigns."""
        owned: tuple[int, ...] = ()
        with self._lock:
            for event in self.events:
                if "assigned" in event:
                    owned = tuple(event["assigned"])
                elif "revoked" in event:
                    owned = ()
        return owned

    @property
    def generations(self) -> tuple[int, ...] | None:
        """The generation of each assignment; None where the client does not tell it."""
        with self._lock:
            told: list[int | None] = [e.get("generation") for e in self.events if "assigned" in e]
        known = tuple(g for g in told if g is not None)
        return known if len(known) == len(told) else None

    @property
    def read(self) -> list[tuple[int, int, str]]:
        return [(int(p), int(o), str(v)) for p, o, v in self._of("read")]

    def close(self) -> None:
        """Close the consumer as a user would (a dynamic member sends LeaveGroup)."""
        assert self.process.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self.process.stdin.write("close\n")
            self.process.stdin.flush()
        try:
            self.process.wait(timeout=30)
        finally:
            self.crash()

    def crash(self) -> None:
        """SIGKILL by process id, as a crashed consumer (no LeaveGroup, no more heartbeats)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)
        self._reader.join(timeout=10)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


@contextlib.contextmanager
def members() -> Iterator[Callable[[Member], Member]]:
    """Every member started through ``start`` is killed at the end, whatever happened."""
    started: list[Member] = []

    def start(member: Member) -> Member:
        started.append(member)
        return member

    try:
        yield start
    finally:
        for member in started:
            member.crash()


def committed(backend: Backend, group: str, topic: str) -> tuple[int, ...]:
    """The group's committed offset of each partition (-1001: none)."""
    consumer = Consumer(
        {"bootstrap.servers": backend.bootstrap_servers, "group.id": group, "log_level": 0}
    )
    try:
        found = consumer.committed(
            [TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10
        )
        return tuple(int(tp.offset) for tp in found)
    finally:
        consumer.close()


def produce_spread(backend: Backend, topic: str, prefix: str, per_partition: int) -> None:
    for partition in range(PARTITIONS):
        values = [f"{prefix}{partition}-{i}".encode() for i in range(per_partition)]
        assert produce(backend, topic, values, partition=partition) == [0] * per_partition


def split_between(*group: Member) -> Callable[[], bool]:
    def check() -> bool:
        owned = [m.assignment for m in group]
        every = sorted(p for partitions in owned for p in partitions)
        return every == list(range(PARTITIONS)) and all(owned)

    return check


def sizes(member: Member) -> tuple[int, ...]:
    """How many partitions each assignment gave, a repeat of the same count left out: a client
    may rejoin once more by timing, which Kafka allows (kafka-python's new leader did, now and
    then, on a loaded machine)."""
    counts = [len(a) for a in member.assignments]
    return tuple(n for i, n in enumerate(counts) if i == 0 or n != counts[i - 1])


def in_order(*members: Member) -> bool | None:
    """Each member's generations increase, and each member's last is one of the next member's
    (``None``: the client does not tell its generation). Not "the next one's first":
    kafka-python's group leader, on a loaded machine, at times rejoins once generation 2 is
    formed without being assigned in it, while the member that joined is (A 1 and 3, B 2, 3
    and 4; 4 of 35 runs on Kafka and 2 of 20 on minibroker beside two busy loops); they split
    in generation 3, which Kafka allows."""
    seen = [g for g in (m.generations for m in members) if g is not None]
    if len(seen) < len(members):
        return None
    rising = all(list(g) == sorted(set(g)) for g in seen)
    return rising and all(earlier[-1] in later for earlier, later in itertools.pairwise(seen))


def after(first: Member, then: Member) -> bool | None:
    """``then``'s first generation is later than ``first``'s last (``None``: not told)."""
    earlier, later = first.generations, then.generations
    return None if earlier is None or later is None else later[0] > earlier[-1]


def values(records: list[tuple[int, int, str]]) -> list[str]:
    return sorted(value for _, _, value in records)


def expected(prefix: str, per_partition: int) -> list[str]:
    return sorted(f"{prefix}{p}-{i}" for p in range(PARTITIONS) for i in range(per_partition))


def _dynamic(
    backend: Backend, client: str, topic: str, timings: list[tuple[str, float]]
) -> list[tuple[str, object]]:
    group = unique("group")
    everything = tuple(range(PARTITIONS))
    with members() as start:
        a = start(Member(client, backend, group, topic, skip_commit=LATE))
        wait_until(lambda: a.assignment == everything, 60, "A to own every partition")
        b = start(Member(client, backend, group, topic, skip_commit=LATE))
        began = time.monotonic()
        wait_until(split_between(a, b), 60, "A and B to split the partitions")
        timings.append(("B joined: partitions split", time.monotonic() - began))
        produce_spread(backend, topic, "r", 10)
        wait_until(lambda: len(a.read) + len(b.read) >= 40, 60, "the first 40 records read")
        wait_until(lambda: committed(backend, group, topic) == (10,) * 4, 30, "their commits")
        read_by_a, read_by_b = len(a.read), len(b.read)
        began = time.monotonic()
        a.close()
        wait_until(lambda: b.assignment == everything, 60, "B to own every partition")
        timings.append(("A closed: B owns every partition", time.monotonic() - began))
        produce_spread(backend, topic, LATE, 5)
        wait_until(lambda: len(b.read) >= read_by_b + 20, 60, "B to read the late records")
        committed_before_crash = committed(backend, group, topic)
        began = time.monotonic()
        b.crash()
        c = start(Member(client, backend, group, topic))
        wait_until(lambda: c.assignment == everything, 60, "C to own every partition")
        timings.append(("B crashed: C owns every partition", time.monotonic() - began))
        wait_until(lambda: len(c.read) >= 20, 60, "C to read from the committed offsets")
        wait_until(lambda: committed(backend, group, topic) == (15,) * 4, 30, "C's commits")
        time.sleep(0.5)  # anything more C would read arrives by now
        c.close()
    return [
        ("assignment sizes seen by A, B, C", (sizes(a), sizes(b), sizes(c))),
        ("generations: A and B split in one, each rising", in_order(a, b)),
        ("generations: C's first after B's last", after(b, c)),
        ("records read by A, B before A closed", (read_by_a, read_by_b)),
        ("the first 40 read once", values(a.read + b.read[:read_by_b]) == expected("r", 10)),
        ("committed before B crashed", committed_before_crash),
        ("C read exactly the uncommitted records", values(c.read) == expected(LATE, 5)),
        ("committed after C", committed(backend, group, topic)),
    ]


def _static(
    backend: Backend, client: str, topic: str, timings: list[tuple[str, float]]
) -> list[tuple[str, object]]:
    group = unique("static")
    with members() as start:
        s1 = start(Member(client, backend, group, topic, instance_id="s1"))
        wait_until(lambda: len(s1.assignment) == PARTITIONS, 60, "S1 to own every partition")
        s2 = start(Member(client, backend, group, topic, instance_id="s2"))
        wait_until(split_between(s1, s2), 60, "S1 and S2 to split the partitions")
        before = s2.assignment
        s2.crash()
        began = time.monotonic()
        back = start(Member(client, backend, group, topic, instance_id="s2"))
        wait_until(lambda: bool(back.assignment), 60, "the new S2 to be assigned")
        timings.append(("static member replaced: assigned", time.monotonic() - began))
        time.sleep(1.0)  # two heartbeats: a rebalance S1 took part in would show by now
        after = back.assignment
        s1.close()
        back.close()
    return [
        ("static: the new S2 got S2's partitions", after == before),
        ("static: assignment sizes seen by S1, S2, new S2", (sizes(s1), sizes(s2), sizes(back))),
        # no rebalance when S2 is replaced: S1's last generation is one of S2's, S2's last one
        # of the new S2's (a rebalance then would give S1 one that S2 did not have)
        ("static: generations of S1, S2, new S2 in one", in_order(s1, s2, back)),
    ]


def group_of_client(backend: Backend, client: str) -> Outcome:
    """Scenario 6 for one client."""
    topic = unique(f"group-{client}")
    backend.create_topic(topic, [[1, 2, 3], [2, 3, 4], [3, 4, 5], [4, 5, 1]])
    timings: list[tuple[str, float]] = []
    observed = _dynamic(backend, client, topic, timings) + _static(backend, client, topic, timings)
    return Outcome(
        scenario=f"6 consumer groups: {client}", observed=tuple(observed), timings_s=tuple(timings)
    )


def consumer_groups(backend: Backend) -> Outcome:
    """Scenario 6 for each client, the rows prefixed with the client's name."""
    observed: list[tuple[str, object]] = []
    timings: list[tuple[str, float]] = []
    for client in CLIENTS:
        outcome = group_of_client(backend, client)
        observed += [(f"{client}: {key}", value) for key, value in outcome.observed]
        timings += [(f"{client}: {key}", value) for key, value in outcome.timings_s]
    return Outcome(scenario="6 consumer groups", observed=tuple(observed), timings_s=tuple(timings))
