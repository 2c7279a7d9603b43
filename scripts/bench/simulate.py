"""How the simulator's run time grows with trace length and cluster size.

Replays seeded synthetic Philly-like traces (offered load ~75% of the cluster) under
the default policy, and the shared Philly week, and prints wall time per run:

    python scripts/bench/simulate.py [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from dispatcher.sim.compare import simulate  # noqa: E402
from dispatcher.sim.nodes import make_nodes  # noqa: E402
from dispatcher.sim.policies import BASELINES, dispatch_policy  # noqa: E402
from dispatcher.sim.workload import EstimateModel, parse_trace, synthetic  # noqa: E402


def timed(trace, gpus, policy) -> dict:
    t0 = time.perf_counter()
    out = simulate(trace, make_nodes(None, gpus), [policy], estimates=EstimateModel("lognormal", 1.0),
                   make_rng=random.Random, seed=1)
    m = out["policies"][policy.name]
    return {"jobs": len(trace), "gpus": gpus, "policy": policy.name, "wall_s": round(time.perf_counter() - t0, 2),
            "cycles": m["cycles"], "avg_jct_s": m["avg_jct_s"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    runs = []
    sizes = [1_000, 10_000] if args.quick else [1_000, 10_000, 100_000]
    for n in sizes:
        for gpus in ([256] if args.quick else [64, 256, 1024]):
            trace = synthetic(n, random.Random(n), users=30, load_gpus=0.75 * gpus)
            runs.append(timed(trace, gpus, dispatch_policy()))
            print(runs[-1], flush=True)
    philly = ROOT.parent / "shared" / "traces" / "philly_week.csv"
    if philly.exists():
        trace = parse_trace(philly.read_text())
        for policy in (BASELINES["fifo"], dispatch_policy()):
            runs.append(dict(timed(trace, 256, policy), trace="philly_week"))
            print(runs[-1], flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
