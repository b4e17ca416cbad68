"""The state of a :class:`FailoverProducer` and the switch of its healthy path."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

import confluent_kafka

from failover_partitioner._message import UndeliveredMessage
from failover_partitioner.choose import KeyedMemo, PartitionChooser
from failover_partitioner.confluent._shared import _CLIENT_PLACES, _OFF, DeadLetterHook, _Record
from failover_partitioner.core import FailoverCore
from failover_partitioner.errors import ProducerClosed
from failover_partitioner.metadata import MetadataRefresher
from failover_partitioner.metadata.confluent import ConfluentMetadataSource
from failover_partitioner.metrics import ProducerMetrics
from retry_buffer import Entry, RetryBuffer

# A degraded topic's keyed choice goes through a memo of its answers (KeyedMemo) on the
# healthy path until the topic shows more distinct keys than this (about 1 MB of table).
_MEMO_KEYS = 10_000


class CallDepth(threading.local):
    """How deep this thread is in the producer's calls into its clients (``depth``, 0 outside
    them): above 0, a callback runs, and poll/flush must not be called again."""

    depth = 0


class ProducerState:
    """What a :class:`FailoverProducer` holds, set up in its ``__init__`` and shared by its parts.

    The producer is built in layers, each a base class of the next and each calling only
    those below it: this state; :class:`Clients` (the confluent-kafka clients);
    :class:`Delivering` (what a report or a metadata answer does); :class:`Producing`
    (``produce`` and the paths of one message); :class:`Batching` (``produce_batch``);
    :class:`FailoverProducer` (setup, ``poll``/``flush``/``close``, views). One object keeps
    the healthy path to attribute reads on ``self``.
    """

    # Settings (FailoverProducer._setup_accounting).
    _name: str
    _limit: int
    _produce_timeout_s: float
    _metadata_timeout_s: float
    _default_cb: Callable[[Any, Any], None] | None
    _only_errors: bool
    _message_id_header: str | None
    _id_prefix: bytes
    _ids: itertools.count[int]
    _dead_letter: DeadLetterHook | None
    _count_bytes: bool
    # Accounting: messages accepted (counted in by produce() once held, and by produce_batch's
    # chunks), final failures, messages handed back at close; the retry buffer, which counts
    # what is in flight and holds the failed; the record classes bound to them. Deliveries
    # are what remains (statistics()): no report needs to count.
    _c_in: itertools.count[int]
    _count_in: Callable[[], int]
    _batched: int
    _delivered_seen: int
    _count_lock: threading.Lock
    _final_failures: int
    _returned: int
    _buffer: RetryBuffer[_Record]
    _record_cls: type[_Record]
    # The client's callback for the last function or method given as a callback (_reporter).
    _reporting: tuple[object, Callable[[Any, Any], None]]
    # The same for messages with headers or a timestamp (_reporter(keeping=True)).
    _reporting_kept: tuple[object, Callable[..., None]]
    # The clients (FailoverProducer._make_client) and the calls into them.
    _client: confluent_kafka.Producer
    _client_conf: dict[str, Any]
    _solo_client: Any
    _quiet_client: Any
    # Every client that exists, the main one first (the quiet one, then the solo one, after it).
    _polled: tuple[Any, ...]
    _quiet: Any
    _queue_cap: int
    _auth_error: str | None
    _refusals: dict[str, tuple[float, Any]]
    _user_error_cb: Any
    _report_cb: Callable[[Any, Any], None]
    _report_kept: Callable[..., None]
    _produce_raw: Any
    _produce_batch_raw: Any
    _produce_reported: Any
    _produce_batch_reported: Any
    _local: CallDepth
    # The paths (FailoverProducer._setup_paths): see its comments.
    _batch_step: int
    _plain: bool
    _simple: bool
    _bare: dict[str, PartitionChooser]
    _bare_ok: bool
    _lanes: dict[str, Callable[[], int] | None]
    _whole: set[str]
    _keyed: dict[str, Callable[[bytes], int]]
    _memos: dict[str, tuple[Callable[[bytes], int], Callable[[bytes], int]]]
    _whole_lock: threading.Lock
    _client_keyed: bool
    _core: FailoverCore[Entry[_Record]]
    _choosers: dict[str, PartitionChooser]
    _topics_lock: threading.Lock
    _watched: set[str]
    _closed: bool
    _closing: bool  # close() has begun: produce() and produce_batch() refuse (ProducerClosed)
    _unsure: int
    _undelivered: list[UndeliveredMessage] | None
    _attention: bool
    _attention_at: float
    # A callback's exception met while produce() made way (Routing._make_way), for the next
    # poll(), flush() or close() to raise.
    _kept_raised: Exception | None
    # The services (FailoverProducer._start_services).
    _source: ConfluentMetadataSource
    _meta: MetadataRefresher
    _metrics: ProducerMetrics
    _opened: bool

    def _leave_whole(self, topic: str | None = None) -> None:
        """Something waits, or a view changed: every message takes the failover path until
        ``_service`` finds nothing waiting (``_reopen_whole``). ``topic``: one just seen,
        given its lane too (off), so that looking it up raises nothing."""
        with self._whole_lock:
            self._attention = True
            lanes = self._lanes
            for known in lanes:
                lanes[known] = _OFF  # (keys kept: produce() reads them without a lock)
            if topic is not None:
                lanes[topic] = _OFF
            self._keyed.clear()
            self._whole.clear()

    def _begin_closing(self) -> None:
        """close() begins: from now on ``produce()`` and ``produce_batch()`` in any thread
        refuse their message (ProducerClosed: not accepted), and the healthy path stays shut.
        A message another thread had accepted while close() flushed and purged was neither
        flushed, nor handed back, nor reported."""
        with self._whole_lock:
            self._closing = True
        self._leave_whole()

    def _refuse_if_closing(self, call: str) -> None:
        if self._closing:
            raise self._closing_error(call)

    @staticmethod
    def _closing_error(call: str) -> ProducerClosed:
        return ProducerClosed(f"{call} after close() began: the message was not accepted")

    def _reopen_whole(self) -> None:
        """Nothing waits: the topics take the healthy path again (a topic not whole, for its
        keyless messages)."""
        with self._whole_lock:
            if self._attention or self._closing or not self._bare_ok:
                return
            if self._quiet is not None and self._buffer.entries:
                # Retries still under way (on the main client): the quiet client's queue bound
                # keeps max_in_flight only when nothing else is held. Look again shortly.
                self._attention = True
                self._attention_at = time.monotonic() + 0.005
                return
            rotations, whole, keyed = self._core.healthy_path(self._buffer.failed_depth)
            for gone in self._memos.keys() - keyed.keys():
                del self._memos[gone]
            for topic, choice in keyed.items():
                self._keyed[topic] = self._keyed_path(topic, choice)
            if self._client_keyed:
                self._whole.update(whole)
            for topic, rotation in rotations.items():
                if rotation is not None:
                    self._lanes[topic] = rotation.__next__
                elif topic in self._whole and self._default_cb is None:
                    self._lanes[topic] = None  # the client places all, nobody hears of them
                else:
                    self._lanes[topic] = _CLIENT_PLACES

    def _keyed_path(self, topic: str, choice: Callable[[bytes], int]) -> Callable[[bytes], int]:
        """What ``produce()`` calls for ``topic``'s keyed messages on the healthy path:
        ``choice`` (the chooser's keyed choice for its view) through a :class:`KeyedMemo`,
        until the topic shows more keys than ``_MEMO_KEYS``, then ``choice`` itself
        (``_memo_full``). Kept per choice (``_memos``): a topic whose choice did not change
        keeps its memo (or, past the cap, the choice alone). Under ``_whole_lock``."""
        kept = self._memos.get(topic)
        if kept is not None and kept[0] is choice:
            return kept[1]
        memo = KeyedMemo(choice, _MEMO_KEYS, lambda: self._memo_full(topic, choice))
        path = memo.__getitem__
        self._memos[topic] = (choice, path)
        return path

    def _memo_full(self, topic: str, choice: Callable[[bytes], int]) -> None:
        """``topic``'s memo of ``choice`` has more keys than it keeps: ``choice`` itself from
        now on (if it is still the topic's choice, and the path still open for it)."""
        with self._whole_lock:
            kept = self._memos.get(topic)
            if kept is None or kept[0] is not choice:
                return
            self._memos[topic] = (choice, choice)
            if self._keyed.get(topic) is kept[1]:
                self._keyed[topic] = choice
