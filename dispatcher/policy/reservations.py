"""Reservations: where and from when a blocked job holds GPUs (EASY backfill), worked out on the
cycle's NodeStates by estimates.

reserve() holds GPUs (and CPUs, memory) on the node where a blocked job could start first;
gang_reservations() holds the whole nodes that come free first for a job larger than any node (an
auto gang), node_reservations() the N nodes where N x G GPUs could first start for a gang asked with
--nodes N --gpus-per-node G (both of one GPU family with --same-type). All three only say what to hold: the cycle puts it on the nodes (Cycle.hold_reservation) and counts the
tries against `PolicyConfig.reservations`. Which later jobs may still use reserved GPUs is
NodeState.backfills. Pure.
"""

from __future__ import annotations

import heapq
from collections import defaultdict

from ..core.model import JobSpec
from ..core.plan import Reservation
from .fit import by_family
from .nodes import NodeState, node_family


def reserve(spec: JobSpec, nodes: list[NodeState], now_ms: int) -> Reservation | None:
    """Hold GPUs (and CPUs, memory) for a blocked job on the node where it could start first (the
    first such node in `nodes` on a tie). `nodes`: those it could ever run on (NodeIndex.fitting).

    Nodes are tried in the order of a lower bound of that start (now, with enough GPUs free; else
    the first end of a job there), and the search stops once no node left can do better.
    """
    order = []
    for i, node in enumerate(nodes):
        if node.resv is not None:
            continue
        if len(node.free) >= spec.gpus:
            order.append((now_ms, i))
        elif (end := node.first_end()) is not None:
            order.append((end, i))
    heapq.heapify(order)  # (only the first few are looked at)
    best: Reservation | None = None
    best_key = None
    while order:
        bound, i = heapq.heappop(order)
        if best_key is not None and (bound, i) > best_key:
            break
        node = nodes[i]
        got = earliest_start(spec, node, now_ms)
        if got is not None and (best_key is None or (got[0], i) < best_key):
            start, gpus = got
            best, best_key = Reservation(spec.id, node.view.name, tuple(sorted(gpus[: spec.gpus])), start), (start, i)
    return best


def earliest_start(spec: JobSpec, node: NodeState, now_ms: int, only=None) -> tuple[int, list[int]] | None:
    """When `spec` could first start on `node`, and the GPUs it may use there (of `only`, if given),
    soonest free first; None if never by the estimates. Each GPU is free at the latest end of the
    jobs holding it; CPUs and memory come back as jobs end. The start is the first moment all three
    suffice."""
    free_at = {g: now_ms for g in node.free}
    for r in node.releases:
        for g in r.gpus:
            if g not in node.free:
                free_at[g] = max(free_at.get(g, now_ms), r.end_ms)
    gpus = sorted(node.fit.usable(spec, node.view, free_at if only is None else [g for g in free_at if g in only]),
                  key=lambda g: (free_at[g], g))
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
    """For an auto gang (a job on several whole nodes): the whole nodes that come free first (by name
    on a tie; of one GPU family with same_type: the family that could start first), each with its
    Reservation from when the last of them is free; None if too few could."""
    ready = defaultdict(list)
    for node in nodes:
        family = node_family(spec, node.view, node.fit)
        if node.resv is None and node.whole(spec) and family is not None and node.view.cpus >= spec.cpus \
                and node.view.mem_gb + 1e-9 >= spec.mem_gb:
            ends = [r.end_ms for r in node.releases]
            ready[family].append((max(ends) if ends and len(node.free) < len(node.view.gpus) else now_ms,
                                  node.view.name, node))
    best = None
    for rows in ready.values():
        rows.sort(key=lambda x: (x[0], x[1]))
        have, picked = 0, []
        for at, _, node in rows:
            if have >= spec.gpus:
                break
            picked.append((at, node))
            have += len(node.view.gpus)
        key = (max(at for at, _ in picked), [n.view.name for _, n in picked]) if have >= spec.gpus else None
        if key is not None and (best is None or key < best[0]):
            best = (key, picked)
    if best is None:
        return None
    start = best[0][0]
    return start, [(node, Reservation(spec.id, node.view.name, tuple(g.index for g in node.view.gpus), start))
                   for _, node in best[1]]


def node_reservations(spec: JobSpec, piece: JobSpec, nodes: list[NodeState],
                      now_ms: int) -> tuple[int, list[tuple[NodeState, Reservation, int]]] | None:
    """For a gang of spec.nodes nodes, each to hold `piece` (its GPUs per node, CPUs, memory): the
    nodes where it could start soonest (by name on a tie; of one GPU family with same_type: the
    family whose nodes could start first), each with its Reservation of `piece.gpus` GPUs from when
    the last of them could, and when that node alone could; None if too few nodes ever could."""
    rows = defaultdict(list)
    for node in nodes:
        if node.resv is not None or not node.fit.fits_ever(piece, node.view):
            continue
        usable = node.fit.usable(piece, node.view, [g.index for g in node.view.gpus])
        for family, gpus in by_family(spec, node.view, usable).items():
            got = earliest_start(piece, node, now_ms, set(gpus)) if len(gpus) >= piece.gpus else None
            if got is not None:
                rows[family].append((got[0], node.idx, node, got[1]))
    best = None
    for found in rows.values():
        if len(found) >= spec.nodes:
            found = sorted(found, key=lambda r: r[:2])[: spec.nodes]
            key = (max(r[0] for r in found), [r[1] for r in found])
            if best is None or key < best[0]:
                best = (key, found)
    if best is None:
        return None
    start = best[0][0]
    held = sorted(best[1], key=lambda r: r[1])
    return start, [(node, Reservation(spec.id, node.view.name, tuple(sorted(gpus[: piece.gpus])), start), at)
                   for at, _, node, gpus in held]
