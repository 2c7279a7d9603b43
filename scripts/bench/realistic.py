"""The policy's cycle on a realistic queue, two policies alternately in one process (an A/B).

Not the uniform queue of cycle.py (one free GPU, jobs of 2-8 GPUs, nothing that can happen):
the cluster and queue issue 16 describes, built in memory and given to the policy alone
(`policy.plan_cycle`; no Redis, so this is the policy's share of a cycle, not the reads):

- nodes: 40% 8xA100-80GB, 30% 8xH100-80GB, 30% 8xV100-32GB; every GPU held by running jobs
  of 1/2/4/8 GPUs, classes low/normal/high, 40% checkpointable, started up to a day ago, except
  about 3% of the GPUs, free in fragments;
- pending: 50 users x 20 request templates (1/2/4/8 GPUs, 1% 16; any, A100, H100 or V100; 10%
  with --gpu-mem 40; all four classes; estimates none to 24 h), submitted over the last 3 days
  (so some are past their starvation bounds).

For each size it times the first cycle (a Backlog built from the pending jobs) and the steady
cycle (the Backlog kept, as the live scheduler's mirror keeps it): medians of --repeats.

    python scripts/bench/realistic.py [--sizes 1000x100,5000x400] [--repeats 5] [A B]

A and B are policies as `dispatch simulate --policy` takes them (default: dispatch and
examples/policy-classes-apart.toml, the default before the workload suite).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from dispatcher.core.plan import Snapshot  # noqa: E402
from dispatcher.policy import Backlog, plan_cycle  # noqa: E402
from dispatcher.lab.suite_run import policy_named  # noqa: E402
from realqueue import Realistic  # noqa: E402

NOW_MS = Realistic(0, 0).now_ms


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("policies", nargs="*", default=["dispatch", "examples/policy-classes-apart.toml"])
    ap.add_argument("--sizes", default="1000x100,5000x400")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    configs = {p: policy_named(p).config for p in args.policies}
    print(f"{'size':>12}  {'policy':36} {'first ms':>9} {'steady ms':>10} {'placed':>7} {'preempt':>8} {'resv':>5}")
    for size in args.sizes.split(","):
        pending, n_nodes = (int(x) for x in size.split("x"))
        gen = Realistic(size, n_nodes)
        nodes, running = gen.cluster()
        jobs = gen.queue(pending)
        first, steady, plans = {p: [] for p in configs}, {p: [] for p in configs}, {}
        for i in range(args.repeats):
            for p in (list(configs) if i % 2 == 0 else list(reversed(configs))):
                cfg = configs[p]
                first[p].append(timed(lambda: plan_cycle(Snapshot(tuple(jobs), tuple(running), tuple(nodes)),
                                                         NOW_MS, cfg)))
                backlog = Backlog(cfg, jobs)
                snap = Snapshot(backlog, tuple(running), tuple(nodes))
                plan_cycle(snap, NOW_MS, cfg)  # the first cycle on this backlog
                steady[p].append(timed(lambda: plans.__setitem__(p, plan_cycle(snap, NOW_MS, cfg)[0])))
        for p in configs:
            plan = plans[p]
            print(f"{size:>12}  {p:36} {statistics.median(first[p]):9.0f} {statistics.median(steady[p]):10.1f} "
                  f"{len(plan.placements):7d} {len(plan.preemptions):8d} {len(plan.reservations):5d}", flush=True)
        if len(configs) == 2:
            a, b = configs
            print(f"{'':>12}  steady {a} / {b}: "
                  f"{statistics.median(steady[a]) / statistics.median(steady[b]):.2f}; first: "
                  f"{statistics.median(first[a]) / statistics.median(first[b]):.2f}")


if __name__ == "__main__":
    main()
