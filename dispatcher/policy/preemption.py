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
- V does not share its GPUs, or every job sharing a GPU with it may be preempted too: the sharers
  of one GPU are one option, all or none (preempting one sharer frees no whole GPU);
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

from dataclasses import dataclass, replace

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
    also: tuple[RunningJob, ...] = ()  # the other sharers of its GPU, stopped with it
    modes: tuple[str, ...] = ()  # with `also`: each sharer's own mode, `job`'s first (`mode`: forced if one is)

    def cost(self) -> tuple:
        return (self.standing, self.mode == "forced", self.lost_gpu_s, len(self.release), self.job.spec.id)

    def each(self) -> list["_Option"]:
        """One option a job: a sharer's group as each of its sharers, in its own mode."""
        if not self.also:
            return [self]
        return [replace(self, job=j, mode=m, also=(), modes=()) for j, m in zip((self.job, *self.also), self.modes)]

    def jobs(self) -> tuple[RunningJob, ...]:
        return (self.job, *self.also)

    def room(self) -> tuple[int, float]:
        """The CPUs and memory it gives back (a shrink: none)."""
        if self.mode == "shrink":
            return 0, 0.0
        return sum(j.spec.cpus for j in self.jobs()), sum(j.spec.mem_gb for j in self.jobs())


def shared_gpus(running: list[RunningJob]) -> dict[int, list[RunningJob]]:
    """GPU -> the --share jobs on it (an exclusive job never shares a GPU)."""
    out: dict[int, list[RunningJob]] = {}
    for r in running:
        if r.spec.share:
            for g in r.gpus:
                out.setdefault(g, []).append(r)
    return out


def coming_back(running: list[RunningJob], shared: dict[int, list[RunningJob]] | None = None) -> set[int]:
    """The GPUs of `running` (one node's) already on their way back: those of jobs stopping, and a shared
    GPU once all its sharers are (`shared`: shared_gpus(running), where the caller has it)."""
    shared = shared_gpus(running) if shared is None else shared
    return {g for r in running if r.stopping and not r.spec.share for g in r.gpus} | \
        {g for g, group in shared.items() if all(r.stopping for r in group)}


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
                p_attained_gpu_s: float = 0.0, *, shared: bool = False) -> str | None:
    """'graceful', 'forced' or None: may `v` be preempted for `p`, and how. A sharer only with `shared`
    (as one of all the sharers of its GPU: one alone frees no whole GPU)."""
    gap = outranks(p, p_attained_gpu_s, v, now_ms, config)
    if v.stopping or (v.spec.share and not shared) or not (gap > 0 or (reclaim and p.rank >= v.spec.rank)):
        return None
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
                   p_attained_gpu_s: float = 0.0, *, fit: GpuMemo, gangs=frozenset(),
                   pinned=frozenset()) -> tuple[tuple, list] | None:
    """The cheapest victims on one node, as (cost, [Preemption]); None if no set lets `p` start.

    `free_usable` are the node's free GPUs `p` may use; `reclaimable(v)` says whether
    v's team is borrowing from a team `p` belongs to; `fit` is the cycle's GpuMemo; `gangs`: the
    ids of jobs running on several nodes (gang_ids), never shrunk; `pinned`: GPUs a --share job was
    placed on this cycle (their sharers free nothing).
    """
    stopping = [r for r in running if r.stopping]
    shared = shared_gpus(running)
    have = set(free_usable) | {g for g in coming_back(running, shared) if fit.gpu_usable(p, node, g)}
    cpus = free_cpus + sum(r.spec.cpus for r in stopping)
    mem = free_mem_gb + sum(r.spec.mem_gb for r in stopping)
    if _enough(p, have, cpus, mem):
        return (), []  # the room is already coming back: nothing more to stop

    options = _options(p, node, running, shared, cpus, now_ms, config, reclaimable, p_attained_gpu_s, fit, gangs,
                       pinned)
    got = _pick(p, options, have, cpus, mem)
    if got is None:
        return None
    chosen, have, cpus, mem = got
    chosen, have = _drop_unneeded(p, chosen, have, cpus, mem)
    preemptions = list({x.job_id: x for o in chosen for one in o.each()
                        for x in [_preemption(p, one, now_ms, config, p_attained_gpu_s)]}.values())
    cost = (max(o.standing for o in chosen), sum(o.mode == "forced" for o in chosen),
            sum(o.lost_gpu_s for o in chosen), max(0, len(have) - p.gpus))
    return cost, preemptions


def _options(p: JobSpec, node, running: list[RunningJob], shared: dict[int, list[RunningJob]], cpus: int,
             now_ms: int, config: PolicyConfig, reclaimable, p_attained_gpu_s: float, fit: GpuMemo, gangs,
             pinned=frozenset()) -> list[_Option]:
    """Every way of preempting one running job for `p` (a shrink where one may do: never a gang's), and
    all the sharers of a GPU (`shared`: shared_gpus(running)), cheapest first."""
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
    for g, group in shared.items():  # the sharers of a GPU: all of them, or none
        group = [r for r in group if not r.stopping]
        modes = [victim_mode(p, r, now_ms, config, reclaimable(r), p_attained_gpu_s, shared=True) for r in group]
        if group and None not in modes and g not in pinned and fit.gpu_usable(p, node, g):
            options.append(_Option(group[0], "forced" if "forced" in modes else "graceful", (g,),
                                   sum(lost_gpu_s(r, now_ms) for r in group),
                                   max(standing(r, now_ms, config) for r in group), tuple(group[1:]), tuple(modes)))
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
        back_cpus, back_mem = o.room()
        cpus, mem = cpus + back_cpus, mem + back_mem
    if not _enough(p, have, cpus, mem):
        return None
    return chosen, have, cpus, mem


def _drop_unneeded(p: JobSpec, chosen: list[_Option], have: set, cpus: int, mem: float):
    """Drop victims that turned out unnecessary, most expensive first; returns (chosen, have)."""
    for o in sorted(chosen, key=_Option.cost, reverse=True):
        rest_have = have - set(o.release)
        back_cpus, back_mem = o.room()
        rest_cpus, rest_mem = cpus - back_cpus, mem - back_mem
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
