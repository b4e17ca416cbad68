"""Broker and topic settings under Kafka's own names, validated once, resolved in Kafka's order.

A topic setting resolves as Kafka resolves it: the topic's own override, else the dynamic
per-broker value, else the dynamic cluster default, else the static broker setting given to
``Cluster(config=...)``, else Kafka's default. DescribeConfigs reports which of these supplied
the value (``ConfigSource``), so admin clients that filter on the source behave as against Kafka.

A few defaults differ from Kafka on purpose, so that tests run fast (marked ``# minibroker``).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from minibroker.errors import ConfigError

__all__ = [
    "BROKER_CONFIGS",
    "PER_BROKER_KEYS",
    "PROFILES",
    "TOPIC_CONFIGS",
    "BrokerSettings",
    "ConfigDef",
    "ConfigSource",
    "ConfigStore",
    "ResolvedConfig",
    "normalize_value",
    "parse_broker_settings",
    "validate_topic_configs",
    "validate_topic_name",
]


class ConfigSource(enum.IntEnum):
    """DescribeConfigs ``config_source`` values (KIP-226)."""

    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class ConfigType(enum.IntEnum):
    """DescribeConfigs ``config_type`` values (KIP-569)."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    LIST = 7


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigDef:
    """One setting: its Kafka name, type, default and whether it may change at runtime."""

    name: str
    type: ConfigType
    default: str | None
    parse: Callable[[str], object]
    dynamic: bool
    doc: str


def _int(low: int, high: int = 2**63 - 1) -> Callable[[str], object]:
    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise ValueError(f"expected an integer, got {text!r}") from None
        if not low <= value <= high:
            raise ValueError(f"must be between {low} and {high}, got {value}")
        return value

    return parse


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError(f"expected true or false, got {text!r}")
    return lowered == "true"


def _choice(*allowed: str, note: str = "") -> Callable[[str], object]:
    def parse(text: str) -> str:
        if text not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}{note}, got {text!r}")
        return text

    return parse


def _cleanup_policy(text: str) -> str:
    parts = [p.strip() for p in text.split(",")]
    if not parts or any(p not in ("delete", "compact") for p in parts):
        raise ValueError(f"must be a list of delete and/or compact, got {text!r}")
    return ",".join(parts)


def _string(text: str) -> str:
    return text


_INT32_MAX = 2**31 - 1


def _defs(*defs: ConfigDef) -> dict[str, ConfigDef]:
    return {d.name: d for d in defs}


BROKER_CONFIGS: Mapping[str, ConfigDef] = _defs(
    ConfigDef(
        name="num.partitions",
        type=ConfigType.INT,
        default="1",
        parse=_int(1, _INT32_MAX),
        dynamic=False,
        doc="Partitions of an auto-created topic.",
    ),
    ConfigDef(
        name="default.replication.factor",
        type=ConfigType.INT,
        default="1",
        parse=_int(1, 32767),
        dynamic=False,
        doc="Replication factor of an auto-created topic or of CreateTopics asking for -1.",
    ),
    ConfigDef(
        name="min.insync.replicas",
        type=ConfigType.INT,
        default="1",
        parse=_int(1, _INT32_MAX),
        dynamic=True,
        doc="Fewest in-sync replicas for an acks=all write (effective: min(this, RF)).",
    ),
    ConfigDef(
        name="auto.create.topics.enable",
        type=ConfigType.BOOLEAN,
        default="true",
        parse=_bool,
        dynamic=False,
        doc="Create a topic when a client asks Metadata for it.",
    ),
    ConfigDef(
        name="message.max.bytes",
        type=ConfigType.INT,
        default="1048588",
        parse=_int(0, _INT32_MAX),
        dynamic=True,
        doc="Largest record batch a topic accepts (topic setting: max.message.bytes).",
    ),
    ConfigDef(
        name="socket.request.max.bytes",
        type=ConfigType.INT,
        default="104857600",
        parse=_int(1, _INT32_MAX),
        dynamic=False,
        doc="Largest request frame; a bigger one closes the connection.",
    ),
    ConfigDef(
        name="replica.lag.time.max.ms",
        type=ConfigType.LONG,
        default="1000",  # minibroker: Kafka's is 30000
        parse=_int(1),
        dynamic=False,
        doc="A follower not caught up for this long leaves the ISR.",
    ),
    ConfigDef(
        name="unclean.leader.election.enable",
        type=ConfigType.BOOLEAN,
        default="false",
        parse=_bool,
        dynamic=True,
        doc="Elect a replica outside the ISR when no ISR member is alive (may lose data).",
    ),
    ConfigDef(
        name="broker.session.timeout.ms",
        type=ConfigType.INT,
        default="300",  # minibroker: Kafka's is 9000
        parse=_int(1, _INT32_MAX),
        dynamic=False,
        doc="How long the controller waits before it fences a stopped broker.",
    ),
    ConfigDef(
        name="auto.leader.rebalance.enable",
        type=ConfigType.BOOLEAN,
        default="false",  # minibroker: Kafka's is true, checked every 300 s
        parse=_bool,
        dynamic=False,
        doc="Move leadership back to the preferred replica as soon as it is in sync.",
    ),
    ConfigDef(
        name="leader.imbalance.check.interval.seconds",
        type=ConfigType.LONG,
        default="0",  # minibroker: Kafka's is 300 (and at least 1); 0 checks at every tick
        parse=_int(0),
        dynamic=False,
        doc="How often auto.leader.rebalance.enable moves leaders back to preferred replicas.",
    ),
    ConfigDef(
        name="group.initial.rebalance.delay.ms",
        type=ConfigType.INT,
        # minibroker: Kafka's is 3000. Not 0: a group leader that gets its JoinGroup answer
        # before its first Metadata answer assigns nothing (kafka-python does).
        default="100",
        parse=_int(0, _INT32_MAX),
        dynamic=False,
        doc="Wait this long for more members before the first rebalance of an empty group.",
    ),
    ConfigDef(
        name="group.min.session.timeout.ms",
        type=ConfigType.INT,
        default="100",  # minibroker: Kafka's is 6000
        parse=_int(1, _INT32_MAX),
        dynamic=False,
        doc="Smallest session timeout a consumer may ask for.",
    ),
    ConfigDef(
        name="group.max.session.timeout.ms",
        type=ConfigType.INT,
        default="1800000",
        parse=_int(1, _INT32_MAX),
        dynamic=False,
        doc="Largest session timeout a consumer may ask for.",
    ),
    ConfigDef(
        name="offsets.topic.num.partitions",
        type=ConfigType.INT,
        default="50",
        parse=_int(1, _INT32_MAX),
        dynamic=False,
        doc="Partitions of __consumer_offsets; a group's coordinator leads the group's one.",
    ),
    ConfigDef(
        name="offsets.topic.replication.factor",
        type=ConfigType.SHORT,
        default="3",
        parse=_int(1, 32767),
        dynamic=False,
        doc="Replicas of each __consumer_offsets partition (at most the number of brokers).",
    ),
    ConfigDef(
        name="log.retention.ms",
        type=ConfigType.LONG,
        default="604800000",
        parse=_int(-1),
        dynamic=True,
        doc="Reported only: minibroker keeps every record until the topic is deleted.",
    ),
    ConfigDef(
        name="log.retention.bytes",
        type=ConfigType.LONG,
        default="-1",
        parse=_int(-1),
        dynamic=True,
        doc="Reported only: minibroker keeps every record until the topic is deleted.",
    ),
    ConfigDef(
        name="log.segment.bytes",
        type=ConfigType.INT,
        default="1073741824",
        parse=_int(14, _INT32_MAX),
        dynamic=True,
        doc="Reported only: the log lives in memory.",
    ),
    ConfigDef(
        name="log.cleanup.policy",
        type=ConfigType.LIST,
        default="delete",
        parse=_cleanup_policy,
        dynamic=True,
        doc="Reported only: minibroker neither deletes nor compacts.",
    ),
    ConfigDef(
        name="log.message.timestamp.type",
        type=ConfigType.STRING,
        default="CreateTime",
        parse=_choice("CreateTime", note=" (LogAppendTime is not supported)"),
        dynamic=True,
        doc="Only CreateTime: batches are stored as the producer wrote them.",
    ),
    ConfigDef(
        name="compression.type",
        type=ConfigType.STRING,
        default="producer",
        parse=_choice("producer", note=" (minibroker never recompresses)"),
        dynamic=True,
        doc="Only 'producer': batches are stored as the producer compressed them.",
    ),
    ConfigDef(
        name="broker.rack",
        type=ConfigType.STRING,
        default=None,
        parse=_string,
        dynamic=False,
        doc="Rack of a broker, shown in Metadata (give it per broker).",
    ),
)

# Defaults per profile. "fast" (the BROKER_CONFIGS defaults) reacts within a fraction of a
# second so tests run quickly; "kafka-defaults" takes Apache Kafka's own defaults for every
# setting whose default minibroker shortens. A setting given in config= wins over either.
PROFILES: Mapping[str, Mapping[str, str]] = {
    "fast": {},
    "kafka-defaults": {
        "replica.lag.time.max.ms": "30000",
        "broker.session.timeout.ms": "9000",
        "auto.leader.rebalance.enable": "true",
        "leader.imbalance.check.interval.seconds": "300",
        "group.initial.rebalance.delay.ms": "3000",
        "group.min.session.timeout.ms": "6000",
    },
}

# Settings that may differ between brokers (``Cluster(broker_config={id: {...}})``).
PER_BROKER_KEYS = frozenset({"broker.rack"})

ELR_MIN_ISR = "min.insync.replicas"

# topic setting -> the broker setting it falls back to (Kafka's synonym)
TOPIC_CONFIGS: Mapping[str, str] = {
    "min.insync.replicas": "min.insync.replicas",
    "max.message.bytes": "message.max.bytes",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes",
    "segment.bytes": "log.segment.bytes",
    "cleanup.policy": "log.cleanup.policy",
    "message.timestamp.type": "log.message.timestamp.type",
    "compression.type": "compression.type",
}


def normalize_value(name: str, value: object) -> str:
    """Kafka's textual form of a Python value (``True`` -> ``"true"``, ``2`` -> ``"2"``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, str)):
        return str(value)
    raise ConfigError(
        f"{name}: expected a string, int or bool, got {type(value).__name__} {value!r}"
    )


def _checked(defn: ConfigDef, name: str, value: object) -> str:
    text = normalize_value(name, value)
    try:
        defn.parse(text)
    except ValueError as exc:
        raise ConfigError(f"{name}={text!r} is invalid: {exc}") from None
    return text


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerSettings:
    """The cluster's static broker settings, parsed (the caller's dicts are never modified)."""

    static: Mapping[str, str]
    per_broker: Mapping[int, Mapping[str, str]]
    profile: str = "fast"

    def default(self, name: str) -> str | None:
        """The value ``name`` takes when nobody set it: the profile's default."""
        return PROFILES[self.profile].get(name, BROKER_CONFIGS[name].default)

    def text(self, name: str) -> str | None:
        if name in self.static:
            return self.static[name]
        return self.default(name)

    def get_int(self, name: str) -> int:
        value = BROKER_CONFIGS[name].parse(self.text(name) or "")
        assert isinstance(value, int)
        return value

    def get_bool(self, name: str) -> bool:
        return self.text(name) == "true"

    def rack(self, broker_id: int) -> str | None:
        return self.per_broker.get(broker_id, {}).get("broker.rack", self.static.get("broker.rack"))


def parse_broker_settings(
    config: Mapping[str, object] | None,
    broker_config: Mapping[int, Mapping[str, object]] | None,
    broker_ids: tuple[int, ...],
    profile: str = "fast",
) -> BrokerSettings:
    """Validate ``Cluster(config=..., broker_config=..., profile=...)``; raise ConfigError
    naming the bad key or profile."""
    if profile not in PROFILES:
        raise ConfigError(f"unknown profile {profile!r}; the profiles are {sorted(PROFILES)}")
    static: dict[str, str] = {}
    for name, value in (config or {}).items():
        defn = BROKER_CONFIGS.get(name)
        if defn is None:
            known = ", ".join(sorted(BROKER_CONFIGS))
            raise ConfigError(f"unknown broker setting {name!r}; minibroker knows: {known}")
        static[name] = _checked(defn, name, value)
    per_broker: dict[int, dict[str, str]] = {}
    for broker_id, overrides in (broker_config or {}).items():
        if broker_id not in broker_ids:
            raise ConfigError(
                f"broker_config names broker {broker_id!r}, but the brokers are {list(broker_ids)}"
            )
        for name, value in overrides.items():
            if name not in PER_BROKER_KEYS:
                raise ConfigError(
                    f"{name!r} cannot differ between brokers; per-broker settings are "
                    f"{sorted(PER_BROKER_KEYS)} (put cluster-wide settings in config=)"
                )
            per_broker.setdefault(broker_id, {})[name] = _checked(BROKER_CONFIGS[name], name, value)
    settings = BrokerSettings(static=static, per_broker=per_broker, profile=profile)
    if settings.get_int("group.min.session.timeout.ms") > settings.get_int(
        "group.max.session.timeout.ms"
    ):
        raise ConfigError(
            "group.min.session.timeout.ms must not exceed group.max.session.timeout.ms "
            f"({settings.text('group.min.session.timeout.ms')} > "
            f"{settings.text('group.max.session.timeout.ms')})"
        )
    return settings


def validate_topic_configs(configs: Mapping[str, object] | None) -> dict[str, str]:
    """Check topic settings; raise ConfigError (Kafka: INVALID_CONFIG) naming the bad one."""
    checked: dict[str, str] = {}
    for name, value in (configs or {}).items():
        synonym = TOPIC_CONFIGS.get(name)
        if synonym is None:
            known = ", ".join(sorted(TOPIC_CONFIGS))
            raise ConfigError(f"unknown topic setting {name!r}; minibroker knows: {known}")
        checked[name] = _checked(BROKER_CONFIGS[synonym], name, value)
    return checked


_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(name: str) -> str | None:
    """Why Kafka refuses ``name`` as a topic name (``Topic.validate``), or None when legal."""
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return f"topic name cannot be {name!r}"
    if len(name) > 249:
        return f"topic name is {len(name)} characters long; the limit is 249"
    if not _TOPIC_NAME.fullmatch(name):
        return f"topic name {name!r} has characters other than ASCII letters, digits, '.', '_', '-'"
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class ResolvedConfig:
    """One entry of a DescribeConfigs answer."""

    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    type: ConfigType
    doc: str
    synonyms: tuple[tuple[str, str | None, ConfigSource], ...]


class ConfigStore:
    """Static settings plus the dynamic layers IncrementalAlterConfigs writes (pure state)."""

    def __init__(self, settings: BrokerSettings) -> None:
        self.settings = settings
        # With eligible leader replicas on (Kafka 4.1+), the controller writes the cluster-level
        # min.insync.replicas as a dynamic default at bootstrap, from its static config or the
        # default (KIP-966); DescribeConfigs names that layer, and it cannot be deleted.
        self._dynamic_default: dict[str, str] = {ELR_MIN_ISR: settings.text(ELR_MIN_ISR) or "1"}
        self._dynamic_broker: dict[int, dict[str, str]] = {}

    def _layers(self, name: str, broker_id: int) -> list[tuple[str, str | None, ConfigSource]]:
        """(synonym name, value, source) from most to least specific, as Kafka lists synonyms."""
        found: list[tuple[str, str | None, ConfigSource]] = []
        per_broker = self._dynamic_broker.get(broker_id, {})
        if name in per_broker:
            found.append((name, per_broker[name], ConfigSource.DYNAMIC_BROKER_CONFIG))
        if name in self._dynamic_default:
            found.append(
                (name, self._dynamic_default[name], ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
            )
        static = self.settings.per_broker.get(broker_id, {})
        if name in static:
            found.append((name, static[name], ConfigSource.STATIC_BROKER_CONFIG))
        elif name in self.settings.static:
            found.append((name, self.settings.static[name], ConfigSource.STATIC_BROKER_CONFIG))
        found.append((name, self.settings.default(name), ConfigSource.DEFAULT_CONFIG))
        return found

    def broker_text(self, name: str, broker_id: int) -> str | None:
        return self._layers(name, broker_id)[0][1]

    def topic_text(self, overrides: Mapping[str, str], name: str, broker_id: int) -> str | None:
        if name in overrides:
            return overrides[name]
        return self.broker_text(TOPIC_CONFIGS[name], broker_id)

    def topic_int(self, overrides: Mapping[str, str], name: str, broker_id: int) -> int:
        value = BROKER_CONFIGS[TOPIC_CONFIGS[name]].parse(
            self.topic_text(overrides, name, broker_id) or ""
        )
        assert isinstance(value, int)
        return value

    def topic_bool(self, overrides: Mapping[str, str], name: str, broker_id: int) -> bool:
        return self.topic_text(overrides, name, broker_id) == "true"

    def broker_int(self, name: str, broker_id: int) -> int:
        value = BROKER_CONFIGS[name].parse(self.broker_text(name, broker_id) or "")
        assert isinstance(value, int)
        return value

    def describe_broker(self, broker_id: int) -> list[ResolvedConfig]:
        entries = []
        for name, defn in BROKER_CONFIGS.items():
            layers = self._layers(name, broker_id)
            if name == "broker.rack":
                value = self.settings.rack(broker_id)
                source = (
                    ConfigSource.STATIC_BROKER_CONFIG
                    if value is not None
                    else ConfigSource.DEFAULT_CONFIG
                )
                layers = [(name, value, source)]
            entries.append(
                ResolvedConfig(
                    name=name,
                    value=layers[0][1],
                    source=layers[0][2],
                    read_only=not defn.dynamic,
                    type=defn.type,
                    doc=defn.doc,
                    synonyms=tuple(layers),
                )
            )
        return entries

    def describe_topic(self, overrides: Mapping[str, str], broker_id: int) -> list[ResolvedConfig]:
        entries = []
        for name, synonym in TOPIC_CONFIGS.items():
            layers = self._layers(synonym, broker_id)
            if name in overrides:
                layers.insert(0, (name, overrides[name], ConfigSource.DYNAMIC_TOPIC_CONFIG))
            defn = BROKER_CONFIGS[synonym]
            entries.append(
                ResolvedConfig(
                    name=name,
                    value=layers[0][1],
                    source=layers[0][2],
                    read_only=False,
                    type=defn.type,
                    doc=defn.doc,
                    synonyms=tuple(layers),
                )
            )
        return entries

    def check_dynamic_broker_change(
        self, name: str, value: str | None, *, cluster_wide: bool = False
    ) -> str | None:
        """Validate one dynamic broker change; returns the normalized value (None = delete)."""
        defn = BROKER_CONFIGS.get(name)
        if defn is None:
            raise ConfigError(f"unknown broker setting {name!r}")
        if not defn.dynamic:
            raise ConfigError(f"{name} cannot be changed at runtime (it is read-only)")
        if value is None and cluster_wide and name == ELR_MIN_ISR:
            raise ConfigError(f"Cluster-level {name} cannot be removed while ELR is enabled")
        if value is None:
            return None
        return _checked(defn, name, value)

    def set_dynamic_broker(self, broker_id: int | None, name: str, value: str | None) -> None:
        """Apply a change already checked; ``broker_id=None`` is the cluster-wide default."""
        layer = (
            self._dynamic_default
            if broker_id is None
            else self._dynamic_broker.setdefault(broker_id, {})
        )
        if value is None:
            layer.pop(name, None)
        else:
            layer[name] = value
