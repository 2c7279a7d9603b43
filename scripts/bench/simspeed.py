"""The simulator's speed under two policies, measured alternately in one process (an A/B).

    python scripts/bench/simspeed.py [--workload philly] [--rounds 3] A B

A and B are what `dispatch simulate --policy` takes (a built-in name or a policy file). Prints
each run's wall time, the median of each policy and the ratio B/A of the medians.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from dispatcher.lab.suite_run import load_workloads, simulate_one  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--workload", default="philly")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    (w,) = load_workloads(None, 1, [args.workload])
    times = {args.a: [], args.b: []}
    for i in range(args.rounds):
        for p in (args.a, args.b) if i % 2 == 0 else (args.b, args.a):
            t0 = time.perf_counter()
            m = simulate_one(w, p, seed=1)
            times[p].append(time.perf_counter() - t0)
            print(f"round {i + 1}: {p}: {times[p][-1]:.1f}s ({m['cycles']} cycles, avg JCT {m['avg_jct_s']:,.0f}s)",
                  flush=True)
    ma, mb = statistics.median(times[args.a]), statistics.median(times[args.b])
    print(f"median {args.a}: {ma:.1f}s; {args.b}: {mb:.1f}s; {args.b} / {args.a} = {mb / ma:.2f}")


if __name__ == "__main__":
    main()
