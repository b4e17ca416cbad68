"""Apache Kafka's jars, fetched with Maven from the pom beside this file, cached between runs.

The cache is a folder per pom content (``~/.cache/failover-partitioner/kafka/<hash>/``, or under
``$REALKAFKA_CACHE``): changing the version in the pom fetches the new release beside the old one.
A folder is used only once complete (a marker file written last), so a fetch cut short is redone.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

POM = Path(__file__).with_name("pom.xml")
_DONE = ".complete"


class Unavailable(RuntimeError):
    """Real Kafka cannot run here: the message says what is missing and what to do."""


@dataclass(frozen=True, slots=True, kw_only=True)
class KafkaJars:
    version: str
    folder: Path
    java: str

    @property
    def classpath(self) -> str:
        return os.pathsep.join(str(p) for p in sorted(self.folder.glob("*.jar")))


def kafka_version() -> str:
    match = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", POM.read_text())
    if match is None:
        raise Unavailable(f"{POM} names no <kafka.version>")
    return match.group(1)


def cache_root() -> Path:
    configured = os.environ.get("REALKAFKA_CACHE")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "failover-partitioner" / "kafka"


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise Unavailable(
            "real Kafka needs Java 17 or newer: no `java` on PATH (or JAVA_HOME/bin/java); "
            "install a JDK (e.g. `apt install openjdk-17-jre-headless`) or set JAVA_HOME"
        )
    return java


def ensure_jars(timeout_s: float = 600.0) -> KafkaJars:
    """The jars of the pom's Kafka release, fetched with Maven on first use."""
    java = _java()
    folder = cache_root() / hashlib.sha256(POM.read_bytes()).hexdigest()[:16]
    version = kafka_version()
    if not (folder / _DONE).exists():
        if shutil.which("mvn") is None:
            raise Unavailable(
                "real Kafka's jars come from Maven Central and `mvn` is not on PATH: install "
                "Maven (e.g. `apt install maven`), or point REALKAFKA_CACHE at a folder fetched "
                "elsewhere"
            )
        maven_fetch(POM, folder, timeout_s=timeout_s)
    return KafkaJars(version=version, folder=folder, java=java)


def maven_fetch(
    pom: Path,
    folder: Path,
    *,
    jars_in: str = "",
    build: Sequence[Sequence[str]] = (),
    timeout_s: float = 600.0,
) -> Path:
    """``pom``'s runtime jars in ``folder`` (its ``jars_in`` subfolder), fetched with Maven
    unless an earlier run completed it. ``build`` are further commands run after the fetch,
    ``{staging}`` in their arguments standing for the folder being filled."""
    if (folder / _DONE).exists():
        return folder
    mvn = shutil.which("mvn")
    if mvn is None:
        raise Unavailable(f"the jars of {pom.name} come from Maven Central: `mvn` is missing")
    fetch = [mvn, "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
             "-DincludeScope=runtime", "-DoutputDirectory={staging}/" + jars_in]  # fmt: skip
    return cached_build(
        folder,
        [fetch, *build],
        what=pom.name,
        hint="is Maven Central reachable?",
        timeout_s=timeout_s,
    )


def cached_build(
    folder: Path,
    commands: Sequence[Sequence[str]],
    *,
    what: str,
    hint: str,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 600.0,
) -> Path:
    """``folder`` filled by ``commands`` unless an earlier run completed it, ``{staging}`` in
    their arguments standing for the folder being filled. It is filled beside its place and
    moved there whole, so a run that fails or races another leaves no half-filled cache."""
    if (folder / _DONE).exists():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="fetch-", dir=folder.parent))
    try:
        for command in commands:
            command = [part.replace("{staging}", str(staging)) for part in command]
            done = subprocess.run(
                command,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
                env=None if env is None else {**os.environ, **env},
            )
            if done.returncode != 0:
                tail = (done.stdout + done.stderr).strip().splitlines()[-15:]
                raise Unavailable(
                    f"`{Path(command[0]).name}` for {what} failed (exit {done.returncode}); "
                    f"{hint} Its last lines:\n" + "\n".join(tail)
                )
        (staging / _DONE).write_text(what)
        if folder.exists():  # another run finished first: keep its copy
            shutil.rmtree(staging)
        else:
            staging.rename(folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return folder
