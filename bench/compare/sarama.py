"""The Go producer contender: Sarama (``github.com/IBM/sarama``), the client of the original
failover partitioner, in a small program built once.

``sarama/main.go`` with its ``go.mod`` and ``go.sum`` (Sarama pinned to v1.61.1, fetched from
the Go module proxy into Go's own module cache) is built with ``go build`` into a cache folder
named after those three files, beside the Java producer's (``programs.cache_folder``), and
reused after. ``programs.py`` runs it, as it runs the Java producer.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.realkafka.jars import Unavailable, cached_build

from compare.programs import Program, cache_folder

HERE = Path(__file__).parent / "sarama"
SOURCES = (HERE / "go.mod", HERE / "go.sum", HERE / "main.go")
BINARY = "sarama-producer"


def ensure_program(timeout_s: float = 600.0) -> Program:
    """The Sarama producer program, built on first use (``Unavailable`` without Go)."""
    go = shutil.which("go")
    if go is None:
        raise Unavailable("the Sarama contender needs `go` (1.26 or newer, as go.mod says) on PATH")
    build = [go, "-C", str(HERE), "build", "-buildvcs=false", "-o", "{staging}/" + BINARY, "."]
    folder = cached_build(
        cache_folder(*SOURCES),
        [build],
        what="bench/compare/sarama",
        hint="is the Go module proxy reachable, and is Go 1.26 or newer?",
        # An older Go fails with what it needs, rather than fetching a newer toolchain itself.
        env={"GOTOOLCHAIN": "local"},
        timeout_s=timeout_s,
    )
    return Program(name="Sarama producer", command=(str(folder / BINARY),))
