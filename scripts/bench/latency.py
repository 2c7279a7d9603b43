"""Benchmark 4: submit -> job process started, on an idle node.

A `dispatch scheduler` and a `dispatch worker --fake-gpus 1xA100-40GB` run as
processes. One 1-GPU `true` job at a time: the clock starts just before
Client.submit and stops at the job record's started_ms, which the agent writes once
the job's process exists (mark_running.lua). The next job is submitted once the
previous one has ended and a short gap has passed, so the scheduler is idle.

Baseline: plain RQ on the same server, enqueue -> job function started (it records
time.time() itself), one job at a time, with the default forking Worker (a fork per
job, as dispatch starts a process per job) and with a SimpleWorker.

Also: submit -> the first line of a Python job (`python -c` printing time.time()), read from the
job's output: the latency a user's program sees, its interpreter's start included, against the
SimpleWorker's function call, and against a SimpleWorker whose function runs the same Python job as a
process (what an RQ user running a command gets).
"""

from __future__ import annotations

import sys
import time

import benchlib as bl
import cluster
import rqtasks

WARMUP = 2
GAP_S = 0.02
P50_TARGET_MS, P99_TARGET_MS = 50.0, 150.0


def final(state: bytes | None) -> bytes | None:
    return state if state in (b"succeeded", b"failed", b"cancelled") else None


#: A job whose first line prints the time: what "the job's first instruction" means for a Python job.
FIRST_LINE = [sys.executable, "-c", "import time; print(repr(time.time()), flush=True)"]


def dispatch_samples(bench: bl.Bench, n: int, first_line: bool = False) -> list[float]:
    """Submit -> started_ms (the agent's record of the process), or with `first_line` submit -> the
    time a Python job's first line read (its output, which includes the interpreter's start)."""
    from dispatcher.api import Client
    from dispatcher.store import keys

    ns = bench.namespace("latency-first" if first_line else "latency")
    procs = cluster.start_live(bench, ns, "b1", "1xA100-40GB")
    samples = []
    try:
        c = Client(bench.url, ns)
        for i in range(n + WARMUP):
            t0 = time.time()
            job = c.submit(FIRST_LINE if first_line else ["true"], gpus=1)
            key = keys.job(ns, job)
            started = bl.wait_until(lambda: c.redis.hget(key, "started_ms"), 30, 0.002, f"{key} to start")
            state = bl.wait_until(lambda: final(c.redis.hget(key, "state")), 30, 0.002, f"{key} to end")
            if state != b"succeeded":
                raise RuntimeError(f"{key} ended {state!r}: {bench.log_tail(f'{ns}-worker')}")
            at = int(started) / 1000
            if first_line:
                out = b"".join(f[b"d"] for _, f in c.redis.xrange(keys.job_log(ns, job)))
                at = float(out.split()[0])
            if i >= WARMUP:
                samples.append((at - t0) * 1000)
            time.sleep(GAP_S)
    finally:
        bench.stop(procs)
        bench.drop(ns)
    return samples


def rq_samples(bench: bl.Bench, kind: str, n: int, first_line: bool = False) -> list[float]:
    """Enqueue -> the job function's start, or with `first_line` -> the first line of the same Python
    job dispatch runs (FIRST_LINE), run by the function as a process."""
    from rq import Queue
    from rq.serializers import JSONSerializer

    ns = bench.namespace(f"latency-rq-{kind}{'-first' if first_line else ''}")
    queue_name, key = f"{ns}.q", f"{ns}:started"
    procs = rqtasks.start(bench, ns, kind, queue_name)
    samples = []
    try:
        q = Queue(queue_name, connection=bench.client, serializer=JSONSerializer)
        for i in range(n + WARMUP):
            t0 = time.time()
            job = q.enqueue("rqtasks.first_line", key, FIRST_LINE) if first_line else q.enqueue("rqtasks.stamp", key)
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
    first = dispatch_samples(bench, n, first_line=True)
    simple_first = rq_samples(bench, "simple", n, first_line=True)
    spread = {"p90_ms": bl.pct(ours, 90), "max_ms": max(ours)}
    note = f"{n} jobs, one at a time; submit -> started_ms written by the agent (ms resolution)"
    return [
        bl.Figure("latency.p50_ms", bl.pct(ours, 50), "ms", bl.pct(fork, 50),
                  "plain RQ enqueue -> job started, forking Worker, p50",
                  bl.ratio_at_most(3) & bl.below(P50_TARGET_MS, "ms"), n, note=note, extra=spread),
        bl.Figure("latency.p50_ms_vs_simpleworker", bl.pct(ours, 50), "ms", bl.pct(simple, 50),
                  "plain RQ enqueue -> job started, SimpleWorker (no fork), p50", bl.ratio_at_most(3), n, note=note),
        bl.Figure("latency.first_line_p50_ms", bl.pct(first, 50), "ms", bl.pct(simple, 50),
                  "plain RQ enqueue -> job function's first line, SimpleWorker (no fork, no interpreter), p50",
                  bl.ratio_at_most(2), n, note=f"{n} jobs, one at a time; submit -> the first line of a Python job "
                  "(python -c, its interpreter's start included), as the job's own clock read it",
                  extra={"p99_ms": bl.pct(first, 99), "max_ms": max(first)}),
        bl.Figure("latency.first_line_p50_ms_same_job", bl.pct(first, 50), "ms", bl.pct(simple_first, 50),
                  "plain RQ enqueue -> the same Python job's first line, a SimpleWorker's function running it "
                  "as a process (as an RQ user runs a command), p50", bl.ratio_at_most(2), n,
                  note=f"{n} jobs, one at a time; both sides the same `python -c` job, its first line read "
                  "by its own clock", extra={"p99_ms": bl.pct(first, 99), "rq_p99_ms": bl.pct(simple_first, 99)}),
        bl.Figure("latency.p99_ms", bl.pct(ours, 99), "ms", bl.pct(fork, 99),
                  "plain RQ enqueue -> job started, forking Worker, p99", bl.below(P99_TARGET_MS, "ms"), n,
                  note=note, extra={"rq_simpleworker_p99_ms": bl.pct(simple, 99)}),
    ]
