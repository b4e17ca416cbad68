"""Building the executor's producer, and checking its settings on the driver beforehand.

The driver must reject bad settings before any task runs, yet must not build a producer: that
would connect to the cluster and start threads on a machine that writes nothing. So the
settings go through the same check ``FailoverProducer.__init__`` uses (every failover option
the producer declares, none listed here), and the client config through a confluent-kafka
client that has no broker to reach.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import confluent_kafka

from failover_partitioner._config import FailoverConfigWarning, client_settings
from failover_partitioner._message import DeliveryReport, UndeliveredMessage
from failover_partitioner._options import check_option_names, producer_options
from failover_partitioner.confluent import DeadLetterHook, FailoverProducer, ProducerStatistics
from failover_partitioner.errors import ConfigError

# Each Python worker would start its own exporter on the same port: the second one fails.
UNSUPPORTED_OPTIONS = {
    "metrics_port": "every Python worker of an executor would bind the same port",
    "metrics_addr": "the Spark writer does not start metrics exporters",
}


class Producer(Protocol):
    """What a task needs of a producer (``FailoverProducer`` in production)."""

    def produce(
        self,
        topic: str,
        value: bytes | str | None = None,
        key: bytes | str | None = None,
        headers: Any = None,
        on_delivery: Callable[[Any, DeliveryReport], None] | None = None,
        timestamp: int | None = None,
    ) -> None: ...

    def poll(self, timeout: float = 0.0) -> int: ...

    def flush(self, timeout: float | None = None) -> int: ...

    def close(self, timeout: float | None = 30.0) -> object: ...

    def statistics(self) -> ProducerStatistics: ...


class FailureLog:
    """The first final error of the current task, for its error message.

    Installed as the producer's ``dead_letter`` hook (rows are produced without a delivery
    callback); the user's own hook, if any, is still called for every failed row.
    """

    __slots__ = ("first_error", "user_hook")

    def __init__(self, user_hook: DeadLetterHook | None) -> None:
        self.user_hook = user_hook
        self.first_error: str | None = None

    def start_task(self, user_hook: DeadLetterHook | None) -> None:
        """Begin a task that calls ``user_hook``: the copy PySpark deserialised for this task.

        The producer outlives the task that built it, but a hook must not: an accumulator it
        adds to is registered with the task that unpickled it, and what a later task adds to
        an earlier task's copy never reaches the driver.
        """
        self.user_hook = user_hook
        self.first_error = None

    def refused(self, message: UndeliveredMessage, err: Any, why: str) -> None:
        """A row the client refused before taking it (``produce`` raised): it fails finally
        as a row the brokers refused does, and ``why`` is the task's first error if none
        came before."""
        if self.first_error is None:
            self.first_error = why
        self(message, err)

    def __call__(self, message: UndeliveredMessage, err: Any) -> None:
        if self.first_error is None:
            self.first_error = str(err)
        if self.user_hook is not None:
            self.user_hook(message, err)


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutorProducer:
    """What a Python worker caches per configuration: the producer and its failure log."""

    producer: FailoverProducer
    failures: FailureLog

    def close(self, timeout_s: float = 30.0) -> list[UndeliveredMessage]:
        """Close the producer after up to ``timeout_s`` to flush; what it still held, back."""
        return self.producer.close(timeout_s)


def open_producer(config: Mapping[str, Any], options: Mapping[str, Any]) -> ExecutorProducer:
    """The executor's producer (the settings were checked on the driver)."""
    failures = FailureLog(options.get("dead_letter"))
    with warnings.catch_warnings():
        # Already shown once on the driver; not again for every worker.
        warnings.simplefilter("ignore", FailoverConfigWarning)
        producer = FailoverProducer(config, **{**options, "dead_letter": failures})
    return ExecutorProducer(producer=producer, failures=failures)


def validate(config: Mapping[str, Any], options: Mapping[str, Any]) -> None:
    """Raise :class:`ConfigError` for any setting ``FailoverProducer`` would refuse.

    Client-setting warnings (e.g. a delivery timeout that delays rerouting) are issued here,
    on the driver, where the user sees them.
    """
    for name, why in UNSUPPORTED_OPTIONS.items():
        if name in options:
            raise ConfigError(
                f"failover option {name!r} is not supported by the Spark writer: {why}."
            )
    check_option_names(options)
    settings = client_settings(config)
    for text in settings.warnings:
        warnings.warn(text, FailoverConfigWarning, stacklevel=4)
    _check_client_config(settings.client_conf)
    # The options not given take their defaults there, as in the producer.
    producer_options(dead_letter_args="message, err", **options)


def _check_client_config(client_conf: Mapping[str, Any]) -> None:
    """Let librdkafka parse the settings, in a client with no broker to connect to."""
    probe = {k: v for k, v in client_conf.items() if k != "bootstrap.servers"}
    probe["log_level"] = 0  # silences the "no bootstrap.servers" notice of this probe
    try:
        client = confluent_kafka.Producer(probe)
    except confluent_kafka.KafkaException as exc:
        raise ConfigError(f"producer_config is not valid for confluent-kafka: {exc}") from None
    client.close()
