"""When the fault starts and ends, and what phase the run is in at a given moment."""

from __future__ import annotations

import math
from dataclasses import dataclass

# Fractions of the producing time: a steady stretch, the fault, then recovery before the end,
# so the plot shows both producers before, during and after.
FAULT_START_FRACTION = 0.3
FAULT_END_FRACTION = 0.7


@dataclass(frozen=True, slots=True, kw_only=True)
class Schedule:
    """Seconds since the start. ``fault_start_s``/``fault_end_s`` are None without a fault."""

    duration_s: float
    fault_start_s: float | None
    fault_end_s: float | None

    @classmethod
    def plan(cls, *, duration_s: float, with_fault: bool) -> Schedule:
        if not (duration_s > 0 and math.isfinite(duration_s)):
            raise ValueError(f"duration_s={duration_s!r}: must be a positive number of seconds")
        if not with_fault:
            return cls(duration_s=duration_s, fault_start_s=None, fault_end_s=None)
        return cls(
            duration_s=duration_s,
            fault_start_s=duration_s * FAULT_START_FRACTION,
            fault_end_s=duration_s * FAULT_END_FRACTION,
        )

    def phase_at(self, t_s: float) -> str:
        if t_s >= self.duration_s:
            return "draining"
        if self.fault_start_s is None or self.fault_end_s is None:
            return "steady"
        if t_s < self.fault_start_s:
            return "steady"
        if t_s < self.fault_end_s:
            return "FAULT"
        return "recovery"
