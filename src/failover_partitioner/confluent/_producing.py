"""``produce`` of :class:`FailoverProducer`: the healthy path (the message goes straight to the
client, as a raw producer's would), else the failover path (``_routing.py``); and what a
refusal by the client at once on the healthy path leads to.

On the healthy path a message is placed by the client (lane None; keys too, while the topic is
whole), by the topic's rotation over its usable partitions (a keyless message), or, on a topic
with partitions out of use, by the chooser's keyed choice (a bytes key; a key it has no
partition for takes the failover path). It is counted in once the client holds it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import confluent_kafka

from failover_partitioner._message import DeliveryGroup
from failover_partitioner.choose import NO_PARTITION
from failover_partitioner.confluent._routing import Routing
from failover_partitioner.confluent._shared import (
    _ANY_PARTITION,
    _OFF,
    _PLAIN_CALLBACKS,
    _SIGNALLED,
    DeliveryCallback,
    _key_bytes,
)

logger = logging.getLogger("failover_partitioner.confluent.producer")  # the producer's own


class Producing(Routing):
    """``produce``: the healthy path, then the failover path."""

    def produce(
        self,
        topic: str,
        value: bytes | str | None = None,
        key: bytes | str | None = None,
        headers: Mapping[str, Any] | list[tuple[str, Any]] | None = None,
        on_delivery: DeliveryCallback | None = None,
        timestamp: int | None = None,
        partition: int | None = None,
    ) -> None:
        """Accept a message; it is delivered, or its callback gets the final error.

        ``partition``: a preference, not a pin. The first attempt goes there while that
        partition is usable (see :meth:`usable`); otherwise, and for every retry, the message
        is placed as any other (by key, or spread), so it is routed around a degraded partition.

        Waits up to ``produce_timeout_s`` while ``max_in_flight`` messages are in flight, then
        raises :class:`ProduceTimeout` carrying the message (not accepted).
        """
        # The healthy path (the module doc): nothing waits, so the message goes to the client
        # as a raw producer's would. Every frame here shows next to librdkafka's produce().
        if headers is None and timestamp is None and partition is None:
            try:
                lane = self._lanes[topic]
            except KeyError:  # a topic not seen yet
                lane = _OFF
            if lane is None or lane is not _OFF:  # (None, the commonest, tested first: cheaper)
                if lane is None:  # (and no default callback)
                    p = _ANY_PARTITION
                else:
                    if key is None:
                        p = lane()
                    elif topic in self._whole:
                        p = _ANY_PARTITION
                    else:
                        keyed = self._keyed.get(topic)
                        p = keyed(key) if keyed is not None and type(key) is bytes else NO_PARTITION
                        if p < 0:  # (also a str key) the failover path: the core places it
                            self._produce_failover(topic, value, key, None, on_delivery, None, None)
                            self._count_in()
                            return
                    if on_delivery is None:
                        on_delivery = self._default_cb
                if on_delivery is None:
                    try:
                        # Lane None: no partition (given, even -1 costs the client a parse).
                        if lane is None:
                            self._produce_raw(topic, value, key)
                        else:
                            self._produce_raw(topic, value, key, p)
                    except BaseException as exc:
                        self._forward_raised(exc, topic, value, key, p, None, None)
                    self._count_in()
                    return
                if (
                    self._quiet is None  # else the failover path ends the quiet mode first
                    # _rebuildable(value, key, on_delivery), inline:
                    and type(value) is not str
                    and type(key) is not str
                    and (
                        type(on_delivery) in _PLAIN_CALLBACKS
                        or (callable(on_delivery) and not isinstance(on_delivery, DeliveryGroup))
                    )
                ):
                    # No record: one client callback per user callback (see _reporter).
                    last = self._reporting
                    sent = (
                        last[1]
                        if on_delivery is last[0]  # == only where it is safe (a method's)
                        or (type(on_delivery) in _PLAIN_CALLBACKS and on_delivery == last[0])
                        else self._reporter(on_delivery)
                    )
                    try:
                        self._produce_reported(topic, value, key, p, sent)
                    except BaseException as exc:
                        self._forward_raised(exc, topic, value, key, p, on_delivery, sent)
                    self._count_in()
                    return
        self._produce_failover(topic, value, key, headers, on_delivery, timestamp, partition)
        self._count_in()

    def _forward_raised(
        self,
        exc: BaseException,
        topic: str,
        value: bytes | str | None,
        key: bytes | str | None,
        partition: int,
        cb: DeliveryCallback | None,
        report: Callable[[Any, Any], None] | None,
    ) -> None:
        """The client refused a message of the healthy path at once: take it on, or raise.
        ``report``: the client callback it was sent with (for ``cb``), None for the default."""
        if isinstance(exc, confluent_kafka.KafkaException):
            # Refused (e.g. the topic refuses this user): the record path decides.
            self._produce_with_record(topic, value, key, None, cb, None)
            return
        if isinstance(exc, _SIGNALLED):
            self._taken_when_interrupted(exc, first=True)  # the client has it: accepted
            raise exc
        if not isinstance(exc, BufferError):
            # Not accepted (a value or key of a wrong type).
            if isinstance(exc, TypeError) and key is not None:
                _key_bytes(key)  # names the key's type, as the other paths do
            raise exc
        # librdkafka's queue is full, and its bound is the in-flight limit: serve reports
        # until it takes the message, as a raw producer's caller does (a poll serves them by
        # the batch), within produce_timeout_s.
        deadline = time.monotonic() + self._produce_timeout_s
        while not self._in_callback() and time.monotonic() < deadline:
            self._make_way(0.005)
            if self._lanes.get(topic, _OFF) is _OFF:
                # Off the healthy path meanwhile (a failure came back and waits): the failover
                # path places it, once the failed buffer and the client leave room for it.
                if not self._buffer.has_room():
                    continue
                self._produce_with_record(topic, value, key, None, cb, None)
                return
            try:
                if report is None:
                    self._produce_raw(topic, value, key, partition)
                else:
                    self._produce_reported(topic, value, key, partition, report)
                return
            except BufferError:
                continue
            except BaseException as again:
                if isinstance(again, _SIGNALLED):
                    self._taken_when_interrupted(again, first=True)
                raise again from None
        raise self._timed_out(topic, value, key, None, None)
