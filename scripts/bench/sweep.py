"""Replay a trace under variants of the default policy: the sweep behind docs/simulator.md.

Each argument is a JSON object of PolicyConfig fields that override the defaults:

    python scripts/bench/sweep.py '{}' '{"starvation_s": {}}' \
        '{"preempt_by": "class+attained", "weights": {"priority": 1, "attained": 0.2, "remaining": 0.08}}'

Options: --trace FILE (default: the shared Philly week), --gpus N (256), --est-error SPEC (lognormal:1),
--seed N (1). Prints one line per variant: wall time, avg JCT and its ratio to fifo, the p99 wait of
8-GPU-and-larger jobs, Jain's index and utilization.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from dispatcher.sim.compare import simulate  # noqa: E402
from dispatcher.sim.nodes import make_nodes  # noqa: E402
from dispatcher.sim.policies import BASELINES  # noqa: E402
from dispatcher.sim.workload import EstimateModel, parse_trace  # noqa: E402
from dispatcher.lab.suite_run import policy_named  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("variants", nargs="*", default=["{}"])
    ap.add_argument("--trace", default=str(ROOT.parent / "shared" / "traces" / "philly_week.csv"))
    ap.add_argument("--gpus", type=int, default=256)
    ap.add_argument("--est-error", default="lognormal:1")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    trace = parse_trace(Path(args.trace).read_text())
    nodes = make_nodes(None, args.gpus)
    est = EstimateModel.parse(args.est_error)
    fifo = simulate(trace, nodes, [BASELINES["fifo"]], estimates=est, make_rng=random.Random,
                    seed=args.seed)["policies"]["fifo"]["avg_jct_s"]
    for text in args.variants:
        variant = policy_named(text.strip())  # a JSON object of PolicyConfig overrides, as the suite reads it
        t0 = time.perf_counter()
        m = simulate(trace, nodes, [variant], estimates=est, make_rng=random.Random,
                     seed=args.seed)["policies"][variant.name]
        print(f"{time.perf_counter() - t0:6.1f}s jct={m['avg_jct_s']:.0f} vs_fifo={m['avg_jct_s'] / fifo:.3f} "
              f"p99_wait_8plus={m['p99_wait_8plus_gpus_s'] or 0:.0f} jain={m['jain_fairness']} "  # (None: no 8+ job)
              f"util={m['utilization']} {text}", flush=True)


if __name__ == "__main__":
    main()
