"""``failover-demo`` end to end: the fault bites the plain producer, the failover one loses nothing.

Runs the real entry point (``main``) against the embedded 5-broker minibroker cluster, with a
short duration so the whole file stays well under a minute.
"""

from __future__ import annotations

import json
import signal
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from failover_partitioner.demo import cli as demo_cli
from failover_partitioner.demo import main
from failover_partitioner.demo.cluster import DemoError, EmbeddedCluster
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


def demo_process(*args: str) -> subprocess.Popen[str]:
    """``failover-demo`` in a process of its own, its stdout and stderr piped to the test."""
    return subprocess.Popen(
        [sys.executable, "-c", DEMO, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


DEMO = "import sys; from failover_partitioner.demo import main; sys.exit(main(sys.argv[1:]))"


@pytest.mark.parametrize("option", ["--plot", "--report"])
def test_an_output_file_that_cannot_be_written_is_refused_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str
) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    target = a_file / "out"
    assert main(["--duration", "2", option, str(target)]) == 2
    err = capsys.readouterr().err
    assert f"failover-demo: {option} {target}: {a_file} is a file, not a folder; give" in err
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize("topic", ["bad/topic", "t" * 300])
def test_an_illegal_topic_name_is_refused_before_the_run(
    capsys: pytest.CaptureFixture[str], topic: str
) -> None:
    assert main(["--duration", "2", "--no-plot", "--topic", topic]) == 2
    err = capsys.readouterr().err
    assert f"failover-demo: --topic {topic!r} is not a legal Kafka topic name" in err


def test_a_topic_the_embedded_cluster_refuses_is_a_demo_error() -> None:
    cluster = EmbeddedCluster()
    try:
        cluster.prepare_topic("taken")
        with pytest.raises(DemoError, match=r"cannot create topic 'taken' .*; choose another"):
            cluster.prepare_topic("taken")
    finally:
        cluster.close()


def test_a_plot_that_cannot_be_written_still_leaves_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check before the run passed; the folder went away meanwhile (simulated)."""
    monkeypatch.setattr(demo_cli, "check_writable", lambda *args, **kwargs: None)
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    plot = a_file / "demo.png"
    report = tmp_path / "report.json"
    args = ["--duration", "2", "--rate", "5", "--plot", str(plot), "--report", str(report)]
    assert main(args) == 2
    out = capsys.readouterr().out
    # A 2 s run's fault window, 30 % to 70 % of it, is said to the tenth of a second.
    assert "from 0.6 s to 1.4 s" in out
    [line] = [x for x in out.splitlines() if "cannot write the plot" in x]
    assert line.startswith(f"failover-demo: cannot write the plot to {plot}: "), line
    assert line.endswith("; give --plot a file in a writable folder, or --no-plot"), line
    assert f"report: {report}" in out
    run_info = json.loads(report.read_text())["run"]
    assert run_info["plot"] is None
    assert run_info["plot_skipped"].startswith(f"cannot write the plot to {plot}")


def test_a_plot_skipped_for_want_of_matplotlib_is_not_named_in_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(demo_cli, "_can_plot", lambda: False)
    report = tmp_path / "report.json"
    plot = tmp_path / "demo.png"
    args = ["--duration", "2", "--rate", "5", "--plot", str(plot), "--report", str(report)]
    assert main(args) == 0
    assert "plot: skipped (matplotlib not installed)" in capsys.readouterr().out
    run_info = json.loads(report.read_text())["run"]
    assert run_info["plot"] is None
    assert run_info["plot_skipped"] == "matplotlib not installed"
    assert not plot.exists()


def test_the_embedded_cluster_on_python_3_10_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # minibroker needs kio, which needs 3.11; with --bootstrap the demo does not need it.
    monkeypatch.setattr(sys, "version_info", (3, 10, 13, "final", 0))
    assert main(["--duration", "2", "--no-plot"]) == 2
    err = capsys.readouterr().err
    assert "failover-demo: the embedded cluster (minibroker) needs Python 3.11 or later " in err
    assert "(this is 3.10)" in err
    assert "--bootstrap" in err
    assert len(err.splitlines()) == 1


def test_a_reader_that_goes_away_ends_the_demo_as_sigpipe_would(tmp_path: Path) -> None:
    """`failover-demo | head -1`: status 141 and no traceback."""
    process = demo_process("--duration", "2", "--rate", "5", "--no-plot")
    try:
        assert process.stdout is not None
        assert process.stderr is not None
        first = process.stdout.readline()
        process.stdout.close()
        err = process.stderr.read()
        assert process.wait(timeout=60) == 128 + signal.SIGPIPE, err
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate()
    assert first.startswith("cluster: "), first
    assert "Traceback" not in err, err


def test_sigterm_deletes_the_topic_the_demo_made_on_an_existing_cluster() -> None:
    with Cluster(brokers=3, config={"min.insync.replicas": "2"}) as cluster:
        process = demo_process(
            "--bootstrap", cluster.bootstrap_servers, "--duration", "60", "--rate", "20"
        )
        try:
            assert process.stdout is not None
            topic = None
            for line in process.stdout:
                if line.startswith("topic "):
                    topic = line.split()[1].rstrip(":")
                if line.startswith("producing"):
                    break
            assert topic is not None
            assert topic in cluster.topics(), topic
            process.send_signal(signal.SIGTERM)
            out, err = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
        assert process.returncode == 128 + signal.SIGTERM, err
        assert "failover-demo: terminated" in out
        assert "Traceback" not in err, err
        assert topic not in cluster.topics()
