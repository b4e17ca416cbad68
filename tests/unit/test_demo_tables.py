"""The demo's partition states and its text tables, as a person reads them."""

from __future__ import annotations

import pytest

from failover_partitioner.demo.partitions import (
    PartitionRow,
    PartitionState,
    Snapshot,
    classify,
    degraded,
)
from failover_partitioner.demo.render import (
    ProgressFigures,
    partition_table,
    producer_table,
    progress_line,
    verdict,
)
from failover_partitioner.demo.stats import ProducerSummary


def row(
    p: int, leader: int | None, replicas: tuple[int, ...], isr: tuple[int, ...]
) -> PartitionRow:
    return PartitionRow(partition=p, leader=leader, replicas=replicas, isr=isr)


@pytest.mark.parametrize(
    ("r", "state"),
    [
        (row(0, 1, (1, 2, 3), (1, 2, 3)), PartitionState.HEALTHY),
        (row(0, 1, (1, 2, 3), (1, 2)), PartitionState.AT_RISK),
        (row(0, 1, (1, 2, 3), (1,)), PartitionState.UNDER_MIN),
        (row(0, None, (1, 2, 3), (1,)), PartitionState.OFFLINE),
        (row(0, -1, (1, 2, 3), ()), PartitionState.OFFLINE),
        # Kafka's effective minimum is min(min.insync.replicas, RF): RF=1 with min ISR 2 is usable.
        (row(0, 1, (1,), (1,)), PartitionState.AT_RISK),
    ],
)
def test_classify_uses_the_effective_minimum(r: PartitionRow, state: PartitionState) -> None:
    assert classify(r, min_insync_replicas=2) is state


def test_degraded_lists_partitions_that_refuse_acks_all() -> None:
    rows = [
        row(0, 1, (1, 2, 3), (1, 2, 3)),
        row(1, 2, (2, 3, 4), (2,)),
        row(2, 3, (3, 4, 5), (3, 4)),
        row(3, None, (4, 5, 1), ()),
    ]
    assert degraded(rows, min_insync_replicas=2) == (1, 3)


def summary(name: str, **changes: object) -> ProducerSummary:
    base: dict[str, object] = {
        "name": name,
        "sent": 1000,
        "delivered": 1000,
        "failed": 0,
        "undelivered": 0,
        "found": 1000,
        "lost": 0,
        "lost_after_ack": 0,
        "duplicates": 0,
        "duplicated_messages": 0,
        "possible_duplicates": 0,
        "rerouted": 0,
        "longest_stall_s": 0.2,
        "not_delivered_within_1s": 0,
        "p50_ms": 3.25,
        "p99_ms": 41.0,
        "delivered_per_s": (500, 500),
    }
    base.update(changes)
    return ProducerSummary(**base)  # type: ignore[arg-type]  # built from a dict of test values


def test_producer_table_puts_producers_side_by_side() -> None:
    text = producer_table(
        [
            summary(
                "plain",
                delivered=700,
                lost=300,
                undelivered=300,
                possible_duplicates=None,
                longest_stall_s=16.04,
                p99_ms=None,
            ),
            summary("failover", rerouted=412),
        ]
    )
    lines = text.splitlines()
    assert lines[0].split() == ["plain", "failover"]
    by_label = {line[:26].strip(): line[26:].split() for line in lines[1:]}
    assert by_label["LOST (not in topic)"] == ["300", "0"]
    assert by_label["delivered (acknowledged)"] == ["700", "1000"]
    assert by_label["possible duplicates"] == ["n/a", "0"]
    assert by_label["rerouted"] == ["0", "412"]
    assert by_label["longest stall"] == ["16.0", "s", "0.2", "s"]
    assert by_label["p50 delivery latency"] == ["3.2", "ms", "3.2", "ms"]
    assert by_label["p99 delivery latency"] == ["-", "41", "ms"]
    # Right-aligned numbers: every data line has the same width as the header.
    assert len({len(line) for line in lines}) == 1


def test_partition_table_shows_each_snapshot_side_by_side() -> None:
    before = Snapshot(
        label="before",
        at_s=9.5,
        rows=(row(0, 1, (1, 2, 3), (1, 2, 3)), row(1, 4, (4, 5, 1), (4, 5, 1))),
    )
    during = Snapshot(
        label="during",
        at_s=20.0,
        rows=(row(0, 1, (1, 2, 3), (1, 2, 3)), row(1, 4, (4, 5, 1), (4,))),
    )
    text = partition_table([before, during], min_insync_replicas=2)
    lines = text.splitlines()
    assert "before (t=9.5s)" in lines[0]
    assert lines[0].index("during (t=20.0s)") == lines[1].index("Leader", lines[1].index("State"))
    assert lines[1].split() == ["Partition", "Replicas"] + ["Leader", "ISR", "State"] * 2
    assert lines[2].split() == ["0", "1,2,3", "1", "1,2,3", "healthy", "1", "1,2,3", "healthy"]
    assert lines[3].split() == ["1", "4,5,1", "4", "4,5,1", "healthy", "4", "4", "UNDER", "MIN"]


def test_partition_table_marks_a_partition_missing_from_a_snapshot() -> None:
    a = Snapshot(label="a", at_s=0, rows=(row(0, 1, (1,), (1,)), row(1, 1, (1,), (1,))))
    b = Snapshot(label="b", at_s=1, rows=(row(0, 1, (1,), (1,)),))
    assert partition_table([a, b], min_insync_replicas=1).splitlines()[3].split()[-3:] == ["?"] * 3
    assert partition_table([], min_insync_replicas=2) == "(no partition snapshots)"


def test_progress_line_names_phase_and_every_producer() -> None:
    line = progress_line(
        elapsed_s=12.34,
        phase="FAULT",
        figures=[
            ProgressFigures(
                name="plain", rate_per_s=120.4, sent=4000, delivered=3500, failed=0, rerouted=0
            ),
            ProgressFigures(
                name="failover", rate_per_s=300, sent=4000, delivered=3990, failed=0, rerouted=57
            ),
        ],
    )
    assert line.startswith(
        " 12.3s FAULT    | plain  120/s delivered   3500 failed   0 rerouted    0"
    )
    assert line.endswith("| failover  300/s delivered   3990 failed   0 rerouted   57")
    assert "\n" not in line
    assert "\r" not in line


def test_verdict_states_loss_waits_and_duplicates() -> None:
    plain = summary(
        "plain",
        lost=12,
        undelivered=12,
        not_delivered_within_1s=1334,
        longest_stall_s=8.72,
        duplicates=160,
        duplicated_messages=154,
        possible_duplicates=None,
    )
    assert verdict(plain) == (
        "plain: LOST 12 of 1000 messages, 12 still undelivered at the deadline, "
        "1334 not delivered within 1 s (longest wait 8.7 s), "
        "154 messages duplicated in the topic, none reported"
    )
    failover = summary(
        "failover", rerouted=218, duplicates=177, duplicated_messages=177, possible_duplicates=177
    )
    assert verdict(failover) == (
        "failover: lost none of 1000 messages, 0 not delivered within 1 s (longest wait 0.2 s), "
        "218 rerouted, 177 messages duplicated in the topic, 177 reported as possible duplicates"
    )
