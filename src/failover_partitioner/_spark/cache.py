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
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._producers: dict[str, P] = {}
        self._built = 0

    def get(self, key: str, build: Callable[[], P]) -> P:
        """The producer for ``key``, built by ``build()`` on first use in this process."""
        with self._lock:
            self._forget_if_forked()
            producer = self._producers.get(key)
            if producer is None:
                producer = build()
                self._producers[key] = producer
                self._built += 1
                _log.debug("built producer %s in process %s", key, self._pid)
            return producer

    def discard(self, key: str) -> None:
        """Close and forget the producer for ``key`` (after a failed task: start clean)."""
        with self._lock:
            self._forget_if_forked()
            producer = self._producers.pop(key, None)
        if producer is not None:
            _close(key, producer)

    def close_all(self) -> None:
        """Close every producer this process built (registered with ``atexit``)."""
        with self._lock:
            self._forget_if_forked()
            producers, self._producers = self._producers, {}
        for key, producer in producers.items():
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

    def _forget_if_forked(self) -> None:
        pid = os.getpid()
        if pid != self._pid:
            self._pid = pid
            self._producers = {}
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
