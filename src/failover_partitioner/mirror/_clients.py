"""The clients the mirror drives: what it needs of each (protocols), and how they are built.

The mirror takes factories, so tests and benchmarks hand it fakes or wrapped clients; the
defaults are confluent-kafka's consumer, producer and admin client and the failover producer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from confluent_kafka import (
    TIMESTAMP_NOT_AVAILABLE,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from prometheus_client.registry import CollectorRegistry

from failover_partitioner._message import DeliveryReport
from failover_partitioner.confluent._shared import kafka_error_of
from failover_partitioner.errors import ConfigError
from failover_partitioner.health import TopicView

from ._errors import MirrorConfigError

__all__ = [
    "CHECK_ADDRESS",
    "UNANSWERED",
    "AdminFactory",
    "Clients",
    "ConsumerFactory",
    "ConsumerLike",
    "DeliveryCallback",
    "LaneFactory",
    "LaneProducer",
    "PlacingProducer",
    "ProducerFactory",
    "ProducerLike",
    "build",
    "default_admin",
    "default_consumer",
    "default_lane",
    "default_producer",
    "describe",
    "names",
    "unanswered",
]

_T = TypeVar("_T")

DeliveryCallback = Callable[[Any, DeliveryReport], None]
RebalanceCallback = Callable[[Any, list[TopicPartition]], None]


class ConsumerLike(Protocol):
    """The part of ``confluent_kafka.Consumer`` the mirror uses."""

    def subscribe(
        self,
        topics: list[str],
        on_assign: RebalanceCallback | None = ...,
        on_revoke: RebalanceCallback | None = ...,
        on_lost: RebalanceCallback | None = ...,
    ) -> None: ...
    def unsubscribe(self) -> None: ...
    def consume(self, num_messages: int = ..., timeout: float = ...) -> list[Message]: ...
    def assignment(self) -> list[TopicPartition]: ...
    def pause(self, partitions: list[TopicPartition]) -> None: ...
    def resume(self, partitions: list[TopicPartition]) -> None: ...
    def seek(self, partition: TopicPartition) -> None: ...
    def commit(
        self, *, offsets: list[TopicPartition], asynchronous: Literal[False]
    ) -> list[TopicPartition]: ...
    def committed(
        self, partitions: list[TopicPartition], timeout: float = ...
    ) -> list[TopicPartition]: ...
    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float = ..., cached: bool = ...
    ) -> tuple[int, int]: ...
    def list_topics(self, topic: str | None = ..., timeout: float = ...) -> Any: ...
    def close(self) -> None: ...


class ProducerLike(Protocol):
    """The part of :class:`~failover_partitioner.FailoverProducer` the mirror uses.

    ``on_delivery(err, report)`` fires exactly once per message with its final outcome;
    ``produce`` may raise ``BufferError`` or :class:`~failover_partitioner.ProduceTimeout`
    when it has no room, without accepting the message.
    """

    def produce(
        self,
        topic: str,
        value: bytes | str | None = ...,
        key: bytes | str | None = ...,
        headers: Any = ...,
        on_delivery: DeliveryCallback | None = ...,
        timestamp: int | None = ...,
    ) -> None: ...
    def poll(self, timeout: float = ...) -> int: ...
    def close(self, timeout: float | None = ...) -> Sequence[object]: ...


@runtime_checkable
class LaneProducer(ProducerLike, Protocol):
    """What the fast lane needs of the producer besides (see ``_lane.py``): the failover
    producer's view of a topic's health, and a way to tell it of a failure or a client error
    seen elsewhere."""

    def whole(self, topic: str) -> bool: ...
    def health(self, topic: str, timeout: float | None = ...) -> object: ...
    def report_failure(self, topic: str, partition: int, err: KafkaError) -> None: ...
    def report_client_error(self, err: KafkaError) -> bool: ...
    def flush(self, timeout: float | None = ...) -> int: ...


@runtime_checkable
class PlacingProducer(ProducerLike, Protocol):
    """What ``--partitioning preserve`` needs of the producer: whether a partition is usable
    now, and a preferred partition for a message's first attempt (the failover producer's)."""

    def usable(self, topic: str, partition: int) -> bool: ...
    def health(self, topic: str, timeout: float | None = ...) -> TopicView: ...
    def produce(
        self,
        topic: str,
        value: bytes | str | None = ...,
        key: bytes | str | None = ...,
        headers: Any = ...,
        on_delivery: DeliveryCallback | None = ...,
        timestamp: int | None = ...,
        partition: int | None = ...,
    ) -> None: ...


ConsumerFactory = Callable[[dict[str, Any]], ConsumerLike]
ProducerFactory = Callable[[dict[str, str]], ProducerLike]
LaneFactory = Callable[[dict[str, Any]], Any]
AdminFactory = Callable[[dict[str, Any]], Any]


@dataclass(slots=True)
class Clients:
    """The consumer and the producer of one run, built by ``Mirror.run`` (None before), shared
    by the parts of the mirror; ``closing``: the consumer is being closed, ask it nothing."""

    consumer: ConsumerLike | None = None
    producer: ProducerLike | None = None
    closing: bool = False

    def lane_producer(self) -> LaneProducer:
        """The producer, with the failover producer's view of topic health (the fast lane and
        ``Targets.whole`` are used only with one: checked where the lane starts)."""
        producer = self.producer
        assert producer is not None
        return producer  # type: ignore[return-value]  # see above


def build(what: str, factory: Callable[[dict[str, Any]], _T], conf: Mapping[str, Any]) -> _T:
    """Build a client; a setting it rejects is a configuration error, named as such."""
    try:
        return factory(dict(conf))
    except KafkaException as exc:
        err = kafka_error_of(exc)
        if err is not None and err.code() == KafkaError._INVALID_ARG:
            raise MirrorConfigError(f"{what} config: {err.str()}") from exc
        raise
    except ConfigError as exc:
        raise MirrorConfigError(f"{what} config: {exc}") from exc


def describe(err: KafkaError) -> str:
    return f"{err.name()} ({err.str()})"


# What a request fails with when no broker of the cluster answered it: none listens at the
# address (a mistyped host or port), none runs, or none can be reached from here.
UNANSWERED = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._RESOLVE,
    }
)

CHECK_ADDRESS = (
    "check the address (host and port) and that the brokers run and can be reached from here"
)


def unanswered(cluster: str, servers: str, flag: str, waited_s: float, exc: BaseException) -> str:
    """The start of the error of a ``cluster`` ("source" or "target") whose bootstrap
    ``servers`` (given by ``flag``) answered no request in ``waited_s``: which cluster, which
    address, where it was given, and what librdkafka said."""
    err = kafka_error_of(exc)
    said = describe(err) if err is not None else str(exc)
    return (
        f"the {cluster} cluster at {servers} ({flag}) did not answer in {waited_s:.0f} s ({said})"
    )


def names(partitions: Sequence[TopicPartition]) -> str:
    if not partitions:
        return "no partitions"
    return ", ".join(f"{tp.topic}[{tp.partition}]" for tp in partitions)


def default_consumer(conf: dict[str, Any]) -> ConsumerLike:
    from confluent_kafka import Consumer

    consumer: ConsumerLike = Consumer(conf)
    return consumer


def default_admin(conf: dict[str, Any]) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient(conf)


def default_lane(conf: dict[str, Any]) -> Any:
    from confluent_kafka import Producer

    return Producer(conf)


def default_producer(
    conf: dict[str, str], *, max_in_flight: int, registry: CollectorRegistry | None
) -> ProducerLike:
    from failover_partitioner.producer import FailoverProducer

    # The mirror's own bound keeps the producer below max_in_flight; the slack covers
    # dead-letter copies and messages of revoked partitions still out.
    producer: ProducerLike = FailoverProducer(
        conf, max_in_flight=max_in_flight + 1024, metrics_registry=registry
    )
    return producer


def produce_consumed(
    producer: ProducerLike,
    target: str,
    msg: Message,
    headers: Any,
    callback: object,  # a DeliveryCallback, or a Span (which is one)
    ts_type: int,
    ts: int,
    *partition: int,
) -> None:
    """Produce the consumed ``msg`` to ``target`` with its key, value and CreateTime (``ts``,
    when ``ts_type`` has one) and ``headers``; ``partition``: a PlacingProducer's preference."""
    producer.produce(
        target,
        msg.value(),
        msg.key(),
        headers,
        callback,  # type: ignore[arg-type]  # see the parameter
        create_time(ts_type, ts),
        *partition,
    )


def create_time(ts_type: int, ts: int) -> int | None:
    """The timestamp a consumed record is produced with: its own, or None (the time of
    sending) when it has none, or 0, which librdkafka cannot carry (it writes the time of
    sending for it; the failover producer refuses it rather than change it unsaid)."""
    return ts if ts_type != TIMESTAMP_NOT_AVAILABLE and ts > 0 else None
