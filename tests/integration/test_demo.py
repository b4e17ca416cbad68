"""``failover-demo`` end to end: the fault bites the plain producer, the failover one loses nothing.

Runs the real entry point (``main``) against the embedded 5-broker minibroker cluster, with a
short duration so the whole file stays well under a minute.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from failover_partitioner.demo import main
from minibroker import Cluster

REQUIRED = {
    "sent",
    "delivered",
    "lost",
    "failed",
    "possible_duplicates",
    "rerouted",
    "longest_stall_s",
    "p50_ms",
    "p99_ms",
}


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert width > 0
    assert height > 0


def run(tmp_path: Path, *args: str) -> tuple[int, dict[str, Any]]:
    report = tmp_path / "report.json"
    code = main(
        [*args, "--rate", "200", "--report", str(report), "--plot", str(tmp_path / "demo.png")]
    )
    return code, json.loads(report.read_text())


# Each fault lasts 40 % of the run: 5.6 s and 6.4 s, longer than request.timeout.ms (5 s).
# A leader holds an acks=all write it appended before the ISR shrank until the ISR is whole
# again or the request's timeout, and reads nothing else from that connection meanwhile; when
# each live leader holds one, nothing fails before a shorter fault ends and the failover side
# waits like the plain one (with 10 s runs, 8 of 60 by hand: no reroute, waits of 4-9.6 s).
@pytest.mark.parametrize(("fault", "duration"), [("isolate", "14"), ("stop", "16")])
def test_failover_producer_loses_nothing_while_the_plain_one_is_hurt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fault: str, duration: str
) -> None:
    code, report = run(tmp_path, "--duration", duration, "--fault", fault)
    out = capsys.readouterr().out
    assert code == 0, out
    plain, failover = report["plain"], report["failover"]
    for name in ("plain", "failover"):
        assert set(report[name]) >= REQUIRED
    # The fault bit: several partitions refused acks=all writes while it lasted.
    during = report["partitions"]["during"]["rows"]
    under = [r["partition"] for r in during if r["state"] in ("UNDER_MIN", "OFFLINE")]
    assert len(under) >= 2, during
    assert report["fault"]["degraded_partitions"] == under
    assert report["fault"]["kind"] == fault
    assert 0 < report["fault"]["start_s"] < report["fault"]["end_s"] <= float(duration) + 1
    # FailoverProducer: every message it sent is in the topic, and it said so on delivery.
    assert failover["sent"] > 0
    assert failover["lost"] == 0
    assert failover["delivered"] == failover["sent"]
    assert failover["failed"] == 0
    assert failover["undelivered"] == 0
    # It went around the degraded partitions: what failed there was sent elsewhere, or (its
    # metadata showed them degraded before a message failed there) nothing waited long.
    assert failover["rerouted"] > 0 or failover["longest_stall_s"] < 2.0, failover
    # Every message found more than once was reported as a possible duplicate.
    assert failover["duplicated_messages"] <= failover["possible_duplicates"]
    # The plain producer was hurt: its messages to the degraded partitions waited for the
    # heal (or failed, or never arrived), far longer than the failover producer's did.
    hurt = plain["lost"] + plain["failed"] + plain["undelivered"]
    assert hurt > 0 or plain["longest_stall_s"] >= 2.0, plain
    # Not compared: messages in flight when the ISR shrank wait out their request timeout on
    # both producers alike (minibroker, like Kafka 3.7+, no longer answers them with error 20),
    # so the count of messages later than a second can come out either way.
    assert plain["rerouted"] == 0
    assert plain["possible_duplicates"] is None
    assert_png(tmp_path / "demo.png")
    assert f"plot: {tmp_path / 'demo.png'}" in out
    assert "LOST (not in topic)" in out
    assert "UNDER MIN" in out


def test_existing_cluster_runs_without_a_fault_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with Cluster(brokers=3, config={"min.insync.replicas": "2"}) as cluster:
        code, report = run(tmp_path, "--duration", "4", "--bootstrap", cluster.bootstrap_servers)
        out = capsys.readouterr().out
        assert code == 0, out
        assert "fault injection disabled" in out
        assert report["fault"] is None
        for name in ("plain", "failover"):
            assert report[name]["sent"] > 0
            assert report[name]["lost"] == 0
        # The run's own topic is removed again from a cluster the demo does not own.
        assert report["run"]["topic"] not in cluster.topics()
    assert set(report["partitions"]) == {"before", "midway", "after"}
    assert_png(tmp_path / "demo.png")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--duration", "0"], "--duration 0"),
        (["--rate", "0"], "--rate 0"),
    ],
)
def test_bad_options_are_refused_before_anything_starts(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_an_unreachable_bootstrap_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Port 1 on loopback: nothing listens there.
    code = main(
        ["--bootstrap", "127.0.0.1:1", "--duration", "2", "--plot", str(tmp_path / "x.png")]
    )
    assert code == 2
    assert "cannot reach the cluster at '127.0.0.1:1'" in capsys.readouterr().out
