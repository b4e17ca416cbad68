"""The failover options both producers take, declared once: their names and types, their
defaults, and their check.

:class:`FailoverOptions` is what an IDE or mypy checks ``FailoverProducer(conf, **options)``
against; :data:`OPTION_DEFAULTS` is the one place a default is written; :func:`producer_options`
checks the values given, over those defaults, and builds what the producers use of them.
``AsyncFailoverProducer`` tells its failover options from aiokafka's keywords by
:data:`OPTION_NAMES`, and the Spark writer checks a job's options on the driver with the same
function. docs/configuration.md describes each option (a test holds its table to these defaults).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Final, TypedDict, cast

from prometheus_client import CollectorRegistry

from failover_partitioner._config import check_count, check_positive_number
from failover_partitioner._message import UndeliveredMessage
from failover_partitioner.choose import ChoiceOptions, KeyPolicy, Strategy
from failover_partitioner.errors import ConfigError
from failover_partitioner.metadata._refresher import min_isr_option
from failover_partitioner.quarantine import QuarantinePolicy
from retry_buffer import RetryPolicy

__all__ = [
    "OPTION_DEFAULTS",
    "OPTION_NAMES",
    "FailoverOptions",
    "ProducerOptions",
    "check_option_names",
    "produce_timeout",
    "producer_options",
]

DeadLetter = Callable[[UndeliveredMessage, Any], None]
"""``hook(message, error)``: the error is the producer's (confluent-kafka's ``KafkaError``, or the
exception ``AsyncFailoverProducer``'s future raises)."""


class FailoverOptions(TypedDict, total=False):
    """The failover options of ``FailoverProducer`` and ``AsyncFailoverProducer``, each optional
    (defaults: :data:`OPTION_DEFAULTS`; meanings: docs/configuration.md)."""

    # An int for every topic or {topic: int}; None: the topic's own (DescribeConfigs), else 1.
    min_insync_replicas: int | Mapping[str, int] | None
    # Keyless messages while a topic is degraded: over usable partitions, or n in a row to one.
    strategy: Strategy
    # A keyed message whose partition is unusable: "failover" moves it, "strict" waits.
    key_policy: KeyPolicy
    # Avoid partitions whose ISR is at the minimum while half the topic is healthy.
    headroom: bool
    # Prefer, for keyless messages, partitions whose leader is in this rack.
    client_rack: str | None
    # sticky: messages to one partition before moving on.
    sticky_messages: int
    # sticky: also move on after this many value bytes; None: count messages only.
    sticky_bytes: int | None
    # Messages accepted and without a final outcome, at most (those waiting to retry too).
    max_in_flight: int
    # How long produce()/send() waits at max_in_flight before ProduceTimeout; None: longer than
    # the inner client may hold a message (see produce_timeout), so the messages taking the
    # room have come back, delivered or failed and rerouted, before a message is refused.
    produce_timeout_s: float | None
    # Give a message up this long after its first failure; None: never.
    delivery_timeout_s: float | None
    # Give a message up after this many turns from its first failure; None: never.
    max_attempts: int | None
    # The pause before a failed message is tried again, doubling per attempt...
    retry_backoff_s: float
    # ... up to this.
    retry_backoff_max_s: float
    # How often topic metadata (leaders, ISR) is fetched.
    metadata_refresh_s: float
    # How often while a partition is quarantined or unusable.
    metadata_fast_refresh_s: float
    # How often min.insync.replicas is asked again.
    min_isr_refresh_s: float
    # The timeout of one metadata request, and how long a topic's first produce()/send()/
    # health() waits for its metadata.
    metadata_timeout_s: float
    # A topic the metadata does not list is waited for (messages held, its metadata watched
    # closely) until this long after its first metadata answer; 0: its messages fail at once.
    topic_propagation_max_s: float
    # A failing partition's first quarantine, doubling per consecutive strike...
    quarantine_backoff_s: float
    # ... up to this; a partition without a strike this long is forgiven.
    quarantine_max_s: float
    # A header carrying each message's unique id, the same on every attempt; None: no header.
    message_id_header: str | None
    # hook(message, error), called once for each message that failed finally.
    dead_letter: DeadLetter | None
    # Where the prometheus metrics go; None: a registry of the producer's own.
    metrics_registry: CollectorRegistry | None
    # Start prometheus' HTTP exporter on this port (0 picks one); None: no exporter.
    metrics_port: int | None
    # The address the exporter listens on.
    metrics_addr: str


_CHOICE = ChoiceOptions()  # the partition chooser's own defaults

# Every option's default: the one place each is written (partition choice's are the chooser's).
OPTION_DEFAULTS: Final[FailoverOptions] = {
    "min_insync_replicas": None,
    "strategy": _CHOICE.strategy,
    "key_policy": _CHOICE.key_policy,
    "headroom": _CHOICE.headroom,
    "client_rack": _CHOICE.client_rack,
    "sticky_messages": _CHOICE.sticky_messages,
    "sticky_bytes": _CHOICE.sticky_bytes,
    "max_in_flight": 50_000,
    "produce_timeout_s": None,
    "delivery_timeout_s": None,
    "max_attempts": None,
    "retry_backoff_s": 0.01,
    "retry_backoff_max_s": 1.0,
    "metadata_refresh_s": 30.0,
    "metadata_fast_refresh_s": 0.5,
    "min_isr_refresh_s": 300.0,
    "metadata_timeout_s": 5.0,
    "topic_propagation_max_s": 30.0,
    "quarantine_backoff_s": 0.5,
    "quarantine_max_s": 30.0,
    "message_id_header": None,
    "dead_letter": None,
    "metrics_registry": None,
    "metrics_port": None,
    "metrics_addr": "0.0.0.0",
}

OPTION_NAMES: Final = FailoverOptions.__optional_keys__

# The options ChoiceOptions checks (and holds).
_CHOICE_NAMES = tuple(f.name for f in fields(ChoiceOptions))


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerOptions:
    """The failover options, checked, and what the producers build of them."""

    choice: ChoiceOptions
    max_in_flight: int
    produce_timeout_s: float | None
    retry_policy: RetryPolicy
    metadata_timeout_s: float
    topic_propagation_max_s: float
    refresh_s: float
    fast_refresh_s: float
    min_isr_refresh_s: float
    min_insync_replicas: int | Mapping[str, int] | None
    quarantine: QuarantinePolicy
    message_id_header: str | None
    dead_letter: DeadLetter | None
    metrics_port: int | None
    metrics_registry: CollectorRegistry | None
    metrics_addr: str


# produce_timeout_s when not given: how long the inner client may hold one message, plus this
# margin (15 s at confluent-kafka's defaults here, 17 s at aiokafka's); for a client that holds
# one without limit (message.timeout.ms=0), the fallback.
PRODUCE_TIMEOUT_MARGIN_S: Final = 5.0
PRODUCE_TIMEOUT_FALLBACK_S: Final = 15.0


def produce_timeout(given: float | None, client_holds_s: float | None) -> float:
    """``produce_timeout_s`` as a producer applies it: as given, else ``client_holds_s`` (the
    longest the inner client may hold one message; None: no limit) plus a margin.

    At ``max_in_flight`` the room is taken by messages the client holds; when a broker holds
    writes, they come back only at the client's timeout. A wait shorter than that would refuse
    messages that room was about to be made for (with 5 s, the first run after a broker stop
    raised ProduceTimeout in 3 of 4 bench runs; docs/configuration.md)."""
    if given is not None:
        return given
    if client_holds_s is None:
        return PRODUCE_TIMEOUT_FALLBACK_S
    return client_holds_s + PRODUCE_TIMEOUT_MARGIN_S


def check_option_names(names: Iterable[str]) -> None:
    """Refuse any name that is not a failover option, with the nearest one where it looks like
    a misspelling of it."""
    unknown = sorted(set(names) - OPTION_NAMES)
    if not unknown:
        return
    said = []
    for name in unknown:
        near = difflib.get_close_matches(name, OPTION_NAMES, n=1)
        said.append(f"{name!r}" + (f" (did you mean {near[0]!r}?)" if near else ""))
    raise ConfigError(
        f"unknown failover option{'s' if len(said) > 1 else ''} {', '.join(said)}; the failover "
        f"options are {', '.join(sorted(OPTION_NAMES))} (see docs/configuration.md)"
    )


def producer_options(*, dead_letter_args: str, **given: Any) -> ProducerOptions:
    """Check the failover options ``given`` to a producer (each one not given takes its
    default) and build what the producers use of them. ``dead_letter_args`` names the hook's
    arguments in its error (the producers pass it different things: ``"message, err"`` or
    ``"message, exc"``).

    Checked in the order written (the first bad value is the one reported): the names, partition
    choice, the in-flight bound, retries, metadata timing, quarantine, then the producer's own.
    """
    check_option_names(given)
    o: dict[str, Any] = {**OPTION_DEFAULTS, **given}
    return ProducerOptions(
        choice=ChoiceOptions(**{name: o[name] for name in _CHOICE_NAMES}),
        max_in_flight=_in_flight_limit(o["max_in_flight"]),
        produce_timeout_s=None
        if o["produce_timeout_s"] is None
        else check_positive_number("produce_timeout_s", o["produce_timeout_s"], allow_zero=True),
        retry_policy=_retry_policy(
            delivery_timeout_s=o["delivery_timeout_s"],
            max_attempts=o["max_attempts"],
            retry_backoff_s=o["retry_backoff_s"],
            retry_backoff_max_s=o["retry_backoff_max_s"],
        ),
        metadata_timeout_s=check_positive_number("metadata_timeout_s", o["metadata_timeout_s"]),
        topic_propagation_max_s=check_positive_number(
            "topic_propagation_max_s", o["topic_propagation_max_s"], allow_zero=True
        ),
        refresh_s=check_positive_number("metadata_refresh_s", o["metadata_refresh_s"]),
        fast_refresh_s=check_positive_number(
            "metadata_fast_refresh_s", o["metadata_fast_refresh_s"]
        ),
        min_isr_refresh_s=check_positive_number("min_isr_refresh_s", o["min_isr_refresh_s"]),
        min_insync_replicas=min_isr_option(o["min_insync_replicas"]),
        quarantine=_quarantine_policy(o["quarantine_backoff_s"], o["quarantine_max_s"]),
        message_id_header=_id_header(o["message_id_header"]),
        dead_letter=_dead_letter(o["dead_letter"], dead_letter_args),
        metrics_registry=_metrics_registry(o["metrics_registry"]),
        metrics_port=_metrics_port(o["metrics_port"]),
        metrics_addr=_metrics_addr(o["metrics_addr"]),
    )


def _in_flight_limit(max_in_flight: object) -> int:
    limit = check_count("max_in_flight", max_in_flight)
    assert limit is not None  # not optional: None is refused
    return limit


def _retry_policy(
    *,
    delivery_timeout_s: object,
    max_attempts: object,
    retry_backoff_s: object,
    retry_backoff_max_s: object,
) -> RetryPolicy:
    """How long and how often a failed message is tried again."""
    deadline = (
        None
        if delivery_timeout_s is None
        else check_positive_number("delivery_timeout_s", delivery_timeout_s)
    )
    attempts = check_count("max_attempts", max_attempts, optional=True)
    # > 0: a message that must wait (nothing usable) is looked at again after a pause,
    # not in a busy loop.
    backoff = check_positive_number("retry_backoff_s", retry_backoff_s)
    backoff_max = check_positive_number("retry_backoff_max_s", retry_backoff_max_s, allow_zero=True)
    if backoff_max < backoff:
        raise ConfigError(
            f"retry_backoff_max_s ({retry_backoff_max_s!r}) must be >= retry_backoff_s "
            f"({retry_backoff_s!r})"
        )
    return RetryPolicy(
        max_attempts=attempts,
        deadline_s=deadline,
        backoff_initial_s=backoff,
        backoff_max_s=backoff_max,
    )


def _quarantine_policy(quarantine_backoff_s: object, quarantine_max_s: object) -> QuarantinePolicy:
    """Checked here, to name the user's options (QuarantinePolicy's own check names its
    fields)."""
    backoff = check_positive_number("quarantine_backoff_s", quarantine_backoff_s)
    backoff_max = check_positive_number("quarantine_max_s", quarantine_max_s)
    if backoff_max < backoff:
        raise ConfigError(
            f"quarantine_max_s ({_given('quarantine_max_s', quarantine_max_s)}) must be >= "
            f"quarantine_backoff_s ({_given('quarantine_backoff_s', quarantine_backoff_s)}): "
            "raise quarantine_max_s or lower quarantine_backoff_s"
        )
    return QuarantinePolicy(initial_s=backoff, max_s=backoff_max)


def _given(name: str, value: object) -> str:
    """``value`` for an error, said to be the default where it is (the user may not have given
    it)."""
    default = cast("Mapping[str, object]", OPTION_DEFAULTS)[name]
    return f"{value!r}, the default" if value == default else repr(value)


def _id_header(message_id_header: object) -> str | None:
    if message_id_header is None:
        return None
    if not isinstance(message_id_header, str) or not message_id_header:
        raise ConfigError(
            f"message_id_header must be a non-empty header name or None, got {message_id_header!r}"
        )
    try:
        message_id_header.encode()  # a header name goes out as UTF-8
    except UnicodeEncodeError:
        raise ConfigError(
            f"message_id_header {message_id_header!r} cannot be encoded as UTF-8, as a Kafka "
            "header name must be"
        ) from None
    return message_id_header


def _dead_letter(hook: object, hook_args: str) -> DeadLetter | None:
    if hook is None:
        return None
    if not callable(hook):
        raise ConfigError(f"dead_letter must be callable({hook_args}), got {hook!r}")
    return cast("DeadLetter", hook)  # callable(): its signature is not checked


def _metrics_port(metrics_port: object) -> int | None:
    if metrics_port is None:
        return None
    if isinstance(metrics_port, bool) or not isinstance(metrics_port, int):
        raise ConfigError(f"metrics_port must be an int or None, got {metrics_port!r}")
    if not 0 <= metrics_port <= 65535:
        raise ConfigError(f"metrics_port must be in 0..65535 (0 picks one), got {metrics_port!r}")
    return metrics_port


def _metrics_registry(registry: object) -> CollectorRegistry | None:
    if registry is None or isinstance(registry, CollectorRegistry):
        return registry
    raise ConfigError(
        "metrics_registry must be a prometheus_client.CollectorRegistry (prometheus_client."
        f"REGISTRY for the process-wide one) or None for a private one, got {registry!r}"
    )


def _metrics_addr(metrics_addr: object) -> str:
    if not isinstance(metrics_addr, str) or not metrics_addr:
        raise ConfigError(
            "metrics_addr must be the address the exporter listens on, a non-empty str "
            f"(e.g. '127.0.0.1', or '0.0.0.0' for every interface), got {metrics_addr!r}"
        )
    return metrics_addr
