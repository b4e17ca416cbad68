"""Exceptions of the package and the policy attached to Kafka delivery errors.

Every exception raised by the package derives from :class:`FailoverError`. What the producer does
with a failed delivery is read from :func:`classify`, one table for every client: broker error
codes are Kafka's own (``Errors.java``); negative codes are librdkafka's local errors, which
confluent-kafka reports with the same numbers. An adapter for another client maps its errors to
these codes before asking.

The table follows librdkafka's own action table (``rdkafka_request.c``) with one exception:
NOT_ENOUGH_REPLICAS (19) is refused before the append; NOT_ENOUGH_REPLICAS_AFTER_APPEND (20),
request timeouts and transport errors may have been written, so producing the message again
elsewhere can duplicate it. librdkafka reads NOT_LEADER_OR_FOLLOWER (6) as "not written", but a
leader that loses the partition while it holds an appended acks=all write answers it with 6 (and
KAFKA_STORAGE_ERROR, 56, when its log directory fails meanwhile), and the new leader may hold a
copy: here both count as possibly written (tests/kafka/test_kafka_min_isr.py shows it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from failover_partitioner._message import UndeliveredMessage

__all__ = [
    "REFUSED_RIGHTS",
    "AuthenticationFailed",
    "BatchRefused",
    "ConfigError",
    "ErrorClass",
    "FailoverError",
    "MetadataUnavailable",
    "NoUsablePartition",
    "ProduceTimeout",
    "ProducerClosed",
    "classify",
    "not_accepted",
    "try_alone",
]


class FailoverError(Exception):
    """Root of every exception this package raises."""


class ConfigError(FailoverError, ValueError):
    """An option or client setting has a value the producer cannot work with."""


class ProducerClosed(FailoverError):
    """``produce`` was called after ``close``."""


class MetadataUnavailable(FailoverError):
    """No metadata could be had for a topic within the time allowed."""


class AuthenticationFailed(MetadataUnavailable):
    """The cluster refused the client's credentials (SASL authentication failed), so no metadata
    and no message can get through until they are fixed. Raised by ``produce`` and ``health``
    for a topic whose metadata could not be had for that reason; ``produce`` did not accept the
    message (the caller still holds it)."""


class NoUsablePartition(FailoverError):
    """The message waited for a usable partition (recorded as its last error while it waits)."""


class ProduceTimeout(FailoverError):
    """``produce`` waited ``timeout_s`` at the in-flight limit and gave up.

    The message was not accepted: it is in :attr:`message`, so the caller still holds it.
    """

    def __init__(self, message: UndeliveredMessage, *, limit: int, timeout_s: float) -> None:
        super().__init__(
            f"produce to {message.topic!r} waited {timeout_s:g} s with {limit} messages in "
            f"flight (max_in_flight={limit}) and gave up; the message was not accepted. Call "
            "poll()/flush() more often, raise max_in_flight or produce_timeout_s, or check why "
            "deliveries are slow (health(topic) shows the partitions' state)"
        )
        self.message = message
        self.limit = limit
        self.timeout_s = timeout_s


class BatchRefused(FailoverError):
    """``produce_batch`` accepted all its messages but some: those are in :attr:`refused`.

    ``refused`` lists ``(index, exception)`` for each message not accepted, in order: its
    index in the list given and why (a ``TypeError`` for a bad value, a
    :class:`ProduceTimeout` at the in-flight limit, which also refuses every message after
    it, ...). Every other message was accepted and ends in exactly one outcome, as
    ``produce``'s do.
    """

    def __init__(self, topic: str, refused: list[tuple[int, BaseException]]) -> None:
        first_index, first = refused[0]
        super().__init__(
            f"produce_batch to {topic!r}: {len(refused)} message(s) not accepted, the first "
            f"(index {first_index}) because {first!r}; the others were accepted. Send the "
            "refused ones again once the cause is fixed (see .refused)"
        )
        self.topic = topic
        self.refused = refused


# What a signal's exception (Ctrl-C) carries out of FailoverProducer.produce_batch.
_NOT_ACCEPTED = "failover_not_accepted"


def not_accepted(interrupt: BaseException) -> list[int] | None:
    """The indices of the messages ``FailoverProducer.produce_batch`` did not accept when
    ``interrupt`` came out of it, in order; None for an exception that did not.

    Ctrl-C (or a signal handler's ``sys.exit()``) goes on out of ``produce_batch`` as it was
    raised, a KeyboardInterrupt (or SystemExit); this reads the indices it carries. Send those
    messages again; every other one was accepted and ends as ``produce``'s do (its callback,
    the dead-letter hook, or ``close()``'s list). When the signal lands between two of the
    producer's own steps rather than in a client call (rare: almost all the time of a batch is
    spent in the client), a message the producer had just taken may be named too, so sending
    the named ones again may make a copy, never a loss.
    """
    indices = getattr(interrupt, _NOT_ACCEPTED, None)
    return None if indices is None else list(indices)


def _mark_not_accepted(interrupt: BaseException, indices: list[int]) -> None:
    setattr(interrupt, _NOT_ACCEPTED, tuple(indices))


# --- delivery error policy --------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorClass:
    """What a delivery error means for the message and for its partition.

    ``retriable``: producing the message again can succeed (else the failure is final now).
    ``possibly_persisted``: the failed attempt may have been written, so another attempt may
    leave a duplicate. ``quarantine``: the partition should be avoided at once, before the
    metadata says anything. ``refresh_metadata``: ask the cluster again soon.
    ``per_record``: a broker answers a whole batch so for one record in it (or the batch's
    total size), so the batch's other records may be fine alone (see :func:`try_alone`).
    ``held``: the leader held the partition's write until the request's timeout (a leader
    waiting for a follower that no longer copies holds every write so): its quarantine lasts
    until its metadata changes (see :mod:`failover_partitioner.quarantine`).
    """

    code: int
    name: str
    retriable: bool
    possibly_persisted: bool
    quarantine: bool
    refresh_metadata: bool
    per_record: bool = False
    held: bool = False

    @property
    def final(self) -> bool:
        """Retrying cannot fix this; the message ends now."""
        return not self.retriable


def _c(
    code: int,
    name: str,
    *,
    retriable: bool,
    persisted: bool,
    quarantine: bool,
    refresh: bool,
    per_record: bool = False,
    held: bool = False,
) -> ErrorClass:
    return ErrorClass(
        code=code,
        name=name,
        retriable=retriable,
        possibly_persisted=persisted,
        quarantine=quarantine,
        refresh_metadata=refresh,
        per_record=per_record,
        held=held,
    )


def _final(code: int, name: str) -> ErrorClass:
    return _c(code, name, retriable=False, persisted=False, quarantine=False, refresh=False)


def _held(code: int, name: str) -> ErrorClass:
    return _c(code, name, retriable=True, persisted=True, quarantine=True, refresh=True, held=True)


def _per_record(code: int, name: str) -> ErrorClass:
    return _c(
        code,
        name,
        retriable=False,
        persisted=False,
        quarantine=False,
        refresh=False,
        per_record=True,
    )


_TABLE: dict[int, ErrorClass] = {
    e.code: e
    for e in (
        # Refused before the append: move the message, no duplicate possible.
        _c(
            19,
            "NOT_ENOUGH_REPLICAS",
            retriable=True,
            persisted=False,
            quarantine=True,
            refresh=True,
        ),
        _c(
            5,
            "LEADER_NOT_AVAILABLE",
            retriable=True,
            persisted=False,
            quarantine=True,
            refresh=True,
        ),
        _c(
            74,
            "FENCED_LEADER_EPOCH",
            retriable=True,
            persisted=False,
            quarantine=True,
            refresh=True,
        ),
        _c(
            75,
            "UNKNOWN_LEADER_EPOCH",
            retriable=True,
            persisted=False,
            quarantine=True,
            refresh=True,
        ),
        _c(
            8,
            "BROKER_NOT_AVAILABLE",
            retriable=True,
            persisted=False,
            quarantine=True,
            refresh=True,
        ),
        _c(
            9,
            "REPLICA_NOT_AVAILABLE",
            retriable=True,
            persisted=False,
            quarantine=True,
            refresh=True,
        ),
        # "Unknown topic" is final only once metadata confirms it; the producer checks that.
        _c(
            3,
            "UNKNOWN_TOPIC_OR_PART",
            retriable=True,
            persisted=False,
            quarantine=True,
            refresh=True,
        ),
        _c(-188, "_UNKNOWN_TOPIC", retriable=True, persisted=False, quarantine=True, refresh=True),
        _c(
            -190,
            "_UNKNOWN_PARTITION",
            retriable=True,
            persisted=False,
            quarantine=True,
            refresh=True,
        ),
        # Never sent: librdkafka dropped it from its queue (close/purge); not persisted.
        _c(-152, "_PURGE_QUEUE", retriable=True, persisted=False, quarantine=False, refresh=False),
        _c(
            -166, "_TIMED_OUT_QUEUE", retriable=True, persisted=False, quarantine=True, refresh=True
        ),
        # Written, or perhaps written: a new attempt elsewhere may duplicate it.
        # NOT_LEADER_OR_FOLLOWER and KAFKA_STORAGE_ERROR also answer a write the leader had
        # appended and was holding for acks=all when it lost the partition (Kafka's
        # DelayedProduce); a follower may have copied it, and the new leader keeps it.
        _c(
            6,
            "NOT_LEADER_OR_FOLLOWER",
            retriable=True,
            persisted=True,
            quarantine=True,
            refresh=True,
        ),
        _c(
            56, "KAFKA_STORAGE_ERROR", retriable=True, persisted=True, quarantine=True, refresh=True
        ),
        _c(
            20,
            "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
            retriable=True,
            persisted=True,
            quarantine=True,
            refresh=True,
        ),
        # The leader held this partition's write until the request's timeout (waiting for a
        # follower): it may hold every write so until its ISR changes. The client's own
        # timeouts below say less: a whole request (or connection) went unanswered, perhaps
        # queued behind a held one, so they are not read as the partition's.
        _held(7, "REQUEST_TIMED_OUT"),
        _c(13, "NETWORK_EXCEPTION", retriable=True, persisted=True, quarantine=True, refresh=True),
        _c(-192, "_MSG_TIMED_OUT", retriable=True, persisted=True, quarantine=True, refresh=True),
        _c(-185, "_TIMED_OUT", retriable=True, persisted=True, quarantine=True, refresh=True),
        _c(-195, "_TRANSPORT", retriable=True, persisted=True, quarantine=True, refresh=True),
        _c(
            -187, "_ALL_BROKERS_DOWN", retriable=True, persisted=True, quarantine=True, refresh=True
        ),
        _c(
            -151, "_PURGE_INFLIGHT", retriable=True, persisted=True, quarantine=False, refresh=False
        ),
        # Given to a whole batch for one record's sake or the batch's size: each record is
        # tried alone once (try_alone), and ends with the error only if refused alone too.
        _per_record(10, "MSG_SIZE_TOO_LARGE"),
        _per_record(18, "RECORD_LIST_TOO_LARGE"),
        _per_record(87, "INVALID_RECORD"),
        _per_record(2, "CORRUPT_MESSAGE"),
        # Retrying cannot fix these: end the message now, never loop.
        _final(4, "INVALID_FETCH_SIZE"),
        _final(17, "INVALID_TOPIC_EXCEPTION"),
        _final(21, "INVALID_REQUIRED_ACKS"),
        _final(32, "INVALID_TIMESTAMP"),
        _final(35, "UNSUPPORTED_VERSION"),
        _final(43, "UNSUPPORTED_FOR_MESSAGE_FORMAT"),
        _final(44, "POLICY_VIOLATION"),
        _final(76, "UNSUPPORTED_COMPRESSION_TYPE"),
        _final(29, "TOPIC_AUTHORIZATION_FAILED"),
        _final(31, "CLUSTER_AUTHORIZATION_FAILED"),
        _final(53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"),
        _final(58, "SASL_AUTHENTICATION_FAILED"),
        _final(-169, "_AUTHENTICATION"),
        _final(-181, "_SSL"),
        _final(-186, "_INVALID_ARG"),
        _final(-198, "_BAD_COMPRESSION"),
        _final(-161, "_VALUE_SERIALIZATION"),
        _final(-162, "_KEY_SERIALIZATION"),
        _final(-150, "_FATAL"),
        _final(-144, "_FENCED"),
        _final(90, "PRODUCER_FENCED"),
    )
}


def classify(code: int, name: str | None = None) -> ErrorClass:
    """The policy for delivery error ``code``.

    Codes not in the table are treated as retriable, possibly persisted and a reason to
    quarantine: the conservative reading (the message is retried within its retry policy, and
    a duplicate is counted rather than assumed away).
    """
    known = _TABLE.get(code)
    if known is not None:
        return known
    return _c(
        code,
        name or f"ERROR_{code}",
        retriable=True,
        persisted=True,
        quarantine=True,
        refresh=True,
    )


def try_alone(ec: ErrorClass, *, batch_size: int | None, alone: bool) -> bool:
    """Whether a record whose batch was refused with ``ec`` is tried again alone, the rule both
    producers follow: only for a per-record error, only once, and not when the batch held that
    record only. ``batch_size``: the refused batch's size, None when the client does not say
    (librdkafka's reports do not: the record is then tried alone once); ``alone``: the record
    was sent alone already."""
    if not ec.per_record or alone:
        return False
    return batch_size is None or batch_size > 1


def error_code(err: Any) -> int:
    """The numeric code of a client error object (``KafkaError.code()`` or ``.errno``)."""
    code = getattr(err, "code", None)
    if callable(code):
        return int(code())
    errno = getattr(err, "errno", None)
    if isinstance(errno, int):
        return errno
    return -1


# The cluster refuses this user (not this message): the client may already know it and refuse
# at produce() time. The message is then not a caller's mistake but a final failure.
REFUSED_RIGHTS: frozenset[int] = frozenset({29, 31})  # TOPIC_/CLUSTER_AUTHORIZATION_FAILED
