"""Gangs: a job larger than any node, on several whole nodes at once (PolicyConfig.gang_across_nodes,
the simulator's multi-node trace jobs; node agents run single-node jobs only).

A gang takes whole free nodes, in name order, until it has its GPUs; else it waits (NO_FIT_NOW) and,
while the cycle has reservations left, holds the whole nodes that come free first
(reservations.gang_reservations). Pure.
"""

from __future__ import annotations

from ..core.model import JobSpec
from ..core.plan import Code
from .fit import describe_need
from .nodes import Release, end_ms
from .reservations import gang_reservations


def place_gang(c, spec: JobSpec, terms: dict[str, float], why: str) -> bool:
    """Start `spec` on whole free nodes of Cycle `c`, fewest first (by name), or give it its verdict
    (and maybe a reservation of whole nodes). True if placed."""
    chosen, have = [], 0
    for node in c.index.nodes:
        if have >= spec.gpus:
            break
        if len(node.free) == len(node.view.gpus) and node.whole(spec) and node.backfills(spec, c.now) \
                and node.cpus >= 1:
            chosen.append(node)
            have += len(node.view.gpus)
    if have < spec.gpus:
        reason = f"needs {describe_need(spec)} on whole nodes; {have} GPUs are on whole free nodes"
        if c.may_reserve(spec):
            c.resv_tries += 1
            start = reserve_gang(c, spec)
            if start is not None:
                reason += f"; holds whole nodes from ~{max(0, start - c.now) / 1000:.0f}s from now"
        c.judge(spec, Code.NO_FIT_NOW, reason, terms)
        return False
    pieces = []
    end = end_ms(spec, c.now, c.now, c.config)
    for node in chosen:
        gpus = tuple(sorted(node.free))
        pieces.append((node.view.name, gpus))
        c.index.free_total -= len(gpus)
        node.free = set()
        c.index.note_placed(node, spec.id)
        node.add_release(Release(end, gpus, 0, 0.0))
    c.index.refresh(*chosen)
    c.use(spec, have)
    terms["fit"] = 100.0
    c.record(spec, pieces[0][0], pieces[0][1], terms, f"{why}; a gang on {len(pieces)} whole nodes", False,
             tuple(pieces[1:]))
    return True


def reserve_gang(c, spec: JobSpec) -> int | None:
    """Hold the whole nodes of Cycle `c` that come free first; returns when the gang could start."""
    got = gang_reservations(spec, c.index.nodes, c.now)
    if got is None:
        return None
    start, held = got
    for node, resv in held:
        c.index.hold(node, resv, spec.rank, 0, 0.0)
        c.reservations.append(resv)
    c.index.refresh(*(node for node, _ in held))
    return start
