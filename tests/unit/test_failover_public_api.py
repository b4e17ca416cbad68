"""The documented public names exist (README, docs/configuration.md, the issue's API)."""

from __future__ import annotations

import importlib
from pathlib import Path

import failover_partitioner

DOCUMENTED = {
    "FailoverProducer",
    "PartitionHealth",
    "TopicView",
    "PartitionView",
    "DeliveryReport",
    "UndeliveredMessage",
    "FailoverError",
    "ConfigError",
    "ProduceTimeout",
    "ProducerClosed",
    "AuthenticationFailed",
    "MetadataUnavailable",
    "FailoverConfigWarning",
    "FailoverOptions",
    "ProducerStatistics",
    "classify",
}


def test_documented_names_are_exported() -> None:
    assert set(failover_partitioner.__all__) >= DOCUMENTED
    for name in failover_partitioner.__all__:
        assert getattr(failover_partitioner, name) is not None, name


def test_the_producer_api_of_the_issue() -> None:
    from failover_partitioner import FailoverProducer

    for method in ("produce", "poll", "flush", "close", "health", "statistics"):
        assert callable(getattr(FailoverProducer, method))
    assert hasattr(FailoverProducer, "__enter__")
    assert hasattr(FailoverProducer, "__exit__")


def test_core_modules_import_no_kafka_client() -> None:
    # The asyncio producer builds on these; they must not pull confluent-kafka in by design.
    for module in ("health", "choose", "quarantine", "errors"):
        mod = importlib.import_module(f"failover_partitioner.{module}")
        source = Path(mod.__file__ or "").read_text()
        assert "import confluent_kafka" not in source
        assert "from confluent_kafka" not in source


def test_importing_the_library_leaves_the_demo_out() -> None:
    """``import failover_partitioner`` pulls in neither the demo's cluster (minibroker) nor its
    plot (matplotlib), nor pyspark: those are for the demo and the Spark writer alone."""
    import subprocess
    import sys

    code = (
        "import sys, failover_partitioner, failover_partitioner.producer, failover_partitioner.aio;"
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'minibroker', 'matplotlib', 'pyspark'}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_old_import_paths_still_work() -> None:
    """Modules moved into subpackages keep their old paths (users may import them)."""
    from failover_partitioner.aio import AsyncFailoverProducer as A
    from failover_partitioner.aio.producer import AsyncFailoverProducer
    from failover_partitioner.confluent import FailoverProducer
    from failover_partitioner.demo import main
    from failover_partitioner.producer import FailoverProducer as F
    from failover_partitioner.producer import ProducerStatistics

    assert A is AsyncFailoverProducer
    assert F is FailoverProducer
    assert ProducerStatistics is failover_partitioner.ProducerStatistics
    assert callable(main)
