"""``produce_batch`` of :class:`FailoverProducer`: value-only keyless messages go to the client's
``produce_batch``, one call per partition, dealt by the chooser; every other message takes
``produce``'s path."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from typing import Any

from failover_partitioner.choose import CLIENT_PARTITIONER, NO_PARTITION, PartitionChooser
from failover_partitioner.confluent._producing import Producing
from failover_partitioner.confluent._shared import (
    _ANY_PARTITION,
    _BATCH_KEYS,
    _PART,
    _SIGNALLED,
    _TAKEN,
    DeliveryCallback,
    _value_only,
)
from failover_partitioner.errors import BatchRefused, ProduceTimeout, _mark_not_accepted


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
        which refuses the rest too); all the others were accepted. Ctrl-C goes on as raised;
        :func:`~failover_partitioner.errors.not_accepted` of it names the messages not
        accepted then.
        """
        if type(messages) is not list:
            raise TypeError(f"messages must be a list of dicts, got {type(messages).__name__}")
        if on_delivery is not None and not callable(on_delivery):
            raise TypeError(f"on_delivery must be callable(err, msg) or None, got {on_delivery!r}")
        self._refuse_if_closing("produce_batch()")
        refused: list[tuple[int, BaseException]] = []
        start = 0  # the first message of the part under way
        try:
            if self._attention:
                self._make_way()
            if on_delivery is not None and self._quiet is not None and not self._end_quiet():
                # The quiet client's messages did not land in time: none of these was accepted.
                late: list[tuple[int, BaseException]] = [
                    (i, self._timed_out(topic, m.get("value"), m.get("key"), None, None))
                    for i, m in enumerate(m if type(m) is dict else {} for m in messages)
                ]
                raise BatchRefused(topic, late)
            chooser = self._bare.get(topic)
            if chooser is None:
                self._produce_each(topic, messages, 0, len(messages), on_delivery, refused)
            else:
                cb = self._default_cb if on_delivery is None else on_delivery
                step = self._batch_step
                for start in range(0, len(messages), step):
                    chunk = messages[start : start + step]
                    end = start + len(chunk)
                    if not _value_only(chunk):
                        if not self._produce_each(
                            topic, messages, start, end, on_delivery, refused
                        ):
                            break
                    elif not self._produce_chunk(topic, chooser, chunk, start, refused, cb):
                        # Timed out at the in-flight limit: the rest is refused with it.
                        exc = refused[-1][1]
                        refused.extend((i, exc) for i in range(end, len(messages)))
                        break
        except _SIGNALLED as exc:
            _name_not_accepted(exc, start, len(messages), refused)
            raise
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
            except _SIGNALLED as exc:
                setattr(exc, _PART, ([] if hasattr(exc, _TAKEN) else [i], i + 1))
                raise
        return True

    def _hand_groups(
        self,
        topic: str,
        groups: dict[int, list[dict[str, Any]]],
        places: Callable[[int], Iterable[int]],
        batch: Any,
        report: Any,
        handed: list[bool],
    ) -> list[int]:
        """One client ``batch`` call per partition's group; the chunk positions of the messages
        the client refused (``places(p)``: those of partition ``p``'s group, in its order).
        ``handed[i]``: whether group ``i`` went to the client (for ``_interrupted_handing``);
        each is a store made before Python looks for signals again (it does so as calls
        return), so a Ctrl-C finds them true to what the client holds."""
        refused: list[int] = []
        for i, (p, group) in enumerate(groups.items()):
            handed[i] = True
            try:
                queued = batch(topic, group, partition=p, on_delivery=report)
            except TypeError:  # a bad value: refused before anything was queued
                handed[i] = False
                refused.extend(places(p))
                continue
            except BufferError:
                # Those refused carry '_error' (queued ones do not); none marked: all refused.
                handed[i] = False
                if not any("_error" in m for m in group):
                    refused.extend(places(p))
                    continue
                handed[i] = True
                queued = 0
            if queued < len(group):
                refused.extend(x for m, x in zip(group, places(p), strict=True) if "_error" in m)
        return refused

    def _interrupted_handing(
        self,
        groups: dict[int, list[dict[str, Any]]],
        places: Callable[[int], Iterable[int]],
        handed: list[bool],
    ) -> list[int]:
        """A signal's exception came as a client ``batch`` call returned (see ``_SIGNALLED``):
        what the client took by then is counted in (the messages of groups ``handed`` but not
        marked '_error'), the client's marks go; the chunk positions of the rest (not
        accepted)."""
        not_taken: list[int] = []
        taken = 0
        for i, (p, group) in enumerate(groups.items()):
            if not handed[i]:
                not_taken.extend(places(p))
                for m in group:
                    m.pop("_error", None)
                continue
            for m, x in zip(group, places(p), strict=True):
                if "_error" in m:
                    del m["_error"]
                    not_taken.append(x)
                else:
                    taken += 1
        self._count_batched(taken)
        return not_taken

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
        call per partition; False when it could not be counted in (the rest is then refused).
        A signal's exception goes on marked with the chunk's messages not accepted."""
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
        groups, slices, left = _dealt(chunk, parts)
        c = len(parts)

        def places(p: int) -> Iterable[int]:
            return itertools.chain.from_iterable(range(j, k, c) for j in slices[p])

        # The client's reports go to one callable for the chunk: the producer's own when nobody
        # listens, else one that makes each message's record only when its report comes.
        if cb is None:
            report, batch = self._report_cb, self._produce_batch_raw
        else:
            report = self._reporter(cb)
            batch = self._produce_batch_reported
        handed = [False] * len(groups)
        try:
            left.extend(self._hand_groups(topic, groups, places, batch, report, handed))
        except _SIGNALLED as exc:
            not_taken = left + self._interrupted_handing(groups, places, handed)
            setattr(exc, _PART, ([start + x for x in not_taken], start + k))
            raise
        # Refused by the client (queue full, partition unknown to it yet, too large, a bad
        # value): each takes the single path, counted in with the chunk, and waits or raises
        # there.
        taken = k - len(left)  # by the client, in the calls per partition
        for j, x in enumerate(left):
            m = chunk[x]
            m.pop("_error", None)
            try:
                self._produce_with_record(topic, m["value"], None, None, cb, None)
            except Exception as exc:
                refused.append((start + x, exc))
            except _SIGNALLED as exc:
                # This one was counted in if the client took it (see _taken_when_interrupted);
                # those before it that were not refused are accepted; the rest are not.
                for y in left[j + 1 :]:
                    chunk[y].pop("_error", None)
                self._count_batched(taken + j - (len(refused) - refused_before))
                rest = [start + y for y in left[j + 1 :]]
                setattr(
                    exc, _PART, (rest if hasattr(exc, _TAKEN) else [start + x, *rest], start + k)
                )
                raise
        self._count_batched(k - (len(refused) - refused_before))
        return True


def _dealt(
    chunk: list[dict[str, Any]], parts: tuple[int, ...]
) -> tuple[dict[int, list[dict[str, Any]]], dict[int, list[int]], list[int]]:
    """``chunk`` dealt out as ``parts`` says (slice j of ``len(parts)`` to ``parts[j]``): each
    partition's messages, the slices each partition's group holds (in order), and the chunk
    positions of those with no usable partition (they wait, as produce()'s would)."""
    k, c = len(chunk), len(parts)
    groups: dict[int, list[dict[str, Any]]] = {}
    slices: dict[int, list[int]] = {}
    waiting: list[int] = []
    for j, p in enumerate(parts):
        if p == NO_PARTITION:
            waiting.extend(range(j, k, c))
            continue
        if p == CLIENT_PARTITIONER:
            p = _ANY_PARTITION
        part = chunk[j::c] if c > 1 else chunk
        group = groups.get(p)
        if group is None:
            groups[p] = part
            slices[p] = [j]
        else:
            group.extend(part)
            slices[p].append(j)
    return groups, slices, waiting


def _name_not_accepted(
    exc: BaseException, start: int, n: int, refused: list[tuple[int, BaseException]]
) -> None:
    """Mark a signal's exception that ends ``produce_batch`` of ``n`` messages with those not
    accepted (``errors.not_accepted``): the ones refused before it, the ones of the part under
    way from ``start`` the client did not take (all of them when the part did not say), and
    every one after that part."""
    part: tuple[list[int], int] | None = getattr(exc, _PART, None)
    not_taken, end = part if part is not None else ([], start)
    _mark_not_accepted(exc, sorted({i for i, _ in refused}.union(not_taken, range(end, n))))
