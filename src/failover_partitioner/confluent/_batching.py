"""``produce_batch`` of :class:`FailoverProducer`: value-only keyless messages go to the client's
``produce_batch``, one call per partition, dealt by the chooser; every other message takes
``produce``'s path."""

from __future__ import annotations

import collections
import itertools
import operator
from collections.abc import Callable, Iterable
from typing import Any

from failover_partitioner._message import DeliveryGroup
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
from failover_partitioner.errors import (
    BatchRefused,
    ProducerClosed,
    ProduceTimeout,
    _mark_not_accepted,
)

_INDEX = operator.itemgetter(0)


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
        Keyless messages given as ``{"value": v}`` alone, ``v`` bytes or None, go to the
        client in one call per partition (confluent-kafka's ``produce_batch``), with or
        without a callback: round robin deals them out over the usable partitions, sticky
        gives a batch to one. Every other message (a str value too: its report gives it back
        as given) takes ``produce``'s own path, in order.

        Raises :class:`~failover_partitioner.errors.BatchRefused` naming the messages that
        were not accepted, in index order (a bad value; :class:`ProduceTimeout` at the
        in-flight limit, or :class:`ProducerClosed` once ``close()`` began in another thread,
        which refuse the rest too); all the others were accepted. A callback that raises
        for a message's own outcome reached inside this call (a topic the cluster lacks)
        does not refuse it: the exception is kept for the next ``poll()``, ``flush()`` or
        ``close()``. Ctrl-C goes on as raised;
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
                    if self._closing:  # close() began in another thread: the rest waits
                        closed = self._closing_error("produce_batch()")
                        refused.extend((i, closed) for i in range(start, len(messages)))
                        break
                    chunk = messages[start : start + step]
                    end = start + len(chunk)
                    if not _value_only(chunk):
                        if not self._produce_each(
                            topic, messages, start, end, on_delivery, refused
                        ):
                            break
                    elif not self._produce_chunk(topic, chooser, chunk, start, refused, cb):
                        # Timed out at the in-flight limit, or closed: the rest is refused
                        # with it.
                        exc = refused[-1][1]
                        refused.extend((i, exc) for i in range(end, len(messages)))
                        break
        except _SIGNALLED as exc:
            _name_not_accepted(exc, start, len(messages), refused)
            raise
        if refused:
            refused.sort(key=_INDEX)  # the client's refusals come per partition
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
        """``produce`` each of ``messages[start:end]``; False once one timed out, or met
        ``close()`` (the rest are then refused too)."""
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
            except (ProduceTimeout, ProducerClosed) as exc:
                refused.extend((j, exc) for j in range(i, len(messages)))
                return False
            except Exception as exc:
                refused.append((i, _saying_whose(exc, m)))
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
        handed: list[int | None],
        left: list[int],
    ) -> None:
        """One client ``batch`` call per partition's group; the chunk positions of the messages
        the client did not take are added to ``left`` (``places(p)``: those of partition
        ``p``'s group, in its order), and the client's marks go. ``handed[i]`` says where group
        ``i`` is (see ``_group_not_taken``; for ``_interrupted_handing``); each is a store
        made before Python looks for signals again (it does so as calls return), so a Ctrl-C
        finds them true to what the client holds."""
        for i, (p, group) in enumerate(groups.items()):
            handed[i] = None
            try:
                taken = batch(topic, group, partition=p, on_delivery=report)
            except Exception:
                # Any exception: what the client took stands (counted in with the chunk); the
                # rest takes the single path, which accepts or refuses each.
                handed[i] = _RAISED
            else:
                handed[i] = taken
                if taken == len(group):
                    continue
            left.extend(_group_not_taken(group, places(p), handed[i]))
            handed[i] = _NOTED
            _drain(map(_UNMARK, group), maxlen=0)

    def _interrupted_handing(
        self,
        groups: dict[int, list[dict[str, Any]]],
        places: Callable[[int], Iterable[int]],
        handed: list[int | None],
        left: list[int],
        k: int,
    ) -> list[int]:
        """A signal's exception came as a client ``batch`` call returned (see ``_SIGNALLED``),
        or while ``_hand_groups`` noted what it took: what the client took by then is counted
        in, the client's marks go; the chunk positions (of ``k``) of the rest, not accepted,
        in order (``left``: those noted so far, perhaps a group's twice)."""
        not_taken = set(left)
        for i, (p, group) in enumerate(groups.items()):
            not_taken.update(_group_not_taken(group, places(p), handed[i]))
            _drain(map(_UNMARK, group), maxlen=0)
        self._count_batched(k - len(not_taken))
        return sorted(not_taken)

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
        call per partition; False when it could not be counted in (timed out, or closed: the
        rest is then refused). A signal's exception goes on marked with the chunk's messages
        not accepted."""
        k = len(chunk)
        refused_before = len(refused)
        if not self._buffer.has_room(k):
            try:
                # Waits until the chunk fits under max_in_flight.
                self._wait_for_room(topic, chunk[0]["value"], None, None, None, need=k)
            except (ProduceTimeout, ProducerClosed) as exc:
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
        # listens, a group's own (see _GroupReport), else one that makes each message's record
        # only when its report comes.
        if cb is None:
            report, batch = self._report_cb, self._produce_batch_raw
        else:
            report = self._group_report(cb) if isinstance(cb, DeliveryGroup) else self._reporter(cb)
            batch = self._produce_batch_reported
        handed: list[int | None] = [_NOT_HANDED] * len(groups)
        try:
            self._hand_groups(topic, groups, places, batch, report, handed, left)
        except _SIGNALLED as exc:
            not_taken = self._interrupted_handing(groups, places, handed, left, k)
            setattr(exc, _PART, ([start + x for x in not_taken], start + k))
            raise
        # Not taken by the client (queue full, partition unknown to it yet, too large) or with
        # no usable partition: each takes the single path, counted in with the chunk, and
        # waits or raises there; once close() began, none (this one and the rest refused).
        taken = k - len(left)  # by the client, in the calls per partition
        for j, x in enumerate(left):
            try:
                if self._closing:
                    self._refuse_if_closing("produce_batch()")
                self._produce_with_record(topic, chunk[x]["value"], None, None, cb, None)
            except ProducerClosed as exc:
                refused.extend((start + y, exc) for y in left[j:])
                self._count_batched(k - (len(refused) - refused_before))
                return False
            except Exception as exc:
                refused.append((start + x, exc))
            except _SIGNALLED as exc:
                # This one was counted in if the client took it (see _taken_when_interrupted);
                # those before it that were not refused are accepted; the rest are not.
                self._count_batched(taken + j - (len(refused) - refused_before))
                rest = [start + y for y in left[j + 1 :]]
                setattr(
                    exc, _PART, (rest if hasattr(exc, _TAKEN) else [start + x, *rest], start + k)
                )
                raise
        self._count_batched(k - (len(refused) - refused_before))
        return True


# Where a group of a chunk is in _hand_groups: not handed yet; handed, its call under way or
# returned without its count noted (None); the call raised; its count noted (how many the
# client took, in order); the positions it did not take noted in the chunk's ``left``.
_NOT_HANDED = -1
_RAISED = -2
_NOTED = -3
_UNMARK = operator.methodcaller("pop", "_error", None)
_drain = collections.deque  # deque(iterator, maxlen=0) consumes it in C


def _group_not_taken(
    group: list[dict[str, Any]], places: Iterable[int], handed: int | None
) -> list[int]:
    """The chunk positions (``places``: those of ``group``, in its order) of the messages of
    ``group`` the client did not take, where ``handed`` says the group is (see
    ``_hand_groups``). The client marks each message it refused ('_error', as it queues the
    others; nothing when it raised before queuing any). A dict held at several positions
    carries the mark of any one of them, so that more may be marked than were refused: then
    of such a dict's positions the first were taken (the client's queue fills in order), and
    without a count (``None``: a signal came as the call returned) all are named, which leans
    to resending (a copy, never a loss)."""
    if handed == _NOTED:
        return []
    positions = list(places)
    if handed == _NOT_HANDED:
        return positions
    marked = [(id(m), x) for m, x in zip(group, positions, strict=True) if "_error" in m]
    if handed == _RAISED and not marked:
        # Raised before it queued anything (the quiet client still busy, a client closed
        # under it); one that marked some had queued the others.
        return positions
    refused = len(marked) if handed is None or handed < 0 else len(group) - handed
    if len(marked) <= refused:
        return [x for _, x in marked]
    held = collections.Counter(key for key, _ in marked)
    alone = [x for key, x in marked if held[key] == 1]
    shared = [x for key, x in marked if held[key] > 1]
    more = min(max(refused - len(alone), 0), len(shared))
    return sorted(alone + shared[len(shared) - more :])


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


def _saying_whose(exc: Exception, m: Any) -> Exception:
    """``exc``; for a str the client could not encode as UTF-8 (a lone surrogate), the same
    error with a reason that says whose str it is (the message's value, key)."""
    if not isinstance(exc, UnicodeEncodeError) or type(m) is not dict:
        return exc
    text = exc.object
    whose = "value" if m.get("value") is text else "key" if m.get("key") is text else "header"
    named = UnicodeEncodeError(
        exc.encoding,
        text,
        exc.start,
        exc.end,
        f"{exc.reason}: the message's {whose} is a str that is not UTF-8 text",
    )
    named.__cause__ = exc
    return named


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
