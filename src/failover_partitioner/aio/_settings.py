"""The asyncio producer's client settings: aiokafka's keyword arguments, checked and completed.

aiokafka retries a refused batch on the same partition until it is ``request_timeout_ms`` old
(40 s by default), so NOT_ENOUGH_REPLICAS would reach the failover layer that late. The inner
producer therefore answers with the first broker response (see ``_aio_client``), and
``request_timeout_ms`` defaults to 5000 here: it also bounds how long an ``acks=all`` request may
wait on a stalled partition before its messages are rerouted.

The caller's keyword arguments are copied, never changed. Options that fight rerouting are
refused with a reason: a custom ``partitioner`` (the failover producer chooses partitions),
idempotence and transactions (they pin a message to its partition and retry it there).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from failover_partitioner.errors import ConfigError

__all__ = ["ANSWER_MARGIN_MS", "CLIENT_DEFAULTS", "AioClientSettings", "aio_client_settings"]

# Applied only when the caller has not given them.
CLIENT_DEFAULTS: Mapping[str, Any] = {
    "acks": "all",
    "request_timeout_ms": 5_000,
}

REROUTE_WARNING_MS = 30_000

# How much longer than ``request_timeout_ms`` (the broker's hold of an acks=all write) the inner
# client waits for an answer and keeps a batch in its queue: long enough for the broker's own
# answer to arrive first (see ``_client.make_inner_producer``).
ANSWER_MARGIN_MS = 1_000

_REFUSED: Mapping[str, str] = {
    "loop": "aiokafka deprecated it; create the producer inside the running event loop",
    "partitioner": (
        "the failover producer chooses every partition itself (strategy=, key_policy=); "
        "a custom partitioner would never be called"
    ),
    "transactional_id": (
        "transactions pin messages to partitions for exactly-once, which re-producing "
        "elsewhere cannot honour; use a plain AIOKafkaProducer"
    ),
    "transaction_timeout_ms": "it only applies to transactions, which are not supported",
}

# Taken out of the client's arguments: the failover producer serialises before it hashes keys.
_SERIALIZERS = ("key_serializer", "value_serializer")


def _client_parameters() -> frozenset[str]:
    from aiokafka import AIOKafkaProducer  # type: ignore[import-untyped,unused-ignore]  # no py.typed

    params = inspect.signature(AIOKafkaProducer.__init__).parameters
    return frozenset(name for name in params if name != "self")


@dataclass(frozen=True, slots=True, kw_only=True)
class AioClientSettings:
    """What to hand ``AIOKafkaProducer``, and what the failover layer keeps for itself."""

    client_kwargs: Mapping[str, Any]
    key_serializer: Callable[[Any], bytes | None] | None
    value_serializer: Callable[[Any], bytes | None] | None
    max_request_size: int
    client_id: str | None
    # The longest the client may hold one message: it answers each batch with the first
    # response, at most request_timeout_ms + ANSWER_MARGIN_MS, and a batch may wait that long
    # behind the one before it on its connection.
    holds_message_s: float | None = None
    warnings: tuple[str, ...] = field(default=())


def _number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ConfigError(f"{name}={value!r} is not a number of milliseconds")
    return float(value)


def aio_client_settings(kwargs: Mapping[str, Any]) -> AioClientSettings:
    """Validate aiokafka keyword arguments and derive the inner producer's from a copy."""
    known = _client_parameters()
    unknown = sorted(k for k in kwargs if k not in known)
    if unknown:
        raise ConfigError(
            f"unknown keyword argument(s) {unknown}: give AIOKafkaProducer's own settings "
            "(bootstrap_servers=, acks=, ...) or the failover options documented in docs/aio.md"
        )
    for name, why in _REFUSED.items():
        if name in kwargs and kwargs[name] is not None:
            raise ConfigError(f"{name}={kwargs[name]!r} is not supported: {why}")
    if kwargs.get("enable_idempotence"):
        raise ConfigError(
            "enable_idempotence=True is not supported: aiokafka then retries a refused batch on "
            "the same partition without end, so it could never be rerouted; use "
            "message_id_header= to let consumers drop duplicates instead"
        )
    servers = kwargs.get("bootstrap_servers")
    if not servers or not isinstance(servers, (str, list, tuple)):
        raise ConfigError(
            f"bootstrap_servers={servers!r}: give the cluster's addresses, e.g. "
            "bootstrap_servers='host:9092' or a list of them"
        )
    for name in _SERIALIZERS:
        fn = kwargs.get(name)
        if fn is not None and not callable(fn):
            raise ConfigError(f"{name} must be callable(obj) -> bytes, got {fn!r}")
    client_kwargs = {k: v for k, v in kwargs.items() if k not in _SERIALIZERS and k not in _REFUSED}
    for name, default in CLIENT_DEFAULTS.items():
        client_kwargs.setdefault(name, default)
    client_kwargs["enable_idempotence"] = False

    warnings: list[str] = []
    timeout_ms = _number("request_timeout_ms", client_kwargs["request_timeout_ms"])
    if not timeout_ms > 0:
        raise ConfigError(f"request_timeout_ms={timeout_ms:g} must be > 0 milliseconds")
    if timeout_ms > REROUTE_WARNING_MS:
        warnings.append(
            f"request_timeout_ms={client_kwargs['request_timeout_ms']!r} lets a stalled request "
            f"wait {timeout_ms / 1000:g} s before its messages are rerouted (more than "
            f"{REROUTE_WARNING_MS / 1000:g} s); leave it unset to use "
            f"{CLIENT_DEFAULTS['request_timeout_ms']} ms"
        )
    if "linger_ms" in client_kwargs and _number("linger_ms", client_kwargs["linger_ms"]) < 0:
        raise ConfigError(f"linger_ms={client_kwargs['linger_ms']!r} must be >= 0 milliseconds")
    acks = client_kwargs["acks"]
    if isinstance(acks, bool) or acks not in (0, 1, -1, "all"):
        raise ConfigError(f"acks={acks!r} must be 0, 1, -1 or 'all'")
    max_request_size = client_kwargs.get("max_request_size", 1_048_576)
    if isinstance(max_request_size, bool) or not isinstance(max_request_size, int):
        raise ConfigError(f"max_request_size must be an int of bytes, got {max_request_size!r}")
    if max_request_size < 1:
        raise ConfigError(f"max_request_size={max_request_size} must be >= 1 byte")
    client_id = client_kwargs.get("client_id")
    return AioClientSettings(
        client_kwargs=client_kwargs,
        key_serializer=kwargs.get("key_serializer"),
        value_serializer=kwargs.get("value_serializer"),
        max_request_size=max_request_size,
        client_id=None if client_id is None else str(client_id),
        holds_message_s=2 * (timeout_ms + ANSWER_MARGIN_MS) / 1000,
        warnings=tuple(warnings),
    )
