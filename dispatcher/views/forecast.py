"""`dispatch eta JOB` (and a line of `dispatch why --fresh`): when a pending job is expected to start.

Reads a fresh snapshot (the scheduler's node timeout) and runs the simulator forward from it under the
policy in force (sim/forecast.py): running jobs end at their estimate, pending jobs run for theirs,
nothing new arrives. Nothing is written. The result is a plain dict (the `--json` form); `describe`
gives the one line.

On a long queue (more than EXACT_UP_TO pending jobs) the forecast is approximate, and says so: it
counts only the jobs the scheduler's last full cycle ranked ahead of this one (the head of its
ranking it publishes, store/stats.RANKED_KEPT jobs), not the jobs behind it that might backfill first;
a job not among those ranked is forecast behind all of them, which is the earliest it can start.
"""

from __future__ import annotations

import time
from dataclasses import replace

from ..clock import now_ms
from ..config import Timing
from ..core.arrays import element_of, label
from ..core.plan import taking_jobs
from ..core.units import within
from ..policy.nodes import OVERRUN_MIN_S
from ..sim.forecast import HORIZON_S, Forecast, forecast, work_left
from ..sim.list_forecast import list_start
from ..scheduler.policy_source import policy_in_force
from ..store import keys
from ..store import stats as published
from ..store.jobs import read_job
from ..store.connect import tolerant
from ..store.snapshot import read_snapshot
from ..store.spec_cache import SpecCache

#: Up to this many pending jobs the forecast runs on the whole queue; past it, on the jobs ranked ahead.
EXACT_UP_TO = 2000


def forecast_read(read, job_id: str, now_ms: int, config, *, ahead: list[str] | None = None) -> dict:
    """The forecast of `job_id` from a ReadResult (store.snapshot.read_snapshot) taken at `now_ms`.
    With `ahead` (the jobs ranked ahead of it, in order), approximate: list scheduling by estimates
    (sim/list_forecast.py), without what-ifs."""
    if job_id in read.held:
        return {"job": job_id, "state": "pending", "held": read.held[job_id]}
    if read.unusable(job_id):
        return {"job": job_id, "state": "pending", "invalid": read.unusable(job_id)}
    if not any(p.spec.id == job_id for p in read.snapshot.pending):
        return {"job": job_id, "state": "unknown"}  # it left the queue between two reads
    # the simulator knows no drain: it is shown only the nodes that take jobs (a drained node's jobs
    # hold nothing there, as a dead node's)
    snapshot = replace(read.snapshot, nodes=taking_jobs(read.snapshot.nodes))
    if ahead is not None:
        start = list_start(snapshot, job_id, ahead, now_ms, work_left(snapshot, now_ms, config))
        return _overrun(as_dict(Forecast(job_id, now_ms, HORIZON_S, start)), snapshot, now_ms)
    return _overrun(as_dict(forecast(snapshot, job_id, now_ms, config)), snapshot, now_ms)


def _overrun(d: dict, snapshot, now_ms: int) -> dict:
    """The forecast with `past_estimate`: those of the jobs it waits for that run past their estimates, whose end
    it can only guess (as much again as they overran, at least a minute: sim/forecast.work_left, as the
    scheduler's plan, policy/nodes.end_ms); and `names`: those that are array elements, as 12_5."""
    after = set((d.get("start") or {}).get("after_jobs") or ())
    d["names"] = {s.id: element_of(s) for s in [r.spec for r in snapshot.running] + [p.spec for p in snapshot.pending]
                  if s.id in after and element_of(s)}  # (a pending one may start and end before it, in the forecast)
    d["past_estimate"] = sorted({r.spec.id for r in snapshot.running if r.spec.id in after and r.spec.est_s is not None
                                 and r.started_ms + r.spec.est_s * 1000 <= now_ms and not _limit_first(r, now_ms)},
                                key=lambda i: (len(i), i))
    return d


def _limit_first(r, now_ms: int) -> bool:
    """Does running job `r`'s --time (and grace) end it before the overrun guess would (work_left's cap)?"""
    ran_s = (now_ms - r.started_ms) / 1000.0
    return bool(r.spec.time_limit_s) and r.spec.time_limit_s + r.spec.grace_s - ran_s <= max(
        OVERRUN_MIN_S, ran_s - r.spec.est_s)


def read_eta(client, ns: str, job_id: str, timing: Timing | None = None) -> dict:
    """The forecast for one job; JobNotFound for an unknown id. A job that is not pending gets its
    state (and when it started). `timing` decides which nodes are live (default: Timing.from_env(),
    as the scheduler's). Its `label` names the job as people do (an array's element as 12_5)."""
    job = read_job(client, ns, job_id)
    return {**_eta(client, ns, job, timing), "label": label(job)}


def _eta(client, ns: str, job: dict, timing: Timing | None) -> dict:
    job_id = job["id"]
    if job["state"] != "pending":
        return {"job": job_id, "state": job["state"], "started_at": job["started_at"], "node": job["node"]}
    if job["hold"]:  # dispatch hold: out of the scheduler's view until released
        return {"job": job_id, "state": "pending", "on_hold": job["reason"] or f"held by {job['hold']}"}
    now = now_ms()
    _, config, _ = policy_in_force(client, ns, now / 1000.0)
    never = _never(job, config)
    if never:
        return {"job": job_id, "state": "pending", "never": never}
    timeout_s = (timing or Timing.from_env()).node_timeout_s
    waiting = tolerant(lambda: client.zcard(keys.jobs_pending(ns)), 0) or 0
    if waiting <= EXACT_UP_TO:
        return forecast_read(read_snapshot(client, ns, now, timeout_s, SpecCache()), job_id, now, config)
    ranked = published.read(client, ns)["ranked"]
    ahead = ranked[:ranked.index(job_id)] if job_id in ranked else ranked
    read = read_snapshot(client, ns, now, timeout_s, SpecCache(), only_pending=ahead + [job_id])
    return {**forecast_read(read, job_id, now, config, ahead=ahead),
            "approximate": {"pending": waiting, "ahead": len(ahead), "ranked": job_id in ranked}}


def _never(job: dict, config) -> str | None:
    """Why a pending job can never start as the cluster and the policy stand (the scheduler's recorded
    verdict that no live node could hold it, or a team limit below what it asks), else None. The
    forecast would otherwise look 7 days ahead for it, or, past EXACT_UP_TO, list it as starting."""
    verdict = job.get("verdict") or {}
    if verdict.get("code") == "no_fit_ever":
        return job["reason"]
    quota = config.teams.get(job["team"]) if job["team"] else None
    need = job.get("min_gpus") or job["gpus_requested"]
    if quota is not None and quota.limit_gpus is not None and need > quota.limit_gpus:
        return (f"team {job['team']}'s limit is {quota.limit_gpus} GPUs at once (the policy's [teams]) and this "
                f"job needs {need}")
    return None


def as_dict(f: Forecast) -> dict:
    def start(s):
        if s is None:
            return None
        return {"at": None if s.at_ms is None else s.at_ms / 1000.0,
                "in_s": None if s.at_ms is None else round((s.at_ms - f.now_ms) / 1000.0, 1),
                "node": s.node or None, "gpus": list(s.gpus), "after_jobs": list(s.after)}

    return {"job": f.job_id, "state": "pending", "now": f.now_ms / 1000.0, "horizon_s": f.horizon_s,
            "start": start(f.start), "change": f.change or None, "change_start": start(f.change_start)}


def _at(t: float, now: float) -> str:
    fmt = "%H:%M" if time.localtime(t)[:3] == time.localtime(now)[:3] else "%a %H:%M"
    return time.strftime(fmt, time.localtime(t))


def describe(d: dict, *, with_job: bool = True) -> str:
    """One line: 'job 12: expected to start in ~35 min (at 14:05), on n3, when job 7 ends; with
    --gpus 1 it would start now on n2' (without 'job 12: ' unless `with_job`)."""
    head = f"job {d.get('label') or d['job']}: " if with_job else ""
    if d["state"] != "pending":
        if d.get("started_at"):
            return f"{head}{d['state']}; started at {_at(d['started_at'], time.time())} on {d['node'] or '-'}"
        return f"{head}{d['state']}; not waiting"
    if "held" in d:
        return f"{head}not forecast: it {d['held']}"  # (waits for job 7 (running); waits for its start time)
    if "on_hold" in d:
        return f"{head}not forecast: {d['on_hold']}"
    if "never" in d:
        return f"{head}never, as the cluster and the policy stand: {d['never']}"
    if "invalid" in d:
        return f"{head}not forecast: its record is unusable ({d['invalid']})"
    if d.get("start") is None:
        return f"{head}left the queue meanwhile"
    s = d["start"]
    if s["at"] is None:
        line = f"{head}not expected to start within {d['horizon_s'] / 86400:g} days as the cluster stands"
    elif s["in_s"] <= 0:
        line = f"{head}expected to start now on {s['node']} (at the scheduler's next cycle)"
    else:
        line = f"{head}expected to start {within(s['in_s'])} (at {_at(s['at'], d['now'])}), on {s['node']}"
        if s["after_jobs"]:
            ids = [d.get("names", {}).get(i, i) for i in s["after_jobs"]]
            line += (f", when job {ids[0]} ends" if len(ids) == 1 else
                     f", when jobs {', '.join(ids[:3])}{' ...' if len(ids) > 3 else ''} end")
        late = [d.get("names", {}).get(i, i) for i in d.get("past_estimate") or ()]
        if late:  # (the same guess the scheduler's plan makes: policy/nodes.end_ms)
            line += (f" (a guess: {'job ' + late[0] + ' runs' if len(late) == 1 else 'those jobs run'} past "
                     f"{'its estimate' if len(late) == 1 else 'their estimates'}, taken to run as much again as "
                     f"{'it' if len(late) == 1 else 'they'} overran, at least a minute)")
    c = d.get("change_start")
    if c:
        line += f"; with {d['change']} it would start {within(c['in_s'])} on {c['node']}"
    a = d.get("approximate")
    if a:
        line += (f" (approximate: of {a['pending']:,} pending jobs, the {a['ahead']:,} the scheduler ranked ahead of "
                 "it at its last cycle go first, each as its estimate allows; not counted: jobs behind it that may "
                 "start first, CPUs and memory, preemption"
                 + ("" if a["ranked"] else "; it was not among those ranked, so this is the earliest")
                 + f"; dispatch why --fresh {d.get('label') or d['job']} runs the whole forecast)")
    return line

