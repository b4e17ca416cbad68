"""FailoverProducer used from several threads, as confluent-kafka's Producer may be: produce()
from some, poll() from another, close() from the main thread while they go on (minibroker).

Every produce() that returned accepted its message; each such message ends exactly once, in
its callback or in close()'s list, and the other threads see ProducerClosed, nothing else.
"""

from __future__ import annotations

import collections
import threading
import time
import traceback
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition

from failover_partitioner import FailoverProducer, ProducerClosed
from minibroker import Cluster

THREADS = 4
RATE_PER_THREAD = 3_000  # messages a second


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    config = {
        "min.insync.replicas": "2",
        "replica.lag.time.max.ms": "300",
        "broker.session.timeout.ms": "300",
    }
    with Cluster(brokers=5, config=config) as c:
        c.create_topic("threads", partitions=12, replication_factor=3)
        yield c


@pytest.mark.parametrize("close_timeout", [0.05, 1.0])
def test_close_while_other_threads_produce_and_poll_loses_no_accepted_message(
    cluster: Cluster, close_timeout: float
) -> None:
    """close() took the producer off line only after its flush and purge: a message another
    thread's produce() accepted meanwhile was neither flushed, nor handed back, nor reported
    (9,373, 755 and 1,910 of about 12,000 in three runs), and the polling thread's poll()
    raised the client's RuntimeError or the buffer's BufferClosed."""
    lock = threading.Lock()
    outcomes: collections.Counter[bytes] = collections.Counter()
    accepted: list[bytes] = []
    raised: list[str] = []
    stop = threading.Event()

    def on_delivery(err: object, report: object) -> None:
        with lock:
            outcomes[report.value()] += 1  # type: ignore[attr-defined]  # a DeliveryReport

    p = FailoverProducer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    p.health("threads")
    began = time.monotonic()

    def produce(thread: int) -> None:
        for i in range(1_000_000):
            ahead = began + i / RATE_PER_THREAD - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
            value = b"%d-%d" % (thread, i)
            try:
                p.produce("threads", value, on_delivery=on_delivery)
            except ProducerClosed:
                return
            except BaseException:
                raised.append(traceback.format_exc())
                return
            with lock:
                accepted.append(value)

    def poll() -> None:
        while not stop.is_set():
            try:
                p.poll(0.05)
            except ProducerClosed:
                return
            except BaseException:
                raised.append(traceback.format_exc())
                return

    threads = [threading.Thread(target=produce, args=(t,)) for t in range(THREADS)]
    threads.append(threading.Thread(target=poll))
    for thread in threads:
        thread.start()
    try:
        time.sleep(0.5)
        # Partitions under min ISR mid-run: messages fail, are retried, held, rerouted.
        cluster.stop_broker(4)
        cluster.stop_broker(5)
        time.sleep(0.5)
        left = p.close(close_timeout)
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
    assert not any(thread.is_alive() for thread in threads)
    assert raised == []
    returned = collections.Counter(m.value for m in left)
    ends = {value: outcomes[value] + returned[value] for value in accepted}
    assert len(accepted) > 1_000
    assert [v for v, n in ends.items() if n == 0] == [], "accepted, then told to nobody"
    assert [v for v, n in ends.items() if n > 1] == [], "told twice"
    with pytest.raises(ProducerClosed):
        p.produce("threads", b"after")


def test_a_first_callback_while_other_threads_produce_without_one_is_taken_in_order(
    cluster: Cluster,
) -> None:
    """A producer without a config-level callback sends callback-less messages on its quiet
    client; the first message with a callback waits for that client's messages to land, so
    none is overtaken. While two other threads went on producing without callbacks, that
    client never emptied: the message was refused with ProduceTimeout after
    produce_timeout_s (3 s here). Now the quiet client takes nothing new from the start of
    that wait: the message is taken within a fraction of a second, and each thread's
    messages keep their order on every partition."""
    # linger.ms 50: the quiet client's queue empties only when nobody produced for 50 ms.
    conf = {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 50}
    p = FailoverProducer(conf, produce_timeout_s=3)
    p.health("threads")
    stop = threading.Event()
    raised: list[str] = []
    counts = [0, 0]
    rate = 100_000  # messages a second, each thread (about as fast as they go)
    began = time.monotonic()

    def produce(thread: int) -> None:
        try:
            while not stop.is_set():
                i = counts[thread]
                ahead = began + i / rate - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
                p.produce("threads", b"%d-%d" % (thread, i))
                counts[thread] = i + 1
                p.poll(0)
        except BaseException:
            raised.append(traceback.format_exc())

    delivered: list[object] = []
    threads = [threading.Thread(target=produce, args=(t,)) for t in range(2)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(0.5)
        start = time.monotonic()
        p.produce("threads", b"with-a-callback", on_delivery=lambda err, m: delivered.append(err))
        took = time.monotonic() - start
        time.sleep(0.3)
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
    assert raised == []
    assert p.flush(30) == 0
    assert p.close() == []
    assert took < 1.5, f"the first message with a callback waited {took:.1f} s"
    assert delivered == [None]
    sent = sum(counts)
    assert sent > 1_000
    got = consume_values(cluster.bootstrap_servers, "threads", sent + 1)
    assert sorted(v for part in got.values() for v in part) == sorted(
        [b"with-a-callback"] + [b"%d-%d" % (t, i) for t in range(2) for i in range(counts[t])]
    )
    for values in got.values():
        for t in range(2):
            mine = [int(v.split(b"-")[1]) for v in values if v.startswith(b"%d-" % t)]
            assert mine == sorted(mine), f"thread {t}'s messages out of order on a partition"


def consume_values(bootstrap: str, topic: str, expected: int) -> dict[int, list[bytes]]:
    """Every value of ``topic`` by partition, in the partition's order."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(12)])
        out: dict[int, list[bytes]] = collections.defaultdict(list)
        deadline = time.monotonic() + 60
        n = 0
        while n < expected and time.monotonic() < deadline:
            for m in c.consume(5000, 0.2):
                partition, value = m.partition(), m.value()
                if m.error() is None and partition is not None and value is not None:
                    out[partition].append(value)
                    n += 1
        return out
    finally:
        c.close()
