"""The demo's --report JSON: producers keyed by name, with the documented keys, JSON-clean."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from failover_partitioner.demo.cluster import DemoError
from failover_partitioner.demo.partitions import PartitionRow, Snapshot
from failover_partitioner.demo.report import FaultWindow, RunInfo, build_report
from failover_partitioner.demo.runner import check_writable, write_report
from failover_partitioner.demo.stats import Record, Status, summarize

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

RUN = RunInfo(
    topic="failover-demo",
    bootstrap_servers="127.0.0.1:1",
    embedded_cluster=True,
    duration_s=40.0,
    rate_per_s=300.0,
    min_insync_replicas=2,
    deadline_s=50.0,
    elapsed_s=55.0,
    plot=None,
)


def test_report_has_one_object_per_producer_and_the_fault_window() -> None:
    records = [Record(sent_s=0.0, status=Status.ACKED, done_s=0.004), Record(sent_s=0.1)]
    plain = summarize(
        name="plain", records=records, found={0: 1}, end_s=2.0, rerouted=0, possible_duplicates=None
    )
    failover = summarize(
        name="failover",
        records=records[:1],
        found={0: 1},
        end_s=2.0,
        rerouted=1,
        possible_duplicates=0,
    )
    fault = FaultWindow(
        kind="isolate",
        brokers=(4, 5),
        start_s=10.0,
        end_s=30.0,
        start_utc="2025-01-01T00:00:10+00:00",
        end_utc="2025-01-01T00:00:30+00:00",
        degraded_partitions=(2, 3),
    )
    snap = Snapshot(
        label="during",
        at_s=20.0,
        rows=(PartitionRow(partition=0, leader=4, replicas=(4, 5, 1), isr=(4,)),),
    )
    report = json.loads(
        json.dumps(
            build_report(summaries=[plain, failover], fault=fault, run=RUN, snapshots=[snap])
        )
    )
    assert set(report) == {"plain", "failover", "fault", "run", "partitions"}
    for name in ("plain", "failover"):
        assert set(report[name]) >= REQUIRED
    assert report["plain"]["lost"] == 1
    assert report["plain"]["possible_duplicates"] is None
    assert report["failover"]["rerouted"] == 1
    assert report["fault"]["start_s"] == 10.0
    assert report["fault"]["end_s"] == 30.0
    assert report["fault"]["brokers"] == [4, 5]
    assert report["fault"]["degraded_partitions"] == [2, 3]
    # Floats are rounded for reading: 2.0 - 0.1 is not printed as 1.9000000000000001.
    assert report["plain"]["longest_stall_s"] == 1.9
    assert report["plain"]["p50_ms"] == 4.0
    assert report["partitions"]["during"]["rows"][0]["state"] == "UNDER_MIN"
    assert report["run"]["rate_per_s"] == 300.0


def test_report_without_a_fault_says_so() -> None:
    report = build_report(summaries=[], fault=None, run=RUN, snapshots=[])
    assert report["fault"] is None


@pytest.mark.parametrize("name", ["fault", "run"])
def test_a_producer_name_may_not_shadow_a_report_key(name: str) -> None:
    s = summarize(name=name, records=[], found={}, end_s=1.0, rerouted=0, possible_duplicates=0)
    with pytest.raises(ValueError, match=repr(name)):
        build_report(summaries=[s], fault=None, run=RUN, snapshots=[])


def test_a_report_that_cannot_be_written_is_a_demo_error_naming_it(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    with pytest.raises(DemoError, match=f"cannot write the report to {a_file / 'r.json'}: "):
        write_report(a_file / "r.json", {"run": {}})
    written = write_report(tmp_path / "new" / "r.json", {"run": {}})
    assert json.loads(written.read_text()) == {"run": {}}


def test_outputs_are_checked_without_creating_anything(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    check_writable(a_file, option="--report")  # overwritten by the run
    check_writable(tmp_path / "new" / "deeper" / "r.json", option="--report")
    assert not (tmp_path / "new").exists()
    with pytest.raises(DemoError, match="is a folder; give --report a file"):
        check_writable(tmp_path, option="--report")
    with pytest.raises(DemoError, match=f"{a_file} is a file, not a folder; .*, or --no-plot"):
        check_writable(a_file / "x" / "p.png", option="--plot", alternative=", or --no-plot")
