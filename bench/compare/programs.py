"""Producers in other languages as programs of their own: the Java producer and Sarama's.

``JavaProducer.java`` and ``sarama/main.go`` take the same command line and print the same lines
(``JavaProducer.java``'s header says which), so one runner drives both: it starts the program in
a session of its own, starts the fault window when the program says "start", reads its
per-message outcomes into a ``Trace``, and kills it by its process id if it is still there when
the run ends, however it ends. Each is built once into a cache folder named after its sources,
beside Kafka's jars (``tests/realkafka/jars.py``).
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from tests.realkafka.jars import cache_root

from compare.contenders import FaultWindow, Load, Trace


@dataclass(frozen=True, slots=True, kw_only=True)
class Program:
    name: str  # for error messages
    command: tuple[str, ...]  # what comes before the program's own arguments


def cache_folder(*inputs: Path) -> Path:
    """The cache folder of what is built from ``inputs``: a change to one builds anew beside."""
    digest = hashlib.sha256(b"".join(path.read_bytes() for path in inputs)).hexdigest()[:16]
    return cache_root().parent / "compare" / digest


def run(
    program: Program,
    args: Sequence[str],
    *,
    log: IO[str],
    on_start: Callable[[], None],
    timeout_s: float,
) -> list[str]:
    """Run ``program`` with ``args``; ``on_start`` when it prints "start"; its other lines."""
    process = subprocess.Popen(
        [*program.command, *args],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline().strip()
        if first != "start":
            raise RuntimeError(f"the {program.name} did not start (said {first!r}); see the log")
        on_start()
        lines, _ = process.communicate(timeout=timeout_s)
        if process.returncode != 0:
            raise RuntimeError(f"the {program.name} exited with {process.returncode}; see the log")
        return lines.splitlines()
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()


def parse(lines: Sequence[str]) -> Trace:
    """The program's report as a ``Trace``."""
    trace = Trace()
    for line in lines:
        word, *rest = line.split()
        if word == "sent":
            trace.sent_s = [0.0] * int(rest[0])
        elif word == "block_us":
            trace.longest_call_s = int(rest[0]) / 1e6
        elif word == "elapsed_us":
            trace.elapsed_s = int(rest[0]) / 1e6
        elif word == "acked":  # burst mode: only the count
            trace.acked_s = dict.fromkeys(range(int(rest[0])), 0.0)
        elif word in ("a", "e"):
            i = int(rest[0])
            trace.sent_s[i] = int(rest[2]) / 1e6
            if word == "a":
                trace.ack(i, int(rest[3]) / 1e6)
            else:
                trace.fail(i, int(rest[3]) / 1e6, rest[4])
    return trace


def runner(
    program: Program, settings: Mapping[str, str], log: IO[str]
) -> Callable[[str, str, Load, FaultWindow], Trace]:
    """``program`` with its client's defaults plus ``settings`` (``key=value`` arguments)."""

    def run_once(bootstrap: str, topic: str, load: Load, window: FaultWindow) -> Trace:
        if load.count is None:
            head = ["steady", bootstrap, topic, repr(load.rate_per_s), repr(load.duration_s)]
        else:
            head = ["burst", bootstrap, topic, str(load.count), "0"]
        args = [*head, str(load.value_bytes), *(f"{k}={v}" for k, v in settings.items())]
        return parse(run(program, args, log=log, on_start=window.begin, timeout_s=600))

    return run_once
