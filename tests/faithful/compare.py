"""Run every scenario on real Kafka and on minibroker; print both outcomes and whether they match.

    python -m tests.faithful.compare [--scenario NAME ...] [--json]

Starts a 5-broker Kafka cluster (tests/realkafka; Java and Maven needed) and a 5-broker
minibroker with the same settings. Exit status 0 when every scenario matches, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Sequence

from tests.faithful.backends import BROKERS, MIN_ISR, Backend, KafkaBackend, minibroker_backend
from tests.faithful.catalog import SCENARIOS
from tests.faithful.scenarios import CLIENT_APIS, Outcome, api_versions
from tests.realkafka.cluster import KafkaCluster


def run(backend: Backend, names: Sequence[str]) -> dict[str, Outcome]:
    outcomes = {}
    for name in names:
        backend.heal()
        outcomes[name] = SCENARIOS[name](backend)
    backend.heal()
    return outcomes


def _value(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def print_table(kafka: dict[str, Outcome], mini: dict[str, Outcome]) -> int:
    matched = 0
    for name, reference in kafka.items():
        other = mini[name]
        same = reference == other
        matched += same
        print(f"\n### {reference.scenario}: {'match' if same else 'DIFFERENT'}\n")
        print("| observation | Kafka | minibroker | |")
        print("|---|---|---|---|")
        theirs = dict(other.observed)
        for key, value in reference.observed:
            mark = "" if theirs.get(key) == value else "differs"
            print(f"| {key} | {_value(value)} | {_value(theirs.get(key))} | {mark} |")
        for key, seconds in reference.timings_s:
            print(f"| {key} (s) | {seconds:.1f} | {other.timing(key):.1f} | timing |")
    print(f"\n{matched} of {len(kafka)} scenarios match")
    return matched


def print_api_versions(kafka: dict[int, tuple[int, int]], mini: dict[int, tuple[int, int]]) -> None:
    print("\n### ApiVersions advertised (min-max)\n")
    print("| key | API | Kafka | minibroker |")
    print("|---|---|---|---|")
    for key in sorted(set(kafka) | set(mini)):
        name = CLIENT_APIS.get(key, "")
        k, m = kafka.get(key), mini.get(key)
        kafka_range = f"{k[0]}-{k[1]}" if k else "-"
        mini_range = f"{m[0]}-{m[1]}" if m else "-"
        print(f"| {key} | {name} | {kafka_range} | {mini_range} |")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS))
    parser.add_argument("--json", action="store_true", help="the outcomes as JSON")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)  # the brokers' fault log lines are not the table
    names = args.scenario or list(SCENARIOS)
    began = time.monotonic()
    with KafkaCluster(BROKERS, min_insync_replicas=MIN_ISR) as cluster:
        kafka_backend = KafkaBackend(cluster)
        kafka = run(kafka_backend, names)
        kafka_versions = api_versions(kafka_backend)
    with minibroker_backend() as mini_backend:
        mini = run(mini_backend, names)
        mini_versions = api_versions(mini_backend)
    if args.json:
        json.dump(
            {
                name: {
                    "kafka": [[k, _value(v)] for k, v in kafka[name].observed],
                    "minibroker": [[k, _value(v)] for k, v in mini[name].observed],
                    "match": kafka[name] == mini[name],
                }
                for name in names
            },
            sys.stdout,
            indent=2,
        )
        print()
        return 0 if all(kafka[n] == mini[n] for n in names) else 1
    matched = print_table(kafka, mini)
    print_api_versions(kafka_versions, mini_versions)
    print(f"\n({time.monotonic() - began:.0f} s)")
    return 0 if matched == len(names) else 1


if __name__ == "__main__":
    sys.exit(main())
