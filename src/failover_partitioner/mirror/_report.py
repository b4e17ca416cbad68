"""What the mirror counts, and the status snapshots and metrics made of it.

Counters are plain ints and dicts moved on the hot path (once per run of messages); delivered
counts are derived from the commit ledger rather than counted per delivery. The Prometheus
collector gets a fresh snapshot now and then (``publish``), never a live view.
"""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import KafkaException, TopicPartition
from prometheus_client.registry import CollectorRegistry

from ._clients import Clients
from ._commits import CommitLedger
from ._status import MetricsSnapshot, MirrorCollector, MirrorStatus, PartitionStatus

__all__ = ["Counters", "Reporter", "partition_lag"]

# librdkafka's names for auto.offset.reset=earliest.
_FROM_START = frozenset({"earliest", "smallest", "beginning"})


def partition_lag(
    committed: int | None, low: int | None, high: int | None, *, reads_from_low: bool
) -> int | None:
    """One source partition's lag: what the mirror still has to read and commit, None if
    unknown. ``low`` and ``high`` are its log start and end offsets as the consumer last saw
    them; ``committed`` the group's offset; ``reads_from_low``: with no committed offset the
    consumer starts at ``low`` (``auto.offset.reset=earliest``, and the group is known to
    store none).

    An empty partition (``low == high``) has nothing to mirror: 0, whatever the offsets and the
    reset. Otherwise the end minus the committed offset; with none, the end minus where the
    consumer starts, known only when it starts at the log start (with ``latest`` it is where
    the end was when the consumer first asked, which librdkafka does not say until a message
    comes: ``position()`` stays invalid)."""
    if high is None:
        return None
    if low is not None and low >= high:
        return 0
    if committed is not None:
        return max(0, high - committed)
    if low is not None and reads_from_low:
        return high - low
    return None


class Counters:
    """The mirror's counts since it started, per source topic where Kafka's are."""

    __slots__ = (
        "commit_failures",
        "commits",
        "consumed",
        "dead_lettered",
        "failed",
        "possible_duplicates",
        "record_age_ms",
        "rerouted",
    )

    def __init__(self) -> None:
        self.consumed: dict[str, int] = {}
        self.rerouted: dict[str, int] = {}
        self.possible_duplicates: dict[str, int] = {}
        self.dead_lettered: dict[str, int] = {}
        self.failed: dict[str, int] = {}
        self.commits = 0
        self.commit_failures = 0
        # Record age (MM2's record-age-ms): the latest consumed record's, per source topic.
        self.record_age_ms: dict[str, float] = {}


class Reporter:
    """Status snapshots (``status``) and metrics (``publish``) of one mirror."""

    def __init__(
        self,
        counters: Counters,
        ledger: CommitLedger,
        clients: Clients,
        clock: Callable[[], float],
        registry: CollectorRegistry | None,
        *,
        reset: str,
    ) -> None:
        """``reset``: the consumer's ``auto.offset.reset``, where it starts reading a
        partition for which the group stores no offset."""
        self._counters = counters
        self._from_start = reset.strip().lower() in _FROM_START
        self._ledger = ledger
        self._clients = clients
        self._clock = clock
        self._registry = registry
        self._started_at = clock()
        self._rate_mark = (self._started_at, 0)
        self._collector = MirrorCollector()
        if registry is not None:
            registry.register(self._collector)

    def mark(self, now: float, delivered: int) -> None:
        """A status line was given at ``now``: the next one's rate counts from here."""
        self._rate_mark = (now, delivered)

    def status(self, state: str, *, paused: bool) -> MirrorStatus:
        """The current status; ``state`` as the loop sees it (``paused`` shows while running)."""
        counters = self._counters
        now = self._clock()
        mark_t, mark_delivered = self._rate_mark
        delivered = sum(self.delivered_by_topic().values())
        rate = (delivered - mark_delivered) / (now - mark_t) if now > mark_t else 0.0
        partitions = self._partition_statuses()
        # A partial sum would read as "caught up" too early: unknown if any partition is.
        lags = [p.lag for p in partitions]
        known = [lag for lag in lags if lag is not None]
        return MirrorStatus(
            state="paused" if paused and state == "running" else state,
            elapsed_s=now - self._started_at,
            consumed=sum(counters.consumed.values()),
            delivered=delivered,
            rerouted=sum(counters.rerouted.values()),
            possible_duplicates=sum(counters.possible_duplicates.values()),
            dead_lettered=sum(counters.dead_lettered.values()),
            failed=sum(counters.failed.values()),
            in_flight=self._ledger.in_flight,
            uncommitted=self._ledger.window,
            lag=sum(known) if known and len(known) == len(lags) else None,
            delivered_per_s=rate,
            commits=counters.commits,
            partitions=partitions,
            replication_latency_ms=tuple(sorted(self._ledger.latency_ms.items())),
            record_age_ms=tuple(sorted(counters.record_age_ms.items())),
        )

    def delivered_by_topic(self) -> dict[str, int]:
        """Delivered messages per source topic, derived rather than counted per delivery: what
        was consumed and is neither in flight, abandoned, failed nor dead-lettered."""
        unfinished = self._ledger.unfinished_by_topic()
        failed, dead = self._counters.failed, self._counters.dead_lettered
        return {
            topic: n - unfinished.get(topic, 0) - failed.get(topic, 0) - dead.get(topic, 0)
            for topic, n in self._counters.consumed.items()
        }

    def _partition_statuses(self) -> tuple[PartitionStatus, ...]:
        consumer = self._clients.consumer
        out = []
        for tracker in sorted(self._ledger, key=lambda t: (t.topic, t.partition)):
            low: int | None = None
            high: int | None = None
            if consumer is not None and not self._clients.closing:
                try:
                    # As of the last fetch response: -1001 (OFFSET_INVALID) before the first.
                    lw, hw = consumer.get_watermark_offsets(
                        TopicPartition(tracker.topic, tracker.partition), cached=True
                    )
                    low = lw if lw >= 0 else None
                    high = hw if hw >= 0 else None
                except KafkaException:
                    pass
            lag = partition_lag(
                tracker.committed_offset,
                low,
                high,
                reads_from_low=self._from_start and tracker.committed_known,
            )
            out.append(
                PartitionStatus(
                    topic=tracker.topic,
                    partition=tracker.partition,
                    committed_offset=tracker.committed_offset,
                    high_watermark=high,
                    lag=lag,
                    in_flight=tracker.in_flight,
                    failed_offset=tracker.failed_offset,
                )
            )
        return tuple(out)

    def publish(self, *, paused: bool) -> None:
        """Give the metrics collector a fresh snapshot (no registry: nothing to do)."""
        if self._registry is None:
            return
        counters = self._counters
        self._collector.snapshot = MetricsSnapshot(
            consumed=tuple(counters.consumed.items()),
            delivered=tuple(self.delivered_by_topic().items()),
            rerouted=tuple(counters.rerouted.items()),
            possible_duplicates=tuple(counters.possible_duplicates.items()),
            dead_lettered=tuple(counters.dead_lettered.items()),
            failed=tuple(counters.failed.items()),
            commits=counters.commits,
            commit_failures=counters.commit_failures,
            in_flight=self._ledger.in_flight,
            uncommitted=self._ledger.window,
            paused=paused,
            partitions=self._partition_statuses(),
            replication_latency_ms=tuple(sorted(self._ledger.latency_ms.items())),
            record_age_ms=tuple(sorted(counters.record_age_ms.items())),
        )

    def unregister(self) -> None:
        """A finished mirror leaves the registry, so the next one (a restart in the same
        process) can register the same metric names."""
        if self._registry is not None:
            self._registry.unregister(self._collector)
