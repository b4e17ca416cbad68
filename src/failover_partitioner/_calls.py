"""Calling the user's code once per message, every message even when a call raises."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TypeVar

__all__ = ["call_each"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


def call_each(
    items: Iterable[T], call: Callable[[T], object], first: BaseException | None = None
) -> BaseException | None:
    """``call(item)`` for every item, even when one raises: a callback or dead-letter hook
    interrupted by a Ctrl-C (``KeyboardInterrupt``) must not leave the other messages without
    an outcome. Returns the first exception (``first``: one the caller already holds from an
    earlier round), for the caller to raise once it is done; later ones are logged."""
    for item in items:
        try:
            call(item)
        except BaseException as exc:
            if first is None:
                first = exc
            else:
                logger.error("%r raised too, for another message, while %r waits", exc, first)
    return first
