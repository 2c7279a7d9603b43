"""Gangs: a job on several nodes at once, all of them or none (PolicyConfig.gang_across_nodes).

Two kinds, both of one GPU family with same_type (fit.gpu_family) and with the job's CPUs and memory
on each node:

- asked with --nodes N --gpus-per-node G (spec.nodes >= 2): exactly N distinct nodes, each with G
  free GPUs the job may use (type, memory, reservations as for one node). Best fit: the nodes that
  leave the fewest free GPUs behind, then name order. Placement.node/gpus is rank 0, Placement.extra
  ranks 1..N-1, in name order.
- an auto gang (spec.nodes 0, more GPUs than any node has, as the simulator's traces ask): whole
  free nodes, in name order, until it has its GPUs.

One that cannot start now waits: RESERVED where only reservations it may not backfill hold it
back, else NO_FIT_NOW (with how many nodes have room now) and, while the cycle has reservations
left, it holds the nodes where it could start first (reservations.py:
node_reservations, gang_reservations). Gangs start no preemptions. Pure.
"""

from __future__ import annotations

from collections import defaultdict

from ..core.model import JobSpec
from ..core.plan import Code
from ..core.units import within
from .fit import by_family, choose_gpus, describe_gang, describe_need
from .nodes import NodeState, Release, end_ms, node_family
from .reservations import gang_reservations, node_reservations
from .verdicts import reserved_for


def place_gang(c, spec: JobSpec, terms: dict[str, float], why: str) -> bool:
    """Start gang `spec` in Cycle `c`, or give it its verdict (and maybe reservations). True if placed."""
    if spec.nodes >= 2:
        return _place_nodes(c, spec, terms, why)
    return _place_whole(c, spec, terms, why)


def per_node(spec: JobSpec) -> JobSpec:
    """What a gang asked with --nodes asks of each of its nodes: its GPUs per node, CPUs, memory."""
    return spec.filled(gpus=spec.gpus_per_node)


def _place_nodes(c, spec: JobSpec, terms: dict[str, float], why: str) -> bool:
    piece, n, g = per_node(spec), spec.nodes, spec.gpus_per_node
    fits = defaultdict(list)  # GPU family -> (free GPUs it would leave, idx, node, its candidates)
    held = defaultdict(list)  # GPU family -> nodes that would do but for a reservation it may not backfill
    for node in c.index.nodes:
        if len(node.free) < g:
            continue
        if node.resv is not None and not node.backfills(piece, c.now) and node.fits_unreserved(piece):
            for family, gpus in by_family(spec, node.view, node.pool(piece)).items():
                held[family] += [node] if len(gpus) >= g else []
        if not node.room(piece, c.now):
            continue
        for family, cands in by_family(spec, node.view, node.candidates(piece, c.now)).items():
            if len(cands) >= g:
                fits[family].append((len(node.free) - g, node.idx, node, cands))
    best = None
    for rows in fits.values():
        if len(rows) >= n:
            rows = sorted(rows, key=lambda r: r[:2])[:n]
            key = (sum(r[0] for r in rows), [r[1] for r in rows])
            if best is None or key < best[0]:
                best = (key, rows)
    if best is None:
        ready = max((len(r) for r in fits.values()), default=0)
        by = next((held[f][0] for f in held if len(fits.get(f, ())) + len(held[f]) >= n), None)
        if by is not None:
            _judge(c, spec, f"needs {describe_gang(spec)}; {ready} {'has' if ready == 1 else 'have'} them now; "
                   f"{by.view.name} {reserved_for(by.resv, spec, c.now)}", terms, Code.RESERVED)
        else:
            _wait_nodes(c, spec, piece, terms, ready)
        return False
    rows = sorted(best[1], key=lambda r: r[1])  # ranks in name order
    picks = [(node, choose_gpus(piece, node.view, cands, node.shared)) for _, _, node, cands in rows]
    backfilled = [node.resv.job_id for node, gpus in picks
                  if node.resv is not None and node.resv.job_id != spec.id and set(gpus) & set(node.resv.gpus)]
    left = best[0][0]
    terms["fit"] = 100.0 * (1 - left / max(1, sum(len(node.view.gpus) for node, _ in picks)))
    text = f"{why}; a gang on {n} nodes ({_names(node for node, _ in picks)}), {g} GPUs each, best fit ({left} GPUs " \
        "left free on them)"
    if backfilled:
        text += f"; backfilled: its estimate ends before job {backfilled[0]}'s reservation"
    _start(c, spec, picks, terms, text)
    return True


def _names(nodes) -> str:
    """A gang's nodes in its reason, rank 0's first: 'n2+n3' (the first 4, then '+N more')."""
    names = [node.view.name for node in nodes]
    return "+".join(names[:4]) + (f"+{len(names) - 4} more" if len(names) > 4 else "")


def _wait_nodes(c, spec: JobSpec, piece: JobSpec, terms: dict[str, float], ready: int) -> None:
    """Gang `spec` (--nodes) waits: how many nodes have room now, and, with a reservation, which nodes
    it holds and when the others free what it needs."""
    reason = f"needs {describe_gang(spec)}; {ready} {'has' if ready == 1 else 'have'} them now"
    if c.may_reserve(spec):
        c.resv_tries += 1
        got = node_reservations(spec, piece, c.index.nodes, c.now)
        if got is not None and c.worth_holding(spec, got[0]):
            start, held = got
            for node, resv, _ in held:
                c.index.hold(node, resv, spec.rank, spec.cpus, spec.mem_gb)
                c.reservations.append(resv)
            c.index.refresh(*(node for node, _, _ in held))
            later = sorted((at, node.view.name) for node, _, at in held if at > c.now)
            frees = "".join(f"; {name} frees them {within((at - c.now) / 1000)}" for at, name in later[:3])
            names = ", ".join(node.view.name for node, _, _ in held)
            reason += f"{frees}; holds {names} for it, to start {within((start - c.now) / 1000)}"
    _judge(c, spec, reason, terms)


def _judge(c, spec: JobSpec, reason: str, terms: dict[str, float], code: Code = Code.NO_FIT_NOW) -> None:
    """A gang that cannot start now: NO_FIT_NOW (RESERVED: only reservations it may not backfill hold
    it back), saying so if it is starving (as Cycle.block), and that it preempts nothing where a one-node job
    of its class would (a critical gang on a cluster full of low work waited, its user told nothing)."""
    if c.config.preemption and c.min_running_rank < spec.rank:
        reason += "; a gang preempts no job: it waits for GPUs to come free"
    if c.starving(spec):
        reason = f"starving ({c.starving(spec)}); " + reason
    c.judge(spec, code, reason, terms)


def _place_whole(c, spec: JobSpec, terms: dict[str, float], why: str) -> bool:
    """An auto gang: whole free nodes in name order (of the family that fills it first)."""
    chosen: dict[str, list[NodeState]] = defaultdict(list)
    have: dict[str, int] = defaultdict(int)
    done = None
    for node in c.index.nodes:
        if len(node.free) == len(node.view.gpus) and (family := node_family(spec, node.view, c.fit)) is not None \
                and node.whole(spec) \
                and node.backfills(spec, c.now) and node.cpus >= max(1, spec.cpus) \
                and node.mem_gb + 1e-9 >= spec.mem_gb:
            chosen[family].append(node)
            have[family] += len(node.view.gpus)
            if have[family] >= spec.gpus:
                done = family
                break
    if done is None:
        reason = (f"needs {describe_need(spec)} on whole nodes; {max(have.values(), default=0)} GPUs are on "
                  f"whole free nodes")
        if c.may_reserve(spec):
            c.resv_tries += 1
            start = _reserve_whole(c, spec)
            if start is not None:
                reason += f"; holds whole nodes starting {within(max(0, start - c.now) / 1000)}"
        _judge(c, spec, reason, terms)
        return False
    terms["fit"] = 100.0
    nodes = chosen[done]
    _start(c, spec, [(node, tuple(sorted(node.free))) for node in nodes], terms,
           f"{why}; a gang on {len(nodes)} whole nodes ({_names(nodes)})")
    return True


def _start(c, spec: JobSpec, picks: list[tuple[NodeState, tuple[int, ...]]], terms: dict[str, float],
           why: str) -> None:
    """Gang `spec` starts on `picks` (node, GPUs), rank 0 first: each node gives it those GPUs and the
    job's CPUs and memory, and gets them back at its estimated end."""
    end = end_ms(spec, c.now, c.now, c.config)
    for node, gpus in picks:
        c.index.take(node, gpus)
        node.cpus -= spec.cpus
        node.mem_gb -= spec.mem_gb
        c.index.note_placed(node, spec.id)
        node.add_release(Release(end, gpus, spec.cpus, spec.mem_gb))
    c.use(spec, sum(len(gpus) for _, gpus in picks), len(picks))
    pieces = [(node.view.name, gpus) for node, gpus in picks]
    c.record(spec, pieces[0][0], pieces[0][1], terms, why, False, tuple(pieces[1:]))


def _reserve_whole(c, spec: JobSpec) -> int | None:
    """Hold the whole nodes of Cycle `c` that come free first; returns when the gang could start."""
    got = gang_reservations(spec, c.index.nodes, c.now)
    if got is None or not c.worth_holding(spec, got[0]):
        return None
    start, held = got
    for node, resv in held:
        c.index.hold(node, resv, spec.rank, 0, 0.0)
        c.reservations.append(resv)
    c.index.refresh(*(node for node, _ in held))
    return start
