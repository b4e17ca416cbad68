"""The Java producer contender: kafka-clients from Maven Central, a small program compiled once.

The jars come from ``bench/compare/pom.xml`` (``mvn dependency:copy-dependencies``) and the class
from ``JavaProducer.java`` (``javac``), both into a cache folder named after the pom's and the
source's contents, next to the broker's jars (``tests/realkafka/jars.py``), and reused after
(``fetched``, which MirrorMaker 2's jars go through too).
Each run is one JVM, started in a session of its own and killed by its process id when the run
ends, however it ends.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from tests.realkafka.jars import Unavailable, cache_root, maven_fetch

HERE = Path(__file__).parent
POM = HERE / "pom.xml"
SOURCE = HERE / "JavaProducer.java"


@dataclass(frozen=True, slots=True, kw_only=True)
class JavaProgram:
    java: str
    classpath: str


def tool(name: str) -> str:
    home = os.environ.get("JAVA_HOME")
    path = str(Path(home) / "bin" / name) if home else shutil.which(name)
    if not path or not Path(path).exists():
        raise Unavailable(f"the Java contenders need `{name}` (a JDK 17+) on PATH or in JAVA_HOME")
    return path


def fetched(
    pom: Path,
    *,
    inputs: Sequence[Path] = (),
    build: Sequence[Sequence[str]] = (),
    timeout_s: float = 600.0,
) -> Path:
    """The runtime jars of ``pom`` in ``<folder>/lib``, fetched with Maven on first use.

    ``build`` are further commands run after the fetch, with ``{staging}`` in their arguments
    standing for the folder being filled; ``inputs`` are the files they read, so a change to one
    fetches and builds anew beside the old folder.
    """
    digest = hashlib.sha256(
        pom.read_bytes() + b"".join(path.read_bytes() for path in inputs)
    ).hexdigest()[:16]
    folder = cache_root().parent / "compare" / digest
    return maven_fetch(pom, folder, jars_in="lib", build=build, timeout_s=timeout_s)


def ensure_program(timeout_s: float = 600.0) -> JavaProgram:
    """kafka-clients and the compiled JavaProducer, fetched and built on first use."""
    java, javac = tool("java"), tool("javac")
    compile_ = [javac, "-nowarn", "-d", "{staging}/classes", "-cp", "{staging}/lib/*", str(SOURCE)]
    folder = fetched(POM, inputs=(SOURCE,), build=(compile_,), timeout_s=timeout_s)
    classpath = os.pathsep.join([str(folder / "classes"), str(folder / "lib" / "*")])
    return JavaProgram(java=java, classpath=classpath)


def run(
    program: JavaProgram,
    args: Sequence[str],
    *,
    log: IO[str],
    on_start: Callable[[], None],
    timeout_s: float,
) -> list[str]:
    """Run JavaProducer with ``args``; ``on_start`` when it prints "start"; its other lines."""
    command = [program.java, "-Xmx256m", "-XX:+UseSerialGC", "-cp", program.classpath]
    process = subprocess.Popen(
        [*command, "JavaProducer", *args],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline().strip()
        if first != "start":
            raise RuntimeError(f"the Java producer did not start (said {first!r}); see the log")
        on_start()
        lines, _ = process.communicate(timeout=timeout_s)
        if process.returncode != 0:
            raise RuntimeError(f"the Java producer exited with {process.returncode}; see the log")
        return lines.splitlines()
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
