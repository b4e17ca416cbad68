"""`minibroker start` in a subprocess, driven by `minibroker ctl` from another process."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource

from minibroker.cli import format_describe

START = [sys.executable, "-m", "minibroker.cli", "start"]


def ctl(port: int, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "minibroker.cli", "ctl", "--control-port", str(port), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def running() -> Iterator[tuple[subprocess.Popen[str], str, int]]:
    process = subprocess.Popen(
        [
            *START,
            "--brokers",
            "3",
            "--control-port",
            "0",
            "--config",
            "min.insync.replicas=2",
            "--config",
            "replica.lag.time.max.ms=300",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        bootstrap = process.stdout.readline().strip()
        control = process.stdout.readline().strip()
        assert control.startswith("control: http://127.0.0.1:"), control
        yield process, bootstrap, int(control.rsplit(":", 1)[1])
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        if process.stdout is not None:
            process.stdout.close()


def describe(port: int, topic: str) -> dict[str, Any]:
    described: dict[str, Any] = json.loads(ctl(port, "describe", topic, "--json"))
    return described


def test_ctl_drives_a_cluster_started_in_another_process(
    running: tuple[subprocess.Popen[str], str, int],
) -> None:
    process, bootstrap, port = running
    assert len(bootstrap.split(",")) == 3
    ctl(port, "create-topic", "orders", "-p", "3", "-r", "3")
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    producer.produce("orders", b"hello", partition=0)
    assert producer.flush(10) == 0

    leader = describe(port, "orders")["partitions"][0]["leader"]
    ctl(port, "isolate", str(leader))
    # As on Kafka, followers that stop fetching leave the ISR once the leader has more than
    # they last fetched (an idle partition keeps them).
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1"})
    producer.produce("orders", b"after the isolation", partition=0)
    assert producer.flush(10) == 0
    deadline = time.monotonic() + 5
    while describe(port, "orders")["partitions"][0]["isr"] != [leader]:
        assert time.monotonic() < deadline, "the isolated leader's ISR did not shrink"
        time.sleep(0.1)
    table = ctl(port, "describe", "orders")
    assert f"Topic: orders\tPartition: 0\tLeader: {leader}\tReplicas: " in table
    assert f"Isr: {leader}\t" in table
    ctl(port, "heal", str(leader))
    ctl(port, "slow", "2", "--delay-ms", "50")
    ctl(port, "stop-broker", "3")
    brokers = {b["broker_id"]: b for b in describe(port, "orders")["brokers"]}
    assert brokers[3]["status"] in ("stopped", "fenced")
    assert brokers[2]["replication_delay_ms"] == 50
    ctl(port, "start-broker", "3")
    ctl(port, "delete-topic", "orders")

    process.send_signal(signal.SIGTERM)
    assert process.wait(15) == 0


def test_ctl_reports_errors_and_a_missing_endpoint(
    running: tuple[subprocess.Popen[str], str, int],
) -> None:
    _, _, port = running
    refused = subprocess.run(
        [
            sys.executable,
            "-m",
            "minibroker.cli",
            "ctl",
            "--control-port",
            str(port),
            "stop-broker",
            "9",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode != 0
    assert "no broker 9" in refused.stderr
    absent = subprocess.run(
        [sys.executable, "-m", "minibroker.cli", "ctl", "--control-port", "1", "describe"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert absent.returncode != 0
    assert "no cluster control endpoint" in absent.stderr


def test_ctl_output_into_a_closed_pipe_ends_quietly(
    running: tuple[subprocess.Popen[str], str, int],
) -> None:
    # `minibroker ctl describe | head`: head exits after its lines and the pipe closes while
    # ctl is still writing. Far more than a pipe buffer (64 KiB) of output makes the write
    # block until the reader is gone, so the broken pipe happens every time.
    _, _, port = running
    ctl(port, "create-topic", "wide", "-p", "2000", "-r", "1")
    reader = subprocess.Popen(
        [sys.executable, "-m", "minibroker.cli", "ctl", "--control-port", str(port), "describe"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert reader.stdout is not None
    assert reader.stderr is not None
    assert reader.stdout.readline().startswith("Broker: 1")
    reader.stdout.close()
    stderr = reader.stderr.read()
    reader.stderr.close()
    assert reader.wait(60) == 141  # what a shell reports for a writer SIGPIPE ended
    assert stderr == ""


def test_describe_table_format() -> None:
    described = {
        "brokers": [
            {
                "broker_id": 1,
                "host": "127.0.0.1",
                "port": 9092,
                "rack": None,
                "status": "running",
                "isolated": True,
                "replication_delay_ms": 0.0,
                "is_controller": True,
            }
        ],
        "partitions": [
            {
                "topic": "t",
                "partition": 0,
                "leader": -1,
                "replicas": [1, 2],
                "isr": [],
                "eligible_leader_replicas": [1],
                "last_known_elr": [1],
                "offline_replicas": [1, 2],
                "leader_epoch": 4,
                "high_watermark": 7,
            }
        ],
    }
    assert format_describe(described).splitlines() == [
        "Broker: 1\tAddress: 127.0.0.1:9092\tRack: -\tStatus: running\t(controller, isolated)",
        "Topic: t\tPartition: 0\tLeader: none\tReplicas: 1,2\tIsr: \tElr: 1\tLastKnownElr: 1\t"
        "Offline: 1,2\tLeaderEpoch: 4\tHW: 7",
    ]


def test_start_with_kafkas_default_timings() -> None:
    process = subprocess.Popen(
        [*START, "--brokers", "1", "--control-port", "0", "--profile", "kafka-defaults"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        bootstrap = process.stdout.readline().strip()
        admin = AdminClient({"bootstrap.servers": bootstrap})
        resource = ConfigResource(ConfigResource.Type.BROKER, "1")
        configs = admin.describe_configs([resource])[resource].result(10)
        for name, value in [
            ("replica.lag.time.max.ms", "30000"),
            ("broker.session.timeout.ms", "9000"),
            ("group.initial.rebalance.delay.ms", "3000"),
            ("group.min.session.timeout.ms", "6000"),
            ("auto.leader.rebalance.enable", "true"),
        ]:
            assert (configs[name].value, configs[name].is_default) == (value, True), name
    finally:
        process.kill()
        process.wait(10)
        if process.stdout is not None:
            process.stdout.close()
