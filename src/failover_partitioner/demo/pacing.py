"""A token bucket that paces one producer at a steady rate, with the clock passed in."""

from __future__ import annotations

import math


class TokenBucket:
    """Hands out ``rate_per_s`` tokens a second and saves at most ``burst`` of them.

    A producer that was held up (a blocking ``produce``, a slow thread) catches up by at most
    ``burst`` messages instead of flooding the cluster with everything it missed, so both
    producers see the same steady offered load.
    """

    __slots__ = ("_burst", "_last_s", "_rate_per_s", "_tokens")

    def __init__(self, *, rate_per_s: float, burst: int, now_s: float) -> None:
        if not (rate_per_s > 0 and math.isfinite(rate_per_s)):
            raise ValueError(f"rate_per_s={rate_per_s!r}: must be a positive number of messages")
        if burst < 1:
            raise ValueError(f"burst={burst!r}: must be at least 1 message")
        self._rate_per_s = rate_per_s
        self._burst = burst
        # Start with one token so the first message goes out at once.
        self._tokens = 1.0
        self._last_s = now_s

    def take(self, now_s: float) -> int:
        """Refill for the time since the last call and take every whole token: messages due now."""
        elapsed_s = max(0.0, now_s - self._last_s)
        self._last_s = max(self._last_s, now_s)
        self._tokens = min(float(self._burst), self._tokens + elapsed_s * self._rate_per_s)
        due = int(self._tokens)
        self._tokens -= due
        return due

    def wait_s(self) -> float:
        """Seconds from the last call until the next whole token is available."""
        return max(0.0, (1.0 - self._tokens) / self._rate_per_s)
