"""The thin shell: start the cluster and both producers, inject the fault, count, report.

Everything that decides (pacing, the schedule, the accounting, the tables) lives in the pure
modules next to this one; this module only moves time forward and calls them.
"""

from __future__ import annotations

import os
import secrets
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from failover_partitioner.confluent._clients import signals_held
from failover_partitioner.core import check_topic
from failover_partitioner.demo.cluster import DemoCluster, DemoError, Topic
from failover_partitioner.demo.consume import ConsumedBack, consume_back
from failover_partitioner.demo.messages import encode
from failover_partitioner.demo.pacing import TokenBucket
from failover_partitioner.demo.partitions import PartitionRow, Snapshot, degraded
from failover_partitioner.demo.producers import Side
from failover_partitioner.demo.render import ProgressFigures, progress_line
from failover_partitioner.demo.report import FaultWindow, RunInfo, build_report
from failover_partitioner.demo.schedule import Schedule
from failover_partitioner.demo.stats import DeliveryLog, ProducerSummary, summarize

FAULT_KINDS = ("isolate", "stop")
# Brokers 4 and 5 of five: with RF=3 placement rotating over the brokers, several partitions
# keep a single in-sync replica (the seed talk's fault) while the rest stay writable.
FAULT_BROKERS = (4, 5)

SideFactory = Callable[[str, DeliveryLog], Side]


@dataclass(frozen=True, slots=True, kw_only=True)
class DemoOptions:
    """What ``failover-demo`` was asked to do. Validated here, before anything starts."""

    duration_s: float = 40.0
    rate_per_s: float = 300.0
    fault: str = "isolate"
    bootstrap: str | None = None
    topic: str | None = None
    plot: Path | None = Path("demo-output/failover-demo.png")
    report: Path | None = None
    quiet: bool = False
    drain_timeout_s: float = 10.0
    recovery_timeout_s: float = 20.0
    consume_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if not 2 <= self.duration_s <= 3600:
            raise DemoError(f"--duration {self.duration_s:g}: give 2 to 3600 seconds")
        if not 1 <= self.rate_per_s <= 100_000:
            raise DemoError(f"--rate {self.rate_per_s:g}: give 1 to 100000 messages a second")
        if self.fault not in FAULT_KINDS:
            raise DemoError(f"--fault {self.fault!r}: choose one of {', '.join(FAULT_KINDS)}")
        if self.topic is not None:
            try:
                check_topic(self.topic)  # the producers' own rule and words
            except ValueError as e:
                raise DemoError(f"--{e}") from None  # "--topic 'a/b' is not a legal ..."
        for name in ("drain_timeout_s", "recovery_timeout_s", "consume_timeout_s"):
            if getattr(self, name) < 0:
                raise DemoError(f"{name}={getattr(self, name)!r}: must not be negative")


@dataclass(frozen=True, slots=True, kw_only=True)
class DemoResult:
    summaries: tuple[ProducerSummary, ...]
    snapshots: tuple[Snapshot, ...]
    fault: FaultWindow | None
    run: RunInfo
    consumed: ConsumedBack
    report: dict[str, Any]
    degraded_during_fault: tuple[int, ...]


class Console:
    """Human output: one live progress line on a terminal, periodic plain lines otherwise."""

    def __init__(self, stream: TextIO, *, quiet: bool) -> None:
        self._stream = stream
        self._quiet = quiet
        self._tty = stream.isatty()
        self._line_open = False
        self.progress_every_s = 0.5 if self._tty else 5.0

    def event(self, text: str) -> None:
        if self._quiet:
            return
        self._close_line()
        self._stream.write(text + "\n")
        self._stream.flush()

    def progress(self, line: str) -> None:
        if self._quiet:
            return
        if self._tty:
            # A line that wraps cannot be redrawn with \r: cut it to the terminal's width.
            width = shutil.get_terminal_size(fallback=(160, 24)).columns
            self._stream.write("\r" + line[: max(20, width - 1)] + "\x1b[K")
            self._line_open = True
        else:
            self._stream.write(line + "\n")
        self._stream.flush()

    def result(self, text: str) -> None:
        self._close_line()
        self._stream.write(text + "\n")
        self._stream.flush()

    def _close_line(self) -> None:
        if self._line_open:
            self._stream.write("\n")
            self._line_open = False


@dataclass(slots=True)
class _Producing:
    """One side with its log and the thread that paces it."""

    side: Side
    log: DeliveryLog
    thread: threading.Thread | None = None
    error: BaseException | None = None
    last_delivered: int = 0
    stats: tuple[int, int | None] = field(default=(0, None))  # rerouted, possible duplicates


@dataclass(frozen=True, slots=True)
class _Run:
    """What every phase of one run works with; ``clock`` reads seconds since producing began."""

    options: DemoOptions
    cluster: DemoCluster
    topic: Topic
    run_id: str
    console: Console
    clock: Callable[[], float]


def run_demo(
    options: DemoOptions,
    *,
    cluster_factory: Callable[[], DemoCluster],
    side_factories: Sequence[SideFactory],
    console: Console,
) -> DemoResult:
    """Set up the cluster and topic, produce with every side through the schedule (the fault
    in its middle), then consume the topic back and account for every message."""
    run_id = secrets.token_hex(4)
    with ExitStack() as stack:
        cluster = cluster_factory()
        stack.callback(cluster.close)
        topic = _prepare_topic(cluster, options, run_id, console)
        schedule = Schedule.plan(
            duration_s=options.duration_s, with_fault=cluster.can_inject_faults
        )
        _announce_plan(options, schedule, console)

        t0 = time.monotonic()  # the run's clock starts when producing starts

        def clock() -> float:
            return time.monotonic() - t0

        run = _Run(options, cluster, topic, run_id, console, clock)
        producing, stop = _start_producing(run, side_factories, stack)
        faults = _FaultControl(cluster, topic, options.fault, console)
        snapshots = _follow_schedule(run, schedule, producing, faults)
        _stop_producing(run, producing, stop)
        end_s = clock()

        _wait_for_recovery(cluster, topic, timeout_s=options.recovery_timeout_s)
        snapshots.append(_snapshot(cluster, topic, "after", clock()))
        consumed = _consume_back(run)
        return _result(run, producing, consumed, faults, snapshots, end_s)
    raise AssertionError("unreachable: the with block returns")  # pragma: no cover


def _prepare_topic(
    cluster: DemoCluster, options: DemoOptions, run_id: str, console: Console
) -> Topic:
    """The run's topic, made (or found) with a leader for every partition."""
    inject = cluster.can_inject_faults
    console.event(f"cluster: {cluster.description}")
    if not inject:
        console.event(
            "fault injection disabled: the demo cannot break a cluster it does not run "
            "(leave out --bootstrap to use the embedded one)"
        )
    topic_name = options.topic or ("failover-demo" if inject else f"failover-demo-{run_id}")
    topic = cluster.prepare_topic(topic_name)
    _wait_for_leaders(cluster, topic, timeout_s=15.0)
    console.event(
        f"topic {topic.name}: {topic.partitions} partitions, replication factor "
        f"{topic.replication_factor}, min.insync.replicas {topic.min_insync_replicas}"
    )
    return topic


def _announce_plan(options: DemoOptions, schedule: Schedule, console: Console) -> None:
    if schedule.fault_start_s is not None and schedule.fault_end_s is not None:
        console.event(
            f"producing {options.rate_per_s:g} msg/s with each producer for "
            f"{options.duration_s:g} s; fault ({_fault_text(options.fault)}) from "
            f"{_seconds(schedule.fault_start_s)} s to {_seconds(schedule.fault_end_s)} s"
        )
    else:
        console.event(
            f"producing {options.rate_per_s:g} msg/s with each producer for "
            f"{options.duration_s:g} s, no fault"
        )


def _start_producing(
    run: _Run, side_factories: Sequence[SideFactory], stack: ExitStack
) -> tuple[list[_Producing], threading.Event]:
    """One side per factory, each paced by a thread of its own until the event is set (the
    stack sets it and closes the sides even if the run fails)."""
    producing = []
    for factory in side_factories:
        log = DeliveryLog(clock=run.clock)
        # Ctrl-C or SIGTERM while confluent-kafka reads a client's settings came out of it as
        # a TypeError (a traceback, exit 1): held until the side is made and will be closed.
        with signals_held():
            side = factory(run.cluster.bootstrap_servers, log)
            stack.callback(side.finish, 0.0)  # closes it even if the run fails
        producing.append(_Producing(side=side, log=log))
    stop = threading.Event()
    stack.callback(stop.set)
    for p in producing:
        p.thread = threading.Thread(
            target=_produce_loop,
            args=(p, run.topic.name, run.run_id, run.options.rate_per_s, run.clock, stop),
            name=f"failover-demo-{p.side.name}",
            daemon=True,
        )
        p.thread.start()
    return producing, stop


def _follow_schedule(
    run: _Run, schedule: Schedule, producing: Sequence[_Producing], faults: _FaultControl
) -> list[Snapshot]:
    """Until the run's duration is over: inject and heal the fault on time, show progress;
    returns the partition snapshots taken on the way."""
    cluster, topic, console, clock = run.cluster, run.topic, run.console, run.clock
    duration_s = run.options.duration_s
    snapshots: list[Snapshot] = []
    inject = cluster.can_inject_faults
    midway_s = None if inject else duration_s / 2
    if not inject:
        snapshots.append(_snapshot(cluster, topic, "before", clock()))
    last_tick = 0.0
    while True:
        now = clock()
        if schedule.fault_start_s is not None and faults.window is None:
            if now >= schedule.fault_start_s:
                snapshots.append(faults.inject(clock))
        elif schedule.fault_end_s is not None and faults.active and now >= schedule.fault_end_s:
            snapshots.append(faults.heal(clock))
        if midway_s is not None and now >= midway_s:
            snapshots.append(_snapshot(cluster, topic, "midway", now))
            midway_s = None
        _raise_worker_error(producing)
        if now >= duration_s:
            return snapshots
        if now - last_tick >= console.progress_every_s:
            _tick(console, producing, now, schedule.phase_at(now), now - last_tick)
            last_tick = now
        time.sleep(max(0.0, min(0.1, duration_s - now)))


def _stop_producing(run: _Run, producing: Sequence[_Producing], stop: threading.Event) -> None:
    """Stop the pacing threads, then wait for the sides' outstanding deliveries."""
    stop.set()
    for p in producing:
        assert p.thread is not None
        p.thread.join(timeout=60.0)
    _raise_worker_error(producing)
    drain_timeout_s = run.options.drain_timeout_s
    run.console.event(
        f"{run.clock():6.1f}s producing stopped; waiting up to {drain_timeout_s:g} s "
        "for outstanding deliveries"
    )
    _drain(producing, drain_timeout_s, run.console, run.clock)


def _consume_back(run: _Run) -> ConsumedBack:
    """What the topic really holds of this run; a partition not read to the end is reported."""
    topic, timeout_s = run.topic, run.options.consume_timeout_s
    run.console.event(
        f"{run.clock():6.1f}s consuming {topic.name} back to see what is really there"
    )
    consumed = consume_back(
        bootstrap_servers=run.cluster.bootstrap_servers,
        topic=topic.name,
        partitions=topic.partitions,
        run_id=run.run_id,
        timeout_s=timeout_s,
    )
    if consumed.unread:
        run.console.event(
            f"warning: partitions {_ids(consumed.unread)} could not be read to the end in "
            f"{timeout_s:g} s; their unread messages count as lost"
        )
    return consumed


def _result(
    run: _Run,
    producing: Sequence[_Producing],
    consumed: ConsumedBack,
    faults: _FaultControl,
    snapshots: list[Snapshot],
    end_s: float,
) -> DemoResult:
    """Each side's summary against what was consumed back, and the report of the run."""
    summaries = tuple(
        summarize(
            name=p.side.name,
            records=p.log.records(),
            found=consumed.found.get(p.side.name, {}),
            end_s=end_s,
            rerouted=p.stats[0],
            possible_duplicates=p.stats[1],
        )
        for p in producing
    )
    options = run.options
    info = RunInfo(
        topic=run.topic.name,
        bootstrap_servers=run.cluster.bootstrap_servers,
        embedded_cluster=run.cluster.can_inject_faults,
        duration_s=options.duration_s,
        rate_per_s=options.rate_per_s,
        min_insync_replicas=run.topic.min_insync_replicas,
        deadline_s=end_s,
        elapsed_s=run.clock(),
        plot=None if options.plot is None else str(options.plot),
    )
    report = build_report(summaries=summaries, fault=faults.window, run=info, snapshots=snapshots)
    return DemoResult(
        summaries=summaries,
        snapshots=tuple(snapshots),
        fault=faults.window,
        run=info,
        consumed=consumed,
        report=report,
        degraded_during_fault=faults.degraded_during,
    )


class _FaultControl:
    """Injects the fault and heals it, taking the partition snapshots on either side."""

    def __init__(self, cluster: DemoCluster, topic: Topic, kind: str, console: Console) -> None:
        self._cluster = cluster
        self._topic = topic
        self._kind = kind
        self._console = console
        self.window: FaultWindow | None = None
        self.degraded_during: tuple[int, ...] = ()

    @property
    def active(self) -> bool:
        return self.window is not None and self.window.end_s is None

    def inject(self, clock: Callable[[], float]) -> Snapshot:
        before = _snapshot(self._cluster, self._topic, "before", clock())
        self._cluster.inject(self._kind, FAULT_BROKERS)
        self.window = FaultWindow(
            kind=self._kind,
            brokers=FAULT_BROKERS,
            start_s=clock(),
            end_s=None,
            start_utc=_utc_now(),
            end_utc=None,
        )
        self._console.event(f"{self.window.start_s:6.1f}s fault: {_fault_text(self._kind)}")
        return before

    def heal(self, clock: Callable[[], float]) -> Snapshot:
        assert self.window is not None, "heal() before inject()"
        # The state just before healing is the fault at its worst.
        during = _snapshot(self._cluster, self._topic, "during", clock())
        self.degraded_during = degraded(
            during.rows, min_insync_replicas=self._topic.min_insync_replicas
        )
        self._cluster.heal(self._kind, FAULT_BROKERS)
        self.window = FaultWindow(
            kind=self.window.kind,
            brokers=self.window.brokers,
            start_s=self.window.start_s,
            end_s=clock(),
            start_utc=self.window.start_utc,
            end_utc=_utc_now(),
            degraded_partitions=self.degraded_during,
        )
        self._console.event(
            f"{self.window.end_s:6.1f}s healed; partitions that refused acks=all writes "
            f"during the fault: {_ids(self.degraded_during)}"
        )
        return during


def _produce_loop(
    p: _Producing,
    topic: str,
    run_id: str,
    rate_per_s: float,
    clock: Callable[[], float],
    stop: threading.Event,
) -> None:
    """Send at the bucket's pace until stopped; a refused message is retried on the next turn."""
    # Up to one second of catch-up: a stall of the thread (GC, a busy machine) costs no messages.
    bucket = TokenBucket(rate_per_s=rate_per_s, burst=max(1, int(rate_per_s)), now_s=clock())
    try:
        while not stop.is_set():
            for _ in range(bucket.take(clock())):
                seq = p.log.begin()
                if not p.side.produce(topic, encode(run_id, p.side.name, seq), seq):
                    p.log.withdraw(seq)
                    break
            p.side.poll(0)
            stop.wait(min(0.05, max(0.001, bucket.wait_s())))
    except BaseException as e:  # surfaced by the main thread, which owns the output
        p.error = e


def _drain(
    producing: Sequence[_Producing],
    timeout_s: float,
    console: Console,
    clock: Callable[[], float],
) -> None:
    """Finish both sides at once, so the drain takes the longer of the two, not their sum."""

    def finish(p: _Producing) -> None:
        try:
            p.side.finish(timeout_s)
            p.stats = (p.side.rerouted(), p.side.possible_duplicates())
        except BaseException as e:
            p.error = e

    threads = [threading.Thread(target=finish, args=(p,), daemon=True) for p in producing]
    for t in threads:
        t.start()
    last_tick = clock()
    while any(t.is_alive() for t in threads):
        for t in threads:
            t.join(timeout=0.1)
        now = clock()
        if now - last_tick >= console.progress_every_s:
            _tick(console, producing, now, "draining", now - last_tick)
            last_tick = now
    _raise_worker_error(producing)


def _tick(
    console: Console, producing: Sequence[_Producing], now: float, phase: str, dt_s: float
) -> None:
    figures = []
    for p in producing:
        sent, delivered, failed = p.log.counts()
        rate = (delivered - p.last_delivered) / dt_s if 0 < dt_s < 1e6 else 0.0
        p.last_delivered = delivered
        figures.append(
            ProgressFigures(
                name=p.side.name,
                rate_per_s=rate,
                sent=sent,
                delivered=delivered,
                failed=failed,
                rerouted=p.side.rerouted(),
            )
        )
    console.progress(progress_line(elapsed_s=now, phase=phase, figures=figures))


def _raise_worker_error(producing: Sequence[_Producing]) -> None:
    for p in producing:
        if p.error is not None:
            raise DemoError(f"the {p.side.name} producer failed: {p.error!r}") from p.error


def _snapshot(cluster: DemoCluster, topic: Topic, label: str, at_s: float) -> Snapshot:
    return Snapshot(label=label, at_s=at_s, rows=cluster.rows(topic))


def _wait_for_leaders(cluster: DemoCluster, topic: Topic, *, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        rows = cluster.rows(topic)
        if len(rows) == topic.partitions and all(r.leader is not None for r in rows):
            return
        if time.monotonic() >= deadline:
            raise DemoError(
                f"topic {topic.name}: not every partition has a leader after {timeout_s:g} s"
            )
        time.sleep(0.1)


def _wait_for_recovery(cluster: DemoCluster, topic: Topic, *, timeout_s: float) -> None:
    """Wait until every partition has its full ISR again, so the high watermarks are final."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _all_healthy(cluster.rows(topic)):
            return
        time.sleep(0.2)


def _all_healthy(rows: Sequence[PartitionRow]) -> bool:
    return bool(rows) and all(r.leader is not None and len(r.isr) == len(r.replicas) for r in rows)


def _fault_text(kind: str) -> str:
    brokers = " and ".join(str(b) for b in FAULT_BROKERS)
    if kind == "isolate":
        return f"brokers {brokers} cut off from the other brokers; clients still reach them"
    return f"brokers {brokers} stopped"


def _seconds(t_s: float) -> str:
    """12, 0.6, 1080: to a tenth, as short as that allows (a 2 s run's fault is 0.6 to 1.4 s)."""
    return f"{round(t_s, 1):g}"


def _ids(ids: Sequence[int]) -> str:
    return ", ".join(str(i) for i in ids) if ids else "none"


def _utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def check_writable(path: Path, *, option: str, alternative: str = "") -> None:
    """Refuse, before the run, an output file that cannot be written: a folder, a read-only
    file, or a path through a regular file or an unwritable folder. Nothing is created here;
    the write creates the missing folders."""
    remedy = f"give {option} a file in a writable folder{alternative}"
    try:
        problem = _unwritable(path)
    except OSError as e:  # e.g. a folder on the way that may not be searched
        problem = str(e.strerror or e)
    if problem is not None:
        raise DemoError(f"{option} {path}: {problem}; {remedy}")


def _unwritable(path: Path) -> str | None:
    """Why ``path`` cannot be written, or None."""
    if path.is_dir():
        return "is a folder"
    if path.exists():
        return None if os.access(path, os.W_OK) else "the file is not writable"
    folder = path.absolute().parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        return f"{folder} is a file, not a folder"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"the folder {folder} is not writable"
    return None


def write_report(path: Path, report: dict[str, Any]) -> Path:
    """Write the JSON report (parent folders created); a failure is a DemoError naming it."""
    import json

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=2) + "\n")
    except OSError as e:
        raise DemoError(
            f"cannot write the report to {path}: {e.strerror or e}; "
            "give --report a file in a writable folder"
        ) from e
    return path
