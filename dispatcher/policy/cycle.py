"""Cycle: the mutable state of one schedule() call, and what placing one job does to it.

schedule.py decides the order in which jobs come up; for each, Cycle.place starts it on its best
node (team rules first, then the node whose free GPUs fit it most tightly), or gives it a verdict:
a blocked job may start a preemption (preemption.VictimSearch) and then holds the GPUs it frees,
or takes a reservation (reservations.py) while the cycle has reservations left. A gang (--nodes N,
or a job larger than any node) goes to gangs.py, an elastic job first picks its GPU count
(elastic_count.py). The nodes
live in a NodeIndex (node_index.py), team usage in Teams (teams.py); the reasons of the verdicts
come from verdicts.py.

Cheap tests keep a long backlog cheap: quick_block gives the common verdicts in O(1),
worth_trying and exhausted let the walk skip whole buckets of jobs that can do nothing more.
Pure: no Redis, clock, OS or randomness.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from ..core.elastic import is_elastic
from ..core.model import JobSpec
from ..core.plan import Code, Placement, Plan, Preemption, Reservation, RunningJob, Snapshot, Verdict, taking_jobs
from ..core.units import within
from .backlog import Backlog, strength
from .config import PolicyConfig
from .elastic_count import elastic_count
from .fit import GpuMemo, choose_gpus, fit_score
from .gangs import place_gang
from .node_index import NodeIndex
from .nodes import JUMPS, NodeState, Release, end_ms, unknown_end_ms
from .preemption import free_from
from .reservations import reserve
from .score import dominant_share, fairness_term, static_terms, weighted
from .teams import Teams
from .victims import VictimSearch
from .verdicts import blocked_reason, drained_note, lower_score_reason, no_fit_now, starving_why, took_its_room


class Cycle:
    """The mutable state of one schedule() call."""

    def __init__(self, snapshot: Snapshot, now_ms: int, config: PolicyConfig, backlog: Backlog):
        self.now, self.config, self.w = now_ms, config, config.weights
        nodes = sorted(snapshot.nodes, key=lambda v: v.name)
        self.views = list(taking_jobs(nodes))  # every rule below sees only these
        self.drained = [v for v in nodes if v.drained is not None]  # only the verdicts name them
        self.fit = GpuMemo()
        self.running_on: dict[str, list[RunningJob]] = defaultdict(list)
        self.usage: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
        self.teams = Teams(config)
        if config.teams:
            self.teams.gpu_kinds = tuple({(g.name, g.mem_total_gb): g for v in self.views for g in v.gpus}.values())
        self.min_running_rank = 99
        for r in snapshot.running:
            self.running_on[r.node].append(r)
            self.min_running_rank = min(self.min_running_rank, r.spec.rank)
            u = self.usage[r.spec.user]
            u[0] += len(r.gpus); u[1] += r.spec.cpus; u[2] += r.spec.mem_gb
            self.teams.running(r.spec, len(r.gpus))
            if r.stopping and r.preempted_for in backlog.jobs:  # preempted for a job still waiting
                self.teams.on_the_way(backlog.jobs[r.preempted_for].spec)

        def end_of(r: RunningJob) -> int:
            return end_ms(r.spec, r.started_ms, now_ms, config)

        self.index = NodeIndex(self.views, self.running_on, end_of, self.fit)
        self.victims = VictimSearch(self.running_on, config)
        views = self.views
        self.totals = (sum(len(v.gpus) for v in views), sum(v.cpus for v in views), sum(v.mem_gb for v in views))
        self.placements: list[Placement] = []
        self.verdicts: list[Verdict] = []
        self.reservations: list[Reservation] = []
        self.preemptions: list[Preemption] = []
        self.preemptors = 0
        self.rest, self.rest_reason = 0, ""
        self.rest_like: dict = {}
        self.pending = backlog.jobs
        self.starving_reserved = 0
        self.resv_tries = 0  # reservations tried for blocked jobs (EASY's quota counts tries)
        self.failed_preempt: dict[tuple, float] = {}
        self._room_by_strength: dict = {}
        self.rank = 0

    # -- bookkeeping ----------------------------------------------------------------------------
    def static(self, spec: JobSpec) -> dict[str, float]:
        return static_terms(self.pending[spec.id], self.now, self.config)

    def terms(self, spec: JobSpec) -> dict[str, float]:
        """The score terms of `spec` now: its static ones and its user's fair share."""
        return dict(self.static(spec), fairness=self.fair(spec.user))

    def fair(self, user: str) -> float:
        return fairness_term(dominant_share(tuple(self.usage[user]), self.totals))

    def attained(self, spec: JobSpec) -> float:
        p = self.pending.get(spec.id)
        return p.attained_gpu_s if p is not None else 0.0

    def strength(self, spec: JobSpec) -> float:
        return strength(spec, self.attained(spec), self.config)

    def plan(self) -> Plan:
        return Plan(tuple(self.placements), tuple(self.verdicts), tuple(self.reservations), tuple(self.preemptions),
                    self.rest, self.rest_reason, self.rest_like)

    def begin_more(self) -> None:
        """Start a new plan from the state this cycle reached (place_arrivals)."""
        self.placements, self.verdicts, self.preemptions, self.reservations = [], [], [], []
        self.rest, self.rest_reason, self.rest_like = 0, "", {}
        self._room_by_strength.clear()

    def judge(self, spec: JobSpec, code: Code, reason: str, terms: dict[str, float]) -> None:
        """Give `spec` its verdict, with its score and terms (rounded) at its rank; one that waits for room
        names first the drained nodes that could hold it."""
        if self.drained and code in (Code.NO_FIT_NOW, Code.LOWER_SCORE, Code.RESERVED):
            reason = drained_note(self.drained, spec, self.fit) + reason
        self.verdicts.append(Verdict(spec.id, code, reason, round(weighted(terms, self.w), 3), self.rank,
                                     {k: round(v, 3) for k, v in terms.items()}))

    def record(self, spec: JobSpec, node: str, gpus: tuple[int, ...], terms: dict[str, float], reason: str,
               share: bool, extra: tuple = ()) -> None:
        """`spec` starts on `node` (and the `extra` nodes of a gang)."""
        self.placements.append(Placement(spec.id, node, gpus, round(weighted(terms, self.w), 3),
                                         {k: round(v, 3) for k, v in terms.items()}, self.rank, reason, share, extra))

    def use(self, spec: JobSpec, gpus: int, nodes: int = 1) -> None:
        """Count a placement of `spec` holding `gpus` GPUs (and its CPUs and memory on each of `nodes`)
        against its user's share and its team."""
        u = self.usage[spec.user]
        u[0] += gpus; u[1] += spec.cpus * nodes; u[2] += spec.mem_gb * nodes
        self.teams.take(spec)

    def hold_reservation(self, node: NodeState, resv: Reservation, rank: int, cpus: int, mem_gb: float) -> None:
        self.index.hold(node, resv, rank, cpus, mem_gb)
        self.reservations.append(resv)
        self.index.refresh(node)

    def worth_holding(self, spec: JobSpec, start_ms: int) -> bool:
        """Is a gang's hold on whole nodes from `start_ms` worth what it idles (gangs.py)? One whose start
        nobody can tell (a job holding what it needs has no estimate left), for a gang with no estimate of
        its own, only if it is high or critical work (short promises) or starving. Where jobs carry no
        estimates (none given, no history to predict from) nothing may backfill such a hold, so it idled
        every GPU of its nodes for as long as better-scored jobs kept jumping it: a normal 32-GPU job held
        a 32-GPU cluster through 1,480 cycles (Philly's first 400 jobs with no estimates: average JCT 1.9x
        FIFO's; 0.59x with this). A one-node job keeps EASY's hold: it idles a node's share at most, and
        without it a 2-GPU job starved behind a stream of 1-GPU jobs (the mission's seed case)."""
        return start_ms < unknown_end_ms(self.now, self.config) or self.config.hold_unknown_starts \
            or spec.est_s is not None or spec.rank >= JUMPS or bool(self.starving(spec))

    def may_reserve(self, spec: JobSpec) -> bool:
        """May a blocked `spec` try for a reservation: while EASY's quota lasts, or a starvation one?
        (Takes a starvation reservation when it answers yes by one.)"""
        return self.resv_tries < self.config.reservations or self.starving_resv_left(spec)

    # -- cheap tests ----------------------------------------------------------------------------
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
        if is_elastic(spec) or spec.nodes >= 2:
            return False
        ends = self.now + bucket.shortest_s * 1000
        for node in self.index.held_nodes():  # where a job of this shape fits but for the reservation
            if (ends <= node.resv.start_ms or (bucket.top_rank >= JUMPS and bucket.top_rank > node.resv_rank)) \
                    and node.fits_unreserved(spec):
                return False
        return True

    def worth_trying(self, shape: tuple, strength_: float) -> bool:
        """Could a job of this shape (backlog.shape_of) and strength do anything more this cycle: start,
        take a reservation, start a preemption, or place a gang? (Cheap and conservative: False only
        where place() could only give a verdict.)"""
        gpus, share, nodes, per_node = shape[0], shape[5], shape[6], shape[7]
        if share or not gpus or gpus <= self.index.max_free or self.config.head_of_line \
                or (nodes >= 2 and per_node <= self.index.max_free):
            return True
        if self.resv_tries < self.config.reservations or (self.config.gang_across_nodes
                                                          and gpus > self.index.largest_node):
            return True
        if not self.config.preemption or self.preemptors >= self.config.preemptors_per_cycle:
            return False
        return bool(self.config.teams) or self.preempt_room(strength_) >= gpus

    def preempt_room(self, strength_: float) -> int:
        """The most GPUs one node could offer a job of this strength (a reserved one too: a higher class
        may preempt there): free ones plus those of the jobs it may preempt there (an upper bound, as
        VictimSearch.weaker_gpus; kept until a preemption or a reservation changes it: placements only
        lower it)."""
        key = (strength_, self.preemptors, len(self.reservations))
        got = self._room_by_strength.get(key)
        if got is None:
            got = max((len(n.free) + self.victims.weaker_gpus(n.view.name, strength_, self.now)
                       for n in self.index.nodes), default=0)
            self._room_by_strength[key] = got
        return got

    def may_preempt(self, spec: JobSpec) -> bool:
        """Could `spec` still start a preemption this cycle? (A cheap, conservative test.)"""
        if not self.config.preemption or self.preemptors >= self.config.preemptors_per_cycle:
            return False
        if self.config.preempt_by != "class" or self.config.teams:
            return True
        return self.min_running_rank < spec.rank

    def is_gang(self, spec: JobSpec) -> bool:
        """Does `spec` run on several nodes: asked with --nodes N (N >= 2), or an auto gang (no --nodes,
        more GPUs than any node has; with gang_across_nodes)? (With gangs off, NeverFit sets the first
        kind aside.)"""
        if spec.nodes >= 2:
            return True
        return spec.nodes == 0 and self.config.gang_across_nodes and spec.gpus > self.index.largest_node \
            and not spec.share

    def quick_block(self, spec: JobSpec, terms: dict[str, float]) -> bool:
        """The common cases under load, in O(1): more GPUs than any node has free (NO_FIT_NOW), or
        than any node has free outside reservations while the job cannot backfill (RESERVED), with
        nothing else (a reservation to take, a preemption, a gang) to try. Gives the verdict."""
        ix = self.index
        if spec.share or spec.gpus <= ix.max_open or self.resv_tries < self.config.reservations \
                or self.may_preempt(spec) or self.is_gang(spec) \
                or (self.starving(spec) and self.starving_reserved < self.config.starvation_reservations):
            return False
        if spec.gpus <= ix.max_free:  # only reserved GPUs could hold it
            if spec.gpu_types or spec.gpu_mem_gb or any(
                    len(n.free) >= spec.gpus and n.backfills(spec, self.now) for n in ix.held_nodes()):
                return False
            code, reason = blocked_reason(ix, spec, self.now)
        elif spec.gpus <= ix.start_max_free and (took := took_its_room(ix, spec)):
            code, reason = Code.LOWER_SCORE, lower_score_reason(spec, *took)
        else:
            code, reason = Code.NO_FIT_NOW, no_fit_now(spec, ix.max_free)
        self.judge(spec, code, reason, terms)
        return True

    # -- one job ----------------------------------------------------------------------------
    def best_node(self, spec: JobSpec):
        """(fit score, node, GPUs) of the node that fits `spec` most tightly now (the first in name
        order on a tie), or None (always for a gang asked with --nodes)."""
        best = None
        if spec.nodes >= 2:  # a gang: gangs.py
            return None
        for node in self.index.nodes_for(spec, self.now) if spec.gpus and not spec.share else self.index.nodes:
            cands = node.candidates(spec, self.now)
            if len(cands) < spec.gpus or not node.room(spec, self.now):
                continue
            chosen = choose_gpus(spec, node.view, cands, node.shared)
            free_after = len(node.free - set(chosen))
            fit = fit_score(spec, node.view, chosen, free_after, node.cpus - spec.cpus, ref_mem_gb=self.index.ref_mem,
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
        spec, note = elastic_count(self, spec)
        if self._place(spec, terms, f"{why}; {note}"):
            return True
        v = self.verdicts[-1]
        if v.job_id == spec.id:  # why it waits with this many
            self.verdicts[-1] = replace(v, reason=f"{note}; {v.reason}")
        return False

    def _place(self, spec: JobSpec, terms: dict[str, float], why: str) -> bool:
        team, best = self.teams.check(spec, self.index.free_total), None
        if team is not None and team[0] is Code.HELD_FOR_TEAM and spec.nodes < 2:
            best = self.best_node(spec)  # held for teams below their guarantee: unless it takes none of theirs
            if best is not None and not self.teams.takes_owed(spec, best[1].view, best[2]):
                team = None
            else:
                best = None
        if team is None and best is None and self.quick_block(spec, terms):
            return False
        if best is None and not team and spec.nodes < 2:
            best = self.best_node(spec)
        if best is None and team is None and self.is_gang(spec):
            return place_gang(self, spec, terms, why)
        if best is None:
            self.block(spec, terms, team)
            return False
        fit, node, chosen = best
        terms["fit"] = fit
        backfill = node.resv is not None and node.resv.job_id != spec.id and set(chosen) & set(node.resv.gpus)
        if spec.share:
            for g in chosen:
                node.shared[g] = node.shared.get(g, 0.0) + spec.gpu_mem_gb
            node.shared_now.update(chosen)
        self.index.take(node, chosen)
        node.cpus -= spec.cpus
        node.mem_gb -= spec.mem_gb
        self.index.note_placed(node, spec.id)
        node.add_release(Release(end_ms(spec, self.now, self.now, self.config), chosen, spec.cpus, spec.mem_gb))
        self.use(spec, len(chosen))
        if backfill:
            why += f"; backfilled: its estimate ends before job {node.resv.job_id}'s reservation"
        self.record(spec, node.view.name, chosen, terms, f"{why}; best fit on {node.view.name} ({fit:.0f}/100)",
                    spec.share)
        return True

    def block(self, spec: JobSpec, terms: dict[str, float], team: tuple[Code, str] | None) -> None:
        """`spec` cannot start now: its verdict, after a preemption or a reservation if it may take one."""
        code, reason = team if team else blocked_reason(self.index, spec, self.now)
        preempting = None
        if team is None and code in (Code.NO_FIT_NOW, Code.LOWER_SCORE, Code.RESERVED) and not spec.share \
                and self.may_preempt(spec):
            preempting = self.preempt_for(spec)
        if preempting is not None:
            victims = ", ".join(f"job {p.job_id} ({p.mode})" for p in preempting) or "jobs already stopping"
            resv = self.reservations[-1]
            reason += f"; preempting {victims} on {resv.node}; holds GPUs {list(resv.gpus)} until they are down"
        elif team is None and code in (Code.NO_FIT_NOW, Code.LOWER_SCORE) and spec.gpus and not spec.share \
                and (spec.gpus >= self.config.reserve_min_gpus or self.starving(spec)) and self.may_reserve(spec):
            self.resv_tries += 1
            resv = reserve(spec, self.index.fitting(spec), self.now)
            if resv is not None:
                self.hold_reservation(self.index.by_name[resv.node], resv, spec.rank, spec.cpus, spec.mem_gb)
                when = "when the jobs holding them end (one has no estimate left)" \
                    if resv.start_ms == unknown_end_ms(self.now, self.config) else \
                    within(max(0, resv.start_ms - self.now) / 1000)  # (not 'in ~24 h', the policy's stand-in)
                reason += f"; holds a reservation on {resv.node} GPUs {list(resv.gpus)} starting {when}"
                reason += self._preempts_later(spec, resv)
        if self.starving(spec):
            reason = f"starving ({self.starving(spec)}); " + reason
        self.judge(spec, code, reason, terms)

    def _preempts_later(self, spec: JobSpec, resv) -> str:
        """What a job that may preempt, but none yet, will preempt on its reserved GPUs once a job there is
        past its minimum run time or cooldown: its start is then, not the reservation's."""
        if not (self.config.preemption and self.may_preempt(spec)):
            return ""
        v = self.victims.protected(spec, resv.node, resv.gpus, self.now, self.attained(spec))
        if v is None:
            return ""
        until = free_from(v, self.config)
        why = "its minimum run time" if v.started_ms + self.config.min_run_s * 1000 >= until \
            else "its cooldown after a preemption"
        return f"; may preempt job {v.spec.id} there {within(max(0, until - self.now) / 1000)}, at the end of {why}"

    def preempt_for(self, spec: JobSpec) -> list[Preemption] | None:
        """Choose victims for blocked `spec` on the node where they cost least; reserve what they free.
        A search that failed for a request shape fails for every job of that shape that is no
        stronger (victims only become fewer within a cycle), so it is not repeated."""
        shape = (spec.gpus, spec.gpu_types, spec.gpu_mem_gb, spec.cpus, spec.mem_gb, spec.team)
        if not self.config.teams and self.strength(spec) <= self.failed_preempt.get(shape, float("-inf")):
            return None
        got = self.victims.cheapest(spec, self.index.fitting(spec), self.now, self.strength(spec), self.attained(spec),
                                    lambda v: self.teams.reclaims(spec.team, v.spec.team))
        if got is None:
            self.failed_preempt[shape] = max(self.failed_preempt.get(shape, float("-inf")), self.strength(spec))
            return None
        node, victims = got
        self.preemptors += 1
        self.preemptions.extend(victims)
        self.teams.on_the_way(spec)
        released = self.victims.stop(node.view.name, victims)
        coming = [g for g in released if self.fit.gpu_usable(spec, node.view, g) and g not in node.shared_now]
        gpus = self.fit.usable(spec, node.view, sorted(node.free)) + [g for g in coming if g not in node.free]
        resv = Reservation(spec.id, node.view.name, tuple(sorted(gpus[: spec.gpus])), self.now)
        # on the node even where it passed a lower class's reservation: a short job that could backfill
        # that one must not take the GPUs this preemption frees
        self.hold_reservation(node, resv, spec.rank, spec.cpus, spec.mem_gb)
        return victims

    def starving_resv_left(self, spec: JobSpec) -> bool:
        """A starving job may take one of the starvation reservations (oldest first) while any are left."""
        if not self.starving(spec) or self.starving_reserved >= self.config.starvation_reservations:
            return False
        self.starving_reserved += 1
        return True

    def starving(self, spec: JobSpec) -> str:
        """Why `spec` is starving (waited past its class's bound), or "" if it is not."""
        return starving_why(spec, self.now, self.config)
