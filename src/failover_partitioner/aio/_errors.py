"""aiokafka's exceptions, mapped to the codes of the shared delivery error policy.

Broker errors carry Kafka's own code (``errno``), which the policy table already speaks. The
client-side ones are mapped to the librdkafka local error with the same meaning, so the answer
to "was it written, should the partition be avoided" is the same for both producers:

* the request never left (no connection to the leader, the batch waited too long in the
  client's queue, the client was closing): not persisted;
* the connection broke or the request timed out after it was sent: possibly persisted.

Exceptions that are not Kafka errors at all (a bug, a bad argument that slipped through) end
the message at once: retrying the same call cannot fix them.
"""

from __future__ import annotations

import asyncio

from aiokafka import errors as aiokafka_errors  # type: ignore[import-untyped,unused-ignore]  # no py.typed

from failover_partitioner.errors import ErrorClass, classify

__all__ = ["error_class", "error_code"]

_TRANSPORT = -195  # possibly persisted: the request may have reached the broker
_TIMED_OUT_QUEUE = -166  # never sent: waited too long in the client's queue
_PURGE_QUEUE = -152  # never sent: the client was closing
_PURGE_INFLIGHT = -151  # sent, then abandoned: possibly persisted
_BROKER_NOT_AVAILABLE = 8  # never sent: no connection to the leader
_UNKNOWN_PARTITION = -190  # the client does not know the partition (yet)
_LEADER_NOT_AVAILABLE = 5

# Most specific first: isinstance() checks run in this order.
_CLIENT_ERRORS: tuple[tuple[type[BaseException], int], ...] = (
    (aiokafka_errors.NodeNotReadyError, _BROKER_NOT_AVAILABLE),
    (aiokafka_errors.NoBrokersAvailable, _BROKER_NOT_AVAILABLE),
    (aiokafka_errors.KafkaConnectionError, _TRANSPORT),
    (aiokafka_errors.KafkaProtocolError, _TRANSPORT),
    (aiokafka_errors.KafkaTimeoutError, _TIMED_OUT_QUEUE),
    (aiokafka_errors.ProducerClosed, _PURGE_QUEUE),
    (aiokafka_errors.StaleMetadata, _LEADER_NOT_AVAILABLE),
    (aiokafka_errors.MetadataEmptyBrokerList, _LEADER_NOT_AVAILABLE),
    (aiokafka_errors.RecordTooLargeError, 10),
    (asyncio.CancelledError, _PURGE_INFLIGHT),
    # aiokafka asserts that an explicit partition is in its own metadata.
    (AssertionError, _UNKNOWN_PARTITION),
)

_NOT_A_KAFKA_ERROR = ErrorClass(
    code=-1,
    name="_FAIL",
    retriable=False,
    possibly_persisted=False,
    quarantine=False,
    refresh_metadata=False,
)


def error_code(exc: BaseException) -> int | None:
    """The Kafka (or librdkafka-equivalent) code of ``exc``; None when it is not a Kafka error."""
    if isinstance(exc, aiokafka_errors.BrokerResponseError):
        return int(exc.errno)
    for kind, code in _CLIENT_ERRORS:
        if isinstance(exc, kind):
            return code
    if isinstance(exc, aiokafka_errors.KafkaError):
        return -1  # an aiokafka error without a code: the policy's conservative default
    return None


def error_class(exc: BaseException) -> ErrorClass:
    """What a failed attempt with ``exc`` means for the message and its partition."""
    code = error_code(exc)
    if code is None:
        return _NOT_A_KAFKA_ERROR
    return classify(code, type(exc).__name__)
