"""Run every benchmark in bench/ and print one table (``make bench``).

Usage: ``python bench/run.py [--quick] [--only NAME] [--json FILE] [--log FILE] [-v]``.

The terminal gets the progress and the table. What the libraries and brokers log (Python
logging, librdkafka and the JVMs writing to file descriptor 2, a benchmark's traceback) goes to
a log file named at the end; ``-v`` leaves it on the terminal instead.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import logging
import os
import sys
import traceback
from pathlib import Path
from typing import IO

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import Figure  # noqa: E402


def _modules(only: str | None) -> list[str]:
    names = sorted(p.stem for p in HERE.glob("bench_*.py"))
    return [n for n in names if only is None or only in n]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="smaller workloads (a smoke run)")
    ap.add_argument("--only", help="run only the bench modules whose name contains this")
    ap.add_argument("--json", help="also write the figures as JSON to this file")
    ap.add_argument("--log", type=Path, help="the log file (default: build/bench/<UTC time>.log)")
    ap.add_argument(
        "-v", "--verbose", action="store_true", help="library and broker logs on the terminal"
    )
    args = ap.parse_args(argv)

    progress: IO[str] = sys.stderr
    log_path: Path | None = None
    if not args.verbose:
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
        log_path = args.log or Path("build") / "bench" / f"{stamp}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = log_path.open("a", buffering=1)
        progress = os.fdopen(os.dup(2), "w", buffering=1)
        # librdkafka, the brokers' processes and the JVMs write to descriptor 2 themselves.
        os.dup2(log.fileno(), 2)
    # WARNING, as Python's last-resort handler printed before: the benchmarks log no more
    # than they did, only elsewhere.
    logging.basicConfig(
        level=logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )

    figures: list[Figure] = []
    failed: list[str] = []
    for name in _modules(args.only):
        print(f"running {name} ...", file=progress, flush=True)
        try:
            mod = importlib.import_module(name)
            figures.extend(mod.run(quick=args.quick))
        except Exception:
            traceback.print_exc()
            failed.append(name)
            print(f"  {name} raised: {traceback.format_exc().splitlines()[-1]}", file=progress)

    header = (
        f"{'issue':>5}  {'figure':<58} {'value':>12} {'reference':>12} {'ratio':>7}  target  met"
    )
    print(header)
    print("-" * len(header))
    for f in figures:
        target = f">={f.target:g}x" if f.kind == "ratio_min" else f"<={f.target:g}{f.unit}"
        print(
            f"{f.issue:>5}  {f.name:<58} {f.value:>12.4g} {f.reference:>12.4g} "
            f"{f.ratio:>7.3f}  {target:<7} {'yes' if f.met else 'NO'}"
        )
        if f.note:
            print(f"{'':>7}{f.note}")
    if failed:
        print(f"benchmarks that raised: {', '.join(failed)}")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                [
                    {
                        "issue": f.issue,
                        "name": f.name,
                        "value": f.value,
                        "reference": f.reference,
                        "unit": f.unit,
                        "ratio": f.ratio,
                        "target": f.target,
                        "kind": f.kind,
                        "met": f.met,
                    }
                    for f in figures
                ],
                indent=2,
            )
        )
    if log_path is not None:
        print(f"logs: {log_path}", file=progress, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
