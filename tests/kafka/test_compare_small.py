"""The comparison harness (bench/compare) kept honest on a small scale: four contenders (three
when Go is missing), a few thousand messages each, brokers 4 and 5 paused for a few seconds. What
it reports must add up (sent = delivered + failed + unresolved = read back + lost) and show what
the tests of the failover producers show: FailoverProducer loses nothing, the plain producer
waits out the fault.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[2] / "bench"))

from compare import java, sarama
from compare.contenders import Load, run_confluent, run_failover
from compare.programs import runner
from compare.scenario import Contender, producers_under_fault
from tests.realkafka.cluster import KafkaCluster
from tests.realkafka.fixtures import unavailable
from tests.realkafka.jars import Unavailable

LOAD = Load(rate_per_s=400.0, duration_s=8.0)  # 3,200 messages each
FAULT_S = (2.0, 5.0)


def test_harness_counts_add_up_under_one_fault(kafka_cluster: KafkaCluster, tmp_path: Path) -> None:
    try:
        program = java.ensure_program()
    except Unavailable as exc:
        unavailable(str(exc))
    with (tmp_path / "programs.log").open("w") as log:
        contenders = [
            Contender(name="confluent-kafka", run=run_confluent),
            Contender(name="FailoverProducer", run=run_failover),
            Contender(name="Java producer", run=runner(program, {}, log)),
        ]
        with contextlib.suppress(Unavailable):  # without Go, the other three check the harness
            go = sarama.ensure_program()
            contenders.append(Contender(name="Sarama", run=runner(go, {}, log)))
        results = producers_under_fault(
            kafka_cluster, contenders, LOAD, fault_start_s=FAULT_S[0], fault_end_s=FAULT_S[1]
        )
    by_name = {r.name: r for r in results}
    for r in results:
        assert r.sent > 0, r
        assert r.paused_at_s is not None, r
        assert r.resumed_at_s is not None, r
        assert r.delivered + r.failed + r.unresolved == r.sent, r
        assert r.consumed + r.lost == r.sent, r
        assert sum(r.per_second) == r.delivered, r
        # A message reported delivered was read back: acks=all, and the cluster healed.
        assert r.lost <= r.sent - r.delivered, r
    ours = by_name["FailoverProducer"]
    assert (ours.sent, ours.delivered, ours.lost) == (LOAD.total, LOAD.total, 0), ours
    # The fault bit: the plain producer's messages on partitions 5, 8, 9 waited for the resume.
    plain = by_name["confluent-kafka"]
    assert plain.max_latency_s > 1.5, plain
    assert plain.lost == 0, plain  # it retries until message.timeout.ms (5 min): it waits
