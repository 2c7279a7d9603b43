"""schedule(snapshot, now_ms, config) -> Plan: the one entry point of the policy.

One cycle starts every pending job that fits, best score first:

1. Jobs no live node could ever hold get NO_FIT_EVER and are set aside.
2. Each job's static score (priority, aging, remaining time) is computed once;
   jobs wait in one queue per user, best static score first.
3. Dominant Resource Fairness picks the next job: among the heads of the user
   queues, the best `static + w_fairness * fairness(user)`, where the fairness
   term falls as the user's dominant share rises with every placement.
4. The job goes to the node whose free GPUs fit it most tightly (type and
   memory are hard constraints, all GPUs of a job on one node).
5. The first `config.reservations` jobs that do not fit get a reservation on
   the node whose GPUs free up first (by estimates); a later job may use those
   GPUs only if its estimate says it ends before the reservation starts (EASY
   backfill). Everything not started gets a Verdict with numbers.

Pure: no Redis, clock, OS or randomness; ties break on submit time, then id,
then node name, so the same snapshot always gives the same plan.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import dataclass, field

from ..model import Code, JobSpec, NodeView, Placement, Plan, Reservation, Snapshot, Verdict
from .config import PolicyConfig
from .fit import choose_gpus, describe_need, fit_score, fits_ever, usable
from .score import dominant_share, fairness_term, priority_term, remaining_term, wait_term


@dataclass
class _Node:
    view: NodeView
    free: set[int]
    cpus: int
    mem_gb: float
    releases: list[tuple[int, tuple[int, ...]]] = field(default_factory=list)  # (end_ms, gpus)
    resv: Reservation | None = None
    resv_cpus: int = 0
    resv_mem_gb: float = 0.0


def static_terms(spec: JobSpec, now_ms: int, config: PolicyConfig) -> dict[str, float]:
    """The score terms that do not depend on the node or on other jobs."""
    return {
        "priority": priority_term(spec.rank),
        "wait": wait_term((now_ms - spec.submit_ms) / 1000.0, config.aging_horizon_s),
        "remaining": remaining_term(spec.est_s, config.remaining_ref_s),
    }


def _weighted(terms: dict[str, float], weights: dict[str, float]) -> float:
    return sum(weights.get(k, 0.0) * v for k, v in terms.items())


def _end_ms(spec: JobSpec, start_ms: int, now_ms: int, config: PolicyConfig) -> int:
    """When a job started at `start_ms` will likely end; past its estimate it is unknown."""
    if spec.est_s is not None:
        end = start_ms + int(spec.est_s * 1000)
        if end > now_ms:
            return end
    return now_ms + int(config.unknown_remaining_s * 1000)


def _ends_before(spec: JobSpec, now_ms: int, deadline_ms: int) -> bool:
    return spec.est_s is not None and now_ms + spec.est_s * 1000 <= deadline_ms


def _candidates(spec: JobSpec, node: _Node, now_ms: int) -> list[int]:
    """Free GPUs of `node` that `spec` may take now, honouring the node's reservation."""
    gpus = usable(spec, node.view, sorted(node.free))
    r = node.resv
    if r is not None and r.job_id != spec.id and not _ends_before(spec, now_ms, r.start_ms):
        gpus = [g for g in gpus if g not in r.gpus]
    return gpus


def _room(spec: JobSpec, node: _Node, now_ms: int) -> bool:
    """CPUs and memory; a reservation also holds the CPUs/memory its job needs."""
    cpus, mem = node.cpus, node.mem_gb
    r = node.resv
    if r is not None and r.job_id != spec.id and not _ends_before(spec, now_ms, r.start_ms):
        cpus -= min(node.resv_cpus, node.cpus)
        mem -= min(node.resv_mem_gb, node.mem_gb)
    return spec.cpus <= cpus and spec.mem_gb <= mem + 1e-9


def _reserve(spec: JobSpec, nodes: list[_Node], now_ms: int) -> Reservation | None:
    """Hold GPUs for a blocked job on the node where enough of them free up first."""
    best: Reservation | None = None
    for node in nodes:
        if node.resv is not None or not fits_ever(spec, node.view):
            continue
        have = usable(spec, node.view, sorted(node.free))
        start = now_ms
        for end_ms, gpus in sorted(node.releases):
            if len(have) >= spec.gpus:
                break
            have += usable(spec, node.view, gpus)
            start = end_ms
        if len(have) < spec.gpus:
            continue
        if best is None or start < best.start_ms:
            best = Reservation(spec.id, node.view.name, tuple(sorted(have[: spec.gpus])), start)
    return best


def _blocked_reason(spec: JobSpec, nodes: list[_Node], now_ms: int) -> tuple[Code, str]:
    need = describe_need(spec)
    best, best_free, blocker = None, -1, None
    for node in nodes:
        if not fits_ever(spec, node.view):
            continue
        free = len(usable(spec, node.view, sorted(node.free)))
        if free >= spec.gpus and node.cpus >= spec.cpus and node.mem_gb + 1e-9 >= spec.mem_gb:
            blocker = node  # would fit but for a reservation
        if free > best_free:
            best, best_free = node, free
    if blocker is not None and blocker.resv is not None:
        r = blocker.resv
        est = "no estimate" if spec.est_s is None else f"its estimate {spec.est_s:g}s"
        return Code.RESERVED, (f"needs {need}; {blocker.view.name} is reserved for job {r.job_id} "
                               f"from ~{max(0, r.start_ms - now_ms) / 1000:.0f}s from now, and {est} "
                               f"does not end before then")
    if best is None:
        return Code.NO_FIT_NOW, f"needs {need}; no node has room now"
    total = len(usable(spec, best.view, [g.index for g in best.view.gpus]))
    return Code.NO_FIT_NOW, (f"needs {need}; best node {best.view.name} has {best_free} of {total} "
                             f"matching GPUs free, {best.cpus} CPUs free")


def _never_reason(spec: JobSpec, views: list[NodeView]) -> str:
    need = describe_need(spec)
    if not views:
        return f"needs {need}; no live node is registered"
    best = max(views, key=lambda v: (len(usable(spec, v, [g.index for g in v.gpus])), v.cpus, v.name))
    k = len(usable(spec, best, [g.index for g in best.gpus]))
    return (f"needs {need}; no live node could ever hold it (largest: {best.name} with {k} "
            f"matching GPUs, {best.cpus} CPUs, {best.mem_gb:g} GB RAM)")


def schedule(snapshot: Snapshot, *, now_ms: int, config: PolicyConfig | None = None) -> Plan:
    config = config or PolicyConfig()
    w = config.weights
    views = sorted(snapshot.nodes, key=lambda v: v.name)
    nodes = [_Node(v, set(v.free_gpus), v.free_cpus, v.free_mem_gb) for v in views]
    by_name = {n.view.name: n for n in nodes}
    totals = (sum(len(v.gpus) for v in views), sum(v.cpus for v in views), sum(v.mem_gb for v in views))

    usage: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for r in snapshot.running:
        u = usage[r.spec.user]
        u[0] += len(r.gpus); u[1] += r.spec.cpus; u[2] += r.spec.mem_gb
        if r.node in by_name:
            by_name[r.node].releases.append((_end_ms(r.spec, r.started_ms, now_ms, config), r.gpus))

    verdicts: list[Verdict] = []
    queues: dict[str, list] = defaultdict(list)
    terms_of: dict[str, dict[str, float]] = {}
    for p in sorted(snapshot.pending, key=lambda p: (p.spec.submit_ms, p.spec.id)):
        spec = p.spec
        if not any(fits_ever(spec, v) for v in views):
            verdicts.append(Verdict(spec.id, Code.NO_FIT_EVER, _never_reason(spec, views)))
            continue
        terms = static_terms(spec, now_ms, config)
        terms_of[spec.id] = terms
        queues[spec.user].append((-_weighted(terms, w), spec.submit_ms, spec.id, spec))
    for q in queues.values():
        heapq.heapify(q)

    def fair(user: str) -> float:
        return fairness_term(dominant_share(tuple(usage[user]), totals))

    placements: list[Placement] = []
    reservations: list[Reservation] = []
    rank = 0
    while queues:
        user = max(queues, key=lambda u: (-queues[u][0][0] + w.get("fairness", 0.0) * fair(u),
                                          -queues[u][0][1], queues[u][0][2]))
        neg_static, _, job_id, spec = heapq.heappop(queues[user])
        if not queues[user]:
            del queues[user]
        rank += 1
        terms = dict(terms_of[job_id], fairness=fair(user))

        best = None
        for node in nodes:
            cands = _candidates(spec, node, now_ms)
            if len(cands) < spec.gpus or not _room(spec, node, now_ms):
                continue
            chosen = choose_gpus(spec, node.view, cands)
            fit = fit_score(spec, node.view, chosen, len(node.free) - len(chosen), node.cpus - spec.cpus)
            if best is None or fit > best[0]:
                best = (fit, node, chosen)
        if best is not None:
            fit, node, chosen = best
            terms["fit"] = fit
            node.free -= set(chosen)
            node.cpus -= spec.cpus
            node.mem_gb -= spec.mem_gb
            node.releases.append((_end_ms(spec, now_ms, now_ms, config), chosen))
            u = usage[user]
            u[0] += len(chosen); u[1] += spec.cpus; u[2] += spec.mem_gb
            placements.append(Placement(job_id, node.view.name, chosen, round(_weighted(terms, w), 3),
                                        {k: round(v, 3) for k, v in terms.items()}))
            continue

        score = round(_weighted(terms, w), 3)
        code, reason = _blocked_reason(spec, nodes, now_ms)
        if code is Code.NO_FIT_NOW and spec.gpus and len(reservations) < config.reservations:
            resv = _reserve(spec, nodes, now_ms)
            if resv is not None:
                node = by_name[resv.node]
                node.resv, node.resv_cpus, node.resv_mem_gb = resv, spec.cpus, spec.mem_gb
                reservations.append(resv)
                reason += (f"; holds a reservation on {resv.node} GPUs {list(resv.gpus)} from "
                           f"~{max(0, resv.start_ms - now_ms) / 1000:.0f}s from now")
        verdicts.append(Verdict(job_id, code, reason, score, rank))

    return Plan(tuple(placements), tuple(verdicts), tuple(reservations))
