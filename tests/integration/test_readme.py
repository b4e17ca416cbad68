"""Every example in the README runs, so it cannot rot (the Spark one is in tests/spark)."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer

from minibroker import Cluster
from tests.readme_blocks import readme_block


def _count(bootstrap: str, topic: str, expected: int, timeout_s: float = 30.0) -> int:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "readme-check",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + timeout_s
    try:
        while seen < expected and time.monotonic() < deadline:
            seen += sum(1 for m in consumer.consume(500, 0.5) if m.error() is None)
    finally:
        consumer.close()
    return seen


def test_producer_example_delivers_its_thousand_orders() -> None:
    code = readme_block("A producer application", "python")
    with Cluster(brokers=3, config={"min.insync.replicas": "2"}) as cluster:
        cluster.create_topic("orders", partitions=6, replication_factor=3)
        namespace: dict[str, object] = {"bootstrap": cluster.bootstrap_servers}
        exec(compile(code, "README.md", "exec"), namespace)
        assert namespace["undelivered"] == 0
        assert _count(cluster.bootstrap_servers, "orders", 1000) == 1000


def test_minibroker_example_runs_as_a_test() -> None:
    code = readme_block("Testing against a real-protocol cluster", "python")
    namespace: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), namespace)
    test = namespace["test_orders_survive_a_broker_crash"]
    assert callable(test)
    test()


def test_mirror_example_copies_and_renames(tmp_path: Path) -> None:
    command = shlex.split(readme_block("Mirroring between clusters", "sh").replace("\\\n", " "))
    assert command[0] == "failover-mirror"
    with Cluster(brokers=3) as source, Cluster(brokers=3) as target:
        source.create_topic("orders.eu", partitions=3, replication_factor=3)
        producer = Producer({"bootstrap.servers": source.bootstrap_servers})
        for i in range(500):
            producer.produce("orders.eu", value=b"%d" % i)
        assert producer.flush(30) == 0
        args = [
            {
                "src-kafka:9092": source.bootstrap_servers,
                "dst-kafka:9092": target.bootstrap_servers,
            }.get(a, a)
            for a in command[1:]
        ]
        proc = subprocess.Popen(
            [sys.executable, "-m", "failover_partitioner.mirror.cli", *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            copied = _count(target.bootstrap_servers, "src.orders.eu", 500, timeout_s=60)
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
        assert copied == 500, err.decode(errors="replace")[-2000:]
        assert proc.returncode == 0, err.decode(errors="replace")[-2000:]
