"""`dispatch why JOB`: what the scheduler decided about a job, and on demand a fresh what-if run.

`recorded` answers from what the leader wrote at its last cycle: the job's reason with the numbers
behind it (its verdict on the job record: code, score, terms, rank), the reservations and the rest
reason it published (store/stats.py), and the class promise. It reads one job, never the queue, so
it costs the same at any queue length, and it says how old it is.

`explain` is the what-if (`dispatch why --fresh`), like `nomad job plan`: the same schedule() the
scheduler calls, under the policy the scheduler published, on what Redis holds right now, with the
scheduler's node timeout (Timing.from_env: DISPATCH_NODE_TIMEOUT_S) deciding which nodes are live.
It reads the whole queue. Nothing is written.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

from ..clock import now_ms
from ..config import Timing
from ..core.arrays import label
from ..core.errors import DispatcherError, MalformedRecord
from ..policy.fit import gpu_ok
from ..policy.promises import promise
from ..scheduler.policy_source import policy_in_force
from ..store.decisions import read_decisions
from ..store.dependencies import element_names
from ..store import stats as published
from ..store.jobs import read_job
from ..store.stats import is_stale
from .capacity import fill_unreached


def recorded(client, ns: str, job_id: str, timing: Timing | None = None) -> dict:
    """The scheduler's last word on a job (see the module's docstring), in explain()'s shape, with
    `as_of` {at, age_s, stale}. JobNotFound for a bad id."""
    job = read_job(client, ns, job_id)
    now = now_ms()
    out = {"job": job, "decisions": read_decisions(client, ns, job_id=job_id, limit=10), "fresh": False}
    if job["state"] != "pending":
        return out
    stats = published.read(client, ns)
    profile, config, source = policy_in_force(client, ns, now / 1000.0)
    at = stats["at_ms"]
    age_s = round((now - at) / 1000.0, 1) if at else None
    out["as_of"] = {"at": at / 1000.0 if at else None, "age_s": age_s,
                    "stale": is_stale(age_s, (timing or Timing.from_env()).tick_s)}
    out.update(profile=stats["profile"] or profile, policy_source=source, weights=config.weights,
               pending=stats["pending"] or 0, live_nodes=stats["live_nodes"] or 0)
    v = job["verdict"]
    if job.get("hold"):
        out["outcome"] = {"code": "held", "reason": job["reason"] or "held: dispatch release it", "rank": None}
    elif v is not None:
        out["outcome"] = {"code": v["code"], "score": v["score"], "terms": v["terms"], "rank": v["rank"],
                          "reason": v["reason"], "since": v["at_ms"] / 1000.0}
    elif job["reason"]:
        out["outcome"] = {"code": "waiting", "reason": job["reason"], "rank": None}
    elif at:
        probe = dict(job)
        fill_unreached(client, ns, [probe])
        out["outcome"] = {"code": "not_reached", "rank": None,
                          "reason": probe["reason"] or "the scheduler's last cycle did not reach it"}
    else:
        out["outcome"] = {"code": "not_judged", "rank": None, "reason": "no scheduler has run yet: dispatch up "
                          "starts one (or dispatch scheduler)"}
    out["reservations"] = concerning(job, [{"job": r["job"], "node": r["node"], "gpus": r["gpus"],
                                            "starts_in_s": round(max(0, r["start_ms"] - now) / 1000, 1)}
                                           for r in stats["reservations"]], lambda nodes: _node_gpus(client, ns, nodes))
    _labelled(client, ns, job_id, out["reservations"])
    since = job["submitted_at"]
    if not config.keep_wait_on_requeue and job["last_preempted_at"]:  # its wait restarted when requeued
        since = job["last_preempted_at"]
    if since:
        out["promise"] = promise(job["priority"], max(0.0, now / 1000.0 - since), config)
    return out


def explain(client, ns: str, job_id: str, timing: Timing | None = None) -> dict:
    """`timing`: the clocks of failure handling (default: Timing.from_env(), as the scheduler's)."""
    from .forecast import forecast_read  # the what-if's own: `dispatch why` without --fresh never loads them
    from ..policy import rest_verdict
    from ..policy.schedule import schedule
    from ..store.snapshot import read_snapshot
    from ..store.spec_cache import SpecCache

    job = read_job(client, ns, job_id)
    now = now_ms()
    out = {"job": job, "decisions": read_decisions(client, ns, job_id=job_id, limit=10), "fresh": True}
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
    gpus = {n.name: {g.index: g for g in n.gpus} for n in read.nodes}
    out["reservations"] = concerning(job, [{"job": r.job_id, "node": r.node, "gpus": list(r.gpus),
                                            "starts_in_s": round(max(0, r.start_ms - now) / 1000, 1)}
                                           for r in plan.reservations], lambda _: gpus)
    _labelled(client, ns, job_id, out["reservations"])
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


def _labelled(client, ns: str, job_id: str, reservations: list[dict]) -> None:
    """Each reservation with the `label` people name its job by (an array's element as 12_5)."""
    others = [r["job"] for r in reservations if r["job"] != job_id]
    names = element_names(client, ns, others) if others else {}
    for r in reservations:
        r["label"] = names.get(r["job"], r["job"])


def concerning(job: dict, reservations: list[dict], node_gpus) -> list[dict]:
    """Of the cycle's reservations, those that concern `job`: its own, and those holding GPUs it could
    use (its GPU types and memory), which stand in its way; not the other jobs' on GPUs it cannot use.
    `node_gpus(names)` -> {node: {GPU index: GpuInfo}} of those nodes (read only when needed)."""
    own = [r for r in reservations if r["job"] == job["id"]]
    others = [r for r in reservations if r["job"] != job["id"]]
    if not others or not job["gpus_requested"]:
        return own
    gpus = node_gpus(sorted({r["node"] for r in others}))
    wants = SimpleNamespace(gpu_types=job["gpu_types"], gpu_mem_gb=job["gpu_mem_gb"])
    return own + [r for r in others if any(g is not None and gpu_ok(wants, g)
                                           for g in map(gpus.get(r["node"], {}).get, r["gpus"]))]


def _node_gpus(client, ns: str, nodes: list[str]) -> dict[str, dict]:
    """{node: {GPU index: GpuInfo}} from these nodes' records (one round trip; an unreadable one left out)."""
    from ..store import keys, scripts
    from ..store.codec import decode_node_info

    out = {}
    for name, raw in zip(nodes, scripts.hget_each(client, [keys.node(ns, n) for n in nodes], "info")):
        try:
            out[name] = {g.index: g for g in decode_node_info(raw)[0]} if isinstance(raw, bytes) else {}
        except MalformedRecord:  # a record that does not read: its reservations are not shown
            out[name] = {}
    return out


def heading(job: dict, given: str) -> str:
    """`dispatch why`'s first line: the job as people name it (an array's element as 12_5), its owner,
    class, state and where it runs; for an array's id (`why 12`: its first element), which element
    answers and how many others the array has."""
    ranks = job.get("ranks") or ([[job["node"], job["gpus"]]] if job["node"] else [])  # (a gang: every rank)
    line = (f"job {label(job)} ({job['name'] or 'no name'}, {job['user']}, {job['priority']}): {job['state']}"
            + (" on " + " and ".join(f"{node} GPUs {list(gpus)}" for node, gpus in ranks) if ranks else ""))
    if job["array_of"] and given == job["array_of"] and job["array_count"] > 1:
        line += (f"\n  job {given} is an array of {job['array_count']} jobs: this is its element {label(job)}; "
                 f"`dispatch why {given}_N` answers for element N, `dispatch queue --expand {given}` lists the "
                 f"{job['array_count'] - 1} others")
    return line


def decision_words(d: dict, job_id: str) -> str:
    """One decision about `job_id` in words: its start, its preemption, or a preemption it made."""
    if d["kind"] != "preempt":
        return f"started on {d['node']} GPUs {d['gpus']}, score {d['score']:.1f}: {d['why']}"
    if d["job"] == job_id:
        return f"preempted ({d.get('mode') or 'graceful'}) on {d['node']} for job {d.get('for_job')}: {d['why']}"
    return f"preempted job {d['job']} on {d['node']} ({d.get('mode') or 'graceful'}) to start: {d['why']}"


class WhatIfTimeout(DispatcherError):
    pass


_cache: dict[tuple, dict] = {}  # (ns, job id, the leader's cycle count and time) -> a what-if's answer
_cache_lock = threading.Lock()
_CACHE_KEPT = 64


def what_if(client, ns: str, job_id: str, timeout_s: float = 60.0, timing: Timing | None = None) -> dict:
    """explain(), given up after `timeout_s` (WhatIfTimeout), and kept per state of the scheduler: asked
    again before the leader's next cycle, the same answer comes back without a second run. The run
    goes on in the background past the timeout, and its answer is kept for the next ask."""
    stats = published.read(client, ns)
    key = (ns, job_id, stats["cycles"], stats["at_ms"])
    with _cache_lock:
        if key in _cache:
            return _cache[key]
    done = threading.Event()

    def run():
        try:
            out = explain(client, ns, job_id, timing)
            with _cache_lock:
                while len(_cache) >= _CACHE_KEPT:
                    _cache.pop(next(iter(_cache)))
                _cache[key] = out
            box.append(out)
        except Exception as e:  # noqa: BLE001 - handed to the caller below
            box.append(e)
        finally:
            done.set()

    box: list = []
    threading.Thread(target=run, name=f"what-if {job_id}", daemon=True).start()
    if not done.wait(timeout_s):
        raise WhatIfTimeout(f"the what-if run for job {job_id} did not finish in {timeout_s:g}s "
                            f"({stats['pending'] or 0} pending jobs); `dispatch why {job_id}` without --fresh "
                            "answers from the scheduler's last cycle")
    if isinstance(box[0], Exception):
        raise box[0]
    return box[0]
