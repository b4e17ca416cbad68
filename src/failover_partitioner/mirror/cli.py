"""``failover-mirror``: the command line, in the MirrorMaker tradition.

Exit status: 0 after a clean stop (SIGTERM, Ctrl-C), 1 when a message finally failed or the
clients failed, 2 for bad flags or settings.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from collections.abc import Sequence
from dataclasses import asdict
from types import FrameType

from confluent_kafka import KafkaException

from ._config import PROVENANCE_FORMATS, MirrorOptions, TopicRouter, load_properties
from ._errors import MessageFailedError, MirrorConfigError, MirrorError
from ._gc import tune_gc
from ._mirror import Mirror
from ._offsets import PROVENANCE_NONE
from ._status import MirrorStatus, format_status
from ._topics import admin_config
from ._translate import translate

__all__ = ["main"]

PROG = "failover-mirror"


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Mirror Kafka topics from a source cluster to a target cluster. Produces through "
            "the failover producer, so target partitions below min.insync.replicas are routed "
            "around; commits each source partition only up to its first message not yet "
            "delivered (at-least-once)."
        ),
        epilog=f"To move a consumer group from the source to the target: {PROG} translate --help",
    )
    _add_clients_options(ap)
    _add_selection_options(ap)
    _add_messages_options(ap)
    _add_target_topics_options(ap)
    _add_timing_options(ap)
    _add_output_options(ap)
    return ap


def _port(text: str) -> int:
    """A TCP port number (argparse names the flag when this raises)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port number (0-65535)")
    return port


def _add_clients_options(ap: argparse.ArgumentParser) -> None:
    """Options: clusters, the group and the clients' settings."""
    ap.add_argument("--source", metavar="BOOTSTRAP", help="source cluster bootstrap servers")
    ap.add_argument("--target", metavar="BOOTSTRAP", help="target cluster bootstrap servers")
    ap.add_argument("--group", metavar="ID", help="consumer group id on the source")
    ap.add_argument(
        "--consumer.config",
        dest="consumer_config",
        metavar="FILE",
        help="Java-style properties for the source consumer (librdkafka names)",
    )
    ap.add_argument(
        "--producer.config",
        dest="producer_config",
        metavar="FILE",
        help="Java-style properties for the target producer (librdkafka names)",
    )


def _add_selection_options(ap: argparse.ArgumentParser) -> None:
    """Options: which source topics, and their target names."""
    ap.add_argument(
        "--include",
        metavar="REGEX",
        default=".*",
        help="mirror source topics whose whole name matches (default: all but internal '__*')",
    )
    ap.add_argument("--exclude", metavar="REGEX", help="skip source topics whose name matches")
    ap.add_argument(
        "--rename",
        metavar="TEMPLATE",
        default="{topic}",
        help="target topic name template, e.g. 'src.{topic}' (default: '{topic}')",
    )


def _add_messages_options(ap: argparse.ArgumentParser) -> None:
    """Options: what is sent for each message, and where."""
    ap.add_argument(
        "--max-in-flight",
        type=int,
        default=10_000,
        metavar="N",
        help="most messages consumed and not yet committed; bounds duplicates after a crash "
        "(default: 10000)",
    )
    ap.add_argument(
        "--dead-letter-topic",
        metavar="TOPIC",
        help="target topic for messages that cannot be delivered (default: stop instead)",
    )
    ap.add_argument(
        "--no-provenance-headers",
        dest="provenance_headers",
        action="store_false",
        help="do not add provenance headers",
    )
    ap.add_argument(
        "--provenance-format",
        choices=PROVENANCE_FORMATS,
        default="compact",
        help="compact: one header mirror.source = TOPIC/PARTITION/OFFSET; separate: "
        "mirror.source.topic, mirror.source.partition and mirror.source.offset (default: "
        "compact, the cheaper to write and to store)",
    )
    ap.add_argument(
        "--no-fast-lane",
        dest="fast_lane",
        action="store_false",
        help="hear of every delivery from the failover producer instead of learning deliveries "
        "in bulk on a second client while the target topics are healthy (slower; see "
        "docs/mirror.md)",
    )
    ap.add_argument(
        "--partitioning",
        choices=("auto", "preserve", "key"),
        default="auto",
        help="preserve: source partition p to target partition p while p is usable, routed "
        "around (and counted) while it is not; key: placement by key, as Kafka's default "
        "partitioner; auto: preserve when the target topic has at least as many partitions "
        "as its source, else key (default: auto)",
    )


def _add_target_topics_options(ap: argparse.ArgumentParser) -> None:
    """Options: target topics and offset syncs."""
    ap.add_argument(
        "--no-sync-topics",
        dest="sync_topics",
        action="store_false",
        help="do not create, grow or configure target topics (the target is managed "
        "elsewhere); a target with fewer partitions than its source is still reported",
    )
    ap.add_argument(
        "--topic-replication-factor",
        type=int,
        default=-1,
        metavar="N",
        help="replication factor of target topics the mirror creates (default: the target "
        "cluster's default.replication.factor)",
    )
    ap.add_argument(
        "--topic-config",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a topic config for every target topic, winning over the source's (repeatable)",
    )
    ap.add_argument(
        "--config-exclude",
        action="append",
        default=[],
        metavar="REGEX",
        help="source topic configs (whole names) not to copy, besides MirrorMaker 2's "
        "default exclusions (repeatable)",
    )
    ap.add_argument(
        "--config-sync-interval",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how often topic configs are copied again (default: 60)",
    )
    ap.add_argument(
        "--offset-syncs-topic",
        default="failover-mirror.offset-syncs",
        metavar="TOPIC",
        help="compacted target topic recording where source offsets are on the target, for "
        "'failover-mirror translate' (default: failover-mirror.offset-syncs)",
    )
    ap.add_argument(
        "--no-offset-syncs",
        dest="offset_syncs",
        action="store_false",
        help="write no offset syncs",
    )


def _add_timing_options(ap: argparse.ArgumentParser) -> None:
    """Options: commits, shutdown and topic refresh."""
    ap.add_argument(
        "--commit-interval",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="commit at least this often (default: 5)",
    )
    ap.add_argument(
        "--drain-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how long shutdown and rebalances wait for in-flight messages (default: 30)",
    )
    ap.add_argument(
        "--topic-refresh-interval",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how often to look for new source topics (default: 30)",
    )


def _add_output_options(ap: argparse.ArgumentParser) -> None:
    """Options: status, metrics and logs."""
    ap.add_argument(
        "--status-interval",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="print a status line this often; 0 turns it off (default: 10)",
    )
    ap.add_argument("--json", action="store_true", help="print status lines as JSON objects")
    ap.add_argument(
        "--metrics-port",
        type=_port,
        metavar="PORT",
        help="serve Prometheus metrics on this port (0 picks a free one; printed at start)",
    )
    ap.add_argument(
        "--metrics-addr",
        default="0.0.0.0",
        metavar="ADDR",
        help="address for the metrics endpoint (default: 0.0.0.0)",
    )
    ap.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="log level on stderr (default: INFO)",
    )


def _options(args: argparse.Namespace) -> MirrorOptions:
    consumer = _properties(args.consumer_config, "--consumer.config")
    producer = _properties(args.producer_config, "--producer.config")
    return MirrorOptions(
        source_bootstrap=args.source,
        target_bootstrap=args.target,
        group_id=args.group,
        consumer_config=consumer,
        producer_config=producer,
        include=args.include,
        exclude=args.exclude,
        rename=args.rename,
        max_in_flight=args.max_in_flight,
        dead_letter_topic=args.dead_letter_topic,
        provenance_headers=args.provenance_headers,
        provenance_format=args.provenance_format,
        fast_lane=args.fast_lane,
        commit_interval_s=args.commit_interval,
        drain_timeout_s=args.drain_timeout,
        topic_refresh_interval_s=args.topic_refresh_interval,
        status_interval_s=args.status_interval,
        partitioning=args.partitioning,
        sync_topics=args.sync_topics,
        topic_replication_factor=args.topic_replication_factor,
        topic_configs=_topic_configs(args.topic_config),
        config_exclude=tuple(args.config_exclude),
        config_sync_interval_s=args.config_sync_interval,
        offset_syncs_topic=args.offset_syncs_topic if args.offset_syncs else None,
    )


def _properties(path: str | None, flag: str) -> dict[str, str]:
    return load_properties(path, flag=flag) if path else {}


def _topic_configs(pairs: Sequence[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise MirrorConfigError(
                f"--topic-config {pair!r}: give NAME=VALUE, e.g. "
                "--topic-config retention.ms=86400000"
            )
        out[name.strip()] = value
    return out


def _translate_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog=f"{PROG} translate",
        description=(
            "Translate a consumer group's committed offsets on the source into offsets on the "
            "target that lose nothing (it may re-read a few messages: the output counts them), "
            "and with --commit set them for the same group on the target. Needs the mirror's "
            "provenance headers; offset syncs shorten the scan."
        ),
    )
    ap.add_argument("--source", metavar="BOOTSTRAP", required=True)
    ap.add_argument("--target", metavar="BOOTSTRAP", required=True)
    ap.add_argument("--group", metavar="ID", required=True, help="the consumer group to move")
    ap.add_argument("--consumer.config", dest="consumer_config", metavar="FILE")
    ap.add_argument("--producer.config", dest="producer_config", metavar="FILE")
    ap.add_argument("--include", metavar="REGEX", default=".*")
    ap.add_argument("--exclude", metavar="REGEX")
    ap.add_argument("--rename", metavar="TEMPLATE", default="{topic}")
    ap.add_argument("--offset-syncs-topic", default="failover-mirror.offset-syncs", metavar="TOPIC")
    told = ap.add_mutually_exclusive_group()
    told.add_argument(
        "--provenance-format",
        dest="provenance",
        choices=PROVENANCE_FORMATS,
        help="as the mirror ran with, where its offset syncs do not say (syncs written before "
        "they said, or none); unsaid, every message counts as unread",
    )
    told.add_argument(
        "--no-provenance-headers",
        dest="provenance",
        action="store_const",
        const=PROVENANCE_NONE,
        help="the mirror ran with --no-provenance-headers",
    )
    ap.add_argument(
        "--commit", action="store_true", help="commit the offsets for the group on the target"
    )
    ap.add_argument("--json", action="store_true", help="one JSON object per target partition")
    return ap


def translate_main(argv: Sequence[str]) -> int:
    args = _translate_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    try:
        source = _properties(args.consumer_config, "--consumer.config")
        target = _properties(args.producer_config, "--producer.config")
        source = {**admin_config(source), "bootstrap.servers": args.source}
        target = {**admin_config(target), "bootstrap.servers": args.target}
        never = frozenset([args.offset_syncs_topic])
        router = TopicRouter(
            include=args.include, exclude=args.exclude, rename=args.rename, never=never
        )
        result = translate(
            source_config=source,
            target_config=target,
            group=args.group,
            router=router,
            offset_syncs_topic=args.offset_syncs_topic,
            commit=args.commit,
            provenance=args.provenance,
        )
    except MirrorConfigError as exc:
        print(f"{PROG} translate: error: {exc}", file=sys.stderr)
        return 2
    except (MirrorError, KafkaException) as exc:
        print(f"{PROG} translate: error: {exc}", file=sys.stderr)
        return 1
    for t in result:
        if args.json:
            print(json.dumps(asdict(t), sort_keys=True))
        else:
            print(f"{t.target_topic}[{t.partition}] offset {t.offset:,}  re-reads {t.rereads:,}")
    if not args.json:
        done = "committed for" if args.commit else "to commit for (pass --commit)"
        print(
            f"{sum(t.rereads for t in result):,} messages will be read again; offsets "
            f"{done} group {args.group!r} on the target",
            file=sys.stderr,
        )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["translate"]:
        return translate_main(argv[1:])
    args = _parser().parse_args(argv)
    try:
        options = _options(args)
    except MirrorConfigError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=getattr(logging, args.log_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )

    registry = None
    if args.metrics_port is not None:
        from prometheus_client import CollectorRegistry, start_http_server

        registry = CollectorRegistry()
        try:
            server, _ = start_http_server(
                args.metrics_port, addr=args.metrics_addr, registry=registry
            )
        except OSError as exc:
            print(
                f"{PROG}: error: cannot serve metrics on {args.metrics_addr}:{args.metrics_port}: "
                f"{exc.strerror}",
                file=sys.stderr,
            )
            return 2
        # Told always: with --metrics-port 0 the port is the one the system picked.
        port = int(server.server_address[1])
        host = f"[{args.metrics_addr}]" if ":" in args.metrics_addr else args.metrics_addr
        print(f"{PROG}: metrics at http://{host}:{port}/metrics", file=sys.stderr, flush=True)

    mirror = Mirror(options, metrics_registry=registry)
    tune_gc()  # this process only mirrors: see tune_gc

    def on_signal(signum: int, frame: FrameType | None) -> None:
        mirror.stop()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}

    def on_status(status: MirrorStatus) -> None:
        print(format_status(status, as_json=args.json), flush=True)

    print(
        f"{PROG}: {options.source_servers} -> {options.target_servers}, group "
        f"{options.group!r}; SIGTERM or Ctrl-C stops cleanly",
        file=sys.stderr,
        flush=True,
    )
    try:
        mirror.run(on_status=on_status)
    except MirrorConfigError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr, flush=True)
        return 2
    except MessageFailedError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr, flush=True)
        return 1
    except (MirrorError, KafkaException) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
