"""Suite-wide settings: a marker per layer, taken from the folder a test lives in."""

from __future__ import annotations

from pathlib import Path

import pytest

_LAYERS = ("unit", "integration", "spark", "interop", "kafka", "faithful")

pytest_plugins = ["tests.realkafka.fixtures"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--run-slow",
        action="store_true",
        default=False,
        help="also run the long variants (chaos soak, large volumes) marked `slow`",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    run_slow = bool(config.getoption("--run-slow"))
    skip_slow = pytest.mark.skip(reason="long variant: run with --run-slow")
    for item in items:
        parts = Path(str(item.fspath)).parts
        for layer in _LAYERS:
            if layer in parts:
                item.add_marker(getattr(pytest.mark, layer))
        if "slow" in item.keywords and not run_slow:
            item.add_marker(skip_slow)
