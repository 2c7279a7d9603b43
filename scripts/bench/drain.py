"""Benchmark 5: draining a burst of `true` jobs on one 8-GPU node, end to end.

A `dispatch scheduler` and a `dispatch worker --fake-gpus 8xA100-80GB` run as
processes (the agent offers 16 CPUs, so the 8 GPUs are what limits concurrency).
The jobs (1 GPU each) are submitted at once with Client.submit_many; the clock runs
from just before the submit to the last job's finished_ms; every job must end
`succeeded`.

Baseline: plain RQ workers on the same server draining as many trivial jobs
(enqueue_many of a function that returns at once): forking Workers, one per CPU up
to 8 (a fork per job, as dispatch starts a process per job); outside --quick, also
as many SimpleWorkers and as many forking Workers as dispatch has slots on the node (8),
each its own figure with a target of at least 1x; and as many SimpleWorkers whose jobs run the same
`true` as a process (the job dispatch runs: a command, not a function).
"""

from __future__ import annotations

import os
import time

import benchlib as bl
import cluster
import rqtasks

TARGET_PER_S = 100.0
#: The jobs dispatch runs at once on the node (its GPUs): the RQ baselines get as many workers.
SLOTS = 8


def dispatch_rates(bench: bl.Bench, n: int, repeats: int) -> list[float]:
    from dispatcher.api import Client
    from dispatcher.store import keys

    ns = bench.namespace("drain")
    procs = cluster.start_live(bench, ns, "d1", "8xA100-80GB", "--cpus", "16", "--mem", "256")
    rates = []
    try:
        c = Client(bench.url, ns)
        for _ in range(repeats):
            t0 = time.time()
            ids = c.submit_many([{"command": ["true"], "gpus": 1}] * n)

            def drained():
                pipe = c.redis.pipeline(transaction=True)
                pipe.zcard(keys.jobs_pending(ns))
                pipe.zcard(keys.jobs_active(ns))
                return sum(pipe.execute()) == 0

            bl.wait_until(drained, max(60.0, n / 10), 0.02, f"{n} jobs to drain")
            pipe = c.redis.pipeline(transaction=False)
            for job_id in ids:
                pipe.hmget(keys.job(ns, job_id), "state", "finished_ms")
            ends = pipe.execute()
            bad = [s for s, _ in ends if s != b"succeeded"]
            if bad:
                raise RuntimeError(f"{len(bad)} of {n} jobs did not succeed (e.g. {bad[0]!r})")
            rates.append(n / (max(int(f) for _, f in ends) / 1000 - t0))
    finally:
        bench.stop(procs)
        bench.drop(ns)
    return rates


def rq_rates(bench: bl.Bench, kind: str, workers: int, n: int, repeats: int, command: bool = False) -> list[float]:
    """Jobs/s of `workers` RQ workers of `kind` draining `n` jobs: a function that returns at once, or
    with `command` one that runs `true` as a process (the job dispatch runs)."""
    from rq import Queue
    from rq.serializers import JSONSerializer

    ns = bench.namespace(f"drain-rq-{kind}{'-cmd' if command else ''}")
    queue_name = f"{ns}.q"
    procs = rqtasks.start(bench, ns, kind, queue_name, workers)
    rates = []
    try:
        q = Queue(queue_name, connection=bench.client, serializer=JSONSerializer)
        for r in range(repeats):
            t0 = time.time()
            q.enqueue_many([Queue.prepare_data("rqtasks.command", (["true"],)) if command
                            else Queue.prepare_data("rqtasks.noop") for _ in range(n)])
            bl.wait_until(lambda: q.finished_job_registry.count + q.failed_job_registry.count >= n * (r + 1),
                          max(60.0, n / 10), 0.01, f"RQ {kind} workers to drain {n} jobs")
            rates.append(n / (time.time() - t0))
        if q.failed_job_registry.count:
            raise RuntimeError(f"{q.failed_job_registry.count} RQ jobs failed")
    finally:
        bench.stop(procs)
        bench.drop(ns)
    return rates


def run(bench: bl.Bench) -> list[bl.Figure]:
    n, repeats = (200, 1) if bench.quick else (2_000, 3)
    workers = max(1, min(8, os.cpu_count() or 1))
    ours = dispatch_rates(bench, n, repeats)
    fork = rq_rates(bench, "fork", workers, n, repeats)
    note = f"{n} `true` jobs (1 GPU each) submitted at once to one 8-GPU node; submit -> last finished_ms"
    figures = [bl.Figure("drain.jobs_per_s", bl.median(ours), "jobs/s", bl.median(fork),
                         f"plain RQ, {workers} forking Workers draining {n} trivial jobs",
                         bl.at_least(TARGET_PER_S, "jobs/s"), repeats, note=note)]
    if not bench.quick:  # as many RQ workers as dispatch has slots on the node (its 8 GPUs), of each kind
        for kind, label in (("simple", "SimpleWorkers"), ("fork", "forking Workers")):
            rq = rq_rates(bench, kind, SLOTS, n, repeats)
            figures.append(bl.Figure(f"drain.jobs_per_s_vs_{SLOTS}_rq_{kind}", bl.median(ours), "jobs/s",
                                     bl.median(rq), f"plain RQ, {SLOTS} {label} (dispatch's slots) draining {n} "
                                     "trivial jobs", bl.ratio_at_least(1.0), repeats, note=note))
        rq = rq_rates(bench, "simple", SLOTS, n, repeats, command=True)  # the same job: `true`, a process
        figures.append(bl.Figure(f"drain.jobs_per_s_vs_{SLOTS}_rq_simple_same_job", bl.median(ours), "jobs/s",
                                 bl.median(rq), f"plain RQ, {SLOTS} SimpleWorkers draining {n} jobs that each run "
                                 "`true` as a process (as an RQ user runs a command)", bl.ratio_at_least(1.0),
                                 repeats, note=note))
    return figures
