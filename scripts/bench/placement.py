"""Benchmark 3: placement throughput for a burst of 1-GPU jobs onto idle nodes.

The burst is written at once; Scheduler.cycle() runs until every job has been
assigned. Nodes have 8 GPUs, so a burst larger than the cluster takes several
cycles: between cycles (off the clock) the assigned jobs are finished as their
agents would finish them, freeing the GPUs. The figure is jobs assigned per second
of cycle time (snapshot, policy, commit with its RQ enqueues).

Baseline: plain RQ, Queue.enqueue_many of the same number of jobs (the same
`workers.jobs.launch` call), spread over the nodes' queues in one MULTI, as the
scheduler's commit enqueues them.
"""

from __future__ import annotations

import time

import benchlib as bl
import cluster

TARGET_PER_S = 2_000.0


def burst(client, ns: str, n_jobs: int, n_nodes: int, seed: int) -> tuple[float, int, dict]:
    """(jobs assigned per second of cycle time, cycles, time per phase in ms)"""
    cluster.add_nodes(client, ns, cluster.node_names(n_nodes))
    cluster.submit(client, ns, cluster.job_specs(n_jobs, gpus=(1,), seed=seed))
    placed, busy, cycles, phases = place_all(client, ns, n_jobs)
    if placed < n_jobs:
        raise RuntimeError(f"a cycle placed nothing with {n_jobs - placed} jobs left")
    return n_jobs / busy, cycles, phases


def place_all(client, ns: str, n_jobs: int) -> tuple[int, float, int, dict]:
    """Scheduler.cycle() until `n_jobs` are placed or a cycle places nothing, the placed jobs ended between
    cycles (off the clock) as their agents would end them: (placed, seconds of the cycles that placed,
    their number, time per phase in ms; the last cycle's phases are in it)."""
    from dispatcher.scheduler.loop import Scheduler

    sched = Scheduler(client, ns, timing=cluster.TIMING)
    busy, cycles = 0.0, 0
    with bl.phase_times(sched) as phases:
        while sched.stats.placed < n_jobs:
            dt, plan = bl.timed(sched.cycle)
            if not plan.placements:  # (what is left never fits, or waits for what this bench never ends)
                break
            busy, cycles = busy + dt, cycles + 1
            cluster.finish(client, ns, cluster.active_jobs(client, ns))
    return sched.stats.placed, busy, cycles, bl.breakdown_ms(phases, busy)


def rq_enqueue(client, ns: str, n_jobs: int, n_nodes: int) -> float:
    from rq import Queue
    from rq.serializers import JSONSerializer

    from dispatcher.store import keys

    queues = [Queue(keys.rq_queue_name(ns, name), connection=client, serializer=JSONSerializer)
              for name in cluster.node_names(n_nodes)]
    t0 = time.perf_counter()
    pipe = client.pipeline(transaction=True)
    by_queue = {}
    for i in range(n_jobs):
        by_queue.setdefault(i % n_nodes, []).append(Queue.prepare_data(
            "workers.jobs.launch", args=[str(i), 1], timeout=-1, result_ttl=0, failure_ttl=86400,
            description=f"dispatch job {i} attempt epoch 1"))
    for q, datas in by_queue.items():
        queues[q].enqueue_many(datas, pipeline=pipe)
    pipe.execute()
    return n_jobs / (time.perf_counter() - t0)


def run(bench: bl.Bench) -> list[bl.Figure]:
    """Sizes run smallest first within bench.budget; repeats stop once the next would not fit."""
    sizes = [(2_000, 100)] if bench.quick else [(2_000, 100), (20_000, 1_000)]
    repeats = bench.repeats(2, 3)
    budget = bench.budget("placement")
    figures, costs = [], []
    for n_jobs, n_nodes in sizes:
        label = bl.size_label(n_jobs, n_nodes)
        if not budget.allows(label, bl.extrapolate(costs, (n_jobs, n_nodes)),
                             "one burst, extrapolated linearly in jobs x nodes"):
            continue
        rates, baseline, cycles, splits = [], [], [], []
        while len(rates) < repeats and (not rates or costs[-1][1] <= budget.left()):
            ns = bench.namespace("placement")
            t0 = time.monotonic()
            rate, n, split = burst(bench.client, ns, n_jobs, n_nodes, seed=len(rates))
            costs.append(((n_jobs, n_nodes), time.monotonic() - t0))
            rates.append(rate)
            cycles.append(n)
            splits.append(split)
            bench.drop(ns)
            ns = bench.namespace("placement-rq")
            baseline.append(rq_enqueue(bench.client, ns, n_jobs, n_nodes))
            bench.drop(ns)
        figures.append(bl.Figure(
            f"placement.jobs_per_s[{label}]", bl.median(rates), "jobs/s", bl.median(baseline),
            "RQ Queue.enqueue_many of as many launch jobs over the nodes' queues", bl.at_least(TARGET_PER_S, "jobs/s"),
            len(rates), note=f"{n_jobs} 1-GPU jobs onto {n_nodes} idle 8-GPU nodes; jobs assigned per second of "
                             f"Scheduler.cycle() time, {max(cycles)} cycles (GPUs freed between cycles, off the "
                             "clock)",
            extra={"breakdown_ms": bl.median_each(splits)}))
    return figures
