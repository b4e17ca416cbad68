"""``produce_batch`` of :class:`FailoverProducer`: value-only keyless messages go to the client's
``produce_batch``, one call per partition, dealt by the chooser; every other message takes
``produce``'s path."""

from __future__ import annotations

from typing import Any

from failover_partitioner.choose import CLIENT_PARTITIONER, NO_PARTITION, PartitionChooser
from failover_partitioner.confluent._producing import Producing
from failover_partitioner.confluent._shared import (
    _ANY_PARTITION,
    _BATCH_KEYS,
    _SIGNALLED,
    DeliveryCallback,
    _value_only,
)
from failover_partitioner.errors import BatchRefused, ProduceTimeout


class Batching(Producing):
    """``produce_batch``."""

    def produce_batch(
        self,
        topic: str,
        messages: list[dict[str, Any]],
        on_delivery: DeliveryCallback | None = None,
    ) -> None:
        """Accept many messages for ``topic`` in one call; each ends as ``produce``'s would.

        ``messages`` is a list of dicts with ``"value"`` and optionally ``"key"``,
        ``"headers"`` and ``"timestamp"`` (the dicts are not kept and come back unchanged);
        ``on_delivery`` is every message's callback (default: ``conf['on_delivery']``).
        Keyless messages given as ``{"value": v}`` alone go to the client in one call per
        partition (confluent-kafka's ``produce_batch``), with or without a callback: round
        robin deals them out over the usable partitions, sticky gives a batch to one. Every
        other message takes ``produce``'s own path, in order.

        Raises :class:`~failover_partitioner.errors.BatchRefused` naming the messages that
        were not accepted (a bad value, or :class:`ProduceTimeout` at the in-flight limit,
        which refuses the rest too); all the others were accepted.
        """
        if type(messages) is not list:
            raise TypeError(f"messages must be a list of dicts, got {type(messages).__name__}")
        if on_delivery is not None and not callable(on_delivery):
            raise TypeError(f"on_delivery must be callable(err, msg) or None, got {on_delivery!r}")
        if self._attention:
            self._service()
        if on_delivery is not None and self._quiet is not None and not self._end_quiet():
            # The quiet client's messages did not land in time: none of these was accepted.
            late: list[tuple[int, BaseException]] = [
                (i, self._timed_out(topic, m.get("value"), m.get("key"), None, None))
                for i, m in enumerate(m if type(m) is dict else {} for m in messages)
            ]
            raise BatchRefused(topic, late)
        refused: list[tuple[int, BaseException]] = []
        chooser = self._bare.get(topic)
        if chooser is None:
            self._produce_each(topic, messages, 0, len(messages), on_delivery, refused)
        else:
            cb = self._default_cb if on_delivery is None else on_delivery
            step = self._batch_step
            for start in range(0, len(messages), step):
                chunk = messages[start : start + step]
                if not _value_only(chunk):
                    end = start + len(chunk)
                    if not self._produce_each(topic, messages, start, end, on_delivery, refused):
                        break
                elif not self._produce_chunk(topic, chooser, chunk, start, refused, cb):
                    # Timed out at the in-flight limit: the rest is refused with it.
                    exc = refused[-1][1]
                    refused.extend((i, exc) for i in range(start + len(chunk), len(messages)))
                    break
        if refused:
            raise BatchRefused(topic, refused)

    def _produce_each(
        self,
        topic: str,
        messages: list[dict[str, Any]],
        start: int,
        end: int,
        on_delivery: DeliveryCallback | None,
        refused: list[tuple[int, BaseException]],
    ) -> bool:
        """``produce`` each of ``messages[start:end]``; False once one timed out (the rest
        are then refused too)."""
        for i in range(start, end):
            m = messages[i]
            try:
                if type(m) is not dict or not m.keys() <= _BATCH_KEYS:
                    raise TypeError(
                        f"each message must be a dict with keys among {sorted(_BATCH_KEYS)}, "
                        f"got {m!r}"
                    )
                self.produce(
                    topic,
                    m.get("value"),
                    m.get("key"),
                    m.get("headers"),
                    on_delivery,
                    m.get("timestamp"),
                )
            except ProduceTimeout as exc:
                refused.extend((j, exc) for j in range(i, len(messages)))
                return False
            except Exception as exc:
                refused.append((i, exc))
        return True

    def _hand_groups(
        self,
        topic: str,
        groups: dict[int, list[dict[str, Any]]],
        batch: Any,
        report: Any,
    ) -> list[dict[str, Any]]:
        """One client ``batch`` call per partition's group; the messages the client refused
        (marked '_error'). A signal's exception that comes as a call returns (see
        ``_SIGNALLED``): what the client took by then is counted in, the rest is not accepted,
        the marks go, and the interrupt goes on."""
        refused: list[dict[str, Any]] = []
        handed: list[list[dict[str, Any]]] = []
        try:
            for p, group in groups.items():
                handed.append(group)
                try:
                    queued = batch(topic, group, partition=p, on_delivery=report)
                except TypeError:  # a bad value: refused before anything was queued
                    queued = 0
                    for m in group:
                        m["_error"] = None
                except BufferError:
                    # Those refused carry '_error' (queued ones do not); none marked: all
                    # refused.
                    queued = 0
                    if not any("_error" in m for m in group):
                        for m in group:
                            m["_error"] = None
                if queued < len(group):
                    refused.extend(m for m in group if "_error" in m)
        except _SIGNALLED:
            taken = 0
            for group in handed:
                for m in group:
                    if "_error" in m:
                        del m["_error"]
                    else:
                        taken += 1
            self._count_batched(taken)
            raise
        return refused

    def _count_batched(self, n: int) -> None:
        with self._count_lock:
            self._batched += n

    def _produce_chunk(
        self,
        topic: str,
        chooser: PartitionChooser,
        chunk: list[dict[str, Any]],
        start: int,
        refused: list[tuple[int, BaseException]],
        cb: DeliveryCallback | None,
    ) -> bool:
        """Hand ``chunk`` (value-only dicts, ``cb`` their callback or None) to the client, one
        call per partition; False when it could not be counted in (the rest is then refused)."""
        k = len(chunk)
        refused_before = len(refused)
        if not self._buffer.has_room(k):
            try:
                # Waits until the chunk fits under max_in_flight.
                self._wait_for_room(topic, chunk[0]["value"], None, None, None, need=k)
            except ProduceTimeout as exc:
                refused.extend((start + j, exc) for j in range(k))
                return False
        # One chooser step for the chunk: slice j holds messages j, j+c, j+2c, ... so round
        # robin deals them out exactly as one by one would; sticky gives all one partition.
        parts = chooser.keyless_deal(k)
        c = len(parts)
        groups: dict[int, list[dict[str, Any]]] = {}
        left: list[dict[str, Any]] = []
        for j, p in enumerate(parts):
            part = chunk[j::c] if c > 1 else chunk
            if p == NO_PARTITION:
                left.extend(part)  # nothing usable: they wait, as produce()'s would
                continue
            if p == CLIENT_PARTITIONER:
                p = _ANY_PARTITION
            group = groups.get(p)
            if group is None:
                groups[p] = part
            else:
                group.extend(part)
        # The client's reports go to one callable for the chunk: the producer's own when nobody
        # listens, else one that makes each message's record only when its report comes.
        if cb is None:
            report, batch = self._report_cb, self._produce_batch_raw
        else:
            report = self._reporter(cb)
            batch = self._produce_batch_reported
        left.extend(self._hand_groups(topic, groups, batch, report))
        # Refused by the client (queue full, partition unknown to it yet, too large, a bad
        # value): each takes the single path, counted in with the chunk, and waits or raises
        # there.
        taken = k - len(left)  # by the client, in the calls per partition
        for j, m in enumerate(left):
            m.pop("_error", None)
            try:
                self._produce_with_record(topic, m["value"], None, None, cb, None)
            except Exception as exc:
                index = next(i for i, x in enumerate(chunk) if x is m)
                refused.append((start + index, exc))
            except _SIGNALLED:
                # This one was counted in if the client took it (see _taken_when_interrupted);
                # those before it that were not refused are accepted; the rest are not.
                for x in left[j + 1 :]:
                    x.pop("_error", None)
                self._count_batched(taken + j - (len(refused) - refused_before))
                raise
        self._count_batched(k - (len(refused) - refused_before))
        return True
