"""Scenario 3 of the comparison harness (bench/compare/mirror.py) kept honest on a small scale:
MirrorMaker 2 and failover-mirror each copy 3,000 messages while the target's brokers 4 and 5
are paused for a few seconds. What the harness reports must add up (every source payload either
read back from the copy or counted lost; the per-second series sums to what the copy holds) and
show what the mirror's own tests show: failover-mirror loses nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "bench"))

from compare import processes
from compare.__main__ import mirror_contenders
from compare.mirror import mirrors_copying
from tests.realkafka.cluster import KafkaCluster
from tests.realkafka.fixtures import unavailable
from tests.realkafka.jars import Unavailable

pytestmark = pytest.mark.slow  # two mirrors, MirrorMaker 2's start included: over a minute

MESSAGES = 3_000
PAUSE_S = 4.0


def test_mirror_harness_counts_add_up_under_one_pause(
    kafka_cluster: KafkaCluster, tmp_path: Path
) -> None:
    try:
        classpath = processes.mirrormaker_classpath()
    except Unavailable as exc:
        unavailable(str(exc))
    results = mirrors_copying(
        kafka_cluster,
        mirror_contenders(classpath),
        MESSAGES,
        tmp_path,
        pause_after=0.3,
        pause_s=PAUSE_S,
        timeout_s=120.0,
        faults=(True,),
    )
    by_name = {r.name: r for r in results}
    assert set(by_name) == {"MirrorMaker 2", "failover-mirror"}
    for r in results:
        assert r.paused_at_s is not None, r
        assert r.resumed_at_s is not None, r
        assert r.resumed_at_s - r.paused_at_s >= PAUSE_S, r
        assert r.foreign == 0, r
        # Every source payload is read back once, more than once, or counted lost.
        assert r.copied == MESSAGES - r.lost + r.duplicates, r
        assert r.during_fault_per_s is not None, r
        if r.done_s is not None:  # the sampled progress saw the copy whole, as read back
            assert sum(r.per_second) == r.copied, r
    ours = by_name["failover-mirror"]
    assert ours.lost == 0, ours
    assert ours.done_s is not None, ours
    assert ours.reported.startswith("exit 0;"), ours.reported
