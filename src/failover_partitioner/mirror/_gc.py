"""Garbage-collector settings for a process whose main work is mirroring."""

from __future__ import annotations

import gc

__all__ = ["GC_YOUNG_THRESHOLD", "tune_gc"]

GC_YOUNG_THRESHOLD = 50_000
"""Net new container objects before a young-generation collection (Python's default: 700)."""


def tune_gc() -> None:
    """Make the cyclic garbage collector cheap for a mirror; ``failover-mirror`` calls it.

    Every message in flight holds a few container objects (the consumed message, its headers,
    its delivery callback, the producer's record). With the default young-generation
    threshold of 700 the collector runs every few hundred messages, re-traverses everything in
    flight and promotes it to the older generations, whose collections then traverse every
    object of the process: about a fifth of the mirror's CPU time in ``bench/bench_mirror.py``.
    This freezes what exists now (module-level objects, never garbage) so that full collections
    skip it, and raises the young threshold to :data:`GC_YOUNG_THRESHOLD`; objects in flight
    are mostly freed before it is reached. Cycles are still collected.

    Process-wide: call it in a process that runs the mirror, not from a library that shares
    its process with other work. ``gc.unfreeze()`` and ``gc.set_threshold`` undo it.
    """
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)
