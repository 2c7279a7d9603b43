"""Victim choice: the cheapest set of running jobs whose GPUs let a blocked job start.

Pure. A running job V may be preempted for a blocked job P when

- V ranks below P by `config.preempt_by`: a lower class ("class"), more
  estimated time left ("remaining", as SRTF), a later least-attained-service tier
  ("attained", as Tiresias), or a lower standing in a multi-level feedback queue
  whose class sets where a job starts ("class+attained": rank * class_step - LAS
  tier; with the step at 100, a lower class or the same class and a later tier);
  or P's team is below its guarantee and
  V's team is above its own (reclaim of borrowed GPUs, same class allowed);
- V has run at least `min_run_s` and was not preempted within `preempt_cooldown_s`;
- V is of a lower class than P, or it had not waited past its class's starvation
  bound when it started: a job that starved its way to the GPUs keeps them
  against its own class (as Tiresias promotes starving jobs), else a large job
  under least-attained-service would start and be preempted again forever;
- V does not share its GPUs (preempting one sharer frees no whole GPU);
- V is checkpointable (graceful: checkpoint signal, grace period, SIGKILL), or
  may be killed outright (forced): it opted in with --preemptible, or P is at
  least `forced_min_gap` classes above it;
- V is elastic (min_gpus below what it holds) and checkpointable: it may instead
  be shrunk, giving up only the GPUs needed. Never a gang (one RunningJob per node, of
  the same spec): preempting one of its nodes stops the whole gang. (Its cost counts the
  work lost on that node alone: counting every node's moved the Philly week's figures,
  avg JCT 40,229 s -> 40,724 s.)

Cost, compared in order: the victims' highest class (lower first), how many are
killed without a checkpoint, GPU-seconds of work lost (since each victim's last
checkpoint, else its start), GPUs taken beyond the need. Jobs already stopping
count as free GPUs: a blocked job never preempts twice for the same room.

A cycle looks for the cheapest node with a VictimSearch: choose_victims on each node where a
cheap bound says it could make room and beat the best found so far.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace
from itertools import accumulate

from ..core.plan import Preemption, RunningJob
from ..core.model import JobSpec
from .config import PolicyConfig
from .fit import GpuMemo
from .score import las_tier


def _tier(attained_gpu_s: float, config: PolicyConfig) -> int:
    return las_tier(attained_gpu_s, config.las_thresholds_gpu_s)


def standing(v: RunningJob, now_ms: int, config: PolicyConfig) -> float:
    """How strongly a running job holds its GPUs under preempt_by; lower is preempted first."""
    if config.preempt_by == "class+attained":
        return v.spec.rank * config.class_step - _tier(v.attained_at(now_ms), config)
    if config.preempt_by == "remaining":
        left = v.remaining_s(now_ms)
        return -(left if left is not None else float("inf"))
    if config.preempt_by == "attained":
        return -_tier(v.attained_at(now_ms), config)
    return v.spec.rank


def free_from(v: RunningJob, config: PolicyConfig) -> int:
    """When `v`'s minimum run time and its cooldown after a preemption are both over (ms)."""
    until = v.started_ms + int(config.min_run_s * 1000)
    if v.preempted_ms:
        until = max(until, v.preempted_ms + int(config.preempt_cooldown_s * 1000))
    return until


def preemptible_below(v: RunningJob, now_ms: int, config: PolicyConfig, standing_: float | None = None) -> float | None:
    """The strength a blocked job needs to preempt `v` this cycle, as far as it depends on `v` alone:
    None if nothing may (minimum run, cooldown); -inf if it is already stopping. A cheap bound for
    skipping nodes (VictimSearch.weaker_gpus): it never says no where victim_mode would say yes.
    `standing_`: standing(v, now_ms, config), where the caller has it."""
    if v.stopping:
        return float("-inf")
    if (now_ms - v.started_ms) / 1000.0 < config.min_run_s:
        return None
    if v.preempted_ms and (now_ms - v.preempted_ms) / 1000.0 < config.preempt_cooldown_s:
        return None
    s = standing(v, now_ms, config) if standing_ is None else standing_
    if config.preempt_by == "class+attained":  # strengths are rank * step - tier, tier in 0..len(tiers)
        step, top = config.class_step, len(config.las_thresholds_gpu_s) + 0.5
        if not v.spec.checkpointable and not v.spec.preemptible:  # forced only, by a class gap
            s = max(s, (v.spec.rank + config.forced_min_gap) * step - top)
        elif started_starving(v, config):  # only a higher class
            s = max(s, (v.spec.rank + 1) * step - top)
    return s


def outranks(p: JobSpec, p_attained_gpu_s: float, v: RunningJob, now_ms: int, config: PolicyConfig) -> float:
    """How far pending `p` outranks running `v` under preempt_by (> 0: it does)."""
    if config.preempt_by == "class+attained":  # a higher standing: rank * class_step - LAS tier
        return (p.rank * config.class_step - _tier(p_attained_gpu_s, config)) - standing(v, now_ms, config)
    if config.preempt_by == "remaining":
        left = v.remaining_s(now_ms)
        mine = p.est_s if p.est_s is not None else float("inf")
        return 1 if (left is None and mine != float("inf")) or (left is not None and mine < left) else 0
    if config.preempt_by == "attained":
        return _tier(v.attained_at(now_ms), config) - _tier(p_attained_gpu_s, config)
    return p.rank - v.spec.rank


@dataclass(frozen=True)
class _Option:
    job: RunningJob
    mode: str
    release: tuple[int, ...]  # GPUs usable by the preemptor that this option frees
    lost_gpu_s: float
    standing: float

    def cost(self) -> tuple:
        return (self.standing, self.mode == "forced", self.lost_gpu_s, len(self.release), self.job.spec.id)


def past_starvation(spec: JobSpec, now_ms: int, config: PolicyConfig) -> bool:
    bound = config.starvation_s.get(spec.priority)
    return bound is not None and (now_ms - spec.submit_ms) / 1000.0 > bound


def started_starving(v: RunningJob, config: PolicyConfig) -> bool:
    """Did running `v` start only after waiting past its class's starvation bound? (Its run time does
    not count: a job that merely ran long is no more protected than a fresh one.)"""
    return past_starvation(v.spec, v.started_ms, config)


def lost_gpu_s(r: RunningJob, now_ms: int) -> float:
    """GPU-seconds since the job's last checkpoint (since its start if it never reported one,
    or if it cannot resume from one)."""
    since = max(r.started_ms, r.checkpoint_ms) if r.spec.checkpointable else r.started_ms
    return max(0.0, (now_ms - since) / 1000.0) * len(r.gpus)


def victim_mode(p: JobSpec, v: RunningJob, now_ms: int, config: PolicyConfig, reclaim: bool,
                p_attained_gpu_s: float = 0.0) -> str | None:
    """'graceful', 'forced' or None: may `v` be preempted for `p`, and how."""
    gap = outranks(p, p_attained_gpu_s, v, now_ms, config)
    if v.stopping or v.spec.share or not (gap > 0 or (reclaim and p.rank >= v.spec.rank)):
        return None  # a sharing job frees no whole GPU: its neighbours stay
    if (now_ms - v.started_ms) / 1000.0 < config.min_run_s:
        return None
    if p.rank <= v.spec.rank and started_starving(v, config):
        return None
    if v.preempted_ms and (now_ms - v.preempted_ms) / 1000.0 < config.preempt_cooldown_s:
        return None
    if v.spec.checkpointable:
        return "graceful"
    if v.spec.preemptible or (config.preempt_by.startswith("class") and p.rank - v.spec.rank >= config.forced_min_gap):
        return "forced"
    return None


def _enough(p: JobSpec, have: set, cpus: int, mem: float) -> bool:
    return len(have) >= p.gpus and cpus >= p.cpus and mem + 1e-9 >= p.mem_gb


def choose_victims(p: JobSpec, node, running: list[RunningJob], free_usable: list[int], free_cpus: int,
                   free_mem_gb: float, now_ms: int, config: PolicyConfig, reclaimable,
                   p_attained_gpu_s: float = 0.0, *, fit: GpuMemo, gangs=frozenset()) -> tuple[tuple, list] | None:
    """The cheapest victims on one node, as (cost, [Preemption]); None if no set lets `p` start.

    `free_usable` are the node's free GPUs `p` may use; `reclaimable(v)` says whether
    v's team is borrowing from a team `p` belongs to; `fit` is the cycle's GpuMemo; `gangs`: the
    ids of jobs running on several nodes (gang_ids), never shrunk.
    """
    stopping = [r for r in running if r.stopping and not r.spec.share]
    have = set(free_usable) | {g for r in stopping for g in r.gpus if fit.gpu_usable(p, node, g)}
    cpus = free_cpus + sum(r.spec.cpus for r in stopping)
    mem = free_mem_gb + sum(r.spec.mem_gb for r in stopping)
    if _enough(p, have, cpus, mem):
        return (), []  # the room is already coming back: nothing more to stop

    options = _options(p, node, running, cpus, now_ms, config, reclaimable, p_attained_gpu_s, fit, gangs)
    got = _pick(p, options, have, cpus, mem)
    if got is None:
        return None
    chosen, have, cpus, mem = got
    chosen, have = _drop_unneeded(p, chosen, have, cpus, mem)
    preemptions = [_preemption(p, o, now_ms, config, p_attained_gpu_s) for o in chosen]
    cost = (max(o.standing for o in chosen), sum(o.mode == "forced" for o in chosen),
            sum(o.lost_gpu_s for o in chosen), max(0, len(have) - p.gpus))
    return cost, preemptions


def _options(p: JobSpec, node, running: list[RunningJob], cpus: int, now_ms: int, config: PolicyConfig,
             reclaimable, p_attained_gpu_s: float, fit: GpuMemo, gangs) -> list[_Option]:
    """Every way of preempting one running job for `p` (a shrink where one may do: never a gang's),
    cheapest first."""
    options = []
    for r in running:
        mode = victim_mode(p, r, now_ms, config, reclaimable(r), p_attained_gpu_s)
        if mode is None:
            continue
        usable_gpus = tuple(g for g in r.gpus if fit.gpu_usable(p, node, g))
        holds = standing(r, now_ms, config)
        lost = lost_gpu_s(r, now_ms)
        if r.spec.min_gpus is not None and r.spec.checkpointable and len(r.gpus) > r.spec.min_gpus \
                and usable_gpus and not p.cpus > cpus and r.spec.id not in gangs:
            spare = min(len(r.gpus) - r.spec.min_gpus, len(usable_gpus))
            options.append(_Option(r, "shrink", usable_gpus[-spare:], lost, holds))
        options.append(_Option(r, mode, usable_gpus, lost, holds))
    options.sort(key=_Option.cost)
    return options


def _pick(p: JobSpec, options: list[_Option], have: set, cpus: int, mem: float):
    """Take options cheapest first while each adds GPUs or room `p` still lacks; returns (chosen,
    have, cpus, mem) once `p` would fit, else None."""
    chosen: list[_Option] = []
    for o in options:
        if _enough(p, have, cpus, mem):
            break
        earlier = next((c for c in chosen if c.job.spec.id == o.job.spec.id), None)
        if earlier is not None:
            if earlier.mode != "shrink" or o.mode == "shrink":
                continue
            # shrinking it was not enough: stop it whole instead
            chosen.remove(earlier)
            have -= set(earlier.release)
        adds_gpus = len(have) < p.gpus and bool(set(o.release) - have)
        adds_room = o.mode != "shrink" and (cpus < p.cpus or mem + 1e-9 < p.mem_gb)
        if not (adds_gpus or adds_room):
            continue
        release = o.release
        if o.mode == "shrink":  # give up only what is still needed
            release = tuple(sorted(set(o.release) - have))[: p.gpus - len(have)]
            o = _Option(o.job, "shrink", release, o.lost_gpu_s, o.standing)
        chosen.append(o)
        have |= set(release)
        if o.mode != "shrink":
            cpus += o.job.spec.cpus
            mem += o.job.spec.mem_gb
    if not _enough(p, have, cpus, mem):
        return None
    return chosen, have, cpus, mem


def _drop_unneeded(p: JobSpec, chosen: list[_Option], have: set, cpus: int, mem: float):
    """Drop victims that turned out unnecessary, most expensive first; returns (chosen, have)."""
    for o in sorted(chosen, key=_Option.cost, reverse=True):
        rest_have = have - set(o.release)
        rest_cpus = cpus - (o.job.spec.cpus if o.mode != "shrink" else 0)
        rest_mem = mem - (o.job.spec.mem_gb if o.mode != "shrink" else 0)
        if _enough(p, rest_have, rest_cpus, rest_mem):
            chosen.remove(o)
            have, cpus, mem = rest_have, rest_cpus, rest_mem
    return chosen, have


def _preemption(p: JobSpec, o: _Option, now_ms: int, config: PolicyConfig, p_attained_gpu_s: float) -> Preemption:
    j = o.job
    keep = tuple(g for g in j.gpus if g not in o.release) if o.mode == "shrink" else ()
    gave = o.release if o.mode == "shrink" else j.gpus
    what = {"graceful": "checkpoint and requeue", "forced": "killed and requeued",
            "shrink": f"shrink from {len(j.gpus)} to {len(keep)} GPUs"}[o.mode]
    if p.rank > j.spec.rank:
        why = f"{p.priority} job {p.id} outranks {j.spec.priority}"
    elif outranks(p, p_attained_gpu_s, j, now_ms, config) <= 0:
        why = "reclaim for team below its guarantee"
    elif config.preempt_by.endswith("attained"):
        why = f"job {p.id} has received less GPU time (least attained service)"
    else:
        why = f"job {p.id} outranks it by {config.preempt_by}"
    return Preemption(j.spec.id, j.node, o.mode, tuple(gave), p.id, f"{why}: {what}", keep, round(o.lost_gpu_s, 1))


def gang_ids(running_on: dict[str, list[RunningJob]]) -> frozenset[str]:
    """The jobs running on several nodes (gangs: one RunningJob per node, of the same spec), and those
    asked with --nodes."""
    first: dict[str, str] = {}
    gangs = set()
    for node, jobs in running_on.items():
        for r in jobs:
            if r.spec.nodes >= 2 or first.setdefault(r.spec.id, node) != node:
                gangs.add(r.spec.id)
    return frozenset(gangs)


class VictimSearch:
    """One cycle's search for where a blocked job's preemption costs least (choose_victims per node).

    Cheap bounds per node skip most of them: weaker_gpus (what every job the preemptor outranks
    there would free) and victim_floor (the least the highest standing among its victims could be,
    so the search stops once no node left can beat the best). Both are kept per node until a
    preemption there changes its jobs (stop)."""

    def __init__(self, running_on: dict[str, list[RunningJob]], config: PolicyConfig):
        self.running_on, self.config = running_on, config
        self.gangs = gang_ids(running_on)
        self._tables: dict[str, tuple[list, list, list]] = {}  # node -> _table

    def _table(self, node: str, now_ms: int) -> tuple[list, list, list]:
        """What the bounds need of `node`'s (unshared) jobs, in one pass, kept until stop(): the sorted
        strengths from which each may be preempted with the GPUs they add up to (weaker_gpus), and
        the sorted (standing, GPUs), those stopping first (victim_floor)."""
        got = self._tables.get(node)
        if got is None:
            below, floor, config = [], [], self.config
            for r in self.running_on[node]:
                if r.spec.share:
                    continue
                n = len(r.gpus)
                s = float("-inf") if r.stopping else standing(r, now_ms, config)
                floor.append((s, n))
                if (b := preemptible_below(r, now_ms, config, s)) is not None:  # (-inf if stopping)
                    below.append((b, n))
            below.sort()
            floor.sort()
            got = self._tables[node] = ([b for b, _ in below], list(accumulate(n for _, n in below)), floor)
        return got

    def weaker_gpus(self, node: str, strength: float, now_ms: int) -> int:
        """An upper bound on the GPUs preemption could free on `node` for a job of `strength`: those of
        the running jobs it outranks (outranking is standing < strength under every preempt_by), and of
        those already stopping (their GPUs are coming back)."""
        below, cum, _ = self._table(node, now_ms)
        i = bisect.bisect_left(below, strength)
        return cum[i - 1] if i else 0

    def victim_floor(self, node, spec: JobSpec, now_ms: int) -> float:
        """A lower bound of the highest standing among the victims any preemption for `spec` on `node`
        needs (choose_victims' cost[0]): the standing at which the node's free GPUs, those of jobs
        already stopping, and those of the weakest running jobs first add up to what `spec` asks
        (-inf if no victim is needed; inf if no set of them would do)."""
        have = len(node.free)
        if have >= spec.gpus:
            return float("-inf")
        for level, n in self._table(node.view.name, now_ms)[2]:  # those stopping first
            have += n
            if have >= spec.gpus:
                return level
        return float("inf")

    def cheapest(self, spec: JobSpec, nodes, now_ms: int, strength: float, attained_gpu_s: float,
                 reclaimable):
        """(node, [Preemption]) where victims for blocked `spec` cost least (ties: node name), or None.
        `nodes`: the cycle's NodeStates `spec` could ever run on (NodeIndex.fitting); a node reserved
        for another job is skipped unless `spec` passes its reservation."""
        tried = []
        for node in nodes:
            if node.resv is not None and node.resv.job_id != spec.id and not node.passes(spec):
                continue
            if not self.config.teams and len(node.free) + self.weaker_gpus(node.view.name, strength, now_ms) \
                    < spec.gpus:
                continue  # even every job it outranks there would not make room
            tried.append((self.victim_floor(node, spec, now_ms), node.idx, node))
        tried.sort(key=lambda t: t[:2])
        best = None
        for floor, _, node in tried:
            if best is not None and floor > (best[0][0][0] if best[0][0] else float("-inf")):
                break  # no node left can beat the best: cost[0] is the victims' highest standing
            free_usable = node.fit.usable(spec, node.view, sorted(node.free))
            got = choose_victims(spec, node.view, self.running_on[node.view.name], free_usable, node.cpus,
                                 node.mem_gb, now_ms, self.config, reclaimable, attained_gpu_s, fit=node.fit,
                                 gangs=self.gangs)
            if got is not None and (best is None or (got[0], node.view.name) < best[0]):
                best = ((got[0], node.view.name), node, got[1])
        return None if best is None else best[1:]

    def protected(self, spec: JobSpec, node: str, gpus, now_ms: int, attained_gpu_s: float) -> RunningJob | None:
        """Of the jobs holding `gpus` on `node`, the first whose minimum run time or cooldown alone keeps
        it from being preempted for `spec` (the one free soonest), or None: what a blocked job that
        reserved those GPUs may preempt later, said in its verdict."""
        config, first = self.config, None
        for r in self.running_on.get(node, ()):
            if r.stopping or r.spec.share or not set(r.gpus) & set(gpus):
                continue
            until = free_from(r, config)
            if until > now_ms and victim_mode(spec, r, until, config, False, attained_gpu_s) is not None \
                    and (first is None or until < free_from(first, config)):
                first = r
        return first

    def stop(self, node: str, victims: list[Preemption]) -> list[int]:
        """Mark `victims` on `node` stopping; returns the GPUs coming back there (those of jobs already
        stopping, then the victims'; a shrink gives up only some)."""
        self._tables.pop(node, None)
        by_id = {p.job_id for p in victims}
        on_node = self.running_on[node]
        already = [g for r in on_node if r.stopping and not r.spec.share for g in r.gpus]
        for i, r in enumerate(on_node):
            if r.spec.id in by_id:
                on_node[i] = replace(r, stopping=True)
        return already + [g for p in victims for g in p.gpus]
