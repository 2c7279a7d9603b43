"""Reservations: where and from when a blocked job holds GPUs (EASY backfill), worked out on the
cycle's NodeStates by estimates.

reserve() holds GPUs (and CPUs, memory) on the node where a blocked job could start first;
gang_reservations() holds the whole nodes that come free first for a job larger than any node.
Both only say what to hold: the cycle puts it on the nodes (Cycle.hold_reservation) and counts the
tries against `PolicyConfig.reservations`. Which later jobs may still use reserved GPUs is
NodeState.backfills. Pure.
"""

from __future__ import annotations

from ..core.model import JobSpec
from ..core.plan import Reservation
from .nodes import NodeState


def reserve(spec: JobSpec, nodes: list[NodeState], now_ms: int) -> Reservation | None:
    """Hold GPUs (and CPUs, memory) for a blocked job on the node where it could start first (the
    first such node in `nodes` on a tie).

    Nodes are tried in the order of a lower bound of that start (now, with enough GPUs free; else
    the first end of a job there), and the search stops once no node left can do better.
    """
    order = []
    for i, node in enumerate(nodes):
        if node.resv is not None or not node.fit.fits_ever(spec, node.view):
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
        got = earliest_start(spec, node, now_ms)
        if got is not None and (best_key is None or (got[0], i) < best_key):
            start, gpus = got
            best, best_key = Reservation(spec.id, node.view.name, tuple(sorted(gpus[: spec.gpus])), start), (start, i)
    return best


def earliest_start(spec: JobSpec, node: NodeState, now_ms: int) -> tuple[int, list[int]] | None:
    """When `spec` could first start on `node`, and the GPUs it may use there, soonest free first;
    None if never by the estimates. Each GPU is free at the latest end of the jobs holding it; CPUs
    and memory come back as jobs end. The start is the first moment all three suffice."""
    free_at = {g: now_ms for g in node.free}
    for r in node.releases:
        for g in r.gpus:
            if g not in node.free:
                free_at[g] = max(free_at.get(g, now_ms), r.end_ms)
    gpus = sorted(node.fit.usable(spec, node.view, free_at), key=lambda g: (free_at[g], g))
    if len(gpus) < spec.gpus:
        return None
    cpus, mem = node.cpus, node.mem_gb
    for t in sorted({now_ms} | {r.end_ms for r in node.releases}):
        cpus_t = cpus + sum(r.cpus for r in node.releases if r.end_ms <= t)
        mem_t = mem + sum(r.mem_gb for r in node.releases if r.end_ms <= t)
        ready = [g for g in gpus if free_at[g] <= t]
        if len(ready) >= spec.gpus and cpus_t >= spec.cpus and mem_t + 1e-9 >= spec.mem_gb:
            return t, gpus
    return None


def gang_reservations(spec: JobSpec, nodes: list[NodeState],
                      now_ms: int) -> tuple[int, list[tuple[NodeState, Reservation]]] | None:
    """For a gang (a job on several whole nodes): the whole nodes that come free first (by name on a
    tie), each with its Reservation from when the last of them is free; None if too few could."""
    ready = []
    for node in nodes:
        if node.resv is None and node.whole(spec):
            ends = [r.end_ms for r in node.releases]
            ready.append((max(ends) if ends and len(node.free) < len(node.view.gpus) else now_ms,
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
    return start, [(node, Reservation(spec.id, node.view.name, tuple(g.index for g in node.view.gpus), start))
                   for _, node in picked]
