"""The delivery error policy (DESIGN.md section 3) and the exception hierarchy."""

from __future__ import annotations

import pytest

from failover_partitioner.errors import (
    ConfigError,
    FailoverError,
    MetadataUnavailable,
    NoUsablePartition,
    ProducerClosed,
    ProduceTimeout,
    classify,
    error_code,
)


def test_not_enough_replicas_moves_without_duplicate() -> None:
    e = classify(19)
    assert (e.retriable, e.possibly_persisted, e.quarantine) == (True, False, True)
    assert not e.final


def test_after_append_is_a_possible_duplicate() -> None:
    e = classify(20)
    assert (e.retriable, e.possibly_persisted, e.quarantine) == (True, True, True)


@pytest.mark.parametrize("code", [6, 5])
def test_leadership_errors_quarantine_and_refresh_metadata(code: int) -> None:
    e = classify(code)
    assert e.retriable
    assert e.quarantine
    assert e.refresh_metadata


def test_no_leader_yet_is_before_any_append() -> None:
    assert not classify(5).possibly_persisted


@pytest.mark.parametrize("code", [6, 56])
def test_a_leader_that_lost_the_partition_may_have_appended(code: int) -> None:
    # A leader holding an appended acks=all write answers it so when the partition moves away
    # (or its log directory fails); the new leader may keep the write.
    assert classify(code).possibly_persisted


@pytest.mark.parametrize("code", [7, -192, -185, -195, 13])
def test_timeouts_and_transport_errors_are_possible_duplicates(code: int) -> None:
    e = classify(code)
    assert e.retriable
    assert e.possibly_persisted
    assert e.quarantine


def test_only_the_brokers_request_timeout_says_the_partition_held_the_write() -> None:
    held = {code for code in range(-200, 100) if classify(code).held}
    assert held == {7}  # not the client's own timeouts: a whole request went unanswered


@pytest.mark.parametrize("code", [10, 87, 29, 31, -186, -150])
def test_unfixable_errors_are_final(code: int) -> None:
    e = classify(code)
    assert e.final
    assert not e.quarantine


def test_unknown_codes_are_treated_conservatively() -> None:
    e = classify(9999, "SOMETHING_NEW")
    assert e.name == "SOMETHING_NEW"
    assert e.retriable
    assert e.possibly_persisted
    assert e.quarantine


def test_error_code_reads_confluent_and_errno_styles() -> None:
    class Confluent:
        def code(self) -> int:
            return 19

    class Errno:
        errno = 20

    assert error_code(Confluent()) == 19
    assert error_code(Errno()) == 20
    assert error_code(object()) == -1


@pytest.mark.parametrize(
    "exc", [ConfigError, ProducerClosed, MetadataUnavailable, NoUsablePartition, ProduceTimeout]
)
def test_one_root(exc: type[Exception]) -> None:
    assert issubclass(exc, FailoverError)


def test_config_error_is_a_value_error() -> None:
    assert issubclass(ConfigError, ValueError)
