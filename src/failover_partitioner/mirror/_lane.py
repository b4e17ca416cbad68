"""The fast lane: a second producer client for the common case, every target partition usable.

The failover producer learns each message's outcome from a delivery report: confluent-kafka
builds a ``Message`` and calls into Python once per message, which is most of what a mirror
spends per message beyond consuming and producing. Nothing needs routing around while every
partition of the target topic is usable, so the mirror then sends on this client instead:

* it reports failures only (``delivery.report.only.error``), through one callback per span;
* librdkafka's partitioner places the messages, murmur2 for keys (``partitioner=
  murmur2_random``), as the failover producer itself lets it while a topic is whole;
* deliveries are learned in bulk: once the client holds no message, every message sent on it
  without a failure report was delivered (:meth:`FastLane.settle`). The mirror settles before
  it needs the outcomes (its window is full, a commit is due, a partition is revoked, it stops),
  which is what a consume-produce loop that commits after ``flush()`` does.

A failure comes back with the message's topic, partition, key and value (not its headers): the
mirror finds the consumed message by key and value within the span, and sends it again through
the failover producer, which routes it around the partition that refused it.

Pure plumbing: no threads; the mirror calls it from its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from confluent_kafka import KafkaError, Message

from failover_partitioner._config import client_settings, companion_conf

from ._commits import Span

__all__ = ["FastLane", "LaneFailure", "lane_config"]

LaneFailure = tuple[Span, KafkaError, Message]


# The longest the mirror may wait for the lane to settle: a message the lane holds longer is
# failed by the client and sent again through the failover producer.
LANE_TIMEOUT_MS = 30_000


def lane_config(producer_config: Mapping[str, str]) -> dict[str, Any]:
    """The lane client's settings: the failover producer's client settings (its defaults for
    timeouts and retries included), failures reported only, keys placed by murmur2, and a
    delivery timeout of at most ``LANE_TIMEOUT_MS``."""
    conf = companion_conf(client_settings(producer_config).client_conf, "lane")
    conf["delivery.report.only.error"] = True
    conf["partitioner"] = "murmur2_random"
    timeout_ms = LANE_TIMEOUT_MS
    for alias in ("message.timeout.ms", "delivery.timeout.ms"):
        given = conf.pop(alias, None)
        if given is not None:
            try:
                ms = int(float(str(given)))
            except ValueError:
                continue  # the failover producer's client refuses it, naming it
            if 0 < ms < timeout_ms:
                timeout_ms = ms
    conf["message.timeout.ms"] = timeout_ms
    return conf


class FastLane:
    """Messages sent on the lane client since the last settle, by span, and their failures.

    ``produce`` is the client's own (confluent-kafka's positional order: topic, value, key,
    partition, on_delivery, callback, timestamp, headers); the callback for a span's messages
    comes from :meth:`follow`. Each span counts its lane messages in ``span.lane``.
    """

    __slots__ = ("_client", "_clock", "failed", "produce", "spans")

    def __init__(self, client: Any, clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self._clock = clock
        self.produce: Callable[..., None] = client.produce
        self.spans: list[Span] = []
        self.failed: list[LaneFailure] = []

    def follow(self, span: Span) -> Callable[[KafkaError, Message], None]:
        """The delivery callback for ``span``'s messages on the lane (failures only)."""
        self.spans.append(span)
        return partial(self._failed_one, span)

    def _failed_one(self, span: Span, err: KafkaError, msg: Message) -> None:
        self.failed.append((span, err, msg))

    def settle(self, timeout: float, between: Callable[[], object] | None = None) -> bool:
        """Serve the client's reports until it holds nothing (True), or ``timeout`` passes
        (False). ``between`` runs every 50 ms meanwhile (the mirror polls its producer)."""
        deadline = self._clock() + timeout
        while True:
            left = max(0.0, deadline - self._clock())
            if self._client.flush(min(0.05, left)) == 0:
                return True
            if between is not None:
                between()
            if left <= 0:
                return False

    def take(self) -> tuple[list[Span], list[LaneFailure]]:
        """The spans sent since the last take and the failures reported for them; call only
        once the lane is settled, when every other message of those spans is delivered."""
        spans, failed = self.spans, self.failed
        self.spans, self.failed = [], []
        return spans, failed

    def purge(self) -> None:
        """Give up on what the client holds: every such message gets a failure report
        (``_PURGE_QUEUE``, or ``_PURGE_INFLIGHT`` for one that may still have been written)."""
        self._client.purge(in_queue=True, in_flight=True, blocking=True)
        self._client.flush(1.0)  # serves those reports
