"""The background metadata refresher and its (pure) schedule.

Metadata is fetched every ``refresh_s``, every ``fast_refresh_s`` while one of the topic's
partitions is quarantined (to notice its recovery, or learn what broke, soon), and at once when
the producer asks (a delivery error that calls for it), but never more often than
``min_gap_s``. min.insync.replicas changes rarely and costs a DescribeConfigs round trip, so it
is asked every ``min_isr_refresh_s``; while a partition is out of use, every
``DEGRADED_MIN_ISR_S`` at most (an operator lowering it is often what brings the topic back),
and at every explicit fetch (``fetch_now``). A failed fetch keeps the last metadata (its age grows,
visible through :meth:`MetadataRefresher.age_s`) and is tried again with back-off. A fetch on
the caller's thread may overlap the thread's own: an answer to a request sent before the one
the current view (or min ISR) came from is dropped, whichever arrives last.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tenacity import Retrying

from failover_partitioner.errors import ConfigError
from failover_partitioner.health import TopicMetadata
from failover_partitioner.metadata import _steps
from failover_partitioner.metadata._source import MetadataSource, MinIsr, PartitionsAnswer

__all__ = ["MetadataRefresher", "RefreshSchedule"]

logger = logging.getLogger(__name__)

# While a topic's fetches are fast (something out of use), min.insync.replicas is read again
# this often at most: lowering it (or raising it) is an operator's fix for the fault itself.
DEGRADED_MIN_ISR_S = 5.0


@dataclass(slots=True)
class _TopicSchedule:
    due_at: float
    min_isr_due_at: float
    fast: bool = False
    last_attempt_at: float | None = None
    # A fetch asked for at a time of its own (request_at), kept across fetches until then.
    ask_at: float | None = None
    last_success_at: float | None = None
    failures: int = 0
    # The last min ISR lookup failed on a budget shorter than a fetch's own timeout (the first
    # fetch, on the caller's thread): the next fetch comes at once and asks again.
    min_isr_cut_short: bool = False


class RefreshSchedule:
    """When each watched topic is due for a metadata fetch (pure: the caller passes the time)."""

    def __init__(
        self,
        *,
        refresh_s: float,
        fast_refresh_s: float,
        min_isr_refresh_s: float,
        min_gap_s: float = 0.05,
        retry_max_s: float = 5.0,
    ) -> None:
        for name, value in (
            ("metadata_refresh_s", refresh_s),
            ("fast_refresh_s", fast_refresh_s),
            ("min_isr_refresh_s", min_isr_refresh_s),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ConfigError(f"{name} must be a number of seconds > 0, got {value!r}")
        self.refresh_s = float(refresh_s)
        self.fast_refresh_s = min(float(fast_refresh_s), self.refresh_s)
        self.min_isr_refresh_s = float(min_isr_refresh_s)
        self.degraded_min_isr_s = min(self.min_isr_refresh_s, DEGRADED_MIN_ISR_S)
        self.min_gap_s = min_gap_s
        self.retry_max_s = retry_max_s
        self._topics: dict[str, _TopicSchedule] = {}

    def __contains__(self, topic: object) -> bool:
        return topic in self._topics

    @property
    def topics(self) -> tuple[str, ...]:
        return tuple(self._topics)

    def add(self, topic: str, now: float) -> None:
        if topic not in self._topics:
            self._topics[topic] = _TopicSchedule(due_at=now, min_isr_due_at=now)

    def request(self, topic: str, now: float) -> None:
        """Fetch ``topic`` as soon as allowed (not sooner than ``min_gap_s`` after the last)."""
        s = self._topics.get(topic)
        if s is None:
            return
        earliest = now if s.last_attempt_at is None else s.last_attempt_at + self.min_gap_s
        s.due_at = min(s.due_at, max(now, earliest))

    def request_at(self, topic: str, at: float) -> None:
        """Fetch ``topic`` at ``at`` too (e.g. when a quarantine's back-off ends, as its
        release needs the metadata of then), whatever fetches come before."""
        s = self._topics.get(topic)
        if s is None:
            return
        s.ask_at = at if s.ask_at is None else min(s.ask_at, at)
        s.due_at = min(s.due_at, at)

    def set_fast(self, topic: str, fast: bool, now: float) -> None:
        s = self._topics.get(topic)
        if s is None or s.fast == fast:
            return
        s.fast = fast
        if fast:
            s.due_at = min(s.due_at, now + self.fast_refresh_s)
            s.min_isr_due_at = min(s.min_isr_due_at, now + self.degraded_min_isr_s)

    def ask_min_isr(self, topic: str, now: float) -> None:
        """Read ``topic``'s min ISR again at its next fetch (an explicit refresh)."""
        s = self._topics.get(topic)
        if s is not None:
            s.min_isr_due_at = min(s.min_isr_due_at, now)

    def due(self, now: float) -> list[str]:
        return [t for t, s in self._topics.items() if s.due_at <= now]

    def min_isr_due(self, topic: str, now: float) -> bool:
        s = self._topics.get(topic)
        return s is not None and s.min_isr_due_at <= now

    def fetched(self, topic: str, now: float, *, ok: bool, exists: bool = True) -> None:
        """Record a fetch; ``exists``: the cluster listed the topic (else its min ISR, which
        could not be read, is asked again at the fetch that finds it listed)."""
        s = self._topics.get(topic)
        if s is None:
            return
        s.last_attempt_at = now
        if ok and not exists:
            s.min_isr_due_at = now
        if ok:
            s.failures = 0
            s.last_success_at = now
            if s.min_isr_cut_short:
                s.due_at = now + self.min_gap_s
            else:
                s.due_at = now + (self.fast_refresh_s if s.fast else self.refresh_s)
        else:
            s.failures += 1
            backoff = _steps.doubling_s(0.1, s.failures, self.retry_max_s)
            s.due_at = now + min(backoff, self.fast_refresh_s if s.fast else self.refresh_s)
        if s.ask_at is not None:
            if s.ask_at > now:
                s.due_at = min(s.due_at, s.ask_at)
            else:
                s.ask_at = None

    def min_isr_fetched(self, topic: str, now: float, *, ok: bool, budgeted: bool = False) -> None:
        """Record a min ISR lookup; ``budgeted``: it had less time than a fetch's timeout."""
        s = self._topics.get(topic)
        if s is not None:
            # A lookup cut short is asked again at the next fetch, which then comes at once
            # with the full timeout: the assumed 1 should not stand for long. Otherwise, not
            # known: ask again sooner, but not on every metadata fetch.
            s.min_isr_cut_short = not ok and budgeted
            if s.min_isr_cut_short:
                s.min_isr_due_at = now
            else:
                s.min_isr_due_at = now + min(
                    self.degraded_min_isr_s if s.fast else self.min_isr_refresh_s,
                    self.min_isr_refresh_s if ok else 30.0,
                )

    def last_success_at(self, topic: str) -> float | None:
        s = self._topics.get(topic)
        return None if s is None else s.last_success_at

    def next_due_at(self) -> float | None:
        return min((s.due_at for s in self._topics.values()), default=None)


def min_isr_option(value: object) -> int | Mapping[str, int] | None:
    def check(v: object, where: str) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"min_insync_replicas{where} must be an int >= 1, got {v!r}")
        return v

    if value is None:
        return None
    if isinstance(value, Mapping):
        return {str(k): check(v, f"[{k!r}]") for k, v in value.items()}
    return check(value, "")


class MetadataRefresher:
    """Keeps every watched topic's metadata fresh on a daemon thread of its own.

    ``on_update(metadata)`` is called (on that thread, or on the caller's in :meth:`fetch_now`)
    with each successful fetch. ``min_insync_replicas``: an int for every topic, or a mapping
    topic -> int; topics it does not name use the cluster's value (DescribeConfigs), else 1.
    """

    def __init__(
        self,
        source: MetadataSource,
        on_update: Callable[[TopicMetadata], None],
        *,
        min_insync_replicas: int | Mapping[str, int] | None = None,
        refresh_s: float = 30.0,
        fast_refresh_s: float = 0.5,
        min_isr_refresh_s: float = 300.0,
        request_timeout_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        name: str = "failover-metadata",
    ) -> None:
        self._source = source
        self._on_update = on_update
        self._option = min_isr_option(min_insync_replicas)
        self._timeout_s = _steps.check_request_timeout_s(
            request_timeout_s, "metadata request_timeout_s"
        )
        self._clock = clock
        self._schedule = RefreshSchedule(
            refresh_s=refresh_s, fast_refresh_s=fast_refresh_s, min_isr_refresh_s=min_isr_refresh_s
        )
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self._then: Callable[[], None] | None = None  # close()'s last step, run once
        self._metadata: dict[str, TopicMetadata] = {}
        self._min_isr: dict[str, MinIsr] = {}
        # Requests numbered as sent (under _lock), so an older answer never replaces a newer.
        self._views_order = _steps.AnswerOrder()
        self._min_isr_order = _steps.AnswerOrder()
        # Held from taking a view to on_update's return: views reach on_update in order too.
        # Reentrant: on_update may call back into the refresher.
        self._apply_lock = threading.RLock()
        self._warned_default: set[str] = set()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._started = False

    # -- the caller's side ------------------------------------------------------------------

    def start(self) -> None:
        with self._lock:
            if not self._started and not self._closed:
                self._started = True
                self._thread.start()

    def close(self, timeout_s: float = 5.0, then: Callable[[], None] | None = None) -> None:
        """Stop the thread, waiting up to ``timeout_s`` for it; then run ``then`` (closing
        what the source's requests use). A request still in flight by then (one to an
        unreachable cluster lasts ``request_timeout_s``) is not waited for: the thread runs
        ``then`` once it returns."""
        with self._lock:
            self._closed = True
            self._then = then
        self._wake.set()
        if self._started and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                return
        self._run_then()

    def _run_then(self) -> None:
        with self._lock:
            then, self._then = self._then, None
        if then is not None:
            then()

    def watch(self, topic: str) -> None:
        with self._lock:
            self._schedule.add(topic, self._clock())
        self._wake.set()

    def request_refresh(self, topic: str) -> None:
        """Fetch ``topic`` again soon. Cheap and non-blocking: safe in a delivery callback."""
        with self._lock:
            self._schedule.request(topic, self._clock())
        self._wake.set()

    def request_at(self, topic: str, at: float) -> None:
        """Fetch ``topic`` at ``at`` (this refresher's clock) too. Non-blocking."""
        with self._lock:
            self._schedule.request_at(topic, at)
        self._wake.set()

    def set_fast(self, topic: str, fast: bool) -> None:
        with self._lock:
            self._schedule.set_fast(topic, fast, self._clock())
        self._wake.set()

    def metadata(self, topic: str) -> TopicMetadata | None:
        return self._metadata.get(topic)

    def age_s(self, topic: str) -> float | None:
        """Seconds since ``topic``'s metadata was last fetched successfully (None: never)."""
        md = self._metadata.get(topic)
        return None if md is None else max(0.0, self._clock() - md.fetched_at)

    def fetch_now(self, topic: str, timeout_s: float) -> TopicMetadata:
        """Fetch ``topic`` on the calling thread (never from a delivery callback), retrying
        until ``timeout_s``; start watching it. Raises :class:`MetadataUnavailable`."""
        self.watch(topic)
        with self._lock:
            self._schedule.ask_min_isr(topic, self._clock())
        deadline = self._clock() + timeout_s
        md = self._fetch(topic, deadline=deadline, min_isr_budget_s=min(1.0, timeout_s / 2))
        if md is None:
            raise _steps.no_metadata(topic, timeout_s, "bootstrap.servers")
        return md

    # -- the thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._serve()
        finally:
            try:
                self._run_then()
            except Exception:
                logger.exception("closing after the metadata thread's last request failed")

    def _serve(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                now = self._clock()
                due = self._schedule.due(now)
                next_at = self._schedule.next_due_at()
            for topic in due:
                if self._is_closed():
                    return
                self._fetch(topic, deadline=self._clock() + self._timeout_s, min_isr_budget_s=None)
            with self._lock:
                next_at = self._schedule.next_due_at()
            wait = 1.0 if next_at is None else max(0.0, min(1.0, next_at - self._clock()))
            if wait > 0:
                self._wake.wait(wait)
                self._wake.clear()

    def _is_closed(self) -> bool:
        return self._closed

    def _fetch(
        self, topic: str, *, deadline: float, min_isr_budget_s: float | None
    ) -> TopicMetadata | None:
        min_isr = self._resolve_min_isr(topic, min_isr_budget_s)
        try:
            number, answer = self._partitions_with_retries(topic, deadline)
        except Exception as exc:
            with self._lock:
                self._schedule.fetched(topic, self._clock(), ok=False)
            _steps.log_fetch_failure(logger, topic, exc, self._metadata.get(topic), self._clock)
            return None
        now = self._clock()
        md = _steps.topic_metadata(topic, answer, min_isr, now, self._warned_default, logger)
        with self._apply_lock:
            with self._lock:
                self._schedule.fetched(topic, now, ok=True, exists=answer.exists)
                newest = self._views_order.take(topic, number)
                if newest:
                    self._metadata[topic] = md
                else:
                    md = self._metadata[topic]
            if not newest:
                logger.debug("metadata for topic %s answered after a newer answer: dropped", topic)
                return md
            self._on_update(md)
        return md

    def _partitions_with_retries(self, topic: str, deadline: float) -> tuple[int, PartitionsAnswer]:
        """The answer, and the number of the request that brought it (see AnswerOrder)."""

        def attempt() -> tuple[int, PartitionsAnswer]:
            remaining = max(0.05, deadline - self._clock())
            with self._lock:
                number = self._views_order.sent(topic)
            return number, self._source.partitions(topic, remaining)

        retrying = Retrying(
            stop=_steps.fetch_stop(deadline, self._clock()), wait=_steps.FETCH_WAIT, reraise=True
        )
        return retrying(attempt)

    def _resolve_min_isr(self, topic: str, budget_s: float | None) -> MinIsr | None:
        chosen = _steps.option_min_isr(self._option, topic)
        if chosen is not None:
            return chosen
        now = self._clock()
        with self._lock:
            cached = self._min_isr.get(topic)
            due = self._schedule.min_isr_due(topic, now)
        if cached is not None and not due:
            return cached
        if due:
            timeout = self._timeout_s if budget_s is None else budget_s
            with self._lock:
                number = self._min_isr_order.sent(topic)
            try:
                answer = self._source.min_insync_replicas(topic, timeout)
                if answer is not None:
                    _steps.heed_min_isr(topic, answer, self._warned_default, logger)
            except Exception as exc:
                logger.info("min.insync.replicas of topic %s not available: %s", topic, exc)
                answer = None
            with self._lock:
                self._schedule.min_isr_fetched(
                    topic, self._clock(), ok=answer is not None, budgeted=budget_s is not None
                )
                if answer is not None and self._min_isr_order.take(topic, number):
                    self._min_isr[topic] = answer
                # A lookup sent later may have answered first: its value is the one to use.
                cached = self._min_isr.get(topic, cached)
        return cached
