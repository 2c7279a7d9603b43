"""VictimSearch: where, among a cycle's nodes, a blocked job's preemption costs least (choose_victims
per node, preemption.py), with cheap bounds that skip most nodes. Pure."""

from __future__ import annotations

import bisect
from dataclasses import replace
from itertools import accumulate

from ..core.model import JobSpec
from ..core.plan import Preemption, RunningJob
from .config import PolicyConfig
from .preemption import (choose_victims, coming_back, free_from, preemptible_below, shared_gpus, standing,
                         victim_mode)


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
            for group in shared_gpus(self.running_on[node]).values():  # a shared GPU: once all its sharers go
                s = max(float("-inf") if r.stopping else standing(r, now_ms, config) for r in group)
                floor.append((s, 1))
                b = [preemptible_below(r, now_ms, config) for r in group]
                if None not in b:
                    below.append((max(b), 1))
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
                                 gangs=self.gangs, pinned=node.shared_now)
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
        already = coming_back(on_node)
        for i, r in enumerate(on_node):
            if r.spec.id in by_id:
                on_node[i] = replace(r, stopping=True)
        now = coming_back(on_node)  # (a shared GPU once its last sharer stops)
        return [*already, *(g for p in victims for g in p.gpus if p.keep_gpus or g in now)]
