"""The dependency rule between the three packages, checked on the source itself.

``make lint`` runs the same rule through import-linter; this test keeps it in ``make test`` too,
and also guards against an import hidden inside a function.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

FORBIDDEN = {
    "retry_buffer": {
        "confluent_kafka",
        "aiokafka",
        "kafka",
        "kio",
        "pyspark",
        "minibroker",
        "failover_partitioner",
    },
    "minibroker": {"failover_partitioner", "retry_buffer", "confluent_kafka", "aiokafka", "kafka"},
    # The failover core decides; the shells own the clients, threads and event loops.
    "failover_partitioner/core": {
        "confluent_kafka",
        "aiokafka",
        "kafka",
        "pyspark",
        "minibroker",
        "threading",
        "asyncio",
    },
}


def _imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_respects_dependency_rule(package: str) -> None:
    files = sorted((SRC / package).rglob("*.py"))
    assert files, f"no sources found for {package}"
    offenders = {
        str(f.relative_to(SRC)): sorted(_imported_roots(f) & FORBIDDEN[package]) for f in files
    }
    offenders = {k: v for k, v in offenders.items() if v}
    assert offenders == {}, f"{package} imports what it must not: {offenders}"


@pytest.mark.parametrize("package", ["retry_buffer", "minibroker", "failover_partitioner"])
def test_every_package_ships_py_typed(package: str) -> None:
    assert (SRC / package / "py.typed").is_file()
