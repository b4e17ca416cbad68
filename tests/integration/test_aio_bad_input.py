"""AsyncFailoverProducer on minibroker: bad input is refused before anything is accepted, and a
message that aiokafka cannot encode anyway ends with its error instead of being stranded.

The guarantee (docs/guarantees.md): an accepted message's future resolves once with its final
outcome (and ``dead_letter``), or ``stop()`` hands it back; bad input raises at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
from aiokafka.producer.message_accumulator import (  # type: ignore[import-untyped,unused-ignore]
    BatchBuilder,
)

from failover_partitioner import ConfigError
from failover_partitioner.aio import AsyncFailoverProducer
from minibroker import Cluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    config = {"min.insync.replicas": "2", "auto.create.topics.enable": "false"}
    with Cluster(brokers=3, config=config) as cluster:
        yield cluster


def test_a_timestamp_or_header_name_kafka_cannot_store_is_refused_at_send(
    cluster: Cluster,
) -> None:
    """A timestamp from 1 to 2**63 - 1 (a record batch holds an int64; 0 is refused by both
    producers alike, as librdkafka cannot carry it) and UTF-8 header names; anything else
    raises ValueError from send(), naming it, and is not accepted (aiokafka would fail on it
    only when the batch is built, after acceptance)."""
    cluster.create_topic("stamps", partitions=1, replication_factor=3)

    async def run() -> list[Any]:
        async with AsyncFailoverProducer(bootstrap_servers=cluster.bootstrap_servers) as ap:
            await ap.refresh("stamps")
            for ts in (2**63, -1, 0):
                with pytest.raises(ValueError, match=rf"timestamp_ms .* got {ts}; .*not accepted"):
                    await ap.send("stamps", b"bad", timestamp_ms=ts)
            with pytest.raises(ValueError, match=r"header name 'h\\ud800'.*not accepted"):
                await ap.send("stamps", b"bad", headers=[("h\ud800", b"1")])
            assert (ap.statistics().produced, len(ap)) == (0, 0)
            futures = [
                await ap.send("stamps", b"first", timestamp_ms=1),
                await ap.send("stamps", b"last", timestamp_ms=2**63 - 1),
                await ap.send("stamps", b"named", headers={"h\u00e9": b"1"}),
            ]
            return await asyncio.wait_for(asyncio.gather(*futures), 10)

    delivered = asyncio.run(run())
    assert [md.offset for md in delivered] == [0, 1, 2]


def test_a_message_id_header_name_that_is_not_utf8_is_refused_at_construction() -> None:
    with pytest.raises(ConfigError, match=r"message_id_header 'id\\ud800'.*UTF-8"):
        AsyncFailoverProducer(bootstrap_servers="127.0.0.1:9", message_id_header="id\ud800")


def test_an_illegal_topic_name_is_refused_by_refresh_and_health_before_the_cluster_is_asked(
    cluster: Cluster,
) -> None:
    """Refused at once, as send() refuses it; it is not watched, so a later send() to it is
    refused too (it used to be known then, and waited for its topic to appear)."""

    async def run() -> None:
        async with AsyncFailoverProducer(bootstrap_servers=cluster.bootstrap_servers) as ap:
            start = time.monotonic()
            with pytest.raises(ValueError, match="not a legal Kafka topic name"):
                await ap.refresh("bad topic!")
            with pytest.raises(TypeError, match="topic must be a str"):
                await ap.refresh(123)  # type: ignore[arg-type]  # the misuse under test
            with pytest.raises(ValueError, match="not a legal Kafka topic name"):
                ap.health("bad topic!")
            with pytest.raises(ValueError, match="not a legal Kafka topic name"):
                await ap.send("bad topic!", b"x")
            assert time.monotonic() - start < 0.5
            assert ap.metadata_age_s("bad topic!") is None  # never asked
            assert ap.statistics().produced == 0

    asyncio.run(run())


@pytest.fixture
def poison(monkeypatch: pytest.MonkeyPatch) -> None:
    """aiokafka fails to encode the value b"poison" (as it would a bug's message): its batch
    builder raises for it, before writing anything."""
    append = BatchBuilder.append

    def poisoned(self: Any, *, timestamp: Any, key: Any, value: Any, headers: Any = None) -> Any:
        if value == b"poison":
            raise OverflowError("cannot encode this record")
        return append(self, timestamp=timestamp, key=key, value=value, headers=headers)

    monkeypatch.setattr(BatchBuilder, "append", poisoned)


@pytest.mark.usefixtures("poison")
def test_a_message_aiokafka_cannot_encode_ends_with_its_error_and_nothing_else_stops(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    """Accepted, then refused by aiokafka: at its first send, and again when it waited in the
    failed buffer (its topic created late) ahead of others. Each time it ends, once, with the
    error on its future and in dead_letter, logged at ERROR; it is not left counted in flight,
    and the retry task goes on sending the messages waiting behind it."""
    cluster.create_topic("poison", partitions=2, replication_factor=3)
    dead: list[tuple[bytes | None, BaseException]] = []

    async def run() -> None:
        async with AsyncFailoverProducer(
            bootstrap_servers=cluster.bootstrap_servers,
            metadata_fast_refresh_s=0.2,
            dead_letter=lambda m, exc: dead.append((m.value, exc)),
        ) as ap:
            # At the first send.
            first = await ap.send("poison", b"poison")
            good = await ap.send("poison", b"good")
            with pytest.raises(OverflowError):
                await first
            assert (await asyncio.wait_for(good, 10)).topic == "poison"
            # From the failed buffer, ahead of the messages waiting behind it.
            waiting = [await ap.send("poison-late", b"poison")]
            waiting += [await ap.send("poison-late", b"good-%d" % i) for i in range(5)]
            await asyncio.sleep(0.3)
            assert ap.statistics().failed_buffer_depth == 6
            await asyncio.to_thread(cluster.create_topic, "poison-late", 2, 3)
            outcomes = await asyncio.wait_for(asyncio.gather(*waiting, return_exceptions=True), 15)
            assert isinstance(outcomes[0], OverflowError)
            assert [getattr(md, "topic", md) for md in outcomes[1:]] == ["poison-late"] * 5
            stats = ap.statistics()
            assert (stats.final_failures, stats.delivered, len(ap)) == (2, 6, 0)

    with caplog.at_level(logging.ERROR, logger="failover_partitioner.aio.producer"):
        asyncio.run(run())
    assert [(value, type(exc)) for value, exc in dead] == [(b"poison", OverflowError)] * 2
    failures = [r for r in caplog.records if "could not be sent" in r.getMessage()]
    assert [r.levelno for r in failures] == [logging.ERROR] * 2
