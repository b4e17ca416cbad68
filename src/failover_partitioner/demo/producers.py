"""The two producers the demo compares, behind one small interface the runner drives.

Each side reports every message's outcome into its ``DeliveryLog``; the runner never asks a
producer how it did, it reads the log and the topic.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Protocol

from confluent_kafka import KafkaError, Message, Producer

from failover_partitioner.demo.stats import DeliveryLog

# librdkafka's own log lines (connection refused, retries) go here rather than to stderr, so
# they do not break the progress line; `failover-demo -v` shows them.
CLIENT_LOGGER = logging.getLogger("failover_partitioner.demo.clients")

_PURGED = frozenset({KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT})


class Side(Protocol):
    """One producer under test, used from a single thread at a time."""

    name: str

    def produce(self, topic: str, value: bytes, seq: int) -> bool:
        """Hand the message to the producer; False if it refused it for now (full queue)."""
        ...

    def poll(self, timeout_s: float) -> None: ...

    def finish(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for outstanding outcomes, then give up on the rest and close.

        Every message still without an outcome afterwards is marked undelivered in the log.
        """
        ...

    def rerouted(self) -> int: ...

    def possible_duplicates(self) -> int | None: ...


class PlainSide:
    """confluent-kafka's Producer with acks=all and otherwise its defaults, as most apps run it.

    Its retries keep a message on the partition it was first given (delivery.timeout.ms is
    300 s by default), so during the fault its messages to degraded partitions wait.
    """

    name = "plain"

    def __init__(self, *, bootstrap_servers: str, log: DeliveryLog) -> None:
        self._log = log
        self._producer = Producer(client_config(bootstrap_servers))
        self._closed = False

    def produce(self, topic: str, value: bytes, seq: int) -> bool:
        try:
            self._producer.produce(
                topic, value=value, on_delivery=functools.partial(self._delivered, seq)
            )
        except BufferError:
            return False
        return True

    def poll(self, timeout_s: float) -> None:
        self._producer.poll(timeout_s)

    def finish(self, timeout_s: float) -> None:
        if self._closed:
            return
        if self._producer.flush(timeout_s) > 0:
            # Still retrying after the deadline: give up on them the only way the client
            # allows. In-flight ones may still have been written; the consume-back decides.
            self._producer.purge(in_queue=True, in_flight=True, blocking=True)
            self._producer.flush(5.0)  # serves the purged messages' callbacks
        for seq in self._log.pending():
            self._log.undelivered(seq, "no outcome by the deadline")
        self._producer.close()
        self._closed = True

    def rerouted(self) -> int:
        return 0  # a message is partitioned once, and retried on that partition only

    def possible_duplicates(self) -> int | None:
        return None  # the client does not count them

    def _delivered(self, seq: int, err: KafkaError | None, _msg: Message) -> None:
        if err is None:
            self._log.acked(seq)
        elif err.code() in _PURGED:
            self._log.undelivered(seq, err.name())
        else:
            self._log.failed(seq, err.name())


def client_config(bootstrap_servers: str) -> dict[str, Any]:
    """The confluent-kafka settings both sides share: the cluster, acks=all, quiet logs."""
    return {"bootstrap.servers": bootstrap_servers, "acks": "all", "logger": CLIENT_LOGGER}


class FailoverSide:
    """FailoverProducer on the same confluent-kafka settings, with its own defaults otherwise."""

    name = "failover"

    def __init__(self, *, bootstrap_servers: str, log: DeliveryLog) -> None:
        from failover_partitioner.confluent import FailoverProducer

        self._log = log
        self._producer = FailoverProducer(client_config(bootstrap_servers))
        self._closed = False

    def produce(self, topic: str, value: bytes, seq: int) -> bool:
        from failover_partitioner.errors import ProduceTimeout

        try:
            self._producer.produce(
                topic, value=value, on_delivery=functools.partial(self._delivered, seq)
            )
        except ProduceTimeout:
            return False  # at its in-flight limit: backpressure, the message was not taken
        return True

    def poll(self, timeout_s: float) -> None:
        self._producer.poll(timeout_s)

    def finish(self, timeout_s: float) -> None:
        if self._closed:
            return
        self._producer.flush(timeout_s)
        # close() hands back what is still undelivered, without callbacks.
        handed_back = self._producer.close(timeout=0.0)
        for seq in self._log.pending():
            self._log.undelivered(seq, "handed back by close()")
        if handed_back:
            logging.getLogger(__name__).info(
                "FailoverProducer handed back %d undelivered message(s)", len(handed_back)
            )
        self._closed = True

    def rerouted(self) -> int:
        return self._producer.statistics().rerouted

    def possible_duplicates(self) -> int | None:
        return self._producer.statistics().possible_duplicates

    def _delivered(self, seq: int, err: Any, _report: Any) -> None:
        if err is None:
            self._log.acked(seq)
        else:
            name = err.name() if isinstance(err, KafkaError) else str(err)
            self._log.failed(seq, name)
