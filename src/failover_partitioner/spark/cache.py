"""One producer per configuration in each Python worker, reused by the tasks it runs.

A producer holds sockets and threads, so it cannot be pickled and shipped from the driver; it
is built where it is used. PySpark reuses Python workers across tasks
(``spark.python.worker.reuse``, true by default), so a module-level cache keeps one producer
per configuration alive for every task the worker runs, as Spark's JVM Kafka sink does with
its producer cache. Tasks still flush before they finish: the cache saves connections and
metadata lookups, never delivery guarantees.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

_log = logging.getLogger(__name__)


class Closeable(Protocol):
    def close(self) -> object: ...


P = TypeVar("P", bound=Closeable)


class ProducerCache(Generic[P]):
    """Producers by configuration key, private to the process that built them.

    A forked child (PySpark's daemon forks workers) must not use its parent's client: the
    librdkafka threads did not survive the fork. The cache therefore forgets, without closing,
    whatever a different process id built.

    A producer not asked for in ``max_idle_s`` is closed the next time any other is asked for,
    so a long-lived worker does not keep connections to every cluster it ever wrote to (Spark's
    JVM sink does the same with ``spark.kafka.producer.cache.timeout``, 10 minutes).
    """

    def __init__(
        self, *, max_idle_s: float = 600.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._producers: dict[str, P] = {}
        self._last_used: dict[str, float] = {}
        self._built = 0
        self._max_idle_s = max_idle_s
        self._clock = clock

    def get(self, key: str, build: Callable[[], P]) -> tuple[P, bool]:
        """The producer for ``key`` and whether it was built by ``build()`` for this call."""
        with self._lock:
            self._forget_if_forked()
            now = self._clock()
            idle = [
                k
                for k, used in self._last_used.items()
                if k != key and now - used >= self._max_idle_s
            ]
            evicted = [(k, self._pop(k)) for k in idle]
            producer = self._producers.get(key)
            built = producer is None
            if producer is None:
                producer = build()
                self._producers[key] = producer
                self._built += 1
                _log.debug("built producer %s in process %s", key, self._pid)
            self._last_used[key] = now
        for k, old in evicted:
            _log.info("closing producer %s, unused for %.0f s or more", k, self._max_idle_s)
            _close(k, old)
        return producer, built

    def discard(self, key: str) -> None:
        """Close and forget the producer for ``key``."""
        producer = self.take(key)
        if producer is not None:
            _close(key, producer)

    def take(self, key: str) -> P | None:
        """Forget the producer for ``key`` without closing it, and return it (None if there
        is none): the caller closes it as it needs (after a failed task, without waiting)."""
        with self._lock:
            self._forget_if_forked()
            return self._pop(key) if key in self._producers else None

    def close_all(self) -> None:
        """Close every producer this process built (registered with ``atexit``)."""
        with self._lock:
            self._forget_if_forked()
            producers = [(k, self._pop(k)) for k in list(self._producers)]
        for key, producer in producers:
            _close(key, producer)

    def producers(self) -> dict[str, P]:
        """A copy of what this process holds, by key."""
        with self._lock:
            self._forget_if_forked()
            return dict(self._producers)

    @property
    def built(self) -> int:
        """How many producers this process has built (reuse shows as a small number)."""
        return self._built

    def _pop(self, key: str) -> P:
        del self._last_used[key]
        return self._producers.pop(key)

    def _forget_if_forked(self) -> None:
        pid = os.getpid()
        if pid != self._pid:
            self._pid = pid
            self._producers = {}
            self._last_used = {}
            self._built = 0


def _close(key: str, producer: Closeable) -> None:
    try:
        left = producer.close()
    except Exception:
        _log.exception("closing producer %s failed", key)
        return
    if isinstance(left, list | tuple) and left:
        # Only reached after a failed task or at worker exit: the rows are written again by
        # Spark's task retry, or were already accounted for by the task that produced them.
        _log.warning("producer %s closed with %s undelivered messages", key, len(left))
