"""``failover-demo``: a plain producer and the failover producer side by side through a fault.

Starts a 5-broker minibroker cluster, creates a topic with 12 partitions (RF 3, min ISR 2) and
produces to it at the same steady rate with confluent-kafka's Producer (acks=all, its defaults)
and with FailoverProducer. Midway, brokers 4 and 5 are cut off from the others (or stopped), so
several partitions keep a single in-sync replica and refuse acks=all writes; later the fault is
healed. The topic is then consumed back to count what really arrived. See docs/demo.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from failover_partitioner.demo.cluster import (
    DemoCluster,
    DemoError,
    EmbeddedCluster,
    ExternalCluster,
)
from failover_partitioner.demo.producers import CLIENT_LOGGER, FailoverSide, PlainSide, Side
from failover_partitioner.demo.render import partition_table, producer_table, verdict
from failover_partitioner.demo.runner import (
    FAULT_KINDS,
    Console,
    DemoOptions,
    DemoResult,
    check_writable,
    run_demo,
    write_report,
)
from failover_partitioner.demo.stats import DeliveryLog

__all__ = ["main"]

_DEFAULTS = DemoOptions()
# What a shell reports for a writer that SIGPIPE ended (`failover-demo | head -1`).
_SIGPIPE_EXIT = 128 + signal.SIGPIPE


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="failover-demo",
        description=(
            "Produce with a plain confluent-kafka Producer and with FailoverProducer at the same "
            "rate while partitions fall below min.insync.replicas, then count what was lost."
        ),
    )
    p.add_argument(
        "--duration",
        type=float,
        default=_DEFAULTS.duration_s,
        metavar="SECONDS",
        help="how long both producers produce (default %(default)g); "
        "the fault covers the middle 40%%",
    )
    p.add_argument(
        "--rate",
        type=float,
        default=_DEFAULTS.rate_per_s,
        metavar="MSG_PER_S",
        help="messages per second for each producer (default %(default)g)",
    )
    p.add_argument(
        "--fault",
        choices=FAULT_KINDS,
        default=_DEFAULTS.fault,
        help="isolate: cut brokers 4 and 5 off from the other brokers (clients still reach "
        "them), the network fault of the original report; stop: stop brokers 4 and 5 "
        "(default %(default)s)",
    )
    p.add_argument(
        "--bootstrap",
        metavar="SERVERS",
        help="run against an existing cluster instead of the embedded one "
        "(no fault is injected then)",
    )
    p.add_argument(
        "--topic",
        metavar="NAME",
        help="topic to use (default failover-demo; with --bootstrap a fresh "
        "failover-demo-<id>, deleted afterwards, unless NAME already exists)",
    )
    p.add_argument(
        "--plot",
        type=Path,
        default=_DEFAULTS.plot,
        metavar="FILE",
        help="PNG of delivered messages per second (default %(default)s)",
    )
    p.add_argument("--no-plot", action="store_true", help="do not draw the plot")
    p.add_argument("--report", type=Path, metavar="FILE", help="write the figures as JSON")
    p.add_argument(
        "--quiet", action="store_true", help="no progress or event lines, only the results"
    )
    p.add_argument(
        "-v", "--verbose", action="store_true", help="also show client and broker log lines"
    )
    return p


def _plain(bootstrap_servers: str, log: DeliveryLog) -> Side:
    return PlainSide(bootstrap_servers=bootstrap_servers, log=log)


def _failover(bootstrap_servers: str, log: DeliveryLog) -> Side:
    return FailoverSide(bootstrap_servers=bootstrap_servers, log=log)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        with _sigterm_interrupts():
            return _main(args)
    except BrokenPipeError:
        # The reader went away (`failover-demo | head -1`); the run's cleanup has happened on
        # the way out. Point stdout at /dev/null so the flush at exit cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return _SIGPIPE_EXIT


def _main(args: argparse.Namespace) -> int:
    if not args.bootstrap and sys.version_info < (3, 11):
        # minibroker's protocol library (kio) needs 3.11; an external cluster does not.
        print(
            f"failover-demo: the embedded cluster (minibroker) needs Python 3.11 or later "
            f"(this is {sys.version_info[0]}.{sys.version_info[1]}); run it with Python 3.11+, "
            "or pass --bootstrap to use an existing cluster",
            file=sys.stderr,
        )
        return 2
    _configure_logging(verbose=args.verbose)
    try:
        options = DemoOptions(
            duration_s=args.duration,
            rate_per_s=args.rate,
            fault=args.fault,
            bootstrap=args.bootstrap,
            topic=args.topic,
            plot=None if args.no_plot else args.plot,
            report=args.report,
            quiet=args.quiet,
        )
        # Found out now, not after the run: the outputs are the run's point.
        if options.plot is not None and _can_plot():
            check_writable(options.plot, option="--plot", alternative=", or --no-plot")
        if options.report is not None:
            check_writable(options.report, option="--report")
    except DemoError as e:
        print(f"failover-demo: {e}", file=sys.stderr)
        return 2

    def cluster_factory() -> DemoCluster:
        if options.bootstrap:
            return ExternalCluster(options.bootstrap)
        return EmbeddedCluster()

    console = Console(sys.stdout, quiet=options.quiet)
    try:
        result = run_demo(
            options,
            cluster_factory=cluster_factory,
            side_factories=(_plain, _failover),
            console=console,
        )
        written = _present(result, options, console)
    except DemoError as e:
        console.result(f"failover-demo: {e}")
        return 2
    except _Terminated:
        console.result("failover-demo: terminated")
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        console.result("failover-demo: interrupted")
        return 130
    failover = next(s for s in result.summaries if s.name == FailoverSide.name)
    if failover.lost:
        console.result(f"failover-demo: FailoverProducer lost {failover.lost} messages")
        return 1
    return 0 if written else 2


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C's KeyboardInterrupt so it takes the same way out: the
    producers closed, the embedded cluster stopped, the topic made on an external one deleted."""


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        raise _Terminated

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        # None: a handler not set from Python; the default is the closest we can restore.
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def _present(result: DemoResult, options: DemoOptions, console: Console) -> bool:
    """The tables and the verdict, then the plot and the report; False if one of those could
    not be written (the report is still written when the plot fails, and says so)."""
    console.result("")
    console.result(
        "Producers (lost = sent but not found when the topic was consumed back; "
        "latency = produce() to delivery report)"
    )
    console.result(producer_table(result.summaries))
    console.result("")
    console.result(
        f"Partitions of {result.run.topic} (min.insync.replicas={result.run.min_insync_replicas})"
    )
    console.result(
        partition_table(result.snapshots, min_insync_replicas=result.run.min_insync_replicas)
    )
    console.result("")
    console.result(_verdict(result))
    written = True
    plot: Path | None = None
    if options.plot is None:
        skipped: str | None = "--no-plot"
    elif not _can_plot():
        skipped = "matplotlib not installed"
        console.result(f"plot: skipped ({skipped})")
    else:
        try:
            plot = _plot(result, options.plot)
            skipped = None
            console.result(f"plot: {plot.resolve()}")
        except DemoError as e:
            skipped = str(e)
            written = False
            console.result(f"failover-demo: {e}")
    if options.report is not None:
        report = _with_plot(result.report, plot, skipped)
        try:
            console.result(f"report: {write_report(options.report, report)}")
        except DemoError as e:
            written = False
            console.result(f"failover-demo: {e}")
    return written


def _with_plot(report: dict[str, Any], plot: Path | None, skipped: str | None) -> dict[str, Any]:
    """The report, its ``run.plot`` naming the PNG only if one was written, else why not."""
    run = {**report["run"], "plot": None if plot is None else str(plot), "plot_skipped": skipped}
    return {**report, "run": run}


def _verdict(result: DemoResult) -> str:
    lines = [verdict(s) for s in result.summaries]
    plain = next((s for s in result.summaries if s.name == PlainSide.name), None)
    if result.fault is None:
        lines.append("No fault was injected, so both producers should look alike.")
    elif plain is not None and plain.not_delivered_within_1s:
        lines.append(
            "The plain producer retries a message only on the partition it first chose: its "
            "messages to the degraded partitions waited until the fault was healed, and would "
            "fail with _MSG_TIMED_OUT after delivery.timeout.ms (300 s by default)."
        )
    return "\n".join(lines)


def _can_plot() -> bool:
    """False without the `demo` extra: the plot is skipped, and said so, rather than fail."""
    return importlib.util.find_spec("matplotlib") is not None


def _plot(result: DemoResult, path: Path) -> Path:
    from failover_partitioner.demo.plot import plot_deliveries

    fault = result.fault
    window = None
    label = ""
    if fault is not None:
        window = (fault.start_s, fault.end_s if fault.end_s is not None else fault.start_s)
        brokers = " and ".join(str(b) for b in fault.brokers)
        label = f"fault: brokers {brokers} {'isolated' if fault.kind == 'isolate' else 'stopped'}"
    return plot_deliveries(
        path,
        series={s.name: s.delivered_per_s for s in result.summaries},
        fault=window,
        fault_label=label,
        produce_end_s=result.run.duration_s,
        end_s=result.run.deadline_s,
        title=(
            f"{result.run.rate_per_s:g} msg/s per producer to {result.run.topic} "
            f"(acks=all, min.insync.replicas={result.run.min_insync_replicas})"
        ),
    )


def _configure_logging(*, verbose: bool) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # librdkafka reports every refused connection and retry, minibroker every ISR change; the
    # demo's own event lines tell the story, these are there when asked for.
    CLIENT_LOGGER.setLevel(logging.DEBUG if verbose else logging.CRITICAL + 1)
    logging.getLogger("minibroker").setLevel(logging.INFO if verbose else logging.ERROR)


if __name__ == "__main__":
    sys.exit(main())
