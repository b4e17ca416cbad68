"""The producer's client settings: the user's client config, checked and completed (never
mutated). The failover options (``min_insync_replicas=``, ``strategy=``, ...) are in
:mod:`failover_partitioner._options`.

The inner confluent-kafka client runs with few retries and a short delivery timeout unless the
user set them: librdkafka retries a partition it cannot move to ("messages are only
partitioned once", librdkafka #2295), and with its default of endless retries a min-ISR
refusal reaches the application minutes later as ``_MSG_TIMED_OUT`` instead of as
NOT_ENOUGH_REPLICAS. With ``retries=0`` the real error arrives within a round trip and the
message can be produced again elsewhere at once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from failover_partitioner.errors import ConfigError

__all__ = [
    "CLIENT_DEFAULTS",
    "NOT_FOR_ADMIN",
    "ClientSettings",
    "FailoverConfigWarning",
    "check_count",
    "check_positive_number",
    "client_settings",
    "companion_conf",
    "surfacing",
]


class FailoverConfigWarning(UserWarning):
    """A client setting works against failover (for instance, it delays rerouting)."""


# Applied only when the user has not set the key (or one of its aliases).
CLIENT_DEFAULTS: Mapping[str, Any] = {
    "retries": 0,
    "message.timeout.ms": 10_000,
    "request.timeout.ms": 5_000,
    # How long librdkafka waits for any answer before it drops the connection. The metadata
    # refresher's list_topics goes to the broker this client sent to last (librdkafka's "least
    # idle" choice), and a request a hung broker holds keeps it the last: every fetch then
    # waits on it until the first request expires (60 s by default), and the health view stays
    # that old. 10 s is the default message.timeout.ms, so a ProduceRequest's own limit (the
    # lesser of the two) is unchanged; it is above request.timeout.ms, the broker's wait for
    # acks, so a live broker's answer comes first.
    "socket.timeout.ms": 10_000,
    # One ProduceRequest at a time per broker (librdkafka's default: a million). A leader
    # answers its connection's requests one at a time, and one that holds an acks=all write (a
    # follower hung, still in the ISR) holds every request sent behind it, each up to
    # request.timeout.ms in turn, for any partition. With one in flight, a broker's next
    # request leaves only after the held one is answered and its partition taken out of use:
    # what was queued for that partition meanwhile is held once more, and nothing after it.
    # Batches grow while a request is out, so the rate on a healthy cluster holds (bench/).
    "max.in.flight.requests.per.connection": 1,
    # The Java client's key placement (murmur2), which the producer's keyed choice follows:
    # with it, librdkafka can place a key itself while the topic is whole (choose.py).
    "partitioner": "murmur2_random",
}

_ALIASES: Mapping[str, tuple[str, ...]] = {
    "retries": ("retries", "message.send.max.retries"),
    "message.timeout.ms": ("message.timeout.ms", "delivery.timeout.ms"),
    "request.timeout.ms": ("request.timeout.ms",),
    "socket.timeout.ms": ("socket.timeout.ms",),
    "max.in.flight.requests.per.connection": (
        "max.in.flight.requests.per.connection",
        "max.in.flight",
    ),
    "partitioner": ("partitioner",),
}

# Keys that only the Python layer of confluent-kafka reads; they stay with the producer.
_PYTHON_ONLY = ("on_delivery", "delivery.report.only.error")

REROUTE_WARNING_S = 30.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientSettings:
    """What to hand the inner client, plus the user's callback settings taken out of it."""

    client_conf: dict[str, Any]
    default_on_delivery: Callable[[Any, Any], None] | None
    report_only_errors: bool
    # The longest the client may hold one message (message.timeout.ms); None: no limit.
    holds_message_s: float | None = None
    warnings: tuple[str, ...] = field(default=())


def _user_value(conf: Mapping[str, Any], canonical: str) -> tuple[str, Any] | None:
    for name in _ALIASES[canonical]:
        if name in conf:
            return name, conf[name]
    return None


def _is_true(value: Any) -> bool:
    """A boolean client setting as librdkafka reads it: a bool, or the text "true", "t" or
    "1" (any case, as given in a properties file)."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "t", "1")
    return bool(value)


def _as_number(name: str, value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigError(
            f"client setting {name}={value!r} is not a number; librdkafka expects an integer"
        ) from None
    if math.isnan(number):
        raise ConfigError(f"client setting {name}={value!r} is not a number")
    return number


def client_settings(conf: Mapping[str, Any]) -> ClientSettings:
    """Validate ``conf`` and derive the inner client's config from a copy of it."""
    _check_conf(conf)
    cb = conf.get("on_delivery")
    if cb is not None and not callable(cb):
        raise ConfigError(f"conf['on_delivery'] must be callable(err, msg), got {cb!r}")
    return ClientSettings(
        client_conf=_inner_conf(conf),
        default_on_delivery=cb,
        report_only_errors=_is_true(conf.get("delivery.report.only.error", False)),
        holds_message_s=(_message_timeout_ms(conf) / 1000) or None,
        warnings=(
            *_timeout_warnings(conf),
            *_socket_timeout_warnings(conf),
            *_retries_warnings(conf),
            *_in_flight_warnings(conf),
        ),
    )


def _check_conf(conf: Mapping[str, Any]) -> None:
    """Refuse a ``conf`` the producer cannot work with: not a dict of named settings, no
    cluster to reach, or a transactional one."""
    if not isinstance(conf, Mapping):
        raise ConfigError(
            f"conf must be a dict of confluent-kafka settings, got {type(conf).__name__}"
        )
    bad_keys = [k for k in conf if not isinstance(k, str)]
    if bad_keys:
        raise ConfigError(f"conf keys must be strings (librdkafka property names), got {bad_keys}")
    # librdkafka's mock cluster replaces the servers; metadata.broker.list is their old name.
    if "test.mock.num.brokers" not in conf:
        name = "bootstrap.servers" if "metadata.broker.list" not in conf else "metadata.broker.list"
        if name not in conf:
            raise ConfigError(
                "conf has no 'bootstrap.servers'; give the cluster's addresses, "
                "e.g. {'bootstrap.servers': 'host:9092'}"
            )
        servers = conf[name]
        if not isinstance(servers, str) or not servers.strip():
            raise ConfigError(
                f"conf['{name}'] must name the cluster's addresses, got {servers!r}: "
                "e.g. {'bootstrap.servers': 'host:9092'}"
            )
    if "transactional.id" in conf:
        raise ConfigError(
            "conf sets 'transactional.id': transactions pin messages to partitions for "
            "exactly-once, which re-producing elsewhere cannot honour; use a plain Producer"
        )
    idempotence = conf.get("enable.idempotence")
    if _is_true(idempotence):
        raise ConfigError(
            f"conf sets 'enable.idempotence': {idempotence!r}, which is not supported: "
            "librdkafka then needs retries >= 1 and retries a refused message on the same "
            "partition until message.timeout.ms, so it is rerouted late, and idempotence "
            "cannot drop a copy written to another partition; leave it unset (or false) and "
            "pass message_id_header= to let consumers drop duplicates"
        )


def _inner_conf(conf: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``conf`` for the inner client: without the Python-only keys, with
    :data:`CLIENT_DEFAULTS` where the user set no value (under any alias), the user's
    callbacks wrapped by :func:`surfacing`."""
    client_conf = {k: v for k, v in conf.items() if k not in _PYTHON_ONLY}
    for canonical, default in CLIENT_DEFAULTS.items():
        if _user_value(conf, canonical) is None:
            client_conf[canonical] = default
    for name in _USER_CALLBACKS:
        if callable(client_conf.get(name)):
            client_conf[name] = surfacing(client_conf[name])
    return client_conf


# The callbacks of a user's config that a client calls itself (on_delivery and error_cb are
# the producer's, which call the user's).
_USER_CALLBACKS = ("stats_cb", "throttle_cb", "oauth_cb")


def surfacing(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, for a confluent-kafka client to call, raising what it raises as raised.

    confluent-kafka (2.16, on Python before 3.12) keeps an exception raised in a callback by
    its value alone, for poll() or flush() to raise; an exception raised in C and caught
    nowhere on its way out has none yet (a KeyError of a dict lookup), and the caller would get
    a SystemError naming neither. Caught once, it has its value. Every function the producer
    hands a client does the same (confluent/_shared.py)."""

    def call(*args: Any) -> Any:
        try:
            return fn(*args)
        except BaseException:
            raise  # whole, for the client to keep

    return call


def _timeout_warnings(conf: Mapping[str, Any]) -> list[str]:
    """A delivery or request timeout of the user's that keeps a message from rerouting long."""
    warnings: list[str] = []
    for canonical in ("message.timeout.ms", "request.timeout.ms"):
        user = _user_value(conf, canonical)
        if user is None:
            continue
        name, value = user
        ms = _as_number(name, value)
        if ms == 0 or ms > REROUTE_WARNING_S * 1000:
            shown = "no limit" if ms == 0 else f"{ms / 1000:g} s"
            warnings.append(
                f"{name}={value!r} lets a failed or stuck message wait {shown} before it is "
                f"rerouted (more than {REROUTE_WARNING_S:g} s); leave it unset to use "
                f"{CLIENT_DEFAULTS[canonical]} ms"
            )
    return warnings


def _socket_timeout_warnings(conf: Mapping[str, Any]) -> list[str]:
    """A socket timeout of the user's that lets a hung broker keep the health view old."""
    socket_timeout = _user_value(conf, "socket.timeout.ms")
    if socket_timeout is None:
        return []
    name, value = socket_timeout
    if _as_number(name, value) <= REROUTE_WARNING_S * 1000:
        return []
    return [
        f"{name}={value!r} lets a hung broker hold the producer's metadata requests that "
        f"long, and its view of the partitions stays as old meanwhile (more than "
        f"{REROUTE_WARNING_S:g} s); leave it unset to use "
        f"{CLIENT_DEFAULTS['socket.timeout.ms']} ms"
    ]


def _in_flight_warnings(conf: Mapping[str, Any]) -> list[str]:
    """More than one request in flight per broker: each may wait behind a held write."""
    in_flight = _user_value(conf, "max.in.flight.requests.per.connection")
    if in_flight is None:
        return []
    name, value = in_flight
    if _as_number(name, value) <= 1:
        return []
    return [
        f"{name}={value!r}: a broker holding an acks=all write (a follower hung, still in the "
        "ISR) answers the requests sent behind it on the connection one after another, each "
        "up to request.timeout.ms, whatever their partitions; leave it unset (1) so that a "
        "held partition holds one request after the first at most"
    ]


def _message_timeout_ms(conf: Mapping[str, Any]) -> float:
    """message.timeout.ms as the inner client runs with it (the user's, under any alias, or
    ours); 0 is no limit."""
    timeout = _user_value(conf, "message.timeout.ms")
    if timeout is None:
        return float(CLIENT_DEFAULTS["message.timeout.ms"])
    return _as_number(timeout[0], timeout[1])


def _retries_warnings(conf: Mapping[str, Any]) -> list[str]:
    """Client retries of the user's under a long delivery timeout: a min-ISR refusal then
    reaches the producer only as a timeout (librdkafka #2295, see the module)."""
    retries = _user_value(conf, "retries")
    if retries is None:
        return []
    name, value = retries
    n = _as_number(name, value)
    timeout_ms = _message_timeout_ms(conf)
    if n > 0 and (timeout_ms == 0 or timeout_ms > REROUTE_WARNING_S * 1000):
        return [
            f"{name}={value!r}: librdkafka retries a refused message on the same partition "
            "until its delivery timeout, so NOT_ENOUGH_REPLICAS reaches the producer late "
            "(as _MSG_TIMED_OUT); leave retries unset (0) for rerouting within a round trip"
        ]
    return []


# What only a producer or only a consumer reads: an admin client made from their settings has no
# use for it (librdkafka would warn of each). Entries ending in "." are prefixes. No connection
# or security setting matches, so none can be lost.
NOT_FOR_ADMIN = (
    "acks",
    "linger.ms",
    "batch.",
    "compression.",
    "enable.idempotence",
    "retries",
    "message.",
    "delivery.",
    "partitioner",
    "queue.buffering.",
    "sticky.",
    "transactional.",
    "statistics.interval.ms",
    "group.",
    "enable.auto.",
    "auto.",
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "max.poll.interval.ms",
    "partition.assignment.strategy",
    "fetch.",
    "isolation.level",
    "enable.partition.eof",
    "queued.",
    "check.crcs",
    "on_commit",
)


# Python callbacks of the producer's own client: a companion must not call them a second time
# (``oauth_cb``, which logs in, and ``logger``, where the client logs, are kept).
_CALLBACKS = ("on_delivery", "error_cb", "stats_cb", "throttle_cb")


def companion_conf(
    conf: Mapping[str, Any],
    role: str,
    *,
    drop: tuple[str, ...] = (),
    settings: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The settings of a client opened beside the producer's (``role``: ``admin``, ``solo``,
    ``lane``): every setting of ``conf`` (connection and security settings above all)
    unchanged, except the producer's callbacks and ``drop`` (names, or prefixes ending in
    "."), with ``settings`` on top and ``client.id`` marked with ``role``.

    Every such client is made from this, so none can forget how to reach and log in to the
    cluster.
    """
    names = {d for d in drop if not d.endswith(".")}
    prefixes = tuple(d for d in drop if d.endswith("."))
    out = {
        k: v
        for k, v in conf.items()
        if k not in names and not k.startswith(prefixes) and k not in _CALLBACKS
    }
    out.update(settings or {})
    if "client.id" in out:
        out["client.id"] = f"{out['client.id']}-{role}"
    return out


def check_positive_number(name: str, value: object, *, allow_zero: bool = False) -> float:
    """``value`` as seconds; a :class:`ConfigError` naming ``name`` when it is not usable."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ConfigError(f"{name} must be a number of seconds, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero) or math.isinf(value):
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigError(f"{name} must be a finite number of seconds {bound}, got {value!r}")
    return float(value)


def check_count(name: str, value: object, *, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        extra = "None or " if optional else ""
        raise ConfigError(f"{name} must be {extra}an int >= 1, got {value!r}")
    return value
