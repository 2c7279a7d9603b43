"""The realistic queue of issue 16, seeded, with knobs: in memory (for the policy alone) or in Redis.

Not the uniform queue of cycle.py (one free GPU, jobs of 2-8 GPUs, nothing that can happen):

- nodes: 40% 8xA100-80GB, 30% 8xH100-80GB, 30% 8xV100-32GB (`kinds`); every GPU held by
  running jobs of 1/2/4/8 GPUs, classes low/normal/high, `ckpt_share` checkpointable, started up
  to a day ago, except `free_share` of the GPUs, free in fragments;
- pending: `users` users x `templates` request templates each (1/2/4/8 GPUs, `big_share` 16;
  any, A100, H100 or V100; `mem_share` with --gpu-mem 40; all four classes; estimates none to
  24 h), submitted over the last `wait_days` days (so some are past their starvation bounds).

`Realistic(seed, nodes).cluster()` and `.queue(n)` give policy inputs (NodeView, RunningJob,
PendingJob); `write(client, ns, pending)` writes the same kind of cluster into Redis as an agent
and the scheduler would have left it (heartbeats, running jobs holding their GPUs through
commit_placement.lua and mark_running.lua, pending jobs through submit).
"""

from __future__ import annotations

import json
import random
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from dispatcher.core.plan import NodeView, PendingJob, RunningJob
from dispatcher.core.model import PRIORITIES, GpuInfo, JobSpec

KINDS = (("A100", 80.0, 0.4), ("H100", 80.0, 0.3), ("V100", 32.0, 0.3))
NODE_CPUS, NODE_MEM_GB = 128, 1024.0


@dataclass
class Realistic:
    seed: object
    nodes: int
    kinds: tuple = KINDS
    users: int = 50
    templates: int = 20
    free_share: float = 0.03
    ckpt_share: float = 0.4
    mem_share: float = 0.1
    big_share: float = 0.01
    wait_days: float = 3.0
    now_ms: int = 1_800_000_000_000

    def __post_init__(self):
        self.rng = random.Random(self.seed)

    # -- in memory ------------------------------------------------------------------------
    def cluster(self) -> tuple[list[NodeView], list[RunningJob]]:
        rng, now = self.rng, self.now_ms
        nodes, running = [], []
        for i in range(self.nodes):
            kind, mem, _ = rng.choices(self.kinds, weights=[k[2] for k in self.kinds])[0]
            gpus = tuple(GpuInfo(g, f"NVIDIA {kind}-SXM-{mem:.0f}GB", mem) for g in range(8))
            name, free, g, used_cpus = f"n{i:04d}", [], 0, 0
            while g < 8:
                size = min(8 - g, rng.choice((1, 1, 2, 4, 8)))
                if rng.random() < self.free_share:
                    free.append(g)
                    g += 1
                    continue
                spec = JobSpec(id=f"r{i}-{g}", command=("train",), user=f"u{rng.randrange(self.users):02d}",
                               gpus=size, priority=rng.choice(("low", "normal", "normal", "high")),
                               checkpointable=rng.random() < self.ckpt_share,
                               est_s=rng.choice((None, 3600.0, 36000.0)), submit_ms=now - 2 * 86_400_000)
                running.append(RunningJob(spec, name, tuple(range(g, g + size)),
                                          now - int(rng.uniform(60, 86400) * 1000)))
                used_cpus += spec.cpus
                g += size
            nodes.append(NodeView(name, gpus, NODE_CPUS, NODE_MEM_GB, tuple(free), NODE_CPUS - used_cpus,
                                  NODE_MEM_GB))
        return nodes, running

    def _templates(self) -> list[dict]:
        rng, out = self.rng, []
        for u in range(self.users):
            for _ in range(self.templates):
                gpus = 16 if rng.random() < self.big_share else rng.choice((1, 1, 2, 4, 8))
                out.append(dict(user=f"u{u:02d}", gpus=gpus,
                                gpu_types=rng.choice(((), (), ("A100",), ("H100",), ("V100",))),
                                gpu_mem_gb=40.0 if rng.random() < self.mem_share else 0.0,
                                priority=rng.choice(PRIORITIES),
                                est_s=rng.choice((None, 600.0, 3600.0, 4 * 3600.0, 24 * 3600.0)),
                                checkpointable=rng.random() < 0.5))
        return out

    def queue(self, n: int) -> list[PendingJob]:
        rng, templates = self.rng, self._templates()
        span = self.wait_days * 86400
        return [PendingJob(JobSpec(id=str(i + 1), command=("train", str(i)),
                                   submit_ms=self.now_ms - int(rng.uniform(0, span) * 1000), **rng.choice(templates)))
                for i in range(n)]

    # -- in Redis -------------------------------------------------------------------------
    def write(self, client, ns: str, pending: int, chunk: int = 5_000) -> dict:
        """This cluster and `pending` jobs in Redis, at the wall clock's now (times shifted from
        now_ms). Returns {'nodes': [names], 'running': [ids], 'pending': [ids]}."""
        from dispatcher.store.jobs import write_jobs
        from dispatcher.store.nodes import write_heartbeat
        from dispatcher.store.scripts import Scripts

        shift = int(time.time() * 1000) - self.now_ms
        views, running = self.cluster()
        for v in views:
            write_heartbeat(client, ns, v.name, list(v.gpus), v.cpus, v.mem_gb, self.now_ms + shift)
        run_ids = []
        specs = [_checked(r.spec, r.spec.submit_ms + shift) for r in running]
        for i in range(0, len(specs), chunk):
            run_ids += write_jobs(client, ns, specs[i:i + chunk])
        scripts = Scripts(client, ns)
        for i in range(0, len(running), chunk):
            pipe = client.pipeline(transaction=False)
            for job_id, r in zip(run_ids[i:i + chunk], running[i:i + chunk]):
                scripts.commit_placement(job_id, r.node, r.gpus, 0, r.started_ms + shift, client=pipe)
                scripts.mark_running(job_id, 1, r.started_ms + shift, 0, client=pipe)
            codes = pipe.execute()
            if any(c != 1 for c in codes[1::2]):
                raise RuntimeError(f"could not hold GPUs for the running jobs: codes {set(codes)}")
        jobs = self.queue(pending)
        ids = []
        specs = [_checked(p.spec, p.spec.submit_ms + shift) for p in jobs]
        for i in range(0, len(specs), chunk):
            ids += write_jobs(client, ns, specs[i:i + chunk])
        return {"nodes": [v.name for v in views], "running": run_ids, "pending": ids}

    def arrivals(self, n: int, now_ms: int) -> list[JobSpec]:
        """`n` more jobs from the templates, submitted at `now_ms` (churn: a cycle's new work)."""
        templates = self._templates_cached()
        return [_checked(JobSpec(id="", command=("train", "new", str(i)), submit_ms=now_ms,
                                 **self.rng.choice(templates)), now_ms) for i in range(n)]

    def requests(self, n: int) -> list[dict]:
        """`n` submit requests (Client.submit_many's dicts) drawn from the templates, as users send them."""
        out = []
        for i, t in enumerate(self.rng.choice(self._templates_cached()) for _ in range(n)):
            out.append({"command": ["python", "train.py", "--run", str(i)], "name": f"{t['user']}-{i}",
                        "gpus": t["gpus"], "gpu_type": ",".join(t["gpu_types"]) or None,
                        "gpu_mem": t["gpu_mem_gb"] or None, "priority": t["priority"], "est": t["est_s"],
                        "checkpointable": t["checkpointable"]})
        return out

    def write_idle(self, client, ns: str) -> list[str]:
        """This cluster's nodes in Redis with every GPU free and nothing running (their heartbeats)."""
        from dispatcher.store.nodes import write_heartbeat

        views, _ = replace(self, free_share=1.0).cluster()
        for v in views:
            write_heartbeat(client, ns, v.name, list(v.gpus), v.cpus, v.mem_gb, int(time.time() * 1000))
        return [v.name for v in views]

    def _templates_cached(self) -> list[dict]:
        if not hasattr(self, "_tpl"):
            self._tpl = self._templates()
        return self._tpl


def _checked(spec: JobSpec, submit_ms: int) -> JobSpec:
    """The spec as `dispatch submit` would have made it (build_spec's checks and defaults)."""
    from dispatcher.core.spec import build_spec

    got = build_spec(command=list(spec.command), user=spec.user, submit_ms=submit_ms, gpus=spec.gpus,
                     gpu_type=",".join(spec.gpu_types) or None, gpu_mem_gb=spec.gpu_mem_gb,
                     priority=spec.priority, est=spec.est_s, checkpointable=spec.checkpointable)
    return replace(got, id="")


def run_sizes(name: str, sizes: str, measure, json_path: str | None = None) -> list[dict]:
    """For each "PENDINGxNODES" of `sizes` (comma-separated): a fresh namespace on a server of the bench's
    own holding the realistic cluster and queue, and `measure(bench, ns, size, nodes)`'s figures. Each row
    (with the running jobs written and the set-up time) is printed as a JSON line, after one of the
    machine; all of them go to `json_path`."""
    import benchlib as bl

    bench = bl.Bench(Path(tempfile.mkdtemp(prefix=f"{name}-")), quick=False)
    rows = []
    try:
        print(json.dumps({"machine": bench.machine()}), flush=True)
        for size in sizes.split(","):
            pending, nodes = (int(x) for x in size.split("x"))
            ns = bench.namespace(f"{name}-{size}")
            t0 = time.perf_counter()
            got = Realistic(size, nodes).write(bench.client, ns, pending)
            row = {"size": size, "running": len(got["running"]), "setup_s": round(time.perf_counter() - t0, 1)}
            row.update(measure(bench, ns, size, nodes))
            bench.drop(ns)
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        bench.close()
    if json_path:
        Path(json_path).write_text(json.dumps(rows, indent=1))
    return rows


def command_line(name: str, measure, **counts: int) -> list[dict]:
    """The command line of a bench over realistic queues: --sizes, one integer option a count (repeats=5:
    --repeats, 5 by default), --json; then run_sizes, `measure(bench, ns, size, nodes, args)` for each."""
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000x1000,100000x1000")
    for option, default in counts.items():
        ap.add_argument(f"--{option}", type=int, default=default)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    return run_sizes(name, args.sizes, lambda bench, ns, size, nodes: measure(bench, ns, size, nodes, args),
                     args.json)
