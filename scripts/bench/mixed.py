"""Placement and submit on mixed requests (issue 16): the requests users send, not copies of one.

The requests are drawn from the realistic queue's templates (realqueue.py: 50 users x 20 templates;
1/2/4/8 GPUs, 1% 16; any, A100, H100 or V100; 10% with --gpu-mem 40; all four classes; estimates
none to 24 h; half checkpointable), and each figure has the uniform case of the same size, measured
in the same process just before, beside it:

- submit: jobs/s of Client.submit_many in batches of 1,000, mixed against uniform (submit.py's
  REQUEST), and against raw pipelined writes of the same mixed records (the ceiling);
- placement: jobs placed per second of Scheduler.cycle() time for a burst onto idle nodes, the mixed
  burst onto the realistic node kinds (40% 8xA100-80GB, 30% 8xH100-80GB, 30% 8xV100-32GB), the uniform
  one (1-GPU jobs) onto as many 8xA100 nodes. The placed jobs are ended between cycles, off the clock;
  mixed requests that can never fit (40 GB on a V100-only request) stay, and the count says so.

    python scripts/bench/mixed.py [--jobs 20000] [--nodes 1000] [--repeats 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

import benchlib as bl
import cluster
import placement
import submit
from realqueue import Realistic

BATCH = 1_000


def submit_rates(bench: bl.Bench, requests: list[dict]) -> dict:
    """jobs/s of Client.submit_many over `requests` in batches, and of the raw writes of their records."""
    from dispatcher.api import Client
    from dispatcher.store.codec import encode_spec

    ns = bench.namespace("mixed-submit")
    client = Client(bench.url, ns)
    t, _ = bl.timed(lambda: [client.submit_many(requests[i:i + BATCH]) for i in range(0, len(requests), BATCH)])
    specs = client._specs(requests)
    bench.drop(ns)
    records = [(encode_spec(s, str(i + 1)), s.submit_ms) for i, s in enumerate(specs)]
    return {"jobs_per_s": len(requests) / t, "ceiling_jobs_per_s": submit._ceiling(bench, ns, records, BATCH)}


def placement_rate(bench: bl.Bench, n_jobs: int, n_nodes: int, seed: int, mixed: bool) -> dict:
    ns = bench.namespace("mixed-placement")
    if mixed:
        real = Realistic(seed, n_nodes)
        real.write_idle(bench.client, ns)
        from dispatcher.api import Client

        client = Client(bench.url, ns)
        requests = real.requests(n_jobs)
        for i in range(0, n_jobs, BATCH):
            client.submit_many(requests[i:i + BATCH])
    else:
        cluster.add_nodes(bench.client, ns, cluster.node_names(n_nodes))
        cluster.submit(bench.client, ns, cluster.job_specs(n_jobs, gpus=(1,), seed=seed))
    placed, busy, cycles, phases = placement.place_all(bench.client, ns, n_jobs)
    bench.drop(ns)
    return {"jobs_per_s": placed / busy if busy else 0.0, "placed": placed, "cycles": cycles, "breakdown_ms": phases}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--nodes", type=int, default=1_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    bench = bl.Bench(Path(tempfile.mkdtemp(prefix="mixed-")), quick=False)
    runs = []
    try:
        print(json.dumps({"machine": bench.machine()}), flush=True)
        for r in range(args.repeats):
            mixed_requests = Realistic(r, 0).requests(args.jobs)
            row = {"repeat": r,
                   "submit_uniform": submit_rates(bench, [submit.REQUEST] * args.jobs),
                   "submit_mixed": submit_rates(bench, mixed_requests),
                   "placement_uniform": placement_rate(bench, args.jobs, args.nodes, r, mixed=False),
                   "placement_mixed": placement_rate(bench, args.jobs, args.nodes, r, mixed=True)}
            runs.append(row)
            print(json.dumps(row), flush=True)
    finally:
        bench.close()
    summary = {k: round(bl.median([row[k]["jobs_per_s"] for row in runs]), 1) for k in runs[0] if k != "repeat"}
    summary["submit_mixed_vs_uniform"] = round(summary["submit_mixed"] / summary["submit_uniform"], 3)
    summary["submit_mixed_vs_ceiling"] = round(bl.median([row["submit_mixed"]["jobs_per_s"] / row["submit_mixed"]
                                                          ["ceiling_jobs_per_s"] for row in runs]), 3)
    summary["placement_mixed_vs_uniform"] = round(summary["placement_mixed"] / summary["placement_uniform"], 3)
    summary["placed_mixed"] = [row["placement_mixed"]["placed"] for row in runs]
    print(json.dumps({"summary": summary, "jobs": args.jobs, "nodes": args.nodes, "load_1min": os.getloadavg()[0]}))
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": runs, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
