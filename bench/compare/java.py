"""The Java producer contender: kafka-clients from Maven Central, a small program compiled once.

The jars come from ``bench/compare/pom.xml`` (``mvn dependency:copy-dependencies``) and the class
from ``JavaProducer.java`` (``javac``), both into a cache folder named after the pom's and the
source's contents, next to the broker's jars (``tests/realkafka/jars.py``), and reused after
(``fetched``, which MirrorMaker 2's and Spark's sink's jars go through too). ``programs.py``
runs it, one JVM per run.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from tests.realkafka.jars import Unavailable, maven_fetch

from compare.programs import Program, cache_folder

HERE = Path(__file__).parent
POM = HERE / "pom.xml"
SOURCE = HERE / "JavaProducer.java"


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
    folder = cache_folder(pom, *inputs)
    return maven_fetch(pom, folder, jars_in="lib", build=build, timeout_s=timeout_s)


def ensure_program(timeout_s: float = 600.0) -> Program:
    """kafka-clients and the compiled JavaProducer, fetched and built on first use."""
    java, javac = tool("java"), tool("javac")
    compile_ = [javac, "-nowarn", "-d", "{staging}/classes", "-cp", "{staging}/lib/*", str(SOURCE)]
    folder = fetched(POM, inputs=(SOURCE,), build=(compile_,), timeout_s=timeout_s)
    classpath = os.pathsep.join([str(folder / "classes"), str(folder / "lib" / "*")])
    return Program(
        name="Java producer",
        command=(java, "-Xmx256m", "-XX:+UseSerialGC", "-cp", classpath, "JavaProducer"),
    )
