"""Scenario 3: MirrorMaker 2 and ``failover-mirror`` copying one topic, healthy then degraded.

Source and target are one cluster (the 5-broker one every scenario uses), the copies renamed
(MirrorMaker 2's ``<alias>.<topic>``, ``failover-mirror --rename``): a second cluster would be
four more JVMs on two cores. The source topic lives on brokers 1-3 only, so pausing brokers 4
and 5 degrades the target alone: each copy is created beforehand with the spread assignment of
scenario 1 (partitions 5, 8 and 9 fall below min ISR 2). What else lives on the cluster shares
the fault: MirrorMaker's internal topics (which live on the target cluster in a real setup too)
and ``failover-mirror``'s group commits (which would live on a healthy source cluster).

The source is filled once; each mirror then copies it twice, each time into a fresh copy topic
from a fresh start: healthy, and with brokers 4 and 5 paused for ``pause_s`` once the copy holds
``pause_after`` of the messages. How far a copy is, is read the same way for both: the sum of
the copy's high watermarks, sampled twice a second (what is there, acknowledged by the ISR).
Afterwards every record of the copy is read back and matched to the source's payloads.
"""

from __future__ import annotations

import logging
import time
import uuid
from array import array
from collections.abc import Callable, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._listoffsets import OffsetSpec  # re-exported untyped by .admin
from tests.kafka.support import FAULTY, PARTITIONS, high_watermarks, spread, wait_for, whole
from tests.realkafka.cluster import KafkaCluster

from compare.contenders import ident, value
from compare.processes import Service

log = logging.getLogger(__name__)

VALUE_BYTES = 100
SAMPLE_S = 0.5
QUIET_S = 3.0  # a copy that holds every message and has not grown for this long is done
STOP_GRACE_S = 60.0


@dataclass(frozen=True, slots=True, kw_only=True)
class MirrorContender:
    name: str
    note: str
    copy_name: Callable[[str, str], str]  # (source topic, run tag) -> the copy's name
    start: Callable[[str, str, str, Path], Service]  # bootstrap, source, copy, folder
    report: Callable[[Service, int], str]  # what it said, from its exit code, status and log


@dataclass(frozen=True, slots=True, kw_only=True)
class CopyResult:
    """One mirror, one copy of the source."""

    name: str
    note: str
    fault: bool
    messages: int
    copied: int  # records read back from the copy at the end (duplicates included)
    lost: int  # source payloads never read back from the copy
    duplicates: int  # records read back beyond the first copy of a payload
    foreign: int  # records that are no source payload
    first_copy_s: float | None  # from the process's start to the first record in the copy
    done_s: float | None  # from the process's start to the copy holding ``messages`` records
    copy_per_s: float  # messages / (done - first copy)
    before_fault_per_s: float | None
    during_fault_per_s: float | None
    catch_up_s: float | None  # from the resume to the copy holding ``messages`` records
    paused_at_s: float | None
    resumed_at_s: float | None
    per_second: tuple[int, ...]  # records added to the copy in each second since the start
    reported: str


def fill(bootstrap: str, topic: str, messages: int) -> None:
    """``messages`` distinct 100-byte payloads on ``topic``, acks=all, every one acknowledged."""
    failed: list[str] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is not None:
            failed.append(str(err))

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20})
    for i in range(messages):
        while True:
            try:
                producer.produce(topic, value(i, VALUE_BYTES), on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    left = producer.flush(120)
    assert left == 0, f"filling {topic}: {left} messages unsent"
    assert not failed, f"filling {topic}: {len(failed)} failed, first {failed[:3]}"
    assert sum(high_watermarks(bootstrap, topic).values()) == messages


_LATEST = OffsetSpec.latest()  # type: ignore[no-untyped-call]  # confluent-kafka: no annotations


class TopicProgress:
    """The sum of a topic's high watermarks, asked of a new admin client each time.

    A long-lived client goes stale under this fault: librdkafka's admin client kept asking
    fenced leaders (FENCED_LEADER_EPOCH) long after the brokers returned, and a consumer's
    watermark query kept asking the paused leader after leadership had moved. A partition that
    does not answer within the budget keeps its last known end.
    """

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._bootstrap = bootstrap
        self._ends = dict.fromkeys(range(PARTITIONS), 0)
        self._topic = topic

    def copied(self, budget_s: float = 1.0) -> int:
        admin = AdminClient({"bootstrap.servers": self._bootstrap, "log_level": 0})
        asked = {TopicPartition(self._topic, p): _LATEST for p in range(PARTITIONS)}
        futures = admin.list_offsets(asked, request_timeout=budget_s)
        deadline = time.monotonic() + budget_s
        for tp, future in futures.items():
            try:
                info = future.result(timeout=max(0.0, deadline - time.monotonic()))
            except (FutureTimeout, KafkaException):
                continue
            self._ends[tp.partition] = max(self._ends[tp.partition], info.offset)
        return sum(self._ends.values())


def count_back(bootstrap: str, topic: str, messages: int) -> tuple[array[int], int]:
    """How often each source payload is in ``topic``, and how many records are none of them."""
    copies = array("I", bytes(4 * messages))
    foreign = 0
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"count-back-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    try:
        ends = high_watermarks(bootstrap, topic)
        consumer.assign([TopicPartition(topic, p, 0) for p, end in ends.items() if end > 0])
        position = dict.fromkeys(ends, 0)
        deadline = time.monotonic() + 300
        while any(position[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            for record in consumer.consume(10_000, 0.5):
                partition, offset, raw = record.partition(), record.offset(), record.value()
                if record.error() is not None or partition is None or offset is None:
                    continue
                position[partition] = offset + 1
                i = ident(raw) if raw and raw[:10].isdigit() else -1
                if 0 <= i < messages and raw == value(i, VALUE_BYTES):
                    copies[i] += 1
                else:
                    foreign += 1
        short = {p: (position[p], ends[p]) for p in ends if position[p] < ends[p]}
        assert not short, f"could not read {topic} to its end (position, end): {short}"
        return copies, foreign
    finally:
        consumer.close()


def copy_once(
    cluster: KafkaCluster,
    contender: MirrorContender,
    source: str,
    messages: int,
    folder: Path,
    *,
    pause_after: float | None,
    pause_s: float,
    timeout_s: float,
    brokers: tuple[int, ...] = FAULTY,
) -> CopyResult:
    """One copy of ``source`` by ``contender``; brokers paused mid-copy if ``pause_after``."""
    bootstrap = cluster.bootstrap_servers
    target = contender.copy_name(source, uuid.uuid4().hex[:6])
    cluster.create_topic(target, assignment=spread())
    progress = TopicProgress(bootstrap, target)
    samples: list[tuple[float, int]] = []
    paused: list[int] = []
    paused_at = resumed_at = done_at = first_at = None
    started = time.monotonic()
    service = contender.start(bootstrap, source, target, folder)
    try:
        grew_at = 0.0
        while True:
            copied = progress.copied()
            now = time.monotonic() - started
            if samples and copied > samples[-1][1]:
                grew_at = now
            samples.append((now, copied))
            if first_at is None and copied > 0:
                first_at = now
            if pause_after is not None and paused_at is None and copied >= pause_after * messages:
                for broker in brokers:
                    cluster.pause(broker)
                    paused.append(broker)
                paused_at = time.monotonic() - started
            if paused and now >= (paused_at or 0.0) + pause_s:
                while paused:
                    cluster.resume(paused.pop())
                resumed_at = time.monotonic() - started
            settled = pause_after is None or resumed_at is not None
            if done_at is None and copied >= messages and settled:
                done_at = now
            if done_at is not None and now - grew_at >= QUIET_S:
                break
            if now > timeout_s or not service.alive:
                log.warning("%s: stopped waiting at %.0f s, %d copied", contender.name, now, copied)
                break
            time.sleep(max(0.0, SAMPLE_S - (time.monotonic() - started - now)))
    finally:
        while paused:
            cluster.resume(paused.pop())
        exit_code = service.stop(STOP_GRACE_S)
    reported = contender.report(service, exit_code)
    cluster.heal()
    wait_for(lambda: whole(cluster, target), 120, f"{target}: every ISR full again")
    copies, foreign = count_back(bootstrap, target, messages)
    return _summarize(
        contender, messages, samples, copies, foreign, reported,
        first_at=first_at, done_at=done_at, paused_at=paused_at, resumed_at=resumed_at,
    )  # fmt: skip


def _copied_at(samples: Sequence[tuple[float, int]], at_s: float) -> int:
    return max((c for t, c in samples if t <= at_s), default=0)


def _summarize(
    contender: MirrorContender,
    messages: int,
    samples: Sequence[tuple[float, int]],
    copies: array[int],
    foreign: int,
    reported: str,
    *,
    first_at: float | None,
    done_at: float | None,
    paused_at: float | None,
    resumed_at: float | None,
) -> CopyResult:
    per_second = [0] * (int(samples[-1][0]) + 1 if samples else 0)
    previous = 0
    for t, copied in samples:
        per_second[int(t)] += copied - previous
        previous = copied
    before = during = catch_up = None
    if paused_at is not None and resumed_at is not None and first_at is not None:
        at_pause = _copied_at(samples, paused_at)
        # Too short a stretch before the pause says nothing about a rate.
        before = at_pause / (paused_at - first_at) if paused_at - first_at >= 1.0 else None
        during = (_copied_at(samples, resumed_at) - at_pause) / (resumed_at - paused_at)
        catch_up = None if done_at is None else max(0.0, done_at - resumed_at)
    copy_s = (done_at - first_at) if done_at is not None and first_at is not None else None
    return CopyResult(
        name=contender.name,
        note=contender.note,
        fault=paused_at is not None,
        messages=messages,
        copied=sum(copies) + foreign,
        lost=sum(1 for n in copies if n == 0),
        duplicates=sum(n - 1 for n in copies if n > 1),
        foreign=foreign,
        first_copy_s=first_at,
        done_s=done_at,
        copy_per_s=messages / copy_s if copy_s else float("nan"),
        before_fault_per_s=before,
        during_fault_per_s=during,
        catch_up_s=catch_up,
        paused_at_s=paused_at,
        resumed_at_s=resumed_at,
        per_second=tuple(per_second),
        reported=reported,
    )


def mirrors_copying(
    cluster: KafkaCluster,
    contenders: Sequence[MirrorContender],
    messages: int,
    folder: Path,
    *,
    pause_after: float,
    pause_s: float,
    timeout_s: float,
    faults: Sequence[bool] = (False, True),
    progress: Callable[[str], None] = lambda line: None,
) -> list[CopyResult]:
    """Scenario 3: each mirror copies one filled source, healthy, then with the fault."""
    cluster.heal()
    source = f"cmp-source-{uuid.uuid4().hex[:8]}"
    on_three = [[(p + i) % 3 + 1 for i in range(3)] for p in range(PARTITIONS)]
    cluster.create_topic(source, assignment=on_three)
    progress(f"  filling {source} with {messages:,} messages ...")
    fill(cluster.bootstrap_servers, source, messages)
    results = []
    for contender in contenders:
        for fault in faults:
            what = (
                f"brokers 4, 5 paused {pause_s:g} s from {pause_after:.0%}" if fault else "healthy"
            )
            progress(f"  {contender.name}, {what} ...")
            result = copy_once(
                cluster, contender, source, messages, folder,
                pause_after=pause_after if fault else None, pause_s=pause_s, timeout_s=timeout_s,
            )  # fmt: skip
            progress(
                f"    copied {result.copied:,} in {result.done_s or float('nan'):.1f} s, "
                f"lost {result.lost}, duplicates {result.duplicates}; {result.reported}"
            )
            results.append(result)
    return results
