"""``failover-mirror translate`` reads each target partition's offsets; an error that passes
(NOT_LEADER_FOR_PARTITION while a broker that came back takes its leadership again, seen on
real Kafka by ``test_a_group_moved_with_translate_after_a_rerouting_fault_misses_nothing``)
is asked again, one that does not ends the command at once, naming the partition.

A stand-in reader: neither librdkafka's mock cluster (its injected ListOffsets errors do not
reach ``get_watermark_offsets``) nor minibroker can make a real client see that error on
demand."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from failover_partitioner.mirror import _translate
from failover_partitioner.mirror._translate import TranslateError, _watermarks

pytestmark = pytest.mark.unit


class Reader:
    """``get_watermark_offsets`` refused with ``errors`` in turn, then answered."""

    def __init__(self, *errors: int) -> None:
        self.errors = list(errors)
        self.asked = 0

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        self.asked += 1
        if self.errors:
            raise KafkaException(KafkaError(self.errors.pop(0)))
        return 3, 9


@pytest.fixture(autouse=True)
def _no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_translate, "_ASK_AGAIN_S", 0.001)


def test_an_error_that_passes_is_asked_again() -> None:
    reader = Reader(KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE)
    tp = TopicPartition("copy.orders", 4)
    assert _watermarks(reader, tp, 5.0) == (3, 9)  # type: ignore[arg-type]  # a stand-in
    assert reader.asked == 3


def test_an_error_that_does_not_pass_ends_it_at_once() -> None:
    reader = Reader(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(TranslateError, match=r"copy\.orders\[4\] on the target: .*AUTHORIZATION"):
        _watermarks(reader, TopicPartition("copy.orders", 4), 5.0)  # type: ignore[arg-type]
    assert reader.asked == 1


def test_an_error_that_lasts_ends_it_within_the_timeout() -> None:
    reader: Any = Reader(*[KafkaError.NOT_LEADER_FOR_PARTITION] * 10_000)
    with pytest.raises(TranslateError, match="NOT_LEADER_FOR_PARTITION"):
        _watermarks(reader, TopicPartition("copy.orders", 4), 0.05)
    assert 1 < reader.asked < 10_000
