"""Benchmark 6: Redis bytes per pending job.

A typical request (`python train.py --lr 0.1`, 2 GPUs, a name, an estimate) is
submitted many times with Client.submit_many; a job's cost is MEMORY USAGE of its
hash (SAMPLES 0: exact) plus its share of the pending and all-jobs indexes. Measured
as submitted, and again after one scheduler cycle on a full node (the scheduler then
writes each waiting job's reason on its record).

Baseline: MEMORY USAGE of the RQ job hash of a comparable enqueue (the same
command as arguments, the name as description, JSON serializer as dispatch uses)
plus its share of the queue list.

The scheduler's RSS at 100k pending jobs is a figure of the cycle benchmark
(cycle.rss_mb[100kx...]).
"""

from __future__ import annotations

import benchlib as bl
import cluster

TARGET_BYTES = 1024
REQUEST = {"command": ["python", "train.py", "--lr", "0.1"], "gpus": 2, "name": "train-lr0.1", "est": "2h"}


def usage(client, keys_: list[str]) -> list[int]:
    pipe = client.pipeline(transaction=False)
    for k in keys_:
        pipe.memory_usage(k, samples=0)
    return [u or 0 for u in pipe.execute()]


def dispatch_bytes(bench: bl.Bench, n: int) -> tuple[float, float, float]:
    """(bytes per job as submitted, after one scheduler cycle, index share)"""
    from dispatcher.api import Client
    from dispatcher.scheduler.loop import Scheduler
    from dispatcher.store import keys

    ns = bench.namespace("memory")
    c = Client(bench.url, ns)
    ids = []
    for start in range(0, n, 1000):
        ids += c.submit_many([REQUEST] * min(1000, n - start))
    job_keys = [keys.job(ns, j) for j in ids]
    index = sum(usage(bench.client, [keys.jobs_pending(ns), keys.jobs_all(ns)])) / n
    as_submitted = bl.median(usage(bench.client, job_keys))
    cluster.add_nodes(bench.client, ns, ["m1"])
    cluster.fill(bench.client, ns, ["m1"], free_on_first=0)
    Scheduler(bench.client, ns, timing=cluster.TIMING).cycle()
    with_reason = bl.median(usage(bench.client, job_keys))
    bench.drop(ns)
    return as_submitted + index, with_reason + index, index


def rq_bytes(bench: bl.Bench, n: int) -> float:
    from rq import Queue
    from rq.serializers import JSONSerializer

    ns = bench.namespace("memory-rq")
    q = Queue(f"{ns}.q", connection=bench.client, serializer=JSONSerializer)
    jobs = []
    for start in range(0, n, 1000):
        jobs += q.enqueue_many([Queue.prepare_data("train.main", args=REQUEST["command"],
                                                   description=REQUEST["name"])
                                for _ in range(min(1000, n - start))])
    index = usage(bench.client, [q.key])[0] / n
    per_job = bl.median(usage(bench.client, [j.key for j in jobs]))
    bench.drop(ns)
    return per_job + index


def run(bench: bl.Bench) -> list[bl.Figure]:
    n = bench.repeats(1_000, 10_000)
    ours, with_reason, index = dispatch_bytes(bench, n)
    rq = rq_bytes(bench, n)
    what = "RQ job hash of a comparable enqueue (JSON serializer) + its share of the queue list"
    note = f"median over {n} jobs of MEMORY USAGE (SAMPLES 0) of the job hash, + {index:.0f} B index share"
    return [bl.Figure("memory.bytes_per_pending_job", ours, "bytes", rq, what, bl.below(TARGET_BYTES, "bytes"), n,
                      note=note + "; as submitted"),
            bl.Figure("memory.bytes_per_pending_job_with_reason", with_reason, "bytes", rq, what,
                      bl.below(TARGET_BYTES, "bytes"), n,
                      note=note + "; after one scheduler cycle wrote each job's reason")]
