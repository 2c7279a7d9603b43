"""Start-time forecasts: the simulator run forward from a cluster's state (`dispatch eta`, `dispatch why`).

From a snapshot (the live one, or a replay's), the engine (engine_from) goes on
under the policy in force: running jobs end when their estimate says (`est_s`, the live
`plan_est_s`, less the time run so far; past it, by PAST_ESTIMATE; without one, the policy's
`unknown_remaining_s`, as the policy itself assumes), pending jobs run for their estimate,
nothing new arrives, and a tick every TICK_S lets what time alone changes take effect, as the
live scheduler's tick does. The forecast is the moment the job starts in that run, or None past
the horizon. What-ifs run the same forward simulation with the job's request changed (no GPU
type, half the GPUs down to 1) and report the change that starts it soonest, if it beats the
plain forecast by max(margin_s, 20% of the wait).

Pure: no Redis, no clock. Cost: one policy cycle per instant at which something ends or a tick
falls before the job starts, fewer past COALESCE_AFTER_S (events close together share a cycle);
the what-ifs stop at the plain forecast's start less the margin, and together simulate at most
half as many cycles as the plain run.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace

from ..core.model import JobSpec
from ..core.plan import PendingJob, RunningJob, Snapshot
from ..policy import PolicyConfig
from ..policy.nodes import OVERRUN_MIN_S
from .engine import ARRIVE, FINISH, SAVED, TICK, Engine, SimJob
from .workload import EstimateModel, TraceJob

#: How far ahead a forecast looks.
HORIZON_S = 7 * 86400.0
#: Past this far ahead, events within COALESCE of the time ahead are simulated together, at the
#: last one's time (one policy cycle instead of several; events are that much late at most, far
#: less than estimates are off).
COALESCE_AFTER_S = 900.0
COALESCE = 0.05
#: What a running job past its estimate is taken to run still: "policy" (the policy's
#: unknown_remaining_s, as schedule() assumes), "elapsed" (as long again as it has run), "overrun"
#: (as much again as it has overrun its estimate by), at least OVERRUN_MIN_S. "overrun" measured
#: best in a replay of the Philly week (docs/simulator.md#start-time-forecasts): the policy's day is
#: far too long for a job a little past a good estimate.
PAST_ESTIMATES = ("policy", "elapsed", "overrun")
PAST_ESTIMATE = "overrun"
#: Cycles with nothing new every this often (then every COALESCE of the time ahead), as the live
#: scheduler's tick: what time alone changes (a preemption cooldown or minimum run ending, a
#: starvation bound crossed) takes effect then.
TICK_S = 60.0
#: The what-ifs of one forecast simulate together at most half as many policy cycles as its plain
#: run did, or this many if that is more.
MIN_WHAT_IF_CYCLES = 50


@dataclass(frozen=True)
class Start:
    """When (ms, None: not within the horizon) and where a job starts, the running jobs on that node
    whose end (at that same instant) let it start, and how many policy cycles the forward run took."""

    at_ms: int | None
    node: str = ""
    gpus: tuple[int, ...] = ()
    after: tuple[str, ...] = ()
    cycles: int = 0


@dataclass(frozen=True)
class Forecast:
    job_id: str
    now_ms: int
    horizon_s: float
    start: Start
    #: The quickest change to the request ("--gpus 1", "no --gpu-type") and when it would start; "" if
    #: none beats the plain forecast by the margin.
    change: str = ""
    change_start: Start | None = None


def _late_by(ahead_s: float) -> float:
    """How late an event `ahead_s` from now may happen, so that it happens with the others of its
    window (Engine.coalesce): not at all within COALESCE_AFTER_S, then COALESCE of the time ahead."""
    return 0.0 if ahead_s <= COALESCE_AFTER_S else COALESCE * ahead_s


def work_left(snapshot: Snapshot, now_ms: int, config: PolicyConfig, past_estimate: str = PAST_ESTIMATE) -> dict[str, float]:
    """Seconds each job still runs, as the forecast assumes: a pending job its whole estimate, a
    running job the rest of its estimate; one past its estimate, or without one, by `past_estimate`
    (PAST_ESTIMATES). Without an estimate: the policy's unknown_remaining_s. At most to its --time."""
    out = {}
    for r in snapshot.running:
        left = r.remaining_s(now_ms)
        ran_s = max(0.0, now_ms - r.started_ms) / 1000.0
        if left is not None:
            out[r.spec.id] = left
        elif r.spec.est_s is None or past_estimate == "policy":
            out[r.spec.id] = config.unknown_remaining_s
        elif past_estimate == "elapsed":
            out[r.spec.id] = max(OVERRUN_MIN_S, ran_s)
        else:  # "overrun": as much again as it has overrun by so far
            out[r.spec.id] = max(OVERRUN_MIN_S, ran_s - r.spec.est_s)
    for p in snapshot.pending:
        est = p.spec.est_s
        out[p.spec.id] = config.unknown_remaining_s if est is None else max(1.0, est)
    for job, ran_s in [(r.spec, max(0.0, now_ms - r.started_ms) / 1000.0) for r in snapshot.running] + \
            [(p.spec, 0.0) for p in snapshot.pending]:
        if job.time_limit_s:  # never past its --time and --grace, a hard limit (policy/nodes.end_ms)
            out[job.id] = min(out[job.id], max(0.0, job.time_limit_s + job.grace_s - ran_s))
    return out


def engine_from(snapshot: Snapshot, now_s: float, work_s: dict[str, float], config, *,
                name: str = "forecast", ckpt_save_s: float = 30.0) -> Engine:
    """An engine that goes on from a cluster's state at `now_s` (seconds on the snapshot's clock):
    its nodes with what is free on them now (blocked GPUs never come back), its running jobs, each
    ending `work_s[id]` seconds from now (a stopping one is requeued after `ckpt_save_s` with that
    much left), and its pending jobs, each running `work_s[id]` once started. The policy is told
    the estimates the specs carry. Nothing else arrives. The snapshot is not changed."""
    engine = Engine([], [(v.name, v.gpus) for v in snapshot.nodes], config, name=name,
                 estimates=EstimateModel("given"), ckpt_save_s=ckpt_save_s, ckpt_restore_s=0.0, tick_s=None)
    for v in snapshot.nodes:  # (what runs there is counted out of what is free)
        engine.free[v.name] = set(v.free_gpus)
        engine.size[v.name], engine.room[v.name] = (v.cpus, v.mem_gb), [v.free_cpus, v.free_mem_gb]

    def admit(spec: JobSpec, since_s: float) -> SimJob:
        work = work_s[spec.id]
        trace = TraceJob(spec.id, spec.submit_ms / 1000.0, spec.user, spec.gpus, work, spec.gpu_types,
                         spec.priority, spec.team)
        engine.jobs[spec.id] = SimJob(trace, spec, work, since_s)
        return engine.jobs[spec.id]

    pieces: dict[str, list[RunningJob]] = defaultdict(list)
    for r in snapshot.running:
        if r.node in engine.nodes:  # a dead node's jobs hold nothing the policy could use
            pieces[r.spec.id].append(r)
    for job_id, views in pieces.items():
        r = views[0]
        job = admit(r.spec, r.spec.submit_ms / 1000.0)
        job.node_gpus = [(v.node, v.gpus) for v in views]
        job.started_s = job.run_start_s = job.first_start_s = r.started_ms / 1000.0
        job.preemptions, job.last_preempted_s = (1, r.preempted_ms / 1000.0) if r.preempted_ms else (0, 0.0)
        job.attained_gpu_s, job.state = r.attained_gpu_s, "stopping" if r.stopping else "running"
        job.preempted_for = r.preempted_for
        engine.running[job_id] = job
        engine.view_running(job)
        if r.stopping:
            engine.push(now_s + ckpt_save_s, SAVED, job_id, job.token)
        else:
            engine.push(now_s + job.work_left_s, FINISH, job_id, job.token)
    for p in snapshot.pending:
        job = admit(p.spec, p.wait_from_ms / 1000.0)
        job.attempts, job.attained_gpu_s = p.attempt, p.attained_gpu_s
        engine.push(now_s, ARRIVE, p.spec.id, 0)
    return engine


def predict_start(snapshot: Snapshot, job_id: str, now_ms: int, config: PolicyConfig, *,
                  until_s: float = HORIZON_S, work: dict[str, float] | None = None,
                  max_cycles: int | None = None) -> Start:
    """When `job_id` (pending in `snapshot`) starts if the cluster goes on as estimated, looking at
    most `until_s` ahead and simulating at most `max_cycles` policy cycles (`Start.cycles`: how many ran)."""
    work = work_left(snapshot, now_ms, config) if work is None else work
    now_s = now_ms / 1000.0
    engine = engine_from(snapshot, now_s, work, config)
    engine.coalesce = lambda t: t + _late_by(t - now_s)
    ahead = TICK_S
    while ahead <= until_s:  # the live scheduler's tick: cooldowns, minimum runs and starvation bounds expire
        engine.push(now_s + ahead, TICK, "", 0)
        ahead += max(TICK_S, _late_by(ahead))
    engine.run(until_s=now_s + until_s, watch=job_id, max_cycles=max_cycles)
    job = engine.jobs[job_id]
    if job.first_start_s is None:
        return Start(None, cycles=engine.cycles)
    t, node, gpus = next((t, n, g) for t, j, n, g, _ in reversed(engine.starts) if j == job_id)
    nodes = list(dict.fromkeys(n for n, _ in job.node_gpus or [(node, gpus)]))  # a gang: every rank's, rank 0 first
    where = {r.spec.id: r.node for r in snapshot.running}
    where.update((j, n) for _, j, n, _, _ in engine.starts)
    after = sorted((j.spec.id for j in engine.jobs.values()
                    if j.end_s == t and where.get(j.spec.id) in nodes and j.spec.id != job_id),
                   key=lambda i: (len(i), i))
    return Start(int(round(t * 1000)), "+".join(nodes), tuple(gpus), tuple(after), engine.cycles)


def what_ifs(spec) -> list[tuple[str, object]]:
    """The changes tried, smallest first: any GPU type, then half the GPUs, down to 1 (the size
    asked for stays on the other what-ifs)."""
    out = []
    if spec.gpu_types:
        out.append(("no --gpu-type", replace(spec, gpu_types=())))
    g = spec.gpus // 2
    while g >= 1:
        out.append((f"--gpus {g}", replace(spec, gpus=g, min_gpus=None)))
        g //= 2
    return out


def forecast(snapshot: Snapshot, job_id: str, now_ms: int, config: PolicyConfig, *,
             horizon_s: float = HORIZON_S, changes: bool = True, margin_s: float = 1.0,
             past_estimate: str = PAST_ESTIMATE) -> Forecast:
    """The job's expected start, and (`changes`) the quickest change to its request that starts it at
    least max(margin_s, 20% of the wait) sooner. KeyError if the job is not pending in `snapshot`."""
    pending = list(snapshot.pending)
    target = next((p for p in pending if p.spec.id == job_id), None)
    if target is None:
        raise KeyError(job_id)
    work = work_left(snapshot, now_ms, config, past_estimate)
    start = predict_start(snapshot, job_id, now_ms, config, until_s=horizon_s, work=work)
    out = Forecast(job_id, now_ms, horizon_s, start)
    if not changes or start.at_ms == now_ms:
        return out
    wait_s = horizon_s if start.at_ms is None else (start.at_ms - now_ms) / 1000.0
    need_s = wait_s - max(margin_s, 0.2 * wait_s)  # a change must start it by then
    if need_s < 0:
        return out
    best, budget = None, max(MIN_WHAT_IF_CYCLES, start.cycles // 2)  # what-ifs: half the forecast's cost
    for label, spec in reversed(what_ifs(target.spec)):  # the boldest first: it bounds the runs after it
        if budget <= 0:
            break
        changed = replace(snapshot, pending=tuple(PendingJob(spec, p.attempt, p.since_ms, p.attained_gpu_s)
                                                  if p is target else p for p in pending))
        s = predict_start(changed, job_id, now_ms, config, until_s=need_s, work=work, max_cycles=budget)
        budget -= s.cycles
        if s.at_ms is not None and (best is None or s.at_ms <= best[1].at_ms):  # a tie goes to the smaller change
            best = (label, s)
            need_s = (s.at_ms - now_ms) / 1000.0
    if best is not None:
        out = replace(out, change=best[0], change_start=best[1])
    return out
