"""The two mirrors as their users start them: MirrorMaker 2 standalone and ``failover-mirror``.

Each runs as a process of its own, in a session of its own, its stderr (and MirrorMaker's
stdout) in a log file; ``stop()`` asks it to stop (SIGTERM, as an operator or a service manager
does) and kills it by its process id if it has not exited within the grace time, however the
run ended.

MirrorMaker 2's jars come from ``mirrormaker.pom.xml`` through the same cache as the Java
producer's (``java.fetched``); it runs as ``org.apache.kafka.connect.mirror.MirrorMaker`` with an
``mm2.properties`` written here that holds only what a run needs (the clusters, the flow, the
topic): every other setting is MirrorMaker's default.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from compare import java

HERE = Path(__file__).parent
MIRRORMAKER_POM = HERE / "mirrormaker.pom.xml"
MIRRORMAKER_MAIN = "org.apache.kafka.connect.mirror.MirrorMaker"
# connect-mirror-maker.sh's heap when KAFKA_HEAP_OPTS is unset is -Xms256M -Xmx2G; a 2 GB
# ceiling is more than this machine should lend one process beside six brokers, and a copy of
# 100-byte records does not come near 512 MB.
MIRRORMAKER_JVM = ("-Xms256m", "-Xmx512m")
_EXCEPTION = re.compile(r"\b([A-Z]\w*(?:Exception|Error))\b")


def mirrormaker_version() -> str:
    match = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", MIRRORMAKER_POM.read_text())
    assert match is not None, f"{MIRRORMAKER_POM} names no <kafka.version>"
    return match.group(1)


def mirrormaker_classpath(timeout_s: float = 600.0) -> str:
    """connect-mirror and its dependencies, fetched on first use (``java.Unavailable`` if not)."""
    java.tool("java")
    return str(java.fetched(MIRRORMAKER_POM, timeout_s=timeout_s) / "lib" / "*")


class Service:
    """A process the harness started and stops: by its pid, SIGTERM first, SIGKILL after."""

    def __init__(self, command: Sequence[str], log_path: Path, *, json_stdout: bool) -> None:
        self.log_path = log_path
        self._log = log_path.open("ab")
        self.statuses: list[dict[str, Any]] = []
        self.process = subprocess.Popen(
            list(command),
            stdout=subprocess.PIPE if json_stdout else self._log,
            stderr=self._log,
            text=json_stdout,
            start_new_session=True,
        )
        self._reader: threading.Thread | None = None
        if json_stdout:
            self._reader = threading.Thread(target=self._read, daemon=True)
            self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        # Every status line is kept beside the log too: what the mirror said, second by second.
        with self.log_path.with_suffix(".status.jsonl").open("w") as kept:
            for line in self.process.stdout:
                if line.startswith("{"):
                    self.statuses.append(json.loads(line))
                    kept.write(line)

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, grace_s: float) -> int:
        """Its exit code (negative: the signal that ended it)."""
        try:
            if self.process.poll() is None:
                os.kill(self.process.pid, signal.SIGTERM)
                try:
                    self.process.wait(grace_s)
                except subprocess.TimeoutExpired:
                    os.kill(self.process.pid, signal.SIGKILL)
                    self.process.wait()
            return self.process.returncode
        finally:
            if self._reader is not None:
                self._reader.join(5)
            if self.process.stdout is not None:
                self.process.stdout.close()
            self._log.close()

    def log_summary(self) -> str:
        """How many WARN and ERROR lines it logged, and the exceptions they name most."""
        warnings, errors = 0, 0
        named: Counter[str] = Counter()
        with self.log_path.open(errors="replace") as lines:
            for line in lines:
                if " WARN " in line or " WARNING " in line:
                    warnings += 1
                elif " ERROR " in line:
                    errors += 1
                else:
                    continue
                named.update(set(_EXCEPTION.findall(line)))
        top = ", ".join(f"{name} x{count}" for name, count in named.most_common(3))
        return f"{warnings} WARN, {errors} ERROR log lines" + (f" ({top})" if top else "")


def mirrormaker_properties(bootstrap: str, alias: str, topic: str) -> str:
    """One flow ``alias -> target`` copying ``topic`` to ``alias.topic``; all else default.

    Source and target are the same cluster here, so the flow back is switched off; a source
    alias of its own per run gives every run fresh internal topics (offsets, configs, status),
    so no run resumes where another stopped.
    """
    return "\n".join(
        [
            f"clusters = {alias}, target",
            f"{alias}.bootstrap.servers = {bootstrap}",
            f"target.bootstrap.servers = {bootstrap}",
            f"{alias}->target.enabled = true",
            f"{alias}->target.topics = {topic}",  # regular expressions: a name matches itself
            f"target->{alias}.enabled = false",
            "",
        ]
    )


def start_mirrormaker(
    classpath: str, bootstrap: str, source: str, target: str, folder: Path
) -> Service:
    """MirrorMaker 2 copying ``source`` to ``target``, which must be ``<alias>.<source>``."""
    alias, _, rest = target.partition(".")
    assert rest == source, f"MirrorMaker 2 names the copy of {source} <alias>.{source}"
    properties = folder / f"mm2-{alias}.properties"
    properties.write_text(mirrormaker_properties(bootstrap, alias, source))
    command = [java.tool("java"), *MIRRORMAKER_JVM, "-XX:+UseSerialGC", "-cp", classpath,
               MIRRORMAKER_MAIN, str(properties)]  # fmt: skip
    return Service(command, folder / f"mm2-{alias}.log", json_stdout=False)


def start_failover_mirror(bootstrap: str, source: str, target: str, folder: Path) -> Service:
    """``failover-mirror`` with its defaults, copying ``source`` to ``target``."""
    group = f"failover-mirror-{target}"
    command = [
        sys.executable, "-m", "failover_partitioner.mirror.cli",
        "--source", bootstrap, "--target", bootstrap, "--group", group,
        "--include", re.escape(source), "--rename", target.replace(source, "{topic}"),
        "--json",
    ]  # fmt: skip
    return Service(command, folder / f"{target}.log", json_stdout=True)


def failover_mirror_report(service: Service, exit_code: int) -> str:
    status = service.statuses[-1] if service.statuses else {}
    counts = ", ".join(
        f"{key.replace('_', ' ')} {status.get(key, '?')}"
        for key in ("delivered", "rerouted", "possible_duplicates", "failed")
    )
    return f"exit {exit_code}; {counts}; {service.log_summary()}"


def mirrormaker_report(service: Service, exit_code: int) -> str:
    # A JVM that ran its shutdown hooks on SIGTERM exits with 128 + 15.
    how = "stopped on SIGTERM (exit 143)" if exit_code == 143 else f"exit {exit_code}"
    return f"{how}; {service.log_summary()}"
