"""The counters both producers report, in one shape."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ProducerStatistics"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerStatistics:
    """A snapshot of a producer's counters (``in_flight`` includes ``failed_buffer_depth``).

    ``in_flight`` is read from what the clients hold, ``len(client)``, which also counts
    reports waiting for the next poll: while messages are out it (and ``produced``, derived
    from it) may be over by a few; after ``flush`` both are exact. The bound itself is kept on
    messages (never more than ``max_in_flight`` accepted and not ended).

    ``possible_duplicates`` counts messages with at least one ambiguous failed attempt (one
    that may have been written); ``ambiguous_failures`` counts those attempts, the most extra
    copies the re-producing can have made.
    """

    produced: int
    delivered: int
    final_failures: int
    returned_on_close: int
    in_flight: int
    failed_buffer_depth: int
    peak_failed_buffer_depth: int
    retries: int
    rerouted: int
    possible_duplicates: int
    ambiguous_failures: int
    quarantines: int
    max_in_flight: int
