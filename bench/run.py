"""Run every benchmark in bench/ and print one table (``make bench``).

Usage: ``python bench/run.py [--quick] [--only NAME] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import traceback
from pathlib import Path

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
    args = ap.parse_args(argv)

    figures: list[Figure] = []
    failed: list[str] = []
    for name in _modules(args.only):
        print(f"running {name} ...", file=sys.stderr, flush=True)
        try:
            mod = importlib.import_module(name)
            figures.extend(mod.run(quick=args.quick))
        except Exception:
            traceback.print_exc()
            failed.append(name)

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
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
