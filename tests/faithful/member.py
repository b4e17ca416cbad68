"""One consumer-group member in a process of its own, for scenario 6 (tests/faithful/groups.py).

    python -m tests.faithful.member CLIENT BOOTSTRAP GROUP TOPIC [--instance-id ID]
                                    [--skip-commit PREFIX]

CLIENT is ``confluent-kafka``, ``aiokafka`` or ``kafka-python``. The member subscribes to TOPIC
in GROUP (eager rebalancing, each client's default assignor, session timeout 6 s, heartbeat
0.5 s, manual commits) and prints one JSON object a line for what its client tells it:
``{"assigned": [partitions], "generation": n}`` (``generation`` is None where the client does not
expose it: confluent-kafka), ``{"revoked": [partitions]}``, ``{"read": [partition, offset,
value]}``. After each batch it commits synchronously the offset after the last record of each
partition whose value does not start with PREFIX. A line ``close`` on stdin (or its end) closes
the consumer as a user would, then prints ``{"closed": true}``; a crash is the parent's SIGKILL.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["CLIENTS", "main"]

CLIENTS = ("confluent-kafka", "aiokafka", "kafka-python")
SESSION_TIMEOUT_MS = 6_000  # Kafka's group.min.session.timeout.ms
HEARTBEAT_INTERVAL_MS = 500
POLL_S = 0.2


def emit(**event: object) -> None:
    print(json.dumps(event), flush=True)


def watch_stdin() -> threading.Event:
    """Set once stdin says ``close`` or ends (the parent went away)."""
    closing = threading.Event()

    def read() -> None:
        for line in sys.stdin:
            if line.strip() == "close":
                break
        closing.set()

    threading.Thread(target=read, name="stdin", daemon=True).start()
    return closing


def to_commit(records: Iterable[tuple[int, int, bytes]], skip: str | None) -> dict[int, int]:
    """Per partition, the offset after its last record that is to be committed."""
    offsets: dict[int, int] = {}
    for partition, offset, value in records:
        emit(read=[partition, offset, value.decode()])
        if skip is None or not value.decode().startswith(skip):
            offsets[partition] = offset + 1
    return offsets


def run_confluent(args: argparse.Namespace, closing: threading.Event) -> None:
    from confluent_kafka import Consumer, TopicPartition

    config: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": SESSION_TIMEOUT_MS,
        "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
        "fetch.wait.max.ms": 100,
        "log_level": 0,
    }
    if args.instance_id:
        config["group.instance.id"] = args.instance_id
    consumer = Consumer(config)

    def assigned(_: Any, partitions: list[TopicPartition]) -> None:
        emit(assigned=sorted(p.partition for p in partitions), generation=None)

    def revoked(_: Any, partitions: list[TopicPartition]) -> None:
        emit(revoked=sorted(p.partition for p in partitions))

    consumer.subscribe([args.topic], on_assign=assigned, on_revoke=revoked)
    while not closing.is_set():
        messages = [m for m in consumer.consume(100, POLL_S) if m.error() is None]
        records = [(m.partition() or 0, m.offset() or 0, m.value() or b"") for m in messages]
        commits = to_commit(records, args.skip_commit)
        if commits:
            offsets = [TopicPartition(args.topic, p, o) for p, o in commits.items()]
            consumer.commit(offsets=offsets, asynchronous=False)
    consumer.close()


async def run_aiokafka(args: argparse.Namespace, closing: threading.Event) -> None:
    from aiokafka import (  # type: ignore[import-untyped,unused-ignore]  # no py.typed
        AIOKafkaConsumer,
        ConsumerRebalanceListener,
        TopicPartition,
    )

    consumer = AIOKafkaConsumer(
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        group_instance_id=args.instance_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
        fetch_max_wait_ms=100,
    )

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]  # untyped base
        def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
            emit(revoked=sorted(p.partition for p in revoked))

        def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
            generation = consumer._coordinator.generation  # no public accessor
            emit(assigned=sorted(p.partition for p in assigned), generation=generation)

    consumer.subscribe([args.topic], listener=Listener())
    await consumer.start()
    try:
        while not closing.is_set():
            batches = await consumer.getmany(timeout_ms=int(POLL_S * 1000))
            records = [(tp.partition, r.offset, r.value) for tp, rs in batches.items() for r in rs]
            commits = to_commit(records, args.skip_commit)
            if commits:
                await consumer.commit(
                    {TopicPartition(args.topic, p): o for p, o in commits.items()}
                )
    finally:
        await consumer.stop()


def run_kafka_python(args: argparse.Namespace, closing: threading.Event) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer, OffsetAndMetadata, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        group_instance_id=args.instance_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
        fetch_max_wait_ms=100,
    )

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]  # untyped base
        def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
            emit(revoked=sorted(p.partition for p in revoked))

        def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
            generation = consumer._coordinator._generation.generation_id  # no public accessor
            emit(assigned=sorted(p.partition for p in assigned), generation=generation)

    consumer.subscribe([args.topic], listener=Listener())
    # kafka-python's leader compares the topic metadata it assigned with against the metadata
    # it learns later, and rejoins when they differ: joining before its first metadata update
    # after subscribe costs an extra generation, or not, by timing. So wait for that update.
    snapshot = consumer._coordinator._metadata_snapshot  # no public accessor
    deadline = time.monotonic() + 10
    while not snapshot.get(args.topic) and time.monotonic() < deadline:
        time.sleep(0.05)
        snapshot = consumer._coordinator._metadata_snapshot
    while not closing.is_set():
        batches = consumer.poll(timeout_ms=int(POLL_S * 1000))
        records = [(tp.partition, r.offset, r.value) for tp, rs in batches.items() for r in rs]
        commits = to_commit(records, args.skip_commit)
        if commits:
            consumer.commit(
                {
                    TopicPartition(args.topic, p): OffsetAndMetadata(o, "", -1)
                    for p, o in commits.items()
                }
            )
    consumer.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("client", choices=CLIENTS)
    parser.add_argument("bootstrap")
    parser.add_argument("group")
    parser.add_argument("topic")
    parser.add_argument("--instance-id", default=None)
    parser.add_argument("--skip-commit", default=None)
    args = parser.parse_args(argv)
    closing = watch_stdin()
    if args.client == "confluent-kafka":
        run_confluent(args, closing)
    elif args.client == "aiokafka":
        asyncio.run(run_aiokafka(args, closing))
    else:
        run_kafka_python(args, closing)
    emit(closed=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
