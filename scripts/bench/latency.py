"""Benchmark 4: submit -> job process started, on an idle node.

A `dispatch scheduler` and a `dispatch worker --fake-gpus 1xA100-40GB` run as
processes. One 1-GPU `true` job at a time: the clock starts just before
Client.submit and stops at the job record's started_ms, which the agent writes once
the job's process exists (mark_running.lua). The next job is submitted once the
previous one has ended and a short gap has passed, so the scheduler is idle.

Baseline: plain RQ on the same server, enqueue -> job function started (it records
time.time() itself), one job at a time, with the default forking Worker (a fork per
job, as dispatch starts a process per job) and with a SimpleWorker.
"""

from __future__ import annotations

import time

import benchlib as bl
import cluster
import rqtasks

WARMUP = 2
GAP_S = 0.02
P50_TARGET_MS, P99_TARGET_MS = 50.0, 150.0


def final(state: bytes | None) -> bytes | None:
    return state if state in (b"succeeded", b"failed", b"cancelled") else None


def dispatch_samples(bench: bl.Bench, n: int) -> list[float]:
    from dispatcher.api import Client
    from dispatcher.store import keys

    ns = bench.namespace("latency")
    procs = cluster.start_live(bench, ns, "b1", "1xA100-40GB")
    samples = []
    try:
        c = Client(bench.url, ns)
        for i in range(n + WARMUP):
            t0 = time.time()
            key = keys.job(ns, c.submit(["true"], gpus=1))
            started = bl.wait_until(lambda: c.redis.hget(key, "started_ms"), 30, 0.002, f"{key} to start")
            state = bl.wait_until(lambda: final(c.redis.hget(key, "state")), 30, 0.002, f"{key} to end")
            if state != b"succeeded":
                raise RuntimeError(f"{key} ended {state!r}: {bench.log_tail(f'{ns}-worker')}")
            if i >= WARMUP:
                samples.append((int(started) / 1000 - t0) * 1000)
            time.sleep(GAP_S)
    finally:
        bench.stop(procs)
        bench.drop(ns)
    return samples


def rq_samples(bench: bl.Bench, kind: str, n: int) -> list[float]:
    from rq import Queue
    from rq.serializers import JSONSerializer

    ns = bench.namespace(f"latency-rq-{kind}")
    queue_name, key = f"{ns}.q", f"{ns}:started"
    procs = rqtasks.start(bench, ns, kind, queue_name)
    samples = []
    try:
        q = Queue(queue_name, connection=bench.client, serializer=JSONSerializer)
        for i in range(n + WARMUP):
            t0 = time.time()
            job = q.enqueue("rqtasks.stamp", key)
            started = bl.wait_until(lambda: bench.client.hget(key, job.id), 30, 0.002, f"RQ job {job.id} to start")
            bl.wait_until(lambda: bench.client.hget(f"rq:job:{job.id}", "status") in (b"finished", b"failed"),
                          30, 0.002, f"RQ job {job.id} to end")
            if i >= WARMUP:
                samples.append((float(started) - t0) * 1000)
            time.sleep(GAP_S)
    finally:
        bench.stop(procs)
        bench.drop(ns)
    return samples


def run(bench: bl.Bench) -> list[bl.Figure]:
    n = bench.repeats(30, 200)
    ours = dispatch_samples(bench, n)
    fork = rq_samples(bench, "fork", n)
    simple = rq_samples(bench, "simple", n)
    spread = {"p90_ms": bl.pct(ours, 90), "max_ms": max(ours)}
    note = f"{n} jobs, one at a time; submit -> started_ms written by the agent (ms resolution)"
    return [
        bl.Figure("latency.p50_ms", bl.pct(ours, 50), "ms", bl.pct(fork, 50),
                  "plain RQ enqueue -> job started, forking Worker, p50",
                  bl.ratio_at_most(3) & bl.below(P50_TARGET_MS, "ms"), n, note=note, extra=spread),
        bl.Figure("latency.p50_ms_vs_simpleworker", bl.pct(ours, 50), "ms", bl.pct(simple, 50),
                  "plain RQ enqueue -> job started, SimpleWorker (no fork), p50", bl.ratio_at_most(3), n, note=note),
        bl.Figure("latency.p99_ms", bl.pct(ours, 99), "ms", bl.pct(fork, 99),
                  "plain RQ enqueue -> job started, forking Worker, p99", bl.below(P99_TARGET_MS, "ms"), n,
                  note=note, extra={"rq_simpleworker_p99_ms": bl.pct(simple, 99)}),
    ]
