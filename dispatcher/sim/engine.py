"""The discrete-event simulator: an event heap, a manual clock, and policy.schedule.

Events are arrivals, finishes and the end of a checkpoint save. After the events of one instant are
applied, the engine builds a Snapshot exactly as the live scheduler reads one from Redis, calls schedule(),
and applies the Plan the way the live planner and node agents would: placements start jobs, graceful
preemptions hold the victim's GPUs for the checkpoint save and requeue it with its progress kept, forced
ones requeue it at once with its progress lost. A job resumed from a checkpoint pays the restore time.

`forecast.engine_from` goes on from a live cluster's state instead of a trace (sim/forecast.py: `dispatch
eta`); `run(until_s=, watch=)` stops early and can be called again.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field, replace

from ..core.plan import Code, NodeView, PendingJob, RunningJob, Snapshot
from ..core.model import JobSpec
from ..policy import Backlog
from ..policy.schedule import schedule
from ..policy.preemption import preemptible_below
from .workload import EstimateModel, HistoryPredictor, TraceJob

ARRIVE, FINISH, SAVED, TICK = 0, 1, 2, 3  # TICK: a cycle with nothing new (time alone changes the plan)
#: The live scheduler cycles every second, so time alone changes its plan: a minimum run or a cooldown
#: ends (a critical job waits behind a minimum run), a running job's LAS tier rises, a waiting job
#: passes its starvation bound. A replay cycles at those moments (Engine._guard), and, while jobs wait,
#: at least this often for what changes gradually: aging, shares of class targets, time-of-day
#: profiles, runs past their estimates.
REPLAY_TICK_S = 300.0
#: Periodic ticks that change nothing double their gap up to this (a backlog of months would otherwise
#: cost a cycle every REPLAY_TICK_S of it); anything else happening sets it back.
MAX_TICK_GAP_S = 3600.0
_PERIODIC = "\0tick"  # the job id of the engine's periodic tick (a job's own guards carry its id)
#: A run stops, stalled, once a simulated day passes in which no job finished and no preempted job kept
#: any progress, while the jobs in the cluster were preempted at least once each on average: a policy
#: that stops jobs before they progress (a preemptive one with no minimum run, against the checkpoint's
#: cost) would never end.
STALL_WINDOW_S = 86400.0


@dataclass
class SimJob:
    trace: TraceJob
    spec: JobSpec
    work_left_s: float  # true run time still to do
    since_s: float  # what aging counts from
    state: str = "future"  # future, pending, running, stopping, done
    token: int = 0  # bumps on every start/stop; stale FINISH events carry an old one
    node_gpus: list = field(default_factory=list)  # [(node, (gpus...))]
    started_s: float = 0.0
    run_start_s: float = 0.0  # when this attempt started
    restore_s: float = 0.0  # restore time this attempt pays first
    first_start_s: float | None = None
    end_s: float | None = None
    attempts: int = 0
    preemptions: int = 0
    last_preempted_s: float = 0.0
    preempted_for: str = ""  # while stopping: the job it was preempted for (RunningJob.preempted_for)
    lost_gpu_s: float = 0.0
    attained_gpu_s: float = 0.0


@dataclass
class SimResult:
    policy: str
    jobs: list[SimJob]
    total_gpus: int
    timeline: list[tuple[float, int, int, int]]  # (t, pending, busy GPUs, fragmented GPUs)
    cycles: int
    unfinished: int
    starts: list[tuple[float, str, str, tuple[int, ...], int]]  # (t, job, node, GPUs, rank in its cycle)
    estimates: list[tuple[float, float]] = field(default_factory=list)  # (what the policy was told, true s)
    stalled_at_s: float | None = None  # the run stopped here, stalled (STALL_WINDOW_S); its jobs left unfinished


class Engine:
    """`config` is a PolicyConfig, or a function of the simulated time in seconds that gives one
    (a policy file's time-of-day profiles; t = 0 is a Monday, 00:00)."""

    def __init__(self, trace: list[TraceJob], nodes, config, *, name: str = "policy",
                 estimates: EstimateModel = EstimateModel(), rng=None, ckpt_save_s: float = 30.0,
                 ckpt_restore_s: float = 30.0, cpus_per_node: int = 1_000_000, mem_per_node_gb: float = 1e9,
                 tick_s: float | None = REPLAY_TICK_S):
        self.config_at = config if callable(config) else (lambda _t: config)
        self.name, self.config, self.estimates = name, self.config_at(0.0), estimates
        self.ckpt_save_s, self.ckpt_restore_s = ckpt_save_s, ckpt_restore_s
        self.rng = rng  # a random.Random, seeded by the caller; only lognormal estimates draw from it
        self.nodes = {n: gpus for n, gpus in nodes}
        self.free = {n: set(g.index for g in gpus) for n, gpus in nodes}
        # each node's CPUs and memory, and what of them is free (a forecast's nodes: their own; trace jobs ask none)
        self.size = dict.fromkeys(self.nodes, (cpus_per_node, mem_per_node_gb))
        self.room = {n: [cpus_per_node, mem_per_node_gb] for n in self.nodes}
        self.total_gpus = sum(len(g) for g in self.nodes.values())
        self.history = HistoryPredictor()
        self.jobs: dict[str, SimJob] = {}
        self.events: list = []
        self.seq = 0
        self._to_happen = 0  # events in the heap that are not ticks: arrivals, ends, saves
        for t in trace:
            spec = JobSpec(id=t.job_id, command=("sim",), name=t.job_id, user=t.user or "anonymous", gpus=t.gpus,
                           gpu_types=t.gpu_types, priority=t.priority, submit_ms=int(t.submit_s * 1000),
                           checkpointable=True, cpus=0, team=t.team)
            self.jobs[t.job_id] = SimJob(t, spec, t.duration_s, t.submit_s)
            self.push(t.submit_s, ARRIVE, t.job_id, 0)
        self.pending = Backlog()  # kept across cycles, as the live scheduler's mirror keeps its own
        self.running: dict[str, SimJob] = {}
        self.timeline: list[tuple[float, int, int, int]] = []
        self.starts: list = []
        self.told: list[tuple[float, float]] = []
        self.views_of_running: dict[str, list[RunningJob]] = {}
        self.node_views: dict[str, NodeView] = {}
        self.dirty: set[str] = set(self.nodes)
        self.cycles = 0
        self.finished = self.preempted = 0
        self.kept_s = 0.0  # work saved by graceful preemptions (a forced one keeps none)
        self.stalled_at_s: float | None = None
        #: (t, (finished, kept_s), preempted) when the jobs last made progress that stays
        self._last_progress: tuple[float, tuple[int, float], int] | None = None
        #: None, or t -> a later time: the events from t up to it happen together, at the last one's
        #: time (fewer cycles, each event at most that much late; forecasts use it)
        self.coalesce = None
        #: at most this long without a cycle while jobs wait (REPLAY_TICK_S); None: cycles only on events
        self.tick_s = self._gap = tick_s
        self._last_cycle_s = -math.inf
        self._acted = False  # the last cycle started or stopped a job
        self._ticks: set[float] = set()  # when the ticks this engine pushed and has not yet popped fall

    def push(self, t: float, kind: int, job_id: str, token: int) -> None:
        self.seq += 1
        self._to_happen += kind != TICK
        heapq.heappush(self.events, (t, kind, self.seq, job_id, token))

    # -- estimates ------------------------------------------------------------------------------
    def estimate(self, job: SimJob) -> float | None:
        kind = self.estimates.kind
        if kind == "given":  # what the spec carries (forecast.engine_from: the live estimate)
            return job.spec.est_s
        if kind == "oracle":  # the truth: how long its next attempt will run, a resumed one's restore included
            return max(1.0, job.work_left_s + (self.ckpt_restore_s if job.preemptions else 0.0))
        if kind == "none":
            return None
        if kind == "history":
            return self.history.predict(job.spec)
        if job.spec.est_s is None or job.attempts == 0:  # one draw per job, kept across attempts
            return job.trace.duration_s * math.exp(self.rng.gauss(0.0, self.estimates.sigma))
        return job.spec.est_s

    def enqueue(self, job: SimJob, now: float) -> None:
        est = self.estimate(job)
        if job.attempts == 0 and est is not None:
            self.told.append((est, job.trace.duration_s))
        job.spec = replace(job.spec, est_s=None if est is None else max(1.0, est))
        job.state = "pending"
        self.pending.add(PendingJob(job.spec, job.attempts, int(job.since_s * 1000), job.attained_gpu_s))
        bound = self.config.starvation_s.get(job.spec.priority)
        if bound is not None:
            self._guard(job, job.spec.submit_ms / 1000.0 + bound, now)

    # -- the loop ------------------------------------------------------------------------------
    def run(self, *, until_s: float = math.inf, watch: str | None = None, max_cycles: int | None = None) -> SimResult:
        """Replays every event; stops early (and may be called again) before the first instant past
        `until_s`, after the instant at which job `watch` first started, or once `max_cycles` cycles ran."""
        while self.events and self.events[0][0] <= until_s and self.stalled_at_s is None:
            if watch is not None and self.jobs[watch].first_start_s is not None:
                break
            if max_cycles is not None and self.cycles >= max_cycles:
                break
            limit = self.events[0][0] if self.coalesce is None else self.coalesce(self.events[0][0])
            batch = []
            while self.events and self.events[0][0] <= limit:
                batch.append(heapq.heappop(self.events))
            # a batch's events happen at the time of its last one (ticks delay none)
            now, changed = max((e[0] for e in batch if e[1] != TICK), default=batch[-1][0]), False
            quiet = all(e[1] == TICK and e[3] == _PERIODIC for e in batch)
            for _, kind, _, job_id, token in batch:
                self._to_happen -= kind != TICK
                if kind == TICK:
                    changed = self._tick_due(now, job_id, token) or changed
                    continue
                job = self.jobs[job_id]
                if kind == ARRIVE:
                    self.enqueue(job, now)
                    changed = True
                elif token == job.token and kind == FINISH and job.state == "running":
                    self.release(job, now)
                    job.state, job.end_s, job.work_left_s = "done", now, 0.0
                    self.finished += 1
                    self.history.observe(job.spec, job.trace.duration_s)
                    changed = True
                elif token == job.token and kind == SAVED and job.state == "stopping":
                    self.release(job, now)
                    self.requeue(job, now, keep_progress=True)
                    changed = True
            if changed and self.pending:
                self.cycle(now)
                if self.tick_s is not None:
                    self._gap = min(2 * self._gap, MAX_TICK_GAP_S) if quiet and not self._acted else self.tick_s
            elif changed:  # nothing waits: a cycle could place nothing and preempt no one
                busy = self.total_gpus - sum(len(f) for f in self.free.values())
                self.timeline.append((now, 0, busy, 0))
            self._check_stall(now)
            self._schedule_tick()
        unfinished = sum(1 for j in self.jobs.values() if j.state != "done")
        return SimResult(self.name, list(self.jobs.values()), self.total_gpus, self.timeline, self.cycles,
                         unfinished, self.starts, self.told, self.stalled_at_s)

    def _tick_due(self, now: float, job_id: str, token: int) -> bool:
        """Whether a TICK popped at `now` cycles: a caller's (job id "") always does; the periodic one
        if no cycle ran for its gap; a job's (_guard) while that job is as it was then, and, for a
        running one, some job waiting could outrank it now."""
        if job_id == "":
            return True
        if job_id == _PERIODIC:
            self._ticks.discard(now)
            return now >= self._last_cycle_s + self._gap
        job = self.jobs[job_id]
        if job.token != token or not self.pending:
            return False
        if job.state != "running":
            return job.state == "pending"
        if self.config.teams:  # a team's guarantee reclaims from its own class too
            return True
        need = preemptible_below(self.views_of_running[job_id][0], int(round(now * 1000)), self.config)
        return need is not None and need < self.pending.strength_bound()

    def _schedule_tick(self) -> None:
        """While jobs wait and something is still to happen (with nothing running and nothing to
        arrive, a job that cannot start never will): a tick after the last cycle, tick_s (or the gap
        quiet ticks have grown to: MAX_TICK_GAP_S)."""
        if self.tick_s is None or not self.pending or not self._to_happen:
            return
        at = self._last_cycle_s + self._gap
        if not any(t <= at for t in self._ticks):
            self._ticks.add(at)
            self.push(at, TICK, _PERIODIC, 0)

    def _guard(self, job: SimJob, at_s: float, now: float) -> None:
        """A tick at `at_s` (to the millisecond, rounded up), when time alone may change what the policy
        makes of `job`, as it stands now: a running job's minimum run or cooldown ends or its LAS tier
        rises (it may become a victim), a waiting one passes its class's starvation bound."""
        if self.tick_s is not None and at_s > now:
            self.push(math.ceil(at_s * 1000) / 1000, TICK, job.spec.id, job.token)

    def _guard_running(self, job: SimJob, now: float) -> None:
        cfg = self.config
        if not cfg.preemption:
            return
        self._guard(job, now + cfg.min_run_s, now)
        if job.preemptions:
            self._guard(job, job.last_preempted_s + cfg.preempt_cooldown_s, now)
        for piece in {len(gpus) for _, gpus in job.node_gpus} - {0}:  # (a job of no GPU gains no service)
            for t in cfg.las_thresholds_gpu_s:
                if t > job.attained_gpu_s:
                    self._guard(job, now + (t - job.attained_gpu_s) / piece, now)

    def _check_stall(self, now: float) -> None:
        """Mark the run stalled (STALL_WINDOW_S) when it is."""
        last, progress = self._last_progress, (self.finished, self.kept_s)
        if last is None or last[1] != progress:
            self._last_progress = (now, progress, self.preempted)
            return
        in_cluster = len(self.pending) + len(self.running)
        if now - last[0] >= STALL_WINDOW_S and self.preempted - last[2] >= max(1, in_cluster):
            self.stalled_at_s = now

    def release(self, job: SimJob, now: float) -> None:
        for node, gpus in job.node_gpus:
            self.free[node] |= set(gpus)
            self.take(node, job.spec, -1)
        ran = max(0.0, now - job.run_start_s)
        job.attained_gpu_s += ran * job.spec.gpus
        job.node_gpus = []
        self.running.pop(job.spec.id, None)
        self.views_of_running.pop(job.spec.id, None)

    def requeue(self, job: SimJob, now: float, *, keep_progress: bool) -> None:
        if not keep_progress:  # forced: everything since this attempt began is lost
            job.lost_gpu_s += max(0.0, now - job.run_start_s) * job.spec.gpus
        job.preemptions += 1
        self.preempted += 1
        job.last_preempted_s = now
        job.attempts += 1
        job.token += 1
        if not self.config.keep_wait_on_requeue:
            job.since_s = now
        self.enqueue(job, now)

    def view_running(self, job: SimJob) -> None:
        """The RunningJobs the policy sees for `job`, kept until the job starts, stops or ends."""
        self.views_of_running[job.spec.id] = [
            RunningJob(job.spec, node, gpus, int(job.started_s * 1000), 0,
                       int(job.last_preempted_s * 1000) if job.preemptions else 0, job.state == "stopping",
                       job.attained_gpu_s, preempted_for=job.preempted_for if job.state == "stopping" else "")
            for node, gpus in job.node_gpus]

    def take(self, node: str, spec: JobSpec, sign: int) -> None:
        """A piece of `spec` on `node` takes (1) or gives back (-1) its CPUs and memory there."""
        self.room[node][0] -= sign * spec.cpus
        self.room[node][1] -= sign * spec.mem_gb
        self.dirty.add(node)

    def snapshot(self, now_ms: int) -> Snapshot:
        for name in self.dirty:  # only nodes whose free GPUs, CPUs or memory changed get a new view
            self.node_views[name] = NodeView(name, self.nodes[name], *self.size[name], tuple(sorted(self.free[name])),
                                             *self.room[name])
        self.dirty.clear()
        running = tuple(r for views in self.views_of_running.values() for r in views)
        return Snapshot(self.pending, running, tuple(self.node_views.values()))

    def cycle(self, now: float) -> None:
        now_ms = int(round(now * 1000))
        self.config = self.config_at(now)
        plan = schedule(self.snapshot(now_ms), now_ms=now_ms, config=self.config)
        self.cycles += 1
        self._last_cycle_s, self._acted = now, bool(plan.placements or plan.preemptions)
        freed = False
        for pr in plan.preemptions:
            victim = self.jobs[pr.job_id]
            if victim.state != "running":
                continue
            done = max(0.0, now - victim.run_start_s - victim.restore_s)
            victim.token += 1
            if pr.mode == "forced":
                self.release(victim, now)
                self.requeue(victim, now, keep_progress=False)
                freed = True
            else:  # graceful (and shrink, which trace jobs never ask for): save, then requeue
                self.kept_s += min(done, victim.work_left_s)
                victim.work_left_s = max(0.0, victim.work_left_s - done)
                victim.state, victim.preempted_for = "stopping", pr.for_job
                self.view_running(victim)
                self.push(now + self.ckpt_save_s, SAVED, victim.spec.id, victim.token)
        for p in plan.placements:
            job = self.jobs[p.job_id]
            pieces = [(p.node, p.gpus)] + list(p.extra)
            for node, gpus in pieces:
                self.free[node] -= set(gpus)
                self.take(node, job.spec, 1)
            job.node_gpus = pieces
            job.state = "running"
            job.token += 1
            job.restore_s = self.ckpt_restore_s if job.preemptions else 0.0
            job.started_s = job.run_start_s = now
            if job.first_start_s is None:
                job.first_start_s = now
            self.pending.discard(p.job_id)
            self.running[p.job_id] = job
            self.view_running(job)
            self._guard_running(job, now)
            self.starts.append((now, p.job_id, p.node, p.gpus, p.rank))
            self.push(now + job.restore_s + job.work_left_s, FINISH, p.job_id, job.token)
        busy = self.total_gpus - sum(len(f) for f in self.free.values())
        never = {v.job_id for v in plan.verdicts if v.code is Code.NO_FIT_EVER}
        frag = 0
        if any(job_id not in never for job_id in self.pending):  # (whatever the policy says of its ranks)
            frag = sum(len(f) for f in self.free.values())  # free GPUs while a job that could run waits
        self.timeline.append((now, len(self.pending), busy, frag))
        if freed:
            self.cycle(now)

