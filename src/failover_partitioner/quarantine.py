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

Pure: callers pass the time and serialise access (the producer holds a lock per topic).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
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

    __slots__ = ("_policy", "_released_at", "_strikes", "_until")

    def __init__(self, policy: QuarantinePolicy | None = None) -> None:
        self._policy = policy or QuarantinePolicy()
        self._until: dict[int, float] = {}
        self._strikes: dict[int, int] = {}
        self._released_at: dict[int, float] = {}

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

    def strike(self, partition: int, now: float) -> bool:
        """Record a failed write; return True if this put the partition into quarantine.

        Failures reported while it is already quarantined (messages that were in flight when
        the first one failed) do not lengthen the back-off: they carry no new information.
        """
        if partition in self._until:
            return False
        released_at = self._released_at.pop(partition, None)
        if released_at is not None and now - released_at > self._policy.max_s:
            self._strikes.pop(partition, None)  # quiet for long enough: forgiven
        strikes = self._strikes.get(partition, 0) + 1
        self._strikes[partition] = strikes
        self._until[partition] = now + self._policy.backoff_s(strikes)
        return True

    def release_due(self, now: float, usable_by_metadata: Callable[[int], bool]) -> list[int]:
        """Release every partition whose back-off has elapsed and whose metadata is usable."""
        released = [p for p, until in self._until.items() if until <= now and usable_by_metadata(p)]
        for p in released:
            del self._until[p]
            self._released_at[p] = now
        return released

    def next_release_at(self) -> float | None:
        """The earliest back-off end, or None when nothing is quarantined."""
        return min(self._until.values(), default=None)

    def next_release_after(self, now: float) -> float | None:
        """The earliest back-off end still ahead of ``now`` (past ones wait for metadata)."""
        return min((u for u in self._until.values() if u > now), default=None)

    def forget(self, partitions: Iterable[int]) -> None:
        """Drop partitions that no longer exist (the topic was recreated smaller)."""
        for p in partitions:
            self._until.pop(p, None)
            self._strikes.pop(p, None)
            self._released_at.pop(p, None)
