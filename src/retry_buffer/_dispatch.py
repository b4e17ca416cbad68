"""Reporting final failures to the user's callback, outside any lock."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from ._model import Entry

__all__ = ["FinalFailureCallback", "report_finals"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

FinalFailureCallback = Callable[[Entry[T], object], None]


def report_finals(
    finals: list[tuple[Entry[T], object]], callback: FinalFailureCallback[T] | None
) -> None:
    """Call ``callback`` once per final failure; every one is called even if one raises.

    The first exception is re-raised after all have been called, so a failing callback is
    seen by its caller and never makes another entry disappear. A KeyboardInterrupt or
    SystemExit (a signal's handler) waits likewise: the entries are already out of the
    buffer, and this is the only place they are reported.
    """
    if callback is None:
        for entry, error in finals:
            # Without a callback the failure is still counted (statistics().final_failures)
            # and logged, never dropped silently.
            logger.error(
                "message seq=%s failed finally after %s attempt(s): %r",
                entry.seq,
                entry.attempts,
                error,
            )
        return
    first: BaseException | None = None
    for entry, error in finals:
        try:
            callback(entry, error)
        except BaseException as exc:
            if first is None:
                first = exc
            else:
                logger.exception("on_final_failure raised for entry seq=%s", entry.seq)
    if first is not None:
        raise first
