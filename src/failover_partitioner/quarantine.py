"""Quarantine: take a partition out of use the moment a write to it fails.

The failed delivery is the fastest signal there is: a follower leaves the ISR only after
``replica.lag.time.max.ms`` (30 s by default) and the metadata a client sees lags further, and
some brokers never report the shrink at all. So a partition whose write failed with a reason in
the error policy (:func:`failover_partitioner.errors.classify`) is quarantined at once, for a
back-off that doubles with each consecutive strike (as a circuit breaker would, cf. KIP-693).

A quarantine is released when its back-off has elapsed *and* the latest metadata shows the
partition usable. If the metadata never shows the problem, the partition is simply tried again
after the back-off; a new failure quarantines it for twice as long. A partition that goes
``max_s`` without a strike after its release starts again from the initial back-off (decided
by time, so successful deliveries cost nothing here).

A write the partition *held* until the request's timeout (the broker's REQUEST_TIMED_OUT for
that partition) is different: the leader took it and waited for a follower that no longer
copies, and it will hold every write the same way until the ISR shrinks
(``replica.lag.time.max.ms`` later) or the follower returns, while the metadata still shows the
partition whole. Released after a short back-off, it would take a full in-flight window of new
messages and hold them for another ``request.timeout.ms``, again and again (each a possible
duplicate). So such a quarantine ends only when the partition's metadata (leader, replicas or
ISR) differs from what it was at the strike, after the back-off, or else after ``max_s``:
while other partitions take writes. With none left, it ends after the back-off as any other
(the messages have nowhere else to go).

A partition whose leader the client could not connect to (a crashed or cut-off broker, which
the metadata names the leader until the controller fences it: ``broker.session.timeout.ms``,
9 s by default) follows the same rule, for the same reason: nothing says when the broker is
back (the client reports a failed connection once, not each retry), and a partition released
while it is away takes messages the client queues for it until then. Its quarantine also ends
as soon as its metadata differs from the strike's (a new leader), without waiting for the
back-off: the broker it was struck for is no longer in its way.

Pure: callers pass the time and serialise access (the producer holds a lock per topic).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass

__all__ = ["Quarantine", "QuarantinePolicy"]


@dataclass(frozen=True, slots=True, kw_only=True)
class QuarantinePolicy:
    """Back-off of a quarantine: ``initial_s * multiplier**(strikes-1)``, at most ``max_s``."""

    initial_s: float = 0.5
    max_s: float = 30.0
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        if not self.initial_s > 0:
            raise ValueError(f"quarantine initial_s must be > 0 seconds, got {self.initial_s!r}")
        if not self.max_s >= self.initial_s:
            raise ValueError(
                f"quarantine max_s ({self.max_s!r}) must be >= initial_s ({self.initial_s!r})"
            )
        if not self.multiplier >= 1:
            raise ValueError(f"quarantine multiplier must be >= 1, got {self.multiplier!r}")

    def backoff_s(self, strikes: int) -> float:
        if strikes <= 1:
            return self.initial_s
        # Cap the exponent: the result is capped anyway and huge powers overflow floats.
        return min(self.max_s, self.initial_s * self.multiplier ** min(strikes - 1, 64))


class Quarantine:
    """Quarantined partitions of one topic, with their strike counts."""

    __slots__ = ("_held", "_policy", "_released_at", "_strikes", "_unreachable", "_until")

    def __init__(self, policy: QuarantinePolicy | None = None) -> None:
        self._policy = policy or QuarantinePolicy()
        self._until: dict[int, float] = {}
        self._strikes: dict[int, int] = {}
        self._released_at: dict[int, float] = {}
        # held writes: partition -> (end of its back-off, its metadata at the strike)
        self._held: dict[int, tuple[float, Hashable]] = {}
        # held ones struck for an unreachable leader (released at once on new metadata)
        self._unreachable: set[int] = set()

    @property
    def policy(self) -> QuarantinePolicy:
        return self._policy

    @property
    def partitions(self) -> frozenset[int]:
        """The partitions quarantined now."""
        return frozenset(self._until)

    def __contains__(self, partition: object) -> bool:
        return partition in self._until

    def __len__(self) -> int:
        return len(self._until)

    def strikes(self, partition: int) -> int:
        return self._strikes.get(partition, 0)

    def until(self, partition: int) -> float | None:
        """When the back-off of ``partition`` ends, or None if it is not quarantined."""
        return self._until.get(partition)

    def strike(
        self, partition: int, now: float, *, held: Hashable = None, unreachable: bool = False
    ) -> bool:
        """Record a failed write (or an unreachable leader); return True if this put the
        partition into quarantine.

        ``held``: the write was held until a timeout, and this is the partition's metadata now
        (see the module): the quarantine then lasts until the metadata differs, or ``max_s``.
        ``unreachable`` (with ``held``): the client could not connect to the partition's
        leader: the quarantine also ends as soon as the metadata differs. Failures reported
        while it is already quarantined (messages that were in flight when the first one
        failed) do not lengthen the back-off: they carry no new information.
        """
        if partition in self._until:
            return False
        released_at = self._released_at.pop(partition, None)
        if released_at is not None and now - released_at > self._policy.max_s:
            self._strikes.pop(partition, None)  # quiet for long enough: forgiven
        strikes = self._strikes.get(partition, 0) + 1
        self._strikes[partition] = strikes
        backoff_end = now + self._policy.backoff_s(strikes)
        if unreachable and held is not None:
            self._unreachable.add(partition)
        if held is None:
            self._until[partition] = backoff_end
        else:
            self._until[partition] = now + self._policy.max_s
            self._held[partition] = (backoff_end, held)
        return True

    def release_due(
        self,
        now: float,
        usable_by_metadata: Callable[[int], bool],
        metadata: Callable[[int], Hashable] = lambda p: None,
        *,
        elsewhere: bool = True,
    ) -> list[int]:
        """Release every partition whose back-off has elapsed and whose metadata is usable (for
        a held write, while other partitions take writes (``elsewhere``), whose
        ``metadata(partition)`` also differs from the strike's); and, back-off or not, one
        struck for an unreachable leader whose metadata differs from the strike's."""
        released = [
            p
            for p, until in self._until.items()
            if (
                until <= now
                or self._held_due(p, now, metadata, elsewhere)
                or (p in self._unreachable and metadata(p) != self._held[p][1])
            )
            and usable_by_metadata(p)
        ]
        for p in released:
            del self._until[p]
            self._held.pop(p, None)
            self._unreachable.discard(p)
            self._released_at[p] = now
        return released

    def _held_due(
        self, partition: int, now: float, metadata: Callable[[int], Hashable], elsewhere: bool
    ) -> bool:
        held = self._held.get(partition)
        return (
            held is not None
            and held[0] <= now
            and (not elsewhere or metadata(partition) != held[1])
        )

    def held(self, partition: int) -> bool:
        """True while ``partition`` is quarantined for a held write (or an unreachable
        leader)."""
        return partition in self._held

    def holding(self) -> bool:
        """True while any partition is quarantined for a held write (or an unreachable
        leader)."""
        return bool(self._held)

    def next_release_at(self) -> float | None:
        """The earliest back-off end, or None when nothing is quarantined."""
        return min(self._until.values(), default=None)

    def next_release_after(self, now: float) -> float | None:
        """The earliest back-off end still ahead of ``now`` (past ones wait for metadata; a held
        write's counts too, as its partition may be the last one left)."""
        ends = [u for u in self._until.values() if u > now]
        ends.extend(end for end, _ in self._held.values() if end > now)
        return min(ends, default=None)

    def forget(self, partitions: Iterable[int]) -> None:
        """Drop partitions that no longer exist (the topic was recreated smaller)."""
        for p in partitions:
            self._until.pop(p, None)
            self._strikes.pop(p, None)
            self._released_at.pop(p, None)
            self._held.pop(p, None)
            self._unreachable.discard(p)
