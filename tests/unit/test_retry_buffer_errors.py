"""Bad input and misuse: clear exceptions that name the value."""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Callable
from typing import Any

import pytest

import retry_buffer
from retry_buffer import (
    AsyncRetryBuffer,
    BufferClosed,
    Entry,
    InvalidArgument,
    Merger,
    RetryBuffer,
    RetryBufferError,
    RetryPolicy,
)


@pytest.mark.parametrize("limit", [0, -1, 1.5, True, "10", None])
def test_bad_limit_is_refused_naming_it(limit: object) -> None:
    with pytest.raises(InvalidArgument, match=rf"max_in_flight.*got {limit!r}"):
        RetryBuffer(max_in_flight=limit)  # type: ignore[arg-type]  # testing bad input
    with pytest.raises(InvalidArgument, match="max_in_flight"):
        AsyncRetryBuffer(max_in_flight=limit)  # type: ignore[arg-type]  # testing bad input


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": -2}, "max_attempts"),
        ({"max_attempts": 2.0}, "max_attempts"),
        ({"max_attempts": True}, "max_attempts"),
        ({"deadline_s": 0}, "deadline_s"),
        ({"deadline_s": -1.0}, "deadline_s"),
        ({"deadline_s": math.nan}, "deadline_s"),
        ({"backoff_initial_s": -0.1}, "backoff_initial_s"),
        ({"backoff_initial_s": math.inf}, "backoff_initial_s"),
        ({"backoff_max_s": "1"}, "backoff_max_s"),
        ({"backoff_initial_s": 2.0, "backoff_max_s": 1.0}, "backoff_max_s"),
    ],
)
def test_bad_policy_values_are_refused_naming_them(kwargs: dict[str, object], name: str) -> None:
    with pytest.raises(InvalidArgument, match=name):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]  # testing bad input
    assert issubclass(InvalidArgument, ValueError)


def test_bad_policy_object_and_callback_are_refused() -> None:
    with pytest.raises(InvalidArgument, match="policy must be a RetryPolicy"):
        RetryBuffer(policy={"max_attempts": 3})  # type: ignore[arg-type]  # testing bad input
    with pytest.raises(InvalidArgument, match="on_final_failure"):
        RetryBuffer(on_final_failure="log")  # type: ignore[arg-type]  # testing bad input


@pytest.mark.parametrize("timeout", ["1", b"1", [1]])
def test_timeouts_that_are_not_numbers_are_refused_naming_them(timeout: object) -> None:
    buf: RetryBuffer[int] = RetryBuffer(max_in_flight=1)
    abuf: AsyncRetryBuffer[int] = AsyncRetryBuffer(max_in_flight=1)
    bad: Any = timeout
    calls: list[Callable[[], object]] = [
        lambda: buf.admit(1, timeout=bad),
        lambda: Merger(buf, [1]).next(bad),
        lambda: asyncio.run(abuf.admit(1, timeout=bad)),
    ]
    for call in calls:
        with pytest.raises(InvalidArgument, match=rf"timeout.*got {re.escape(repr(timeout))}"):
            call()
    assert buf.in_flight == abuf.in_flight == 0


@pytest.mark.parametrize("timeout", [-1, -0.001, math.nan])
def test_negative_timeouts_are_refused_naming_them(timeout: float) -> None:
    buf: RetryBuffer[int] = RetryBuffer(max_in_flight=1)
    with pytest.raises(InvalidArgument, match=rf"timeout.*got {timeout!r}"):
        buf.admit(1, timeout=timeout)
    with pytest.raises(InvalidArgument, match="timeout"):
        buf.wait_idle(timeout)
    with pytest.raises(InvalidArgument, match="timeout"):
        Merger(buf, [1]).next(timeout)
    with pytest.raises(InvalidArgument, match="timeout"):
        buf.admit_many([1], timeout=timeout)
    assert buf.in_flight == 0


def test_double_delivered_raises_and_counts_once() -> None:
    buf: RetryBuffer[str] = RetryBuffer()
    entry = buf.admit("m")
    buf.delivered(entry)
    with pytest.raises(RetryBufferError, match=r"seq=0.*already had its final outcome"):
        buf.delivered(entry)
    with pytest.raises(RetryBufferError, match="already had its final outcome"):
        buf.failed(entry, "x")
    assert buf.statistics().delivered == 1


def test_entry_of_another_buffer_is_refused() -> None:
    a: RetryBuffer[str] = RetryBuffer()
    b: RetryBuffer[str] = RetryBuffer()
    ea = a.admit("a")
    eb = b.admit("b")  # same seq as ea
    with pytest.raises(RetryBufferError, match="did not admit"):
        b.delivered(ea)
    b.delivered(eb)  # b's own entry is untouched by the refused call
    a.delivered(ea)
    assert a.statistics().delivered == b.statistics().delivered == 1


class _OwnEntry(Entry["_OwnEntry"]):
    """A sender's message object that is its own entry (see ``try_enter``)."""

    __slots__ = ()

    def __init__(self) -> None:
        pass

    @property
    def item(self) -> _OwnEntry:
        return self


@pytest.mark.parametrize("flavour", [RetryBuffer, AsyncRetryBuffer])
def test_try_enter_refuses_an_entry_in_flight_already(flavour: type[Any]) -> None:
    """Entered twice, it would count twice and end twice (the second end a misuse error);
    refused with the limit free or reached, sent or waiting in the failed buffer."""
    buf: RetryBuffer[_OwnEntry] | AsyncRetryBuffer[_OwnEntry] = flavour(max_in_flight=2)
    a, b = _OwnEntry(), _OwnEntry()
    assert buf.try_enter(a)
    with pytest.raises(RetryBufferError, match=r"try_enter\(\) got entry seq=0, which this buffer"):
        buf.try_enter(a)
    assert buf.in_flight == 1
    assert buf.try_enter(b)
    with pytest.raises(RetryBufferError, match="counts in flight already"):
        buf.try_enter(b)  # at the limit: refused, not just "no room"
    assert buf.failed(a, "x")
    with pytest.raises(RetryBufferError, match="counts in flight already"):
        buf.try_enter(a)  # waiting in the failed buffer
    buf.delivered(b)
    assert buf.take_failed() is a
    buf.delivered(a)
    stats = buf.statistics()
    assert (stats.admitted, stats.delivered, stats.in_flight) == (2, 2, 0)
    assert buf.close() == []


def test_failed_and_delivered_after_close_raise_buffer_closed() -> None:
    buf: RetryBuffer[str] = RetryBuffer()
    entry = buf.admit("m")
    other = buf.admit("n")
    assert buf.close() == [entry, other]
    with pytest.raises(BufferClosed, match=r"failed\(\) for entry seq=0 after close"):
        buf.failed(entry, "x")
    with pytest.raises(BufferClosed, match=r"delivered\(\) for entry seq=1 after close"):
        buf.delivered(other)
    with pytest.raises(BufferClosed):
        buf.admit("late")
    with pytest.raises(BufferClosed):
        buf.admit_many(["late"])
    stats = buf.statistics()
    assert (stats.returned_on_close, stats.delivered, stats.closed) == (2, 0, True)


def test_merger_needs_the_matching_buffer() -> None:
    with pytest.raises(InvalidArgument, match="Merger needs a RetryBuffer"):
        Merger(AsyncRetryBuffer(), [1])  # type: ignore[arg-type]  # testing bad input


def test_documented_names_are_exported() -> None:
    pinned = {
        "RetryPolicy",
        "Entry",
        "RetryBuffer",
        "AsyncRetryBuffer",
        "Merger",
        "Statistics",
        "RetryBufferError",
        "InflowTimeout",
        "BufferClosed",
        "AdmissionShut",
    }
    assert pinned <= set(retry_buffer.__all__)
    for name in retry_buffer.__all__:
        assert getattr(retry_buffer, name).__module__.startswith("retry_buffer")
    for method in (
        "admit",
        "try_admit",
        "try_enter",
        "delivered",
        "failed",
        "take_failed",
        "next_due_in",
        "wait_idle",
        "shut_admission",
        "close",
        "statistics",
    ):
        # On instances: delivered (and AsyncRetryBuffer.try_admit, try_enter) are the core's own
        # methods, set per buffer.
        assert callable(getattr(RetryBuffer(), method))
        assert callable(getattr(AsyncRetryBuffer(), method))
