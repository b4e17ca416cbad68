"""The faithfulness layer: every scenario on both backends.

``backend`` is parametrized: ``kafka`` is the session's real cluster (tests/realkafka/fixtures.py;
skipped with the reason where Java or Maven is missing), ``minibroker`` a 5-broker minibroker
with the same settings, shared by the module. Each test starts and ends with every fault undone.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.faithful.backends import Backend, KafkaBackend, MiniBackend, minibroker_backend


@pytest.fixture(scope="module")
def _minibroker_backend() -> Iterator[MiniBackend]:
    with minibroker_backend() as backend:
        yield backend


@pytest.fixture(params=["kafka", "minibroker"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    chosen: Backend
    if request.param == "kafka":
        chosen = KafkaBackend(request.getfixturevalue("_kafka_session_cluster"))
    else:
        chosen = request.getfixturevalue("_minibroker_backend")
    chosen.heal()
    yield chosen
    chosen.heal()
