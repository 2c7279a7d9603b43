"""schedule(snapshot, now_ms, config) -> Plan: the one entry point of the policy.

One cycle starts every pending job that fits, best first:

1. Jobs no live node could ever hold get NO_FIT_EVER and are set aside.
2. Starving jobs (waiting past their class's starvation bound, half its wait
   target) go first, oldest first: each starts if it fits, else it gets a
   reservation. With `reserve_longest_wait`, the jobs longest overdue against
   their class's target then take the reservations.
3. The rest wait in one queue per user, best static score first (priority
   class, LAS tier, remaining time, aging). Dominant Resource Fairness picks the
   next job: among the heads of the user queues, the best
   `static + fairness(user)`, where the fairness term falls as the user's
   dominant share rises with every placement. With the default weights a class
   step weighs half a LAS tier (`class_step`), so a fresh low job goes ahead of
   a normal one that has had its first GPU-hour.
4. Team limits and guarantees are checked; then the job goes to the node whose
   free GPUs fit it most tightly (type and memory are hard constraints, all GPUs
   of a job on one node; sharing jobs pack onto GPUs within their declared memory).
5. A blocked job may preempt running jobs that stand lower (rank x class_step -
   LAS tier; or, to reclaim a team's guarantee, borrowers): the cheapest victims on one node
   (preemption.py), at most `preemptors_per_cycle` preemptors a cycle. It then
   holds a reservation on the GPUs they free.
6. The first `config.reservations` other blocked GPU jobs get a reservation on the
   node whose GPUs, CPUs and memory free up first (by estimates); a later job may
   use reserved GPUs only if its estimate says it ends before the reservation
   starts (EASY backfill), or if it is high or critical work and the
   reservation a lower class's. Everything not started gets a Verdict with numbers.

Pure: no Redis, clock, OS or randomness; ties break on submit time, then id,
then node name, so the same snapshot always gives the same plan.
"""

from __future__ import annotations

import bisect
import heapq
from collections import defaultdict
from dataclasses import dataclass, field, replace

from ..core.plan import (
    Code,
    NodeView,
    PendingJob,
    Placement,
    Plan,
    Preemption,
    Reservation,
    RunningJob,
    Snapshot,
    Verdict,
)
from ..core.model import PRIORITIES, JobSpec
from .backlog import Backlog, bucket_key, id_key, shape_of, strength
from ..core.elastic import counts, is_elastic, run_time, smallest
from .config import PolicyConfig
from .fit import choose_gpus, describe_need, fit_score, fits_ever, gpu_facts, gpu_usable, usable, usable_count
from .preemption import choose_victims, past_starvation, preemptible_below, standing
from .promises import short_span
from .score import attained_term, dominant_share, fairness_term, priority_term, remaining_term, wait_term


@dataclass
class _Release:
    end_ms: int
    gpus: tuple[int, ...]
    cpus: int
    mem_gb: float


_UNLISTED = ("unlisted",)


@dataclass
class _Node:
    view: NodeView
    free: set[int]
    shared: dict[int, float]
    cpus: int
    mem_gb: float
    running: list = field(default_factory=list)  # its RunningJobs (shared with _Cycle.running_on)
    end_of: object = None  # RunningJob -> when it likely ends (ms)
    _releases: list[_Release] | None = None
    _first_end: int | None = None  # the earliest end_ms among `releases`, once asked
    resv: Reservation | None = None
    resv_rank: int = -1  # the class of the job holding `resv`: a higher class is not held back by it
    resv_cpus: int = 0
    resv_mem_gb: float = 0.0
    placed: list[str] = field(default_factory=list)
    idx: int = 0  # its place in name order (ties go to the first)
    group: tuple | None = _UNLISTED  # its _Cycle.groups key, None while special (see _Cycle.regroup)
    counted: tuple[int, int] = (-1, -1)  # (free, open) GPUs as counted in _Cycle's histograms

    @property
    def releases(self) -> list[_Release]:
        """What comes back when: the running jobs (worked out on first use: most cycles never ask),
        then whatever this cycle places here."""
        if self._releases is None:
            self._releases = [_Release(self.end_of(r), r.gpus, r.spec.cpus, r.spec.mem_gb) for r in self.running]
        return self._releases

    def add_release(self, r: _Release) -> None:
        """What a placement this cycle gives back, and when."""
        self.releases.append(r)
        if self._first_end is not None:
            self._first_end = min(self._first_end, r.end_ms)

    def first_end(self) -> int | None:
        """When the first of `releases` comes back; None if nothing is to come back."""
        if self._first_end is None and self.releases:
            self._first_end = min(r.end_ms for r in self.releases)
        return self._first_end


def static_terms(job: PendingJob, now_ms: int, config: PolicyConfig) -> dict[str, float]:
    """The score terms that do not depend on the node or on other jobs."""
    spec = job.spec
    terms = {
        "priority": priority_term(spec.rank),
        "wait": min(config.aging_cap, wait_term((now_ms - job.wait_from_ms) / 1000.0, config.aging_horizon_s)),
        "remaining": remaining_term(spec.est_s, config.remaining_ref_s),
    }
    if config.weights.get("attained"):
        terms["attained"] = attained_term(job.attained_gpu_s, config.las_thresholds_gpu_s)
    return terms


def weighted(terms: dict[str, float], weights: dict[str, float]) -> float:
    """The weighted mean of the terms present: Σ w·t / Σ w over all weights, so 0..100."""
    total = sum(weights.values()) or 1.0
    return sum(weights.get(k, 0.0) * v for k, v in terms.items()) / total


def _end_ms(spec: JobSpec, start_ms: int, now_ms: int, config: PolicyConfig) -> int:
    """When a job started at `start_ms` will likely end; past its estimate it is unknown."""
    if spec.est_s is not None:
        end = start_ms + int(spec.est_s * 1000)
        if end > now_ms:
            return end
    return now_ms + int(config.unknown_remaining_s * 1000)


#: Interactive and critical work jumps the queue at any time (seed 000): no reservation of a lower class
#: holds back a job of this class or above.
_JUMPS = PRIORITIES.index("high")


def _passes(spec: JobSpec, node: _Node) -> bool:
    return spec.rank >= _JUMPS and spec.rank > node.resv_rank


def _backfills(spec: JobSpec, node: _Node, now_ms: int) -> bool:
    """May `spec` use what `node`'s reservation holds? Its own job, a high or critical job when the
    reservation is a lower class's, or one that ends before the reservation starts."""
    r = node.resv
    return r is None or r.job_id == spec.id or _passes(spec, node) \
        or (spec.est_s is not None and now_ms + spec.est_s * 1000 <= r.start_ms)


def _pool(spec: JobSpec, node: _Node) -> list[int]:
    """GPUs of `node` that `spec` could take now, reservations aside: free ones, and for a
    sharing job also GPUs other sharers hold with enough memory left."""
    if spec.share:
        pool = [i for i in sorted(set(node.free) | set(node.shared))
                if node.view.gpu(i).mem_total_gb - node.shared.get(i, 0.0) + 1e-9 >= spec.gpu_mem_gb]
    else:
        pool = sorted(node.free)
    return usable(spec, node.view, pool)


def _candidates(spec: JobSpec, node: _Node, now_ms: int) -> list[int]:
    """GPUs of `node` that `spec` may take now, honouring the node's reservation."""
    gpus = _pool(spec, node)
    if not _backfills(spec, node, now_ms):
        gpus = [g for g in gpus if g not in node.resv.gpus]
    return gpus


def _room(spec: JobSpec, node: _Node, now_ms: int) -> bool:
    """CPUs and memory; a reservation also holds the CPUs/memory its job needs."""
    cpus, mem = node.cpus, node.mem_gb
    if not _backfills(spec, node, now_ms):
        cpus -= min(node.resv_cpus, node.cpus)
        mem -= min(node.resv_mem_gb, node.mem_gb)
    return spec.cpus <= cpus and spec.mem_gb <= mem + 1e-9


def _fits_unreserved(spec: JobSpec, node: _Node) -> bool:
    """Would `spec` fit what `node` has free (GPUs, CPUs, memory) if no reservation held any of it?"""
    return len(_pool(spec, node)) >= spec.gpus and spec.cpus <= node.cpus and spec.mem_gb <= node.mem_gb + 1e-9


def _reserve(spec: JobSpec, nodes: list[_Node], now_ms: int) -> Reservation | None:
    """Hold GPUs (and CPUs, memory) for a blocked job on the node where it could start first (the
    first such node in `nodes` on a tie).

    Each GPU is free at the latest end of the jobs holding it; CPUs and memory come
    back as jobs end. The start is the first moment all three suffice. Nodes are tried
    in the order of a lower bound of that start (now, with enough GPUs free; else the
    first end of a job there), and the search stops once no node left can do better.
    """
    order = []
    for i, node in enumerate(nodes):
        if node.resv is not None or not fits_ever(spec, node.view):
            continue
        if len(node.free) >= spec.gpus:
            order.append((now_ms, i))
        elif node.first_end() is not None:
            order.append((node.first_end(), i))
    order.sort()
    best: Reservation | None = None
    best_key = None
    for bound, i in order:
        if best_key is not None and (bound, i) > best_key:
            break
        node = nodes[i]
        free_at = {g: now_ms for g in node.free}
        for r in node.releases:
            for g in r.gpus:
                if g not in node.free:
                    free_at[g] = max(free_at.get(g, now_ms), r.end_ms)
        gpus = sorted(usable(spec, node.view, free_at), key=lambda g: (free_at[g], g))
        if len(gpus) < spec.gpus:
            continue
        cpus, mem = node.cpus, node.mem_gb
        start = None
        for t in sorted({now_ms} | {r.end_ms for r in node.releases}):
            cpus_t = cpus + sum(r.cpus for r in node.releases if r.end_ms <= t)
            mem_t = mem + sum(r.mem_gb for r in node.releases if r.end_ms <= t)
            ready = [g for g in gpus if free_at[g] <= t]
            if len(ready) >= spec.gpus and cpus_t >= spec.cpus and mem_t + 1e-9 >= spec.mem_gb:
                start = t
                break
        if start is not None and (best_key is None or (start, i) < best_key):
            best, best_key = Reservation(spec.id, node.view.name, tuple(sorted(gpus[: spec.gpus])), start), (start, i)
    return best


@dataclass
class _Teams:
    """Team usage against guarantees and limits, in GPUs, kept current through the cycle."""

    config: PolicyConfig
    used: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    demand: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def guarantee(self, team: str) -> int:
        q = self.config.teams.get(team)
        return q.guarantee_gpus if q else 0

    def owed(self, team: str) -> int:
        """GPUs `team` still needs to reach its guarantee, bounded by what it has waiting."""
        return max(0, min(self.guarantee(team) - self.used[team], self.demand[team]))

    def check(self, spec: JobSpec, free_gpus: int) -> tuple[Code, str] | None:
        if not self.config.teams:
            return None
        team, g = spec.team, spec.gpus
        q = self.config.teams.get(team)
        if q and q.limit_gpus is not None and self.used[team] + g > q.limit_gpus:
            return Code.OVER_LIMIT, (f"team {team} holds {self.used[team]} of its limit of {q.limit_gpus} GPUs; "
                                     f"this job needs {g} more")
        if g and self.used[team] + g > self.guarantee(team):
            owed = {t: self.owed(t) for t in self.config.teams if t != team and self.owed(t)}
            if owed and free_gpus - g < sum(owed.values()):
                who = ", ".join(f"{t} needs {n}" for t, n in sorted(owed.items()))
                return Code.HELD_FOR_TEAM, (f"team {team or '(none)'} would go past its guarantee of "
                                            f"{self.guarantee(team)} GPUs; the {free_gpus} free GPUs are held for "
                                            f"teams below their guarantee ({who})")
        return None

    def take(self, spec: JobSpec) -> None:
        self.used[spec.team] += spec.gpus
        self.demand[spec.team] = max(0, self.demand[spec.team] - spec.gpus)


class _Cycle:
    """The mutable state of one schedule() call."""

    def __init__(self, snapshot: Snapshot, now_ms: int, config: PolicyConfig, backlog: Backlog):
        self.now, self.config, self.w = now_ms, config, config.weights
        views = sorted(snapshot.nodes, key=lambda v: v.name)
        self.views = views
        self.running_on: dict[str, list[RunningJob]] = defaultdict(list)
        self._weaker: dict[str, tuple[list, list]] = {}  # node -> standings, cumulative GPUs (weaker_gpus)
        self._standings: dict[str, list] = {}  # node -> sorted (standing, GPUs) of its jobs (victim_floor)
        self.usage: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
        self.teams = _Teams(config)
        self.min_running_rank = 99
        for r in snapshot.running:
            self.running_on[r.node].append(r)
            self.min_running_rank = min(self.min_running_rank, r.spec.rank)
            u = self.usage[r.spec.user]
            u[0] += len(r.gpus); u[1] += r.spec.cpus; u[2] += r.spec.mem_gb
            self.teams.used[r.spec.team] += len(r.gpus)

        def end_of(r: RunningJob) -> int:
            return _end_ms(r.spec, r.started_ms, now_ms, config)

        self.nodes = [_Node(v, set(v.free_gpus), dict(v.shared), v.free_cpus, v.free_mem_gb,
                            self.running_on[v.name], end_of, idx=i) for i, v in enumerate(views)]
        self.by_name = {n.view.name: n for n in self.nodes}
        self.start = {n.view.name: (set(n.free), dict(n.shared), n.cpus, n.mem_gb) for n in self.nodes}
        self.totals = (sum(len(v.gpus) for v in views), sum(v.cpus for v in views), sum(v.mem_gb for v in views))
        self.ref_mem = min((gpu_facts(v.gpus).min_mem_gb for v in views if v.gpus), default=0.0)
        self.largest_node = max((len(v.gpus) for v in views), default=0)
        self.free_total = sum(len(n.free) for n in self.nodes)
        self.placements: list[Placement] = []
        self.verdicts: list[Verdict] = []
        self.reservations: list[Reservation] = []
        self.preemptions: list[Preemption] = []
        self.preemptors = 0
        self.rest, self.rest_reason = 0, ""
        self.rest_like: dict = {}
        self.pending: dict[str, PendingJob] = backlog.jobs
        self.starving_reserved = 0
        self.resv_tries = 0  # reservations tried for blocked jobs (EASY's quota counts tries)
        self.failed_preempt: dict[tuple, float] = {}
        self.held: list[int] = []  # nodes with a reservation, by idx (a reservation stays on its node)
        self.placed_on: list[int] = []  # nodes this cycle placed on, by idx
        self.refresh_free()
        self.start_max_free = self.max_free
        self._room_by_strength: dict = {}
        self.rank = 0

    def hold(self, node: _Node, resv: Reservation, rank: int, cpus: int, mem_gb: float) -> None:
        """Put `resv` (of a job of class `rank` needing `cpus`, `mem_gb`) on `node`."""
        if node.resv is None:
            bisect.insort(self.held, node.idx)
        node.resv, node.resv_rank, node.resv_cpus, node.resv_mem_gb = resv, rank, cpus, mem_gb

    def note_placed(self, node: _Node, job_id: str) -> None:
        if not node.placed:
            bisect.insort(self.placed_on, node.idx)
        node.placed.append(job_id)

    def static(self, spec: JobSpec) -> dict[str, float]:
        return static_terms(self.pending[spec.id], self.now, self.config)

    def terms(self, spec: JobSpec) -> dict[str, float]:
        """The score terms of `spec` now: its static ones and its user's fair share."""
        return dict(self.static(spec), fairness=self.fair(spec.user))

    def plan(self) -> Plan:
        return Plan(tuple(self.placements), tuple(self.verdicts), tuple(self.reservations), tuple(self.preemptions),
                    self.rest, self.rest_reason, self.rest_like)

    def begin_more(self) -> None:
        """Start a new plan from the state this cycle reached (place_arrivals)."""
        self.placements, self.verdicts, self.preemptions, self.reservations = [], [], [], []
        self.rest, self.rest_reason, self.rest_like = 0, "", {}
        self._room_by_strength.clear()

    def exhausted(self, spec: JobSpec, tries: tuple[int, int], bucket) -> bool:
        """After `spec` got a verdict: will every job of its bucket (backlog: shape, team and strength)
        get one too, for the rest of this cycle? Yes unless it started a preemption, tried for a
        reservation, or was held back by a team rule (quotas move as teams place), or by a reservation
        that some job of the bucket may pass (high or critical work) or backfill (its estimate ends
        before the reservation starts): room only shrinks within a cycle."""
        if (self.preemptors, self.resv_tries) != tries or self.config.teams:
            return False
        v = self.verdicts[-1]
        if v.job_id != spec.id:
            return False
        if v.code != Code.RESERVED:
            return True
        if is_elastic(spec):
            return False
        ends = self.now + bucket.shortest_s * 1000
        for node in (self.nodes[i] for i in self.held):  # where a job of this shape fits but for the reservation
            if (ends <= node.resv.start_ms or (bucket.top_rank >= _JUMPS and bucket.top_rank > node.resv_rank)) \
                    and _fits_unreserved(spec, node):
                return False
        return True

    def worth_trying(self, shape: tuple, strength_: float) -> bool:
        """Could a job of this shape (backlog.shape_of) and strength do anything more this cycle: start,
        take a reservation, start a preemption, or place a gang? (Cheap and conservative: False only
        where place() could only give a verdict.)"""
        gpus, share = shape[0], shape[5]
        if share or not gpus or gpus <= self.max_free or self.config.head_of_line:
            return True
        if self.resv_tries < self.config.reservations or (self.config.gang_across_nodes and gpus > self.largest_node):
            return True
        if not self.config.preemption or self.preemptors >= self.config.preemptors_per_cycle:
            return False
        return bool(self.config.teams) or self.preempt_room(strength_) >= gpus

    def preempt_room(self, strength_: float) -> int:
        """The most GPUs one node could offer a job of this strength (a reserved one too: a higher class
        may preempt there): free ones plus those of
        the jobs it may preempt there (an upper bound, as weaker_gpus; kept until a preemption or a
        reservation changes it: placements only lower it)."""
        key = (strength_, self.preemptors, len(self.reservations))
        got = self._room_by_strength.get(key)
        if got is None:
            got = max((len(n.free) + self.weaker_gpus(n.view.name, strength_) for n in self.nodes),
                      default=0)
            self._room_by_strength[key] = got
        return got

    def may_preempt(self, spec: JobSpec) -> bool:
        """Could `spec` still start a preemption this cycle? (A cheap, conservative test.)"""
        if not self.config.preemption or self.preemptors >= self.config.preemptors_per_cycle:
            return False
        if self.config.preempt_by != "class" or self.config.teams:
            return True
        return self.min_running_rank < spec.rank

    def fair(self, user: str) -> float:
        return fairness_term(dominant_share(tuple(self.usage[user]), self.totals))

    # -- one job ----------------------------------------------------------------------------
    def best_node(self, spec: JobSpec):
        best = None
        for node in self.nodes_for(spec) if spec.gpus and not spec.share else self.nodes:
            cands = _candidates(spec, node, self.now)
            if len(cands) < spec.gpus or not _room(spec, node, self.now):
                continue
            chosen = choose_gpus(spec, node.view, cands, node.shared)
            free_after = len(node.free - set(chosen))
            fit = fit_score(spec, node.view, chosen, free_after, node.cpus - spec.cpus, ref_mem_gb=self.ref_mem,
                            shared_used=node.shared)
            if best is None or fit > best[0] + 1e-9:
                best = (fit, node, chosen)
        return best

    def place(self, spec: JobSpec, terms: dict[str, float], why: str) -> bool:
        """Place `spec` on its best node, or give it a verdict (and maybe a reservation). True if placed.
        An elastic job is placed (or waits) with the GPU count that finishes it soonest."""
        self.rank += 1
        if not is_elastic(spec):
            return self._place(spec, terms, why)
        spec, note = self.elastic_count(spec)
        if self._place(spec, terms, f"{why}; {note}"):
            return True
        v = self.verdicts[-1]
        if v.job_id == spec.id:  # why it waits with this many
            self.verdicts[-1] = replace(v, reason=f"{note}; {v.reason}")
        return False

    def _place(self, spec: JobSpec, terms: dict[str, float], why: str) -> bool:
        team = self.teams.check(spec, self.free_total)
        if team is None and self.quick_block(spec, terms):
            return False
        best = None if team else self.best_node(spec)
        if best is None and team is None and self.is_gang(spec):
            return self.place_gang(spec, terms, why)
        if best is None:
            self.block(spec, terms, team)
            return False
        fit, node, chosen = best
        terms["fit"] = fit
        backfill = node.resv is not None and node.resv.job_id != spec.id and set(chosen) & set(node.resv.gpus)
        if spec.share:
            for g in chosen:
                node.shared[g] = node.shared.get(g, 0.0) + spec.gpu_mem_gb
        self.free_total -= len(node.free & set(chosen))
        node.free -= set(chosen)
        self.refresh_free(node)
        node.cpus -= spec.cpus
        node.mem_gb -= spec.mem_gb
        self.note_placed(node, spec.id)
        node.add_release(_Release(_end_ms(spec, self.now, self.now, self.config), chosen, spec.cpus,
                                  spec.mem_gb))
        u = self.usage[spec.user]
        u[0] += len(chosen); u[1] += spec.cpus; u[2] += spec.mem_gb
        self.teams.take(spec)
        if backfill:
            why += f"; backfilled: its estimate ends before job {node.resv.job_id}'s reservation"
        self.placements.append(Placement(spec.id, node.view.name, chosen, round(weighted(terms, self.w), 3),
                                         {k: round(v, 3) for k, v in terms.items()}, self.rank,
                                         f"{why}; best fit on {node.view.name} ({fit:.0f}/100)", spec.share))
        return True

    def elastic_count(self, spec: JobSpec) -> tuple[JobSpec, str]:
        """The GPU count (elastic.counts) whose expected completion is soonest: now on the best node
        with room, or when a reservation for that many could start (_reserve's estimate), plus the
        run time on that many (elastic.run_time). Ties go to more GPUs. Returns the job as it will be
        placed or held (that count, its run time as the estimate) and why."""
        best, notes = None, []
        for g in counts(spec):
            trial = replace(spec, gpus=g, min_gpus=None, est_s=run_time(spec, g))
            run_s = trial.est_s if trial.est_s is not None else self.config.unknown_remaining_s
            if self.teams.check(trial, self.free_total) is None and self.best_node(trial) is not None:
                start = self.now
            else:
                resv = _reserve(trial, self.nodes, self.now)
                if resv is None:
                    continue
                start = resv.start_ms
            done = start + int(run_s * 1000)
            wait = "now" if start <= self.now else f"in ~{short_span((start - self.now) / 1000)}"
            notes.append(f"{g} starts {wait}, runs ~{short_span(run_s)}")
            if best is None or (done, -g) < best[0]:  # a tie (no estimates): the most GPUs
                best = ((done, -g), trial)
        if best is None:
            return replace(spec, min_gpus=None), "elastic: no count could start before others end"
        chosen = best[1]
        return chosen, f"elastic: {chosen.gpus} GPUs finish soonest ({'; '.join(notes)})"

    def quick_block(self, spec: JobSpec, terms: dict[str, float]) -> bool:
        """The common cases under load, in O(1): more GPUs than any node has free (NO_FIT_NOW), or
        than any node has free outside reservations while the job cannot backfill (RESERVED), with
        nothing else (a reservation to take, a preemption, a gang) to try. Gives the verdict."""
        if spec.share or spec.gpus <= self.max_open or self.resv_tries < self.config.reservations \
                or self.may_preempt(spec) or self.is_gang(spec) \
                or (self.starving(spec) and self.starving_reserved < self.config.starvation_reservations):
            return False
        if spec.gpus <= self.max_free:  # only reserved GPUs could hold it
            if spec.gpu_types or spec.gpu_mem_gb or any(
                    len(n.free) >= spec.gpus and _backfills(spec, n, self.now)
                    for n in (self.nodes[i] for i in self.held)):
                return False
            code, reason = self.blocked_reason(spec)
        elif spec.gpus <= self.start_max_free and (took := self.took_its_room(spec)):
            code, reason = Code.LOWER_SCORE, self.lower_score_reason(spec, *took)
        else:
            code, reason = Code.NO_FIT_NOW, f"needs {describe_need(spec)}; no node has more than {self.max_free} GPUs free"
        self.verdicts.append(Verdict(spec.id, code, reason, round(weighted(terms, self.w), 3), self.rank,
                                     {k: round(v, 3) for k, v in terms.items()}))
        return True

    def refresh_free(self, *changed: _Node) -> None:
        """Keep max_free (most GPUs free on one node), max_open (most free outside any reservation,
        for quick_block) and the node groups (best_node) current after `changed` nodes changed; with
        no argument, work them out for every node. Costs the changed nodes, not the cluster."""
        if not changed:
            self.free_hist, self.open_hist = defaultdict(int), defaultdict(int)
            self.groups: dict[tuple, list[int]] = defaultdict(list)
            self.special: list[int] = []
            changed = self.nodes
            for node in changed:
                node.counted, node.group = (-1, -1), _UNLISTED
        for node in changed:
            free = len(node.free)
            opened = len(node.free - set(node.resv.gpus)) if node.resv else free
            was_free, was_open = node.counted
            if was_free >= 0:
                self.free_hist[was_free] -= 1
                self.open_hist[was_open] -= 1
            self.free_hist[free] += 1
            self.open_hist[opened] += 1
            node.counted = (free, opened)
            self.regroup(node)
        self.max_free = max((k for k, n in self.free_hist.items() if n > 0), default=0)
        self.max_open = max((k for k, n in self.open_hist.items() if n > 0), default=0)

    def regroup(self, node: _Node) -> None:
        """A plain node (alike GPUs, no reservation, no sharers) sits in the group of its GPU kind and
        free count: for an exclusive job, every node of a group fits equally well, so best_node looks
        at the first of each group with room. Other nodes are `special`: looked at one by one."""
        facts = gpu_facts(node.view.gpus)
        plain = facts.alike and node.resv is None and not node.shared
        key = (facts.kind, node.view.cpus, node.view.mem_gb, len(node.free)) if plain else None
        if key == node.group:
            return
        if node.group is None:
            self.special.remove(node.idx)
        elif node.group is not _UNLISTED:
            members = self.groups[node.group]
            del members[bisect.bisect_left(members, node.idx)]
        node.group = key
        if key is None:
            bisect.insort(self.special, node.idx)
        else:
            bisect.insort(self.groups[key], node.idx)

    def nodes_for(self, spec: JobSpec) -> list[_Node]:
        """The nodes best_node must look at for an exclusive GPU job, in name order: the first node with
        room of each group with enough free GPUs of a kind it may use, and the special nodes."""
        out = [self.nodes[i] for i in self.special if len(self.nodes[i].free) >= spec.gpus]
        for (*_, free), members in self.groups.items():
            if free < spec.gpus or not members:
                continue
            first = self.nodes[members[0]]
            if len(usable(spec, first.view, sorted(first.free))) < spec.gpus:
                continue  # the whole group: its GPUs are all alike
            for i in members:
                if _room(spec, self.nodes[i], self.now):
                    out.append(self.nodes[i])
                    break
        out.sort(key=lambda n: n.idx)
        return out

    def one_per_group(self) -> list[_Node]:
        """The special nodes (by idx) and the first node of each group: for what a job could get now,
        reservations and sharers aside, a group's members differ only in CPUs and memory free (its
        GPU kind, node size and free GPU count are the group's key)."""
        return [self.nodes[i] for i in self.special] + [self.nodes[m[0]] for m in self.groups.values() if m]

    def is_gang(self, spec: JobSpec) -> bool:
        return self.config.gang_across_nodes and spec.gpus > self.largest_node and not spec.share

    def place_gang(self, spec: JobSpec, terms: dict[str, float], why: str) -> bool:
        """A job larger than any node: whole free nodes, fewest first (by name), or a reservation."""
        chosen, have = [], 0
        for node in self.nodes:
            if have >= spec.gpus:
                break
            if len(node.free) == len(node.view.gpus) and _whole_node_usable(spec, node.view) \
                    and _backfills(spec, node, self.now) and node.cpus >= 1:
                chosen.append(node)
                have += len(node.view.gpus)
        if have < spec.gpus:
            score = round(weighted(terms, self.w), 3)
            reason = f"needs {describe_need(spec)} on whole nodes; {have} GPUs are on whole free nodes"
            if self.resv_tries < self.config.reservations or self.starving_resv_left(spec):
                self.resv_tries += 1
                start = self.reserve_gang(spec)
                if start is not None:
                    reason += f"; holds whole nodes from ~{max(0, start - self.now) / 1000:.0f}s from now"
            self.verdicts.append(Verdict(spec.id, Code.NO_FIT_NOW, reason, score, self.rank,
                                         {k: round(v, 3) for k, v in terms.items()}))
            return False
        pieces = []
        end = _end_ms(spec, self.now, self.now, self.config)
        for node in chosen:
            gpus = tuple(sorted(node.free))
            pieces.append((node.view.name, gpus))
            self.free_total -= len(gpus)
            node.free = set()
            self.note_placed(node, spec.id)
            node.add_release(_Release(end, gpus, 0, 0.0))
        self.refresh_free(*chosen)
        u = self.usage[spec.user]
        u[0] += have; u[1] += spec.cpus; u[2] += spec.mem_gb
        self.teams.take(spec)
        terms["fit"] = 100.0
        self.placements.append(Placement(spec.id, pieces[0][0], pieces[0][1], round(weighted(terms, self.w), 3),
                                         {k: round(v, 3) for k, v in terms.items()}, self.rank,
                                         f"{why}; a gang on {len(pieces)} whole nodes", False, tuple(pieces[1:])))
        return True

    def reserve_gang(self, spec: JobSpec) -> int | None:
        """Hold the whole nodes that come free first; returns when the gang could start."""
        ready = []
        for node in self.nodes:
            if node.resv is None and _whole_node_usable(spec, node.view):
                ends = [r.end_ms for r in node.releases]
                ready.append((max(ends) if ends and len(node.free) < len(node.view.gpus) else self.now,
                              node.view.name, node))
        ready.sort(key=lambda x: (x[0], x[1]))
        have, picked = 0, []
        for at, _, node in ready:
            if have >= spec.gpus:
                break
            picked.append((at, node))
            have += len(node.view.gpus)
        if have < spec.gpus:
            return None
        start = max(at for at, _ in picked)
        for _, node in picked:
            resv = Reservation(spec.id, node.view.name, tuple(g.index for g in node.view.gpus), start)
            self.hold(node, resv, spec.rank, 0, 0.0)
            self.reservations.append(resv)
        self.refresh_free(*(node for _, node in picked))
        return start

    def block(self, spec: JobSpec, terms: dict[str, float], team: tuple[Code, str] | None) -> None:
        score = round(weighted(terms, self.w), 3)
        code, reason = team if team else self.blocked_reason(spec)
        preempting = None
        if team is None and code in (Code.NO_FIT_NOW, Code.LOWER_SCORE, Code.RESERVED) and not spec.share \
                and self.may_preempt(spec):
            preempting = self.preempt_for(spec)
        if preempting is not None:
            victims = ", ".join(f"job {p.job_id} ({p.mode})" for p in preempting) or "jobs already stopping"
            resv = self.reservations[-1]
            reason += f"; preempting {victims} on {resv.node}; holds GPUs {list(resv.gpus)} until they are down"
        elif team is None and code in (Code.NO_FIT_NOW, Code.LOWER_SCORE) and spec.gpus and not spec.share and (
                self.resv_tries < self.config.reservations or self.starving_resv_left(spec)):
            self.resv_tries += 1
            resv = _reserve(spec, self.nodes, self.now)
            if resv is not None:
                node = self.by_name[resv.node]
                self.hold(node, resv, spec.rank, spec.cpus, spec.mem_gb)
                self.reservations.append(resv)
                self.refresh_free(node)
                reason += (f"; holds a reservation on {resv.node} GPUs {list(resv.gpus)} from "
                           f"~{max(0, resv.start_ms - self.now) / 1000:.0f}s from now")
        if self.starving(spec):
            reason = f"starving ({self.starving(spec)}); " + reason
        self.verdicts.append(Verdict(spec.id, code, reason, score, self.rank,
                                     {k: round(v, 3) for k, v in terms.items()}))

    def weaker_gpus(self, node: str, strength: float) -> int:
        """An upper bound on the GPUs preemption could free on `node` for a job of `strength`: those of
        the running jobs it outranks (outranking is standing < strength under every preempt_by), and of
        those already stopping (their GPUs are coming back)."""
        table = self._weaker.get(node)
        if table is None:
            rows = sorted((s, len(r.gpus)) for r in self.running_on[node] if not r.spec.share
                          and (s := preemptible_below(r, self.now, self.config)) is not None)
            cum, total = [], 0
            for _, n in rows:
                total += n
                cum.append(total)
            table = self._weaker[node] = ([s for s, _ in rows], cum)
        keys_, cum = table
        i = bisect.bisect_left(keys_, strength)
        return cum[i - 1] if i else 0

    def victim_floor(self, node: _Node, spec: JobSpec) -> float:
        """A lower bound of the highest standing among the victims any preemption for `spec` on `node`
        needs (choose_victims' cost[0]): the standing at which the node's free GPUs, those of jobs
        already stopping, and those of the weakest running jobs first add up to what `spec` asks
        (-inf if no victim is needed; inf if no set of them would do)."""
        rows = self._standings.get(node.view.name)
        if rows is None:
            rows = self._standings[node.view.name] = sorted(
                (float("-inf") if r.stopping else standing(r, self.now, self.config), len(r.gpus))
                for r in self.running_on[node.view.name] if not r.spec.share)
        have = len(node.free)
        if have >= spec.gpus:
            return float("-inf")
        for level, n in rows:  # those stopping first
            have += n
            if have >= spec.gpus:
                return level
        return float("inf")

    def attained(self, spec: JobSpec) -> float:
        p = self.pending.get(spec.id)
        return p.attained_gpu_s if p is not None else 0.0

    def strength(self, spec: JobSpec) -> float:
        return strength(spec, self.attained(spec), self.config)

    def preempt_for(self, spec: JobSpec) -> list[Preemption] | None:
        """Choose victims for blocked `spec` on the node where they cost least; reserve what they free.
        A search that failed for a request shape fails for every job of that shape that is no
        stronger (victims only become fewer within a cycle), so it is not repeated."""
        shape = (spec.gpus, spec.gpu_types, spec.gpu_mem_gb, spec.cpus, spec.mem_gb, spec.team)
        if not self.config.teams and self.strength(spec) <= self.failed_preempt.get(shape, float("-inf")):
            return None
        got = self._preempt_for(spec)
        if got is None:
            self.failed_preempt[shape] = max(self.failed_preempt.get(shape, float("-inf")), self.strength(spec))
        return got

    def _preempt_for(self, spec: JobSpec) -> list[Preemption] | None:
        def reclaimable(v: RunningJob) -> bool:
            t = self.teams
            return bool(self.config.teams) and t.used[spec.team] < t.guarantee(spec.team) \
                and t.used[v.spec.team] > t.guarantee(v.spec.team)

        best = None
        strength = self.strength(spec)
        tried = []
        for node in self.nodes:
            if (node.resv is not None and node.resv.job_id != spec.id and not _passes(spec, node)) \
                    or not fits_ever(spec, node.view):
                continue
            if not self.config.teams and len(node.free) + self.weaker_gpus(node.view.name, strength) < spec.gpus:
                continue  # even every job it outranks there would not make room
            tried.append((self.victim_floor(node, spec), node.idx, node))
        tried.sort(key=lambda t: t[:2])
        for floor, _, node in tried:
            if best is not None and floor > (best[0][0][0] if best[0][0] else float("-inf")):
                break  # no node left can beat the best: cost[0] is the victims' highest standing
            free_usable = usable(spec, node.view, sorted(node.free))
            got = choose_victims(spec, node.view, self.running_on[node.view.name], free_usable, node.cpus,
                                 node.mem_gb, self.now, self.config, reclaimable, self.attained(spec))
            if got is not None and (best is None or (got[0], node.view.name) < best[0]):
                best = ((got[0], node.view.name), node, got[1])
        if best is None:
            return None
        _, node, victims = best
        self.preemptors += 1
        self.preemptions.extend(victims)
        by_id = {p.job_id: p for p in victims}
        self._weaker.pop(node.view.name, None)
        self._standings.pop(node.view.name, None)
        on_node = self.running_on[node.view.name]
        already = [g for r in on_node if r.stopping and not r.spec.share for g in r.gpus]
        for i, r in enumerate(on_node):
            if r.spec.id in by_id:
                on_node[i] = replace(r, stopping=True)
        released = already + [g for p in victims for g in p.gpus]  # a shrink gives up only some
        coming = [g for g in released if gpu_usable(spec, node.view, g) and g not in node.shared]
        gpus = usable(spec, node.view, sorted(node.free)) + [g for g in coming if g not in node.free]
        resv = Reservation(spec.id, node.view.name, tuple(sorted(gpus[: spec.gpus])), self.now)
        # on the node even where it passed a lower class's reservation: a short job that could backfill
        # that one must not take the GPUs this preemption frees
        self.hold(node, resv, spec.rank, spec.cpus, spec.mem_gb)
        self.reservations.append(resv)
        self.refresh_free(node)
        return victims

    def blocked_reason(self, spec: JobSpec) -> tuple[Code, str]:
        need = describe_need(spec)
        best, best_free, reserved_by = None, -1, None
        for node in self.one_per_group():
            if not fits_ever(spec, node.view):
                continue
            free = len(_pool(spec, node))
            if node.resv is not None and not _backfills(spec, node, self.now):
                unreserved = _candidates(spec, node, self.now)
                if _fits_unreserved(spec, node) and (len(unreserved) < spec.gpus or not _room(spec, node, self.now)):
                    reserved_by = node
            if free > best_free or (free == best_free and node.idx < best.idx):
                best, best_free = node, free
        if reserved_by is not None:
            r = reserved_by.resv
            est = "it has no estimate" if spec.est_s is None else f"its estimate {spec.est_s:g}s"
            return Code.RESERVED, (f"needs {need}; {reserved_by.view.name} is reserved for job {r.job_id} from "
                                   f"~{max(0, r.start_ms - self.now) / 1000:.0f}s from now, and {est} does not "
                                   f"end before then")
        took = self.took_its_room(spec)
        if took:
            return Code.LOWER_SCORE, self.lower_score_reason(spec, *took)
        if best is None:
            return Code.NO_FIT_NOW, f"needs {need}; no node has room now"
        total = usable_count(spec, best.view)
        return Code.NO_FIT_NOW, (f"needs {need}; best node {best.view.name} has {best_free} of {total} "
                                 f"matching GPUs free, {best.cpus} CPUs free")

    @staticmethod
    def lower_score_reason(spec: JobSpec, node: str, jobs: list[str]) -> str:
        return (f"needs {describe_need(spec)}; it fitted on {node} at the start of this cycle, but "
                f"higher-ranked jobs took the room there (jobs {', '.join(jobs[-5:])})")

    def took_its_room(self, spec: JobSpec):
        """The first node where `spec` fitted before this cycle's placements, and who took it."""
        for node in (self.nodes[i] for i in self.placed_on):
            free, shared, cpus, mem = self.start[node.view.name]
            pool = sorted(set(free) | set(shared)) if spec.share else sorted(free)
            if spec.share:
                pool = [i for i in pool if node.view.gpu(i).mem_total_gb - shared.get(i, 0.0) >= spec.gpu_mem_gb]
            if len(usable(spec, node.view, pool)) >= spec.gpus and spec.cpus <= cpus and spec.mem_gb <= mem + 1e-9:
                return node.view.name, node.placed
        return None

    def starving_resv_left(self, spec: JobSpec) -> bool:
        """A starving job may take one of the starvation reservations (oldest first) while any are left."""
        if not self.starving(spec) or self.starving_reserved >= self.config.starvation_reservations:
            return False
        self.starving_reserved += 1
        return True

    def starving(self, spec: JobSpec) -> str:
        """Why `spec` is starving (waited past its class's bound), or "" if it is not."""
        if not past_starvation(spec, self.now, self.config):
            return ""
        waited = (self.now - spec.submit_ms) / 1000.0
        return f"waited {waited:.0f}s, past the {spec.priority} bound of {self.config.starvation_s[spec.priority]:.0f}s"


def schedule(snapshot: Snapshot, *, now_ms: int, config: PolicyConfig | None = None) -> Plan:
    """snapshot.pending is a Backlog kept across cycles (the live scheduler's and the simulator's), or
    any iterable of PendingJob (ordered here, for this call)."""
    return plan_cycle(snapshot, now_ms, config)[0]


def plan_cycle(snapshot: Snapshot, now_ms: int, config: PolicyConfig | None = None) -> tuple[Plan, _Cycle]:
    """schedule(), and the state the cycle ended in, for place_arrivals."""
    config = config or PolicyConfig()
    backlog = snapshot.pending
    if isinstance(backlog, Backlog):
        backlog.configure(config)
    else:
        backlog = Backlog(config, backlog)
    c = _Cycle(snapshot, now_ms, config, backlog)
    order = backlog.order(now_ms)
    try:
        _walk(c, backlog, order)
    finally:
        order.close()
    return c.plan(), c


def place_arrivals(c: _Cycle, jobs, now_ms: int) -> Plan:
    """Jobs that arrived since the cycle `c` (plan_cycle) ended, met against what it left: each starts,
    waits or preempts exactly as it would have as the last job of that cycle. Nothing else changed
    since (the caller checks: no job ended, moved or failed a commit; no node changed), and every job
    of that cycle that could do anything did it, so the arrivals are all a full cycle would place.
    Returns only what the arrivals did; `c` goes on from there."""
    c.now = now_ms
    c.begin_more()
    never = _NeverFit(c.views, c.config.gang_across_nodes)
    for p in sorted(jobs, key=lambda p: (-weighted(c.static(p.spec), c.w), p.spec.submit_ms, id_key(p.spec.id))):
        spec = p.spec
        c.teams.demand[spec.team] += spec.gpus
        if never.check(smallest(spec)):
            c.verdicts.append(Verdict(spec.id, Code.NO_FIT_EVER, _never_reason(spec, c.views)))
            continue
        c.place(spec, c.terms(spec), f"rank {c.rank + 1}: arrived, and "
                "the jobs before it could not use the room")
    return c.plan()


def rest_verdict(plan: Plan, p: PendingJob, config: PolicyConfig) -> tuple[Code, str]:
    """Why a job the cycle did not reach (plan.rest) waits: as the first job of its group, or for want
    of room anywhere."""
    like = plan.rest_like.get(bucket_key(p, config))
    if like is not None:
        return like.code, like.reason
    return Code.NO_FIT_NOW, plan.rest_reason


def _walk(c: _Cycle, backlog: Backlog, order) -> None:
    config = c.config
    never = _NeverFit(c.views, config.gang_across_nodes)
    c.teams.demand.update(backlog.team_gpus)
    excluded, n_never = set(), 0
    for shape, ids in backlog.shapes.items():
        spec = backlog.jobs[next(iter(ids))].spec
        if never.check(smallest(spec)):
            excluded.add(shape)
            reason = _never_reason(spec, c.views)
            for job_id in ids:
                c.verdicts.append(Verdict(job_id, Code.NO_FIT_EVER, reason))
                c.teams.demand[backlog.jobs[job_id].spec.team] -= spec.gpus
            n_never += len(ids)
    c.verdicts.sort(key=lambda v: id_key(v.job_id))

    # the oldest starving jobs go first, ahead of every class: each starts, or holds a reservation;
    # the other starving jobs keep their place by score (so a long backlog does not turn into FIFO)
    oldest = backlog.oldest_starving(c.now, config.starvation_reservations + n_never)
    for p in [p for p in oldest if shape_of(p.spec) not in excluded][:config.starvation_reservations]:
        spec = p.spec
        order.skip.add(spec.id)
        terms = c.terms(spec)
        c.place(spec, terms, f"rank {c.rank + 1}: starving, {c.starving(spec)}")

    # then, with reserve_longest_wait, the jobs longest overdue against their class's target (past that
    # share of it), until the reservations are taken (fifo-easy's reservation for its oldest job)
    if config.reserve_longest_wait is not None and config.reservations:
        tries = 0
        for p in backlog.longest_waiting(c.now, 4 * config.reservations + n_never + len(order.skip),
                                         config.reserve_longest_wait):
            if c.resv_tries >= config.reservations or tries >= 4 * config.reservations:
                break
            if p.spec.id in order.skip or shape_of(p.spec) in excluded:
                continue
            tries += 1
            jumpers = PRIORITIES[max(_JUMPS, p.spec.rank + 1):]
            if any(backlog.by_class[k] for k in jumpers) and c.best_node(p.spec) is not None:
                continue  # it fits, but high or critical work waits: it starts in score order, after that
            order.skip.add(p.spec.id)
            terms = c.terms(p.spec)
            c.place(p.spec, terms, f"rank {c.rank + 1}: the longest wait against its class's target")

    # then Dominant Resource Fairness: the user whose best job has the best static + fairness score
    # picks next; buckets of jobs that could do nothing more this cycle are skipped whole
    blocked: set = set()
    w_total = sum(config.weights.values()) or 1.0
    w_fair = config.weights.get("fairness", 0.0) / w_total

    def worth(bucket) -> bool:
        return bucket.shape not in excluded and bucket.key not in blocked \
            and c.worth_trying(bucket.shape, bucket.strength)

    def user_key(u: str):
        got = order.head(u, worth)
        if got is None:
            return None
        key, _ = got
        return (key[0] - w_fair * c.fair(u), key[1], key[2], u)

    users = [k for u in list(order.users) if (k := user_key(u)) is not None]
    heapq.heapify(users)
    blocked_by = None  # head-of-line blocking: the first job that could not start
    while users:
        picked = heapq.heappop(users)
        user = picked[3]
        now_key = user_key(user)  # what is worth trying only shrinks, and fairness only falls: re-check
        if now_key != picked:
            if now_key is not None:
                heapq.heappush(users, now_key)
            continue
        _, bucket = order.head(user, worth)
        spec = order.take(user).spec
        terms = c.terms(spec)
        if blocked_by is not None:
            c.rank += 1
            c.verdicts.append(Verdict(spec.id, Code.LOWER_SCORE, f"strict order: waits behind job {blocked_by}",
                                      round(weighted(terms, c.w), 3), c.rank, terms))
        else:
            tries = (c.preemptors, c.resv_tries)
            if not c.place(spec, terms, f"rank {c.rank + 1}: the best score among the jobs left"):
                if config.head_of_line:
                    blocked_by = spec.id
                elif c.exhausted(spec, tries, bucket):
                    blocked.add(bucket.key)
                    c.rest_like[bucket.key] = c.verdicts[-1]
        again = user_key(user)
        if again is not None:
            heapq.heappush(users, again)
    c.rest = order.left() - n_never
    if c.rest:
        c.rest_reason = (f"no node has room for it this cycle (at most {c.max_free} GPUs free on one node); "
                         f"{c.rank} jobs were considered before it")


class _NeverFit:
    """fits_ever over all nodes, remembered per request shape (most jobs share a few shapes)."""

    def __init__(self, views: list[NodeView], gangs: bool):
        self.views, self.gangs, self.memo = views, gangs, {}

    def check(self, spec: JobSpec) -> bool:
        key = (spec.gpus, spec.gpu_types, spec.gpu_mem_gb, spec.cpus, spec.mem_gb)
        got = self.memo.get(key)
        if got is None:
            got = not any(fits_ever(spec, v) for v in self.views)
            if got and self.gangs and spec.gpus and not spec.share:
                got = sum(len(v.gpus) for v in self.views if _whole_node_usable(spec, v)) < spec.gpus
            self.memo[key] = got
        return got


def _whole_node_usable(spec: JobSpec, view: NodeView) -> bool:
    """May a gang member of `spec` take this node whole (every GPU of the right type and memory)?"""
    return bool(view.gpus) and usable_count(spec, view) == len(view.gpus)


def _never_reason(spec: JobSpec, views: list[NodeView]) -> str:
    need = describe_need(spec)
    if not views:
        return f"needs {need}; no live node is registered"
    best = max(views, key=lambda v: (usable_count(spec, v), v.cpus, v.name))
    k = usable_count(spec, best)
    return (f"needs {need}; no live node could ever hold it (largest: {best.name} with {k} "
            f"matching GPUs, {best.cpus} CPUs, {best.mem_gb:g} GB RAM)")
