"""`dispatch why JOB`: the policy run on a fresh snapshot, without committing anything.

Like `nomad job plan`: the same schedule() the scheduler calls, under the policy
the scheduler published, on what Redis holds right now, with the scheduler's node
timeout (Timing.from_env: DISPATCH_NODE_TIMEOUT_S) deciding which nodes are live.
Nothing is written.
"""

from __future__ import annotations

from ..clock import now_ms
from ..config import Timing
from .forecast import forecast_read
from ..policy import rest_verdict, schedule
from ..policy.promises import promise
from ..scheduler.policy_source import policy_in_force
from ..store.decisions import read_decisions
from ..store.jobs import read_job
from ..store.snapshot import SpecCache, read_snapshot


def explain(client, ns: str, job_id: str, timing: Timing | None = None) -> dict:
    """`timing`: the clocks of failure handling (default: Timing.from_env(), as the scheduler's)."""
    job = read_job(client, ns, job_id)
    now = now_ms()
    out = {"job": job, "decisions": read_decisions(client, ns, job_id=job_id, limit=10)}
    if job["state"] != "pending":
        return out
    profile, config, source = policy_in_force(client, ns, now / 1000.0)
    read = read_snapshot(client, ns, now, (timing or Timing.from_env()).node_timeout_s, SpecCache())
    plan = schedule(read.snapshot, now_ms=now, config=config)
    out.update(profile=profile, policy_source=source, weights=config.weights,
               pending=len(read.snapshot.pending), live_nodes=len(read.snapshot.nodes))
    for p in plan.placements:
        if p.job_id == job_id:
            out["outcome"] = {"code": "would_start", "node": p.node, "gpus": list(p.gpus), "score": p.score,
                              "terms": p.terms, "rank": p.rank, "reason": p.reason}
    for v in plan.verdicts:
        if v.job_id == job_id:
            out["outcome"] = {"code": v.code.value, "score": v.score, "terms": v.terms, "rank": v.rank,
                              "reason": v.reason}
    out["reservations"] = [{"job": r.job_id, "node": r.node, "gpus": list(r.gpus),
                            "starts_in_s": round(max(0, r.start_ms - now) / 1000, 1)} for r in plan.reservations]
    waiting = next((p for p in read.snapshot.pending if p.spec.id == job_id), None)
    if "outcome" not in out and waiting is not None:  # the cycle did not reach it (plan.rest)
        code, reason = rest_verdict(plan, waiting, config)
        out["outcome"] = {"code": code.value, "reason": reason, "rank": None}
    if job_id in read.held:
        out["outcome"] = {"code": "held", "reason": read.held[job_id], "rank": None}
    if job.get("hold"):  # dispatch hold: out of the scheduler's view until released
        out["outcome"] = {"code": "held", "reason": job["reason"] or "held: dispatch release it", "rank": None}
    if read.unusable(job_id):
        out["outcome"] = {"code": "invalid", "reason": read.unusable(job_id)}
    if waiting is not None:
        out["promise"] = promise(waiting.spec.priority, (now - waiting.wait_from_ms) / 1000.0, config)
    out["forecast"] = forecast_read(read, job_id, now, config)  # `dispatch eta`'s line
    return out
