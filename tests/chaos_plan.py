"""A seeded, replayable schedule of broker faults for the chaos tests (pure: no cluster here).

The plan is drawn in full from the seed before anything runs, so the same seed injects the same
faults in the same order whatever the timing of the run. It keeps each cluster able to recover:
at most ``max_faulted`` brokers are stopped or isolated at once (with RF=3 and min ISR 2 a
partition may become unavailable, but some replica of every committed record stays in the
ISR), and it ends with every broker started, healed and at full speed.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "ACTIONS",
    "PROCESS_ACTIONS",
    "ClusterShape",
    "FaultEvent",
    "FaultState",
    "chaos_plan",
    "process_plan",
]

ACTIONS = ("stop", "start", "isolate", "heal", "slow", "unslow")


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterShape:
    """A cluster the plan may hurt: its broker ids, its fault budget and its share of events."""

    brokers: tuple[int, ...]
    max_faulted: int
    weight: float = 1.0


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultEvent:
    at_s: float
    """Seconds after the start of the run."""
    cluster: str
    action: str
    broker: int
    delay_ms: float = 0.0
    """Replication delay, for ``slow``."""

    def __str__(self) -> str:
        extra = f" {self.delay_ms:.0f} ms" if self.action == "slow" else ""
        return f"{self.at_s:7.2f}s {self.cluster} {self.action} {self.broker}{extra}"


@dataclass(slots=True)
class FaultState:
    """Which brokers of one cluster are down, isolated or slowed."""

    down: set[int] = field(default_factory=set)
    isolated: set[int] = field(default_factory=set)
    slowed: set[int] = field(default_factory=set)

    @property
    def faulted(self) -> set[int]:
        return self.down | self.isolated

    def apply(self, event: FaultEvent) -> None:
        """Track ``event``; raises ValueError for an event that does not fit the state."""
        b = event.broker
        sets = {"stop": self.down, "isolate": self.isolated, "slow": self.slowed}
        undo = {"start": self.down, "heal": self.isolated, "unslow": self.slowed}
        if event.action in sets:
            target = sets[event.action]
            if b in target:
                raise ValueError(f"{event}: broker {b} is already in that state")
            target.add(b)
        elif event.action in undo:
            target = undo[event.action]
            if b not in target:
                raise ValueError(f"{event}: broker {b} is not in the state this undoes")
            target.discard(b)
        else:
            raise ValueError(f"unknown action {event.action!r}")

    @property
    def clean(self) -> bool:
        return not (self.down or self.isolated or self.slowed)


def _choices(shape: ClusterShape, state: FaultState) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    budget_left = len(state.faulted) < shape.max_faulted
    for b in shape.brokers:
        hurt = b in state.faulted
        if b in state.down:
            out.append(("start", b))
        elif hurt or budget_left:
            out.append(("stop", b))  # an isolated broker may also crash
        if b in state.isolated:
            out.append(("heal", b))
        elif hurt or budget_left:
            out.append(("isolate", b))  # a stopped broker may come back isolated
        if b in state.slowed:
            out.append(("unslow", b))
        elif not state.slowed:  # one slow broker at a time
            out.append(("slow", b))
    return out


def chaos_plan(
    seed: int,
    duration_s: float,
    clusters: Mapping[str, ClusterShape],
    *,
    gap_s: tuple[float, float] = (0.4, 2.5),
    slow_ms: tuple[float, float] = (50.0, 1500.0),
) -> tuple[FaultEvent, ...]:
    """Faults at random moments over ``duration_s``, then, at ``duration_s``, full recovery."""
    if duration_s <= 0:
        raise ValueError(f"duration_s must be > 0, got {duration_s!r}")
    rng = random.Random(seed)
    names = sorted(clusters)
    weights = [clusters[n].weight for n in names]
    states = {n: FaultState() for n in names}
    events: list[FaultEvent] = []
    t = rng.uniform(*gap_s)
    while t < duration_s:
        name = rng.choices(names, weights)[0]
        action, broker = rng.choice(_choices(clusters[name], states[name]))
        delay = round(rng.uniform(*slow_ms)) if action == "slow" else 0.0
        # Rounded to the millisecond for a readable printout, but never past the recovery.
        at_s = min(round(t, 3), duration_s)
        event = FaultEvent(at_s=at_s, cluster=name, action=action, broker=broker)
        if delay:
            event = FaultEvent(
                at_s=event.at_s, cluster=name, action=action, broker=broker, delay_ms=delay
            )
        states[name].apply(event)
        events.append(event)
        t += rng.uniform(*gap_s)
    for name in names:
        state = states[name]
        for action, pending in (("start", state.down), ("heal", state.isolated)):
            for b in sorted(pending):
                events.append(FaultEvent(at_s=duration_s, cluster=name, action=action, broker=b))
        for b in sorted(state.slowed):
            events.append(FaultEvent(at_s=duration_s, cluster=name, action="unslow", broker=b))
    return tuple(events)


PROCESS_ACTIONS = ("pause", "resume", "kill", "restart")


def process_plan(
    seed: int,
    duration_s: float,
    clusters: Mapping[str, ClusterShape],
    *,
    gap_s: tuple[float, float] = (2.0, 7.0),
) -> tuple[FaultEvent, ...]:
    """Faults for brokers that are processes (the real Kafka cluster): pause (SIGSTOP) and
    resume, kill (SIGKILL) and restart, never more than ``max_faulted`` brokers of a cluster
    hurt at once; a hurt broker is only undone (a paused one may also be killed). Gaps are
    longer than ``chaos_plan``'s: a JVM broker takes seconds to restart and to rejoin."""
    if duration_s <= 0:
        raise ValueError(f"duration_s must be > 0, got {duration_s!r}")
    rng = random.Random(seed)
    names = sorted(clusters)
    weights = [clusters[n].weight for n in names]
    paused: dict[str, set[int]] = {n: set() for n in names}
    killed: dict[str, set[int]] = {n: set() for n in names}
    events: list[FaultEvent] = []
    t = rng.uniform(*gap_s)
    while t < duration_s:
        name = rng.choices(names, weights)[0]
        shape = clusters[name]
        hurt = paused[name] | killed[name]
        options: list[tuple[str, int]] = []
        for b in shape.brokers:
            if b in paused[name]:
                options += [("resume", b), ("kill", b)]
            elif b in killed[name]:
                options.append(("restart", b))
            elif len(hurt) < shape.max_faulted:
                options += [("pause", b), ("kill", b)]
        action, broker = rng.choice(options)
        if action == "pause":
            paused[name].add(broker)
        elif action == "resume":
            paused[name].discard(broker)
        elif action == "kill":
            paused[name].discard(broker)
            killed[name].add(broker)
        else:
            killed[name].discard(broker)
        events.append(
            FaultEvent(
                at_s=min(round(t, 3), duration_s), cluster=name, action=action, broker=broker
            )
        )
        t += rng.uniform(*gap_s)
    for name in names:
        for b in sorted(paused[name]):
            events.append(FaultEvent(at_s=duration_s, cluster=name, action="resume", broker=b))
        for b in sorted(killed[name]):
            events.append(FaultEvent(at_s=duration_s, cluster=name, action="restart", broker=b))
    return tuple(events)
