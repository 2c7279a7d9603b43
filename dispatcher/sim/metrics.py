"""Metrics of a simulated run: completion times, queueing delay, utilization, fairness.

Definitions (seconds unless named otherwise):
- JCT = end - submit.  Queueing delay = JCT - the job's true duration: all the time
  it was not making progress (waiting, and checkpoint save/restore after preemptions).
- makespan = last end - first submit.  utilization = busy GPU-time / (GPUs x makespan).
- fragmentation = GPU-time that was free while a job that could ever run waited, / (GPUs x
  makespan): GPUs free but unused by the queue, whatever the policy ranks. Both it and
  utilization count the timeline up to the makespan's end only (a job that never starts
  keeps ticks going after the last end), so each is a share from 0 to 1.
- jain_fairness = Jain's index over users' mean slowdowns (JCT / duration): 1 is equal.

A figure with no sample (no job finished: no JCT, wait, makespan or Jain; no job of 8+ GPUs
finished: no p99 wait of them) is None, not 0: a policy that finished nothing must not look best.
- gpu_hours_lost = work killed by forced preemptions + checkpoint save and restore time.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict

from ..core.model import PRIORITIES


def pct(values, q: float) -> float:
    """The q-th percentile by nearest rank (q in 0..100): the smallest value with at least q% of the values
    at or below it; 0 for no values. (Not a rounded position: round() halves to even, so the p50 of four
    values was the upper middle one and of two the lower.)"""
    if not values:
        return 0.0
    v = sorted(values)
    return v[min(len(v) - 1, max(0, math.ceil(q / 100.0 * len(v) - 1e-9) - 1))]


def jain(values) -> float | None:
    values = [x for x in values if x > 0]
    if not values:
        return None
    return sum(values) ** 2 / (len(values) * sum(x * x for x in values))


def _waits(jobs):
    return [j.end_s - j.trace.submit_s - j.trace.duration_s for j in jobs]


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _mean(values) -> float | None:
    return statistics.fmean(values) if values else None


def _p(values, q: float) -> float | None:
    """pct, or None for no values."""
    return pct(values, q) if values else None


def _summary(jobs) -> dict:
    waits = _waits(jobs)
    jcts = [j.end_s - j.trace.submit_s for j in jobs]
    return {"jobs": len(jobs), "avg_jct_s": round(statistics.fmean(jcts), 1) if jcts else 0.0,
            "avg_wait_s": round(statistics.fmean(waits), 1) if waits else 0.0,
            "p99_wait_s": round(pct(waits, 99), 1)}


def estimate_error(told: list[tuple[float, float]], jobs: int) -> dict:
    """How far the estimates the policy saw were from the true durations: the median and p90 of
    |estimate - true| / true, the share within a factor of 2, and how many jobs had one at all."""
    if not told:
        return {"jobs_with_estimate": 0, "of_jobs": jobs}
    rel = [abs(e - t) / t for e, t in told if t > 0]
    within2 = sum(1 for e, t in told if t > 0 and 0.5 <= e / t <= 2.0)
    return {"jobs_with_estimate": len(told), "of_jobs": jobs, "median_rel_error": round(pct(rel, 50), 3),
            "p90_rel_error": round(pct(rel, 90), 3), "within_2x": round(within2 / max(1, len(rel)), 3)}


def _what(t) -> str:
    return f"{t.job_id} ({t.gpus} GPU{'s' if t.gpus != 1 else ''}" + (f" of {'|'.join(t.gpu_types)})" if t.gpu_types
                                                                       else ")")


def compute(result, *, ckpt_save_s: float, ckpt_restore_s: float, never_fits=lambda _spec: False) -> dict:
    """The run's figures. `never_fits(spec)`: whether no node of the cluster could ever hold a job
    (sim/nodes.never_fits), to tell apart, among the jobs that never finished, those the policy held back."""
    done = [j for j in result.jobs if j.end_s is not None]
    never, held = [], []
    for j in result.jobs:
        if j.end_s is None:
            (never if never_fits(j.spec) else held).append(j)
    jcts = [j.end_s - j.trace.submit_s for j in done]
    waits = _waits(done)
    start = min((j.trace.submit_s for j in result.jobs), default=0.0)
    end = max([j.end_s for j in done] + [result.stalled_at_s or start], default=start)  # a stalled run: its stop
    makespan = max(1e-9, end - start)
    spanned = end > start  # else no job finished: no makespan, so no share of it busy or fragmented
    busy = frag = 0.0
    tl = result.timeline
    for (t, _, b, f), (t2, _, _, _) in zip(tl, tl[1:] + [(end, 0, 0, 0)]):
        span = max(0.0, min(t2, end) - t)  # nothing past the makespan's end: the denominator stops there
        busy += b * span
        frag += f * span
    cap = result.total_gpus * makespan
    by_user, by_class = defaultdict(list), defaultdict(list)
    for j in done:
        by_user[j.trace.user or "anonymous"].append(j)
        by_class[j.trace.priority].append(j)
    slowdowns = {u: statistics.fmean((j.end_s - j.trace.submit_s) / j.trace.duration_s for j in js)
                 for u, js in by_user.items()}
    preemptions = sum(j.preemptions for j in result.jobs)
    lost_s = sum(j.lost_gpu_s + j.preemptions * (ckpt_save_s + ckpt_restore_s) * j.trace.gpus
                 for j in result.jobs)
    big = [j for j in done if j.trace.gpus >= 8]
    return {
        "jobs": len(result.jobs),
        "finished": len(done),
        # the jobs that never ended, for the table's note: those no node could ever hold (too big for the
        # cluster, a GPU type it lacks), and those that fit but were never run to an end (held back by the policy)
        "never_fit": len(never),
        "never_fit_examples": [_what(j.trace) for j in never[:3]],
        "held_examples": [_what(j.trace) for j in held[:3]],
        "stalled_at_s": result.stalled_at_s,  # None, or when the run stopped (sim/engine.py STALL_WINDOW_S)
        "avg_jct_s": _rounded(_mean(jcts), 1),
        "p50_jct_s": _rounded(_p(jcts, 50), 1),
        "p99_jct_s": _rounded(_p(jcts, 99), 1),
        "avg_wait_s": _rounded(_mean(waits), 1),
        "p99_wait_s": _rounded(_p(waits, 99), 1),
        "makespan_s": round(makespan, 1) if spanned else None,
        "utilization": round(busy / cap, 4) if spanned else None,
        "fragmentation": round(frag / cap, 4) if spanned else None,
        "jain_fairness": _rounded(jain(slowdowns.values()), 4),
        "preemptions": preemptions,
        "gpu_hours_lost": round(lost_s / 3600.0, 2),
        "p99_wait_8plus_gpus_s": _rounded(_p(_waits(big), 99), 1),
        "cycles": result.cycles,
        "estimate_error": estimate_error(result.estimates, len(result.jobs)),
        "per_class": {c: _summary(by_class[c]) for c in reversed(PRIORITIES) if by_class.get(c)},
        "per_user": {u: dict(_summary(js), avg_slowdown=round(slowdowns[u], 2))
                     for u, js in sorted(by_user.items())},
    }
