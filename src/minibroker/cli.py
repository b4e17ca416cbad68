"""``minibroker`` console script: run a cluster (``start``) and drive it from elsewhere (``ctl``).

    minibroker start --brokers 5 [--port 9092] [--control-port 9700] [--config k=v ...]
                     [--profile fast|kafka-defaults]
    minibroker ctl [--control-port 9700] stop-broker 2 | start-broker 2 | isolate 2 | heal 2
                   | slow 2 --delay-ms 500 | create-topic NAME [-p N] [-r N] [--config k=v]
                   | delete-topic NAME | describe [TOPIC] [--json]

``start`` prints the bootstrap servers on its first line (scripts read it), the control URL on
the second, and runs until Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import json
import logging
import os
import signal
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

from minibroker.errors import MinibrokerError

__all__ = ["format_describe", "main"]

DEFAULT_CONTROL_PORT = 9700
_SIGPIPE_EXIT = 128 + signal.SIGPIPE
_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _key_values(pairs: Sequence[str]) -> dict[str, str]:
    parsed = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--config expects KEY=VALUE, got {pair!r}")
        parsed[key.strip()] = value.strip()
    return parsed


def _port_type(lowest: int) -> Callable[[str], int]:
    """An argparse type: a TCP port from ``lowest`` to 65535 (0 lets the system pick one)."""

    def port(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
        if not lowest <= value <= 65535:
            raise argparse.ArgumentTypeError(
                f"{value} is not a TCP port number: give {lowest} to 65535"
                + (" (0 picks a free one)" if lowest == 0 else "")
            )
        return value

    return port


async def _run(args: argparse.Namespace) -> int:
    from minibroker.cluster import AsyncCluster  # here: `ctl` must not pay for kio's import
    from minibroker.control import ControlServer

    ports = [args.port + i for i in range(args.brokers)] if args.port else None
    cluster = AsyncCluster(
        args.brokers,
        args.config_values,
        host=args.host,
        ports=ports,
        profile=args.profile,
    )
    control = ControlServer(cluster, port=args.control_port)
    # First, so that a taken port (another `minibroker start`) is said before the cluster is
    # up; a request meanwhile is answered "the cluster is not running".
    try:
        await control.start()
    except OSError as exc:
        print(_control_port_error(args.control_port, exc), file=sys.stderr)
        return 2
    try:
        await cluster.start()
        print(cluster.bootstrap_servers, flush=True)
        print(f"control: {control.url}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
        print("minibroker: shutting down", file=sys.stderr, flush=True)
    finally:
        await control.close()
        await cluster.close()
    return 0


def _control_port_error(port: int, exc: OSError) -> str:
    """One line for a control port ``start`` cannot listen on: which port, and what to give."""
    why = os.strerror(exc.errno).lower() if exc.errno else str(exc)
    if exc.errno == errno.EADDRINUSE:
        why += " (another `minibroker start` running?)"
    other = port + 1 if port < 65535 else port - 1
    return (
        f"minibroker: cannot listen on the control port 127.0.0.1:{port} (--control-port, "
        f"default {DEFAULT_CONTROL_PORT}): {why}; give this cluster its own: --control-port 0 "
        f"(a free port, printed on the second line) or another, e.g. --control-port {other} "
        "(and the same to `minibroker ctl`)"
    )


def _request(port: int, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=data,
        method=method,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        payload = json.loads(exc.read() or b"{}")
        raise SystemExit(f"minibroker ctl: {payload.get('error', exc)}") from None
    except urllib.error.URLError as exc:
        raise SystemExit(
            f"minibroker ctl: no cluster control endpoint on 127.0.0.1:{port} ({exc.reason}); "
            "is `minibroker start` running, and is --control-port right?"
        ) from None


def _ids(values: Sequence[int]) -> str:
    return ",".join(str(v) for v in values)


def format_describe(described: dict[str, Any]) -> str:
    """Brokers, then one line per partition, in ``kafka-topics --describe`` style."""
    lines = []
    for broker in described["brokers"]:
        flags = []
        if broker["is_controller"]:
            flags.append("controller")
        if broker["isolated"]:
            flags.append("isolated")
        if broker["replication_delay_ms"]:
            flags.append(f"slow {broker['replication_delay_ms']:g} ms")
        lines.append(
            f"Broker: {broker['broker_id']}\tAddress: {broker['host']}:{broker['port']}\t"
            f"Rack: {broker['rack'] or '-'}\tStatus: {broker['status']}"
            + (f"\t({', '.join(flags)})" if flags else "")
        )
    for p in described["partitions"]:
        lines.append(
            f"Topic: {p['topic']}\tPartition: {p['partition']}\tLeader: "
            f"{p['leader'] if p['leader'] >= 0 else 'none'}\tReplicas: {_ids(p['replicas'])}\t"
            f"Isr: {_ids(p['isr'])}\tElr: {_ids(p['eligible_leader_replicas'])}\t"
            f"LastKnownElr: {_ids(p['last_known_elr'])}\tOffline: {_ids(p['offline_replicas'])}\t"
            f"LeaderEpoch: {p['leader_epoch']}\tHW: {p['high_watermark']}"
        )
    return "\n".join(lines)


def _ctl(args: argparse.Namespace) -> int:
    port = args.control_port
    command = args.command
    if command in ("stop-broker", "start-broker", "isolate", "heal", "slow"):
        action = {"stop-broker": "stop", "start-broker": "start"}.get(command, command)
        body = {"delay_ms": args.delay_ms} if command == "slow" else {}
        _request(port, "POST", f"/brokers/{args.broker}/{action}", body)
        print(f"broker {args.broker}: {command} done")
    elif command == "create-topic":
        _request(
            port,
            "POST",
            "/topics",
            {
                "name": args.name,
                "partitions": args.partitions,
                "replication_factor": args.replication_factor,
                "config": args.config_values,
            },
        )
        print(f"created topic {args.name}")
    elif command == "delete-topic":
        _request(port, "DELETE", f"/topics/{_quoted(args.name)}")
        print(f"deleted topic {args.name}")
    else:
        path = "/describe" + (f"?topic={_quoted(args.topic)}" if args.topic else "")
        described = _request(port, "GET", path)
        print(json.dumps(described, indent=2) if args.json else format_describe(described))
    return 0


def _quoted(name: str) -> str:
    """A topic name as one URL path segment or query value: a space or '/' cannot break it."""
    return urllib.parse.quote(name, safe="")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="minibroker", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="mode", required=True)

    start = commands.add_parser("start", help="run a cluster until Ctrl-C or SIGTERM")
    start.add_argument("--brokers", type=int, default=3)
    start.add_argument(
        "--port",
        type=_port_type(0),
        default=0,
        help="first broker port (next ones follow); default: any",
    )
    start.add_argument("--host", default="127.0.0.1")
    start.add_argument(
        "--control-port",
        type=_port_type(0),
        default=DEFAULT_CONTROL_PORT,
        help="port of the HTTP control endpoint `ctl` talks to (0: any, printed)",
    )
    start.add_argument(
        "--config", action="append", default=[], metavar="KEY=VALUE", help="broker setting"
    )
    start.add_argument(
        "--profile",
        choices=("fast", "kafka-defaults"),
        default="fast",
        help="defaults of the timing settings: fast (tests) or Kafka's own",
    )
    start.add_argument(
        "--log-level", type=str.upper, choices=_LOG_LEVELS, default="INFO", help="of stderr"
    )

    ctl = commands.add_parser("ctl", help="drive a running cluster")
    ctl.add_argument("--control-port", type=_port_type(1), default=DEFAULT_CONTROL_PORT)
    actions = ctl.add_subparsers(dest="command", required=True)
    for name in ("stop-broker", "start-broker", "isolate", "heal"):
        actions.add_parser(name).add_argument("broker", type=int)
    slow = actions.add_parser("slow")
    slow.add_argument("broker", type=int)
    slow.add_argument("--delay-ms", type=float, required=True)
    create = actions.add_parser("create-topic")
    create.add_argument("name")
    create.add_argument("-p", "--partitions", type=int, default=-1)
    create.add_argument("-r", "--replication-factor", type=int, default=-1)
    create.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    delete = actions.add_parser("delete-topic")
    delete.add_argument("name")
    describe = actions.add_parser("describe")
    describe.add_argument("topic", nargs="?")
    describe.add_argument("--json", action="store_true")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        args.config_values = _key_values(getattr(args, "config", None) or [])
    except ValueError as exc:
        parser.error(str(exc))  # exits 2, as for every other bad argument
    if args.mode == "start" and sys.version_info < (3, 11):
        # Its protocol library, kio, needs 3.11 (pyproject.toml); `ctl` only speaks HTTP.
        print(
            "minibroker: minibroker start needs Python 3.11 or later "
            f"(this is {sys.version_info[0]}.{sys.version_info[1]}); run it with Python 3.11+",
            file=sys.stderr,
        )
        return 2
    if args.mode == "ctl":
        try:
            code = _ctl(args)
            sys.stdout.flush()
        except BrokenPipeError:
            # The reader went away (`minibroker ctl describe | head`). Point stdout at
            # /dev/null so the flush at exit cannot fail again, and end as a shell reports a
            # writer that SIGPIPE ended. Python ignores SIGPIPE, so restoring its default
            # instead would also kill `start`'s server on a client that hung up.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return _SIGPIPE_EXIT
        return code
    logging.basicConfig(
        level=args.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return asyncio.run(_run(args))
    except MinibrokerError as exc:
        print(f"minibroker: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"minibroker: cannot listen: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
