"""The checks both producers make of a message before it is accepted (``core.topic``)."""

from __future__ import annotations

import pytest

from failover_partitioner.core import check_timestamp


@pytest.mark.parametrize("timestamp", [1, 1_700_000_000_000, 2**63 - 1])
def test_a_timestamp_kafka_and_librdkafka_can_store_passes(timestamp: int) -> None:
    check_timestamp(timestamp)


@pytest.mark.parametrize("timestamp", [0, -1, 2**63])
def test_a_timestamp_that_would_not_be_stored_as_given_is_refused(timestamp: int) -> None:
    """0 too: Kafka would store it, but librdkafka writes it as the time of sending."""
    with pytest.raises(ValueError, match=rf"from 1 to 2\*\*63 - 1 .*got {timestamp}; .*not acc"):
        check_timestamp(timestamp, "timestamp")


@pytest.mark.parametrize("timestamp", [True, 1.5, "1"])
def test_a_timestamp_not_an_int_is_refused(timestamp: object) -> None:
    with pytest.raises(TypeError, match="timestamp_ms must be an int"):
        check_timestamp(timestamp, "timestamp_ms")
