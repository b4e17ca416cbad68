"""Prometheus metrics, read from the producer's own counters when scraped.

Nothing is counted twice and nothing is paid per message: a prometheus ``Counter.inc()`` takes a
lock, which on the delivery path would cost a large share of a message's budget. Instead each
producer exposes a :class:`MetricsSnapshot` and one collector per registry turns the snapshots
of every producer registered with it into metric families at scrape time.

Registry: by default each producer gets a private ``CollectorRegistry`` (so two producers, or a
test suite, never collide on metric names); pass ``metrics_registry=prometheus_client.REGISTRY``
to publish in the process-wide one. Several producers may share a registry: their series are
told apart by the ``producer`` label (``client.id``, else a generated name).

Names (counters get prometheus' ``_total`` suffix):

=====================================  =======  ==============================================
``failover_produced_total``            counter  messages accepted by ``produce``
``failover_delivered_total``           counter  messages delivered (final success)
``failover_rerouted_total``            counter  attempts sent to another partition than before
``failover_retries_total``             counter  attempts after the first
``failover_final_failures_total``      counter  messages that failed finally
``failover_possible_duplicates_total`` counter  messages with an ambiguous failed attempt
``failover_quarantines_total``         counter  partitions put into quarantine (per topic)
``failover_partitions``                gauge    partitions per topic and state
``failover_in_flight``                 gauge    accepted, no final outcome yet
``failover_failed_buffer_depth``       gauge    waiting for another attempt
``failover_metadata_age_seconds``      gauge    age of the topic's metadata
=====================================  =======  ==============================================
"""

from __future__ import annotations

import inspect
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from failover_partitioner.core.statistics import MetricsSnapshot, TopicMetrics

__all__ = ["MetricsSnapshot", "ProducerMetrics", "TopicMetrics"]


_COUNTERS = (
    ("produced", "Messages accepted by produce"),
    ("delivered", "Messages delivered (final success)"),
    ("rerouted", "Attempts sent to a different partition than the previous attempt"),
    ("retries", "Attempts after the first"),
    ("final_failures", "Messages that failed finally (callback with the error)"),
    ("possible_duplicates", "Messages with an ambiguous failed attempt (may be duplicated)"),
)


class _RegistryCollector(Collector):
    """Collects every producer registered for one registry."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sources: dict[str, Callable[[], MetricsSnapshot]] = {}

    def add(self, name: str, source: Callable[[], MetricsSnapshot]) -> None:
        with self._lock:
            if name in self._sources:
                raise ValueError(
                    f"a producer named {name!r} already reports to this metrics registry; "
                    "give each producer its own client.id"
                )
            self._sources[name] = source

    def remove(self, name: str) -> None:
        with self._lock:
            self._sources.pop(name, None)

    def describe(self) -> list[Metric]:
        return list(self._families({}))

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            sources = dict(self._sources)
        snapshots = {}
        for name, source in sources.items():
            try:
                snapshots[name] = source()
            except Exception:  # a closed or failing producer must not break the scrape
                continue
        yield from self._families(snapshots)

    @staticmethod
    def _families(snapshots: Mapping[str, MetricsSnapshot]) -> Iterator[Metric]:
        for attr, doc in _COUNTERS:
            c = CounterMetricFamily(f"failover_{attr}", doc, labels=["producer"])
            for name, s in snapshots.items():
                c.add_metric([name], getattr(s, attr))
            yield c
        q = CounterMetricFamily(
            "failover_quarantines", "Partitions put into quarantine", labels=["producer", "topic"]
        )
        parts = GaugeMetricFamily(
            "failover_partitions", "Partitions by state", labels=["producer", "topic", "state"]
        )
        age = GaugeMetricFamily(
            "failover_metadata_age_seconds",
            "Seconds since the topic's metadata was fetched",
            labels=["producer", "topic"],
        )
        in_flight = GaugeMetricFamily(
            "failover_in_flight", "Messages accepted and not yet done", labels=["producer"]
        )
        depth = GaugeMetricFamily(
            "failover_failed_buffer_depth",
            "Messages waiting for another attempt",
            labels=["producer"],
        )
        for name, s in snapshots.items():
            in_flight.add_metric([name], s.in_flight)
            depth.add_metric([name], s.failed_buffer_depth)
            for topic, t in s.topics.items():
                q.add_metric([name, topic], t.quarantines)
                for state, count in t.partitions_by_state.items():
                    parts.add_metric([name, topic, state], count)
                if t.metadata_age_s is not None:
                    age.add_metric([name, topic], t.metadata_age_s)
        yield from (q, parts, age, in_flight, depth)


_collectors: weakref.WeakKeyDictionary[Any, _RegistryCollector] = weakref.WeakKeyDictionary()
_collectors_lock = threading.Lock()


def _held_weakly(source: Callable[[], MetricsSnapshot]) -> Callable[[], MetricsSnapshot]:
    """A producer's bound method, held weakly: the collector lives as long as its registry,
    and must not keep an unclosed producer alive (it would never be collected and warned of).
    A scrape skips a producer that is gone (the call raises)."""
    if not inspect.ismethod(source):
        return source
    ref: weakref.WeakMethod[Callable[[], MetricsSnapshot]] = weakref.WeakMethod(source)

    def snapshot() -> MetricsSnapshot:
        bound = ref()
        if bound is None:
            raise ReferenceError("the producer was collected")
        return bound()

    return snapshot


class ProducerMetrics:
    """One producer's registration with a registry, and its optional HTTP exporter."""

    def __init__(
        self,
        name: str,
        source: Callable[[], MetricsSnapshot],
        *,
        registry: CollectorRegistry | None = None,
        http_port: int | None = None,
        http_addr: str = "0.0.0.0",
    ) -> None:
        self.registry = CollectorRegistry() if registry is None else registry
        self.name = name
        with _collectors_lock:
            collector = _collectors.get(self.registry)
            if collector is None:
                collector = _RegistryCollector()
                self.registry.register(collector)
                _collectors[self.registry] = collector
        collector.add(name, _held_weakly(source))
        self._collector = collector
        self._server: Any = None
        self.http_port: int | None = None
        if http_port is not None:
            from prometheus_client import start_http_server

            try:
                server, _thread = start_http_server(
                    http_port, addr=http_addr, registry=self.registry
                )
            except OSError as e:
                # Undone, so that the same producer may be created again with another port.
                collector.remove(name)
                raise OSError(
                    e.errno,
                    f"cannot serve metrics on {http_addr}:{http_port}: {e.strerror or e}; "
                    "choose a free metrics_port (0 picks one) or another metrics_addr",
                ) from e
            self._server = server
            self.http_port = int(server.server_address[1])

    def close(self) -> None:
        self._collector.remove(self.name)
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
