"""The counters both producers report, in one shape, and the figures their metrics export."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from failover_partitioner.core.topic import TopicState

__all__ = ["MetricsSnapshot", "ProducerStatistics", "TopicMetrics", "metrics_snapshot"]


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


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicMetrics:
    """Per-topic figures: partitions per state (``healthy``, ``at_risk``, ``unavailable``),
    quarantines so far, metadata age."""

    partitions_by_state: Mapping[str, int]
    quarantines: int
    metadata_age_s: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricsSnapshot:
    produced: int
    delivered: int
    rerouted: int
    retries: int
    final_failures: int
    possible_duplicates: int
    in_flight: int
    failed_buffer_depth: int
    topics: Mapping[str, TopicMetrics] = field(default_factory=dict)


def metrics_snapshot(
    stats: ProducerStatistics,
    topics: Mapping[str, TopicState],
    metadata_age_s: Callable[[str], float | None],
) -> MetricsSnapshot:
    """What a producer's metrics export: its statistics and each topic's partitions by state.
    Called from the scraping thread: reads, never changes (``topics`` is copied first)."""
    per_topic = {}
    for topic, state in list(topics.items()):
        counts = state.view.counts()
        per_topic[topic] = TopicMetrics(
            # Prometheus label values are lower case: healthy, at_risk, unavailable (the alert
            # rules of docs/operations.md match on them).
            partitions_by_state={k.name.lower(): v for k, v in counts.items()},
            quarantines=state.quarantines,
            metadata_age_s=metadata_age_s(topic),
        )
    return MetricsSnapshot(
        produced=stats.produced,
        delivered=stats.delivered,
        rerouted=stats.rerouted,
        retries=stats.retries,
        final_failures=stats.final_failures,
        possible_duplicates=stats.possible_duplicates,
        in_flight=stats.in_flight,
        failed_buffer_depth=stats.failed_buffer_depth,
        topics=per_topic,
    )
