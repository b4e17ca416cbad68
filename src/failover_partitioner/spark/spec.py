"""Everything a task needs, decided and checked on the driver, small enough to pickle."""

from __future__ import annotations

import hashlib
import hmac
import math
import pickle
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from pyspark import cloudpickle

from failover_partitioner.errors import ConfigError
from failover_partitioner.spark.columns import RowLayout
from failover_partitioner.spark.factory import validate

# Spark ships closures with its vendored cloudpickle (untyped); checking with the same pickler
# accepts exactly what Spark can send (lambdas and closures included).
_dumps = cast(Callable[..., bytes], cloudpickle.dumps)

# The writer needs each row's own outcome; a delivery callback in the client config would
# either be bypassed or run on an executor nobody watches.
_REJECTED_KEYS = ("on_delivery", "on.delivery", "dr_cb", "dr_msg_cb")
# The cache key is a keyed hash of the settings, passwords included, and workers log it: a
# plain hash would let whoever reads the logs and knows the other settings test password
# guesses offline. This driver process's own key: one configuration, one name, within a job.
_CACHE_KEY_SECRET = secrets.token_bytes(32)


@dataclass(frozen=True, slots=True, kw_only=True)
class WriterSpec:
    """What ships to every task: the row layout, the producer settings and how to finish.

    ``cache_key`` names the producer configuration; it is computed once here, so every task
    and every worker agrees on it without hashing anything on the hot path.
    """

    topic: str | None
    layout: RowLayout
    producer_config: Mapping[str, Any]
    failover_options: Mapping[str, Any]
    cache_key: str
    flush_timeout_s: float
    raise_on_failed_rows: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerSettings:
    """A private copy of the caller's producer config and failover options, already checked."""

    producer_config: Mapping[str, Any]
    failover_options: Mapping[str, Any]
    cache_key: str


def check_settings(
    producer_config: Mapping[str, Any] | None, failover_options: Mapping[str, Any]
) -> ProducerSettings:
    """Check the settings on the driver, without connecting anywhere, and copy them."""
    if producer_config is None:
        raise ConfigError(
            "producer_config is required: confluent-kafka settings with at least "
            "'bootstrap.servers', e.g. producer_config={'bootstrap.servers': 'host:9092'}."
        )
    if not isinstance(producer_config, Mapping):
        raise ConfigError(
            f"producer_config must be a dict of confluent-kafka settings, got "
            f"{type(producer_config).__name__}."
        )
    config = dict(producer_config)
    bad_keys = [k for k in config if not isinstance(k, str)]
    if bad_keys:
        raise ConfigError(f"producer_config keys must be strings, got {bad_keys!r}.")
    if not str(config.get("bootstrap.servers", "")).strip():
        raise ConfigError(
            "producer_config has no 'bootstrap.servers'; executors need it to reach Kafka, "
            "e.g. {'bootstrap.servers': 'broker1:9092,broker2:9092'}."
        )
    rejected = [k for k in _REJECTED_KEYS if k in config]
    if rejected:
        raise ConfigError(
            f"producer_config sets {rejected[0]!r}: the Spark writer handles each row's "
            "delivery report itself and returns the counts; remove it (a failover option "
            "such as a dead-letter hook can observe final failures)."
        )
    options = dict(failover_options)
    validate(config, options)
    payload = _shippable(config, options)
    return ProducerSettings(
        producer_config=config,
        failover_options=options,
        cache_key=hmac.new(_CACHE_KEY_SECRET, payload, hashlib.sha256).hexdigest()[:24],
    )


def check_flush_timeout(flush_timeout_s: float) -> float:
    if (
        isinstance(flush_timeout_s, bool)
        or not isinstance(flush_timeout_s, int | float)
        or not math.isfinite(flush_timeout_s)
        or flush_timeout_s <= 0
    ):
        raise ConfigError(
            f"flush_timeout_s must be a positive number of seconds, got {flush_timeout_s!r}."
        )
    return float(flush_timeout_s)


def _shippable(config: dict[str, Any], options: dict[str, Any]) -> bytes:
    """The settings as Spark will pickle them to executors; a clear error if they cannot be."""
    items = (tuple(sorted(config.items())), tuple(sorted(options.items())))
    try:
        return _dumps(items, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        pass
    for kind, mapping in (("producer_config", config), ("failover option", options)):
        for name, value in mapping.items():
            try:
                _dumps(value)
            except Exception as exc:
                raise ConfigError(
                    f"{kind} {name!r} ({type(value).__name__}) cannot be sent to executors: "
                    f"{exc}. Pass a value that pickles, or build it on the executor."
                ) from exc
    raise ConfigError("the producer settings cannot be pickled and sent to executors.")
