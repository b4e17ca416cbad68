"""A source partition's lag, the rule the status line and ``failover_mirror_lag`` share."""

from __future__ import annotations

import pytest

from failover_partitioner.mirror._report import partition_lag


@pytest.mark.parametrize(
    ("committed", "low", "high", "reads_from_low", "lag"),
    [
        (40, 0, 100, True, 60),  # end minus the committed offset
        (40, 0, 100, False, 60),  # whatever the reset
        (None, 10, 100, True, 90),  # none committed, starts at the log start (earliest)
        (None, 10, 100, False, None),  # latest (or the group's offset unread): unknown
        (None, 7, 7, False, 0),  # empty: nothing to mirror, whatever the reset
        (None, 7, 7, True, 0),
        (3, 7, 7, True, 0),  # empty since retention passed the committed offset
        (120, 0, 100, True, 0),  # committed past the end: nothing left to read
        (None, None, None, True, None),  # not fetched yet
        (40, None, None, True, None),
        (None, None, 100, True, None),  # the log start unknown
    ],
)
def test_lag(
    committed: int | None, low: int | None, high: int | None, reads_from_low: bool, lag: int | None
) -> None:
    assert partition_lag(committed, low, high, reads_from_low=reads_from_low) == lag
