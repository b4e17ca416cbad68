"""``_calls.call_each``: every message's call runs, the first exception is kept for the caller
and every later one is logged, also across two rounds (the asyncio producer's failed batch:
the messages withdrawn from its partition, then the batch's own)."""

from __future__ import annotations

import logging

import pytest

from failover_partitioner._calls import call_each


def test_every_call_runs_the_first_exception_is_returned_and_the_later_ones_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    called: list[int] = []

    def call(i: int) -> None:
        called.append(i)
        if i % 2:
            raise KeyboardInterrupt(i) if i == 1 else ValueError(i)

    caplog.set_level(logging.ERROR, logger="failover_partitioner._calls")
    first = call_each(range(4), call)
    assert called == [0, 1, 2, 3]
    assert isinstance(first, KeyboardInterrupt)
    # A second round keeps the first round's exception and logs its own.
    again = call_each(range(4, 6), call, first)
    assert again is first
    assert called == [0, 1, 2, 3, 4, 5]
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 2
    assert all("while KeyboardInterrupt(1) waits" in line for line in logged)
    assert ["ValueError(3)" in logged[0], "ValueError(5)" in logged[1]] == [True, True]
    assert call_each([], call) is None
