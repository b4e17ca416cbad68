"""The mirror's options: Java-style client property files, topic selection and naming, bounds.

Everything here validates at construction and never keeps a reference to a caller's dict.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from failover_partitioner._topics import legal_topic_name

from ._errors import MirrorConfigError

__all__ = [
    "PROVENANCE_FORMATS",
    "MirrorOptions",
    "TopicRouter",
    "load_properties",
    "parse_properties",
]

# Kafka's legal topic name (org.apache.kafka.common.internals.Topic).

# Settings that would let the consumer commit offsets the producer has not delivered.
_FORCED_CONSUMER = {"enable.auto.commit": "false", "enable.auto.offset.store": "false"}

_LINE_BREAK = re.compile(r"\r\n|\r|\n")

_PROPERTY_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse_properties(text: str, *, source: str = "<properties>") -> dict[str, str]:
    """Parse the text of a Java ``.properties`` file (``java.util.Properties.load`` rules).

    Comments start with ``#`` or ``!``; the key ends at the first unescaped ``=``, ``:`` or
    whitespace; a line ending in an odd number of backslashes continues on the next one;
    ``\\t``, ``\\n``, ``\\uXXXX`` and escaped separators are understood.
    """
    props: dict[str, str] = {}
    # Java ends lines only at \n, \r or \r\n (str.splitlines would also split at \v, \x1c...).
    lines = _LINE_BREAK.split(text)
    i = 0
    while i < len(lines):
        lineno = i + 1
        logical = lines[i].lstrip(" \t\f")
        i += 1
        if not logical or logical[0] in "#!":
            continue
        while _continues(logical) and i < len(lines):
            logical = logical[:-1] + lines[i].lstrip(" \t\f")
            i += 1
        if _continues(logical):
            logical = logical[:-1]
        key, value = _split_property(logical)
        props[_unescape(key, source, lineno)] = _unescape(value, source, lineno)
    return props


def _continues(line: str) -> bool:
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _split_property(line: str) -> tuple[str, str]:
    i = 0
    while i < len(line):
        ch = line[i]
        if ch == "\\":
            i += 2
            continue
        if ch in "=: \t\f":
            break
        i += 1
    key = line[:i]
    rest = line[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return key, rest


def _unescape(raw: str, source: str, lineno: int) -> str:
    if "\\" not in raw:
        return raw
    out: list[str] = []
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch != "\\" or i + 1 >= len(raw):
            out.append(ch)
            i += 1
            continue
        nxt = raw[i + 1]
        if nxt == "u":
            digits = raw[i + 2 : i + 6]
            if len(digits) != 4 or any(c not in string.hexdigits for c in digits):
                raise MirrorConfigError(
                    f"{source}:{lineno}: malformed \\uXXXX escape at character {i + 1} of "
                    "the value (not shown: it may be a password); write four hex digits "
                    "after \\u"
                )
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_PROPERTY_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def load_properties(path: str | Path, *, flag: str | None = None) -> dict[str, str]:
    """Read a Java-style properties file (``--consumer.config``/``--producer.config``; errors
    name ``flag``).

    The file must be UTF-8. Java's ``Properties.load`` reads ISO-8859-1, so a file written for
    Kafka's tools may not be: it is refused, naming the line, rather than read either way, since
    ISO-8859-1 would turn a UTF-8 value (a password, say) into other characters silently.
    ``\\uXXXX`` escapes work in both."""
    p = Path(path)
    what = f"{flag + ' ' if flag else ''}properties file {str(p)!r}"
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise MirrorConfigError(f"cannot read {what}: {exc.strerror}") from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise MirrorConfigError(
            f"{what} is not UTF-8 text (line {line} has byte 0x{data[exc.start]:02x}): save it "
            "as UTF-8 (e.g. iconv -f ISO-8859-1 -t UTF-8), or write such characters as "
            "\\uXXXX escapes"
        ) from exc
    return parse_properties(text, source=str(p))


class TopicRouter:
    """Which source topics are mirrored, and the target topic each one goes to.

    ``include`` and ``exclude`` are regular expressions matched against the whole topic name
    (as MirrorMaker 2's ``topics``/``topics.exclude``). Internal topics (``__consumer_offsets``
    and any name starting with ``__``) are never mirrored. ``rename`` is a template with one
    field, ``{topic}``: ``"{topic}"`` keeps names, ``"src.{topic}"`` prefixes them.
    """

    __slots__ = ("_cache", "_exclude", "_include", "_never", "_written", "rename")

    def __init__(
        self,
        *,
        include: str = ".*",
        exclude: str | None = None,
        rename: str = "{topic}",
        never: frozenset[str] = frozenset(),
    ) -> None:
        self._include = _compile("include", include)
        self._exclude = _compile("exclude", exclude) if exclude is not None else None
        _check_template(rename)
        self.rename = rename
        self._written = _written_pattern(rename)
        self._never = never
        self._cache: dict[str, str] = {}

    @property
    def include(self) -> str:
        return self._include.pattern

    def selects(self, topic: str) -> bool:
        if topic.startswith("__") or topic in self._never:
            return False
        if not self._include.fullmatch(topic):
            return False
        return self._exclude is None or not self._exclude.fullmatch(topic)

    @property
    def keeps_names(self) -> bool:
        return self.rename.format(topic="t") == "t"

    def could_write(self, topic: str) -> bool:
        """Whether ``rename`` makes ``topic`` out of some source topic's name: on one cluster,
        the mirror's output (whether or not its source is still there), never mirrored again,
        as MirrorMaker 2 never mirrors a remote topic back."""
        return self._written.fullmatch(topic) is not None

    def target(self, topic: str) -> str:
        """The target topic for a source topic."""
        name = self._cache.get(topic)
        if name is None:
            name = self.rename.format(topic=topic)
            if not legal_topic_name(name):
                raise MirrorConfigError(
                    f"--rename {self.rename!r} turns source topic {topic!r} into {name!r}, "
                    "which is not a legal Kafka topic name (letters, digits, '.', '_', '-', "
                    "at most 249 characters)"
                )
            self._cache[topic] = name
        return name


def _compile(flag: str, pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise MirrorConfigError(
            f"--{flag} {pattern!r} is not a valid regular expression: {exc}"
        ) from exc


def _check_template(template: str) -> None:
    try:
        fields = [
            (name, spec, conv) for _, name, spec, conv in string.Formatter().parse(template) if name
        ]
    except ValueError as exc:
        raise MirrorConfigError(f"--rename {template!r} is not a valid template: {exc}") from exc
    bad = [name for name, _, _ in fields if name != "topic"]
    if bad or not fields:
        raise MirrorConfigError(
            f"--rename {template!r} must contain {{topic}} and no other field "
            f"(found {sorted(set(bad)) or 'no field'}); e.g. '{{topic}}' or 'src.{{topic}}'"
        )
    # A format spec or conversion could give two source topics one name ('{topic:.6}' cuts
    # 'orders.eu' and 'orders.us' to 'orders'): their messages would merge in one target topic.
    if any(spec or conv for _, spec, conv in fields):
        raise MirrorConfigError(
            f"--rename {template!r}: write {{topic}} without a format spec or conversion (one "
            "such as ':.6' could give two source topics the same target topic)"
        )
    try:
        sample = template.format(topic="t")
    except (ValueError, IndexError, KeyError) as exc:
        raise MirrorConfigError(f"--rename {template!r} is not a valid template: {exc}") from exc
    if not legal_topic_name(sample):
        raise MirrorConfigError(
            f"--rename {template!r} yields illegal topic names such as {sample!r}; "
            "use only letters, digits, '.', '_' and '-' around {topic}"
        )


def _written_pattern(template: str) -> re.Pattern[str]:
    """The names ``template`` (checked) makes: ``{topic}`` stands for any name, the same one
    each time it appears."""
    parts, field = [], "(?P<topic>.+)"
    for literal, name, _, _ in string.Formatter().parse(template):
        parts.append(re.escape(literal))
        if name:
            parts.append(field)
            field = "(?P=topic)"
    return re.compile("".join(parts))


def refuse_copy_onto_itself(router: TopicRouter, why: str) -> None:
    """Source and target are one cluster (``why`` says how that is known): a rename that keeps
    names would have the mirror read its own output forever."""
    if router.keeps_names:
        raise MirrorConfigError(
            "source and target are the same cluster and --rename keeps topic names, so the "
            f"mirror would read its own output forever ({why}); pass e.g. --rename "
            "'copy.{topic}'"
        )


def _frozen(mapping: Mapping[str, object] | None, what: str) -> Mapping[str, str]:
    out: dict[str, str] = {}
    for key, value in (mapping or {}).items():
        if not isinstance(key, str):
            raise MirrorConfigError(f"{what}: key {key!r} is not a string")
        out[key] = value if isinstance(value, str) else str(value)
    return MappingProxyType(out)


@dataclass(frozen=True, slots=True, kw_only=True)
class MirrorOptions:
    """Everything a :class:`Mirror` needs, validated at construction.

    ``consumer_config`` and ``producer_config`` are librdkafka settings with Kafka's dotted names
    (what ``--consumer.config``/``--producer.config`` files hold); ``source_bootstrap``,
    ``target_bootstrap`` and ``group_id`` win over the same settings in them. The caller's dicts
    are copied, never changed.
    """

    source_bootstrap: str | None = None
    target_bootstrap: str | None = None
    group_id: str | None = None
    consumer_config: Mapping[str, str] = field(default_factory=dict)
    producer_config: Mapping[str, str] = field(default_factory=dict)
    include: str = ".*"
    exclude: str | None = None
    rename: str = "{topic}"
    max_in_flight: int = 10_000
    """Bound on messages consumed and not yet committed (so also on messages in the producer)."""
    dead_letter_topic: str | None = None
    provenance_headers: bool = True
    provenance_format: str = "compact"
    """``"compact"``: one header ``mirror.source`` = ``topic/partition/offset``; ``"separate"``:
    ``mirror.source.topic``, ``mirror.source.partition`` and ``mirror.source.offset``."""
    fast_lane: bool = True
    """While every partition of a target topic is usable, send on a second client that reports
    failures only, and learn deliveries in bulk (see docs/mirror.md, "Fast lane")."""
    commit_interval_s: float = 5.0
    status_interval_s: float = 10.0
    drain_timeout_s: float = 30.0
    """How long shutdown and partition revocation wait for in-flight messages."""
    topic_refresh_interval_s: float = 30.0
    poll_batch: int = 500
    """Most messages taken from the consumer in one call."""
    sync_topics: bool = True
    """Create missing target topics like their source (partition count, topic-level configs),
    add partitions when a source grows, and copy configs every ``config_sync_interval_s``
    (MirrorMaker 2's topic and config sync). Off: the target is managed elsewhere."""
    topic_replication_factor: int = -1
    """Replication factor of target topics the mirror creates; -1: the target's default."""
    topic_configs: Mapping[str, str] = field(default_factory=dict)
    """Topic-level settings for every target topic, winning over the source's."""
    config_exclude: tuple[str, ...] = ()
    """Regular expressions (whole names) of source topic configs not to copy, besides
    MirrorMaker 2's default exclusions (see ``_topics.EXCLUDED_CONFIGS``)."""
    config_sync_interval_s: float = 60.0
    offset_syncs_topic: str | None = "failover-mirror.offset-syncs"
    """Compacted topic on the target where the mirror records, as it commits, where source
    offsets are on the target (for ``failover-mirror translate``); None: none written."""
    partitioning: str = "auto"
    """``"preserve"``: source partition p goes to target partition p while p is usable, and
    elsewhere (counted as rerouted) while it is not; ``"key"``: placement by key (murmur2) as
    Kafka's default partitioner; ``"auto"``: preserve when the target topic has at least as
    many partitions as its source, else key (logged as a warning)."""

    def __post_init__(self) -> None:
        # The checks in order: a value's type, then the clients, names and bounds it sets.
        self._check_types()
        self._settle_client_configs()
        self._check_names()
        self._check_topic_settings()
        self._check_bounds()

    def _settle_client_configs(self) -> None:
        """The clients' settings: the flags win over the files; both clusters and the group
        must be named; auto-commit stays off (the mirror commits only what is delivered)."""
        consumer = dict(_frozen(self.consumer_config, "consumer config"))
        producer = dict(_frozen(self.producer_config, "producer config"))
        if self.source_bootstrap is not None:
            consumer["bootstrap.servers"] = self.source_bootstrap
        if self.group_id is not None:
            consumer["group.id"] = self.group_id
        if self.target_bootstrap is not None:
            producer["bootstrap.servers"] = self.target_bootstrap
        for what, conf, flag in (
            ("source", consumer, "--source"),
            ("target", producer, "--target"),
        ):
            if not conf.get("bootstrap.servers"):
                raise MirrorConfigError(
                    f"no {what} cluster: pass {flag} BOOTSTRAP or set bootstrap.servers in the "
                    f"{'consumer' if what == 'source' else 'producer'} config"
                )
        if not consumer.get("group.id"):
            raise MirrorConfigError(
                "no consumer group: pass --group ID or set group.id in the consumer config"
            )
        for key, forced in _FORCED_CONSUMER.items():
            given = consumer.get(key)
            if given is not None and given.strip().lower() != forced:
                raise MirrorConfigError(
                    f"consumer setting {key}={given} would commit offsets of messages not yet "
                    "delivered to the target; the mirror commits them itself, remove the setting"
                )
            consumer[key] = forced
        consumer.setdefault("auto.offset.reset", "earliest")
        producer.setdefault("acks", "all")
        object.__setattr__(self, "consumer_config", MappingProxyType(consumer))
        object.__setattr__(self, "producer_config", MappingProxyType(producer))

    def _check_names(self) -> None:
        """Topic selection and naming, and the choices given by name."""
        # Validates the patterns and the template.
        router = self.router()
        if self.source_servers == self.target_servers:
            # Told before connecting; two lists naming one cluster are told at start (Targets).
            refuse_copy_onto_itself(router, "the same bootstrap servers")
        if self.dead_letter_topic is not None and not legal_topic_name(self.dead_letter_topic):
            raise MirrorConfigError(
                f"--dead-letter-topic {self.dead_letter_topic!r} is not a legal Kafka topic name"
            )
        if self.offset_syncs_topic is not None and not legal_topic_name(self.offset_syncs_topic):
            raise MirrorConfigError(
                f"--offset-syncs-topic {self.offset_syncs_topic!r} is not a legal Kafka topic name"
            )
        if self.provenance_format not in PROVENANCE_FORMATS:
            raise MirrorConfigError(
                f"--provenance-format must be one of {', '.join(PROVENANCE_FORMATS)}, not "
                f"{self.provenance_format!r}"
            )
        if self.partitioning not in PARTITIONING_MODES:
            raise MirrorConfigError(
                f"--partitioning must be one of {', '.join(PARTITIONING_MODES)}, not "
                f"{self.partitioning!r}"
            )

    def _check_topic_settings(self) -> None:
        """What the topic sync applies to target topics."""
        topic_configs = dict(_frozen(self.topic_configs, "topic configs"))
        for key in topic_configs:
            if not key or "=" in key:
                raise MirrorConfigError(
                    f"--topic-config {key!r}: give a topic config as NAME=VALUE, "
                    "e.g. --topic-config retention.ms=604800000"
                )
        object.__setattr__(self, "topic_configs", MappingProxyType(topic_configs))
        for pattern in self.config_exclude:
            _compile("config-exclude", pattern)
        if (
            isinstance(self.topic_replication_factor, bool)
            or not isinstance(self.topic_replication_factor, int)
            or not (self.topic_replication_factor == -1 or self.topic_replication_factor >= 1)
        ):
            raise MirrorConfigError(
                "--topic-replication-factor must be a positive integer, or -1 for the target "
                f"cluster's default, not {self.topic_replication_factor!r}"
            )

    def _check_bounds(self) -> None:
        """Counts and intervals."""
        _positive_int("--max-in-flight", self.max_in_flight)
        _positive_int("poll_batch", self.poll_batch)
        for name, flag in (
            ("commit_interval_s", "--commit-interval"),
            ("drain_timeout_s", "--drain-timeout"),
            ("topic_refresh_interval_s", "--topic-refresh-interval"),
            ("config_sync_interval_s", "--config-sync-interval"),
        ):
            value = getattr(self, name)
            if not value > 0:
                raise MirrorConfigError(f"{flag} must be a positive number of seconds, not {value}")
        if not self.status_interval_s >= 0:
            raise MirrorConfigError(
                f"--status-interval must be >= 0 seconds (0 turns it off), "
                f"not {self.status_interval_s}"
            )

    def _check_types(self) -> None:
        """Refuse a wrong type by name, before a later check fails on it obscurely."""
        for name, kinds, what in (
            ("include", (str,), "a regular expression"),
            ("rename", (str,), "a template"),
            ("exclude", (str, type(None)), "a regular expression or None"),
            ("dead_letter_topic", (str, type(None)), "a topic name or None"),
            ("offset_syncs_topic", (str, type(None)), "a topic name or None"),
            ("consumer_config", (Mapping, type(None)), "a dict of settings"),
            ("producer_config", (Mapping, type(None)), "a dict of settings"),
            ("provenance_headers", (bool,), "True or False"),
            ("fast_lane", (bool,), "True or False"),
            ("sync_topics", (bool,), "True or False"),
            ("topic_configs", (Mapping, type(None)), "a dict of topic configs"),
            ("config_exclude", (tuple,), "a tuple of regular expressions"),
            ("partitioning", (str,), "'auto', 'preserve' or 'key'"),
        ):
            value = getattr(self, name)
            if not isinstance(value, kinds):
                raise MirrorConfigError(f"{name} must be {what}, not {value!r}")
        for name in (
            "commit_interval_s",
            "status_interval_s",
            "drain_timeout_s",
            "topic_refresh_interval_s",
            "config_sync_interval_s",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise MirrorConfigError(f"{name} must be a number of seconds, not {value!r}")

    @property
    def source_servers(self) -> str:
        return self.consumer_config["bootstrap.servers"]

    @property
    def target_servers(self) -> str:
        return self.producer_config["bootstrap.servers"]

    @property
    def group(self) -> str:
        return self.consumer_config["group.id"]

    def router(self) -> TopicRouter:
        never = frozenset(t for t in (self.dead_letter_topic, self.offset_syncs_topic) if t)
        return TopicRouter(
            include=self.include, exclude=self.exclude, rename=self.rename, never=never
        )


PROVENANCE_FORMATS = ("compact", "separate")
PARTITIONING_MODES = ("auto", "preserve", "key")


def _positive_int(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise MirrorConfigError(f"{name} must be a positive integer, not {value!r}")
