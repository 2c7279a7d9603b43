"""A/B of two checkouts in one run: the same benchmark script from each, alternating (A B A B ...), so
both meet the same machine load. Prints each run's figures and, per figure, the medians and B/A.

    python scripts/bench/ab.py A_CHECKOUT B_CHECKOUT ROUNDS SCRIPT [ARGS...]

SCRIPT is a file under scripts/bench/ of each checkout that prints JSON objects, one a line (the last
line with numbers is taken; nested objects are flattened as a.b). `{checkout}` in ARGS is replaced by
the checkout's path (up_submit.py takes it as its first argument). Example, the refactor of issue 19:

    git worktree add /tmp/base 9241e02
    python scripts/bench/ab.py /tmp/base . 3 realcycle.py --sizes 10000x1000 --repeats 3
    python scripts/bench/ab.py /tmp/base . 3 up_submit.py {checkout} 20
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path


def flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flat(v, f"{prefix}{k}."))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[f"{prefix}{k}"] = v
    return out


def run(checkout: Path, script: str, args: list[str]) -> dict:
    argv = [sys.executable, str(checkout / "scripts" / "bench" / script)] + [a.replace("{checkout}", str(checkout))
                                                                           for a in args]
    p = subprocess.run(argv, cwd=checkout, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{checkout}: {script} exited {p.returncode}: {p.stderr[-2000:]}")
    figures = {}
    for line in p.stdout.splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and flat(obj):
            figures = flat(obj)
    return figures


def main() -> None:
    a, b, rounds, script, *args = sys.argv[1:]
    sides = {"A": Path(a).resolve(), "B": Path(b).resolve()}
    got: dict[str, list[dict]] = {"A": [], "B": []}
    for i in range(int(rounds)):
        for side in ("A", "B") if i % 2 == 0 else ("B", "A"):
            got[side].append(run(sides[side], script, args))
            print(json.dumps({"round": i + 1, "side": side, **got[side][-1]}), flush=True)
    keys = sorted(set(got["A"][0]) & set(got["B"][0]))
    print(f"{'figure':44} {'A median':>12} {'B median':>12} {'B/A':>6}")
    for k in keys:
        ma = statistics.median(r[k] for r in got["A"] if k in r)
        mb = statistics.median(r[k] for r in got["B"] if k in r)
        ratio = f"{mb / ma:.2f}" if ma else "-"
        print(f"{k:44} {ma:12.2f} {mb:12.2f} {ratio:>6}")


if __name__ == "__main__":
    main()
