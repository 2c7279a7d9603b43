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
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from dispatcher.cycle import NodeView, PendingJob, RunningJob, Snapshot  # noqa: E402
from dispatcher.model import PRIORITIES, GpuInfo, JobSpec  # noqa: E402
from dispatcher.policy import Backlog, plan_cycle  # noqa: E402
from dispatcher.suite_run import policy_named  # noqa: E402

NOW_MS = 1_800_000_000_000
KINDS = (("A100", 80.0, 0.4), ("H100", 80.0, 0.3), ("V100", 32.0, 0.3))


def cluster(n_nodes: int, rng) -> tuple[list[NodeView], list[RunningJob]]:
    nodes, running = [], []
    for i in range(n_nodes):
        kind, mem, _ = rng.choices(KINDS, weights=[k[2] for k in KINDS])[0]
        gpus = tuple(GpuInfo(g, f"NVIDIA {kind}-SXM-{mem:.0f}GB", mem) for g in range(8))
        name, free, g = f"n{i:04d}", [], 0
        while g < 8:
            size = min(8 - g, rng.choice((1, 1, 2, 4, 8)))
            if rng.random() < 0.03:
                free.append(g)
                g += 1
                continue
            spec = JobSpec(id=f"r{i}-{g}", command=("train",), user=f"u{rng.randrange(50):02d}", gpus=size,
                           priority=rng.choice(("low", "normal", "normal", "high")),
                           checkpointable=rng.random() < 0.4, est_s=rng.choice((None, 3600.0, 36000.0)),
                           submit_ms=NOW_MS - 2 * 86_400_000)
            running.append(RunningJob(spec, name, tuple(range(g, g + size)),
                                      NOW_MS - int(rng.uniform(60, 86400) * 1000)))
            g += size
        used_cpus = sum(r.spec.cpus for r in running if r.node == name)
        nodes.append(NodeView(name, gpus, 128, 1024.0, tuple(free), 128 - used_cpus, 1024.0))
    return nodes, running


def queue(n: int, rng) -> list[PendingJob]:
    templates = []
    for u in range(50):
        for _ in range(20):
            gpus = 16 if rng.random() < 0.01 else rng.choice((1, 1, 2, 4, 8))
            templates.append(dict(user=f"u{u:02d}", gpus=gpus,
                                  gpu_types=rng.choice(((), (), ("A100",), ("H100",), ("V100",))),
                                  gpu_mem_gb=40.0 if rng.random() < 0.1 else 0.0, priority=rng.choice(PRIORITIES),
                                  est_s=rng.choice((None, 600.0, 3600.0, 4 * 3600.0, 24 * 3600.0)),
                                  checkpointable=rng.random() < 0.5))
    return [PendingJob(JobSpec(id=str(i + 1), command=("train", str(i)),
                               submit_ms=NOW_MS - int(rng.uniform(0, 3 * 86400) * 1000), **rng.choice(templates)))
            for i in range(n)]


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
        rng = random.Random(size)
        nodes, running = cluster(n_nodes, rng)
        jobs = queue(pending, rng)
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
