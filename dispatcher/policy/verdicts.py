"""Why a job waits: the codes and reasons of the verdicts the cycle gives, with numbers.

`dispatch why` and the tests read these strings: change their wording only on purpose. The cycle
calls them once it knows a job does not start; the reasons that follow from one rule alone are
written beside that rule (team quotas in teams.py, preemption in preemption.py, gangs in gangs.py).
Pure.
"""

from __future__ import annotations

from collections import defaultdict

from ..core.model import JobSpec
from ..core.plan import Code, NodeView, Reservation
from ..core.units import within
from .config import PolicyConfig
from .fit import GpuMemo, by_family, describe_gang, describe_need
from .node_index import NodeIndex
from .nodes import node_family, whole_node_usable
from .preemption import past_starvation


class NeverFit:
    """No live node could ever hold the job (NO_FIT_EVER): fits_ever over all nodes; with gangs, the
    whole nodes of one family together (an auto gang), or fewer than N nodes that could each hold a
    --nodes N gang's share; remembered per request shape (most jobs share a few shapes)."""

    def __init__(self, views: list[NodeView], gangs: bool, fit: GpuMemo, drained=()):
        self.views, self.gangs, self.fit, self.memo, self.drained = views, gangs, fit, {}, drained
        # fits_ever, whole_node_usable and node_family read a node's GPU kind, CPUs and memory only: the
        # nodes alike in those are one group, (the one of them last by name, how many they are)
        groups: dict = {}
        for v in views:
            key = (fit.facts(v).kind, v.cpus, v.mem_gb)
            last, n = groups.get(key, (v, 0))
            groups[key] = (max(last, v, key=lambda x: x.name), n + 1)
        self.groups = list(groups.values())

    def check(self, spec: JobSpec) -> bool:
        key = (spec.gpus, spec.gpu_types, spec.gpu_mem_gb, spec.cpus, spec.mem_gb, spec.nodes, spec.gpus_per_node,
               spec.same_type)
        got = self.memo.get(key)
        if got is None:
            if spec.nodes >= 2:
                got = not self.gangs or self.gang_nodes(spec) < spec.nodes
            else:
                got = not any(self.fit.fits_ever(spec, v) for v, _ in self.groups)
            if got and self.gangs and spec.gpus and not spec.share and spec.nodes == 0:
                got = self.whole_gpus(spec) < spec.gpus
            self.memo[key] = got
        return got

    def gang_nodes(self, spec: JobSpec) -> int:
        """How many nodes could ever hold one node's share of a --nodes gang (of one family with
        same_type: the most of any family)."""
        piece, count = spec.filled(gpus=spec.gpus_per_node), defaultdict(int)
        for v, n in self.groups:
            if self.fit.fits_ever(piece, v):
                usable = self.fit.usable(piece, v, [g.index for g in v.gpus])
                for family, gpus in by_family(spec, v, usable).items():
                    count[family] += n if len(gpus) >= piece.gpus else 0
        return max(count.values(), default=0)

    def whole_gpus(self, spec: JobSpec) -> int:
        """The most GPUs an auto gang of `spec` could ever have on whole nodes (of one family with
        same_type), each with its CPUs and memory."""
        count = defaultdict(int)
        for v, n in self.groups:
            family = node_family(spec, v, self.fit)
            if family is not None and whole_node_usable(spec, v, self.fit) and v.cpus >= spec.cpus \
                    and v.mem_gb + 1e-9 >= spec.mem_gb:
                count[family] += n * len(v.gpus)
        return max(count.values(), default=0)

    def verdict(self, spec: JobSpec) -> tuple[Code, str]:
        """The code and reason of a job check() set aside: NO_FIT_EVER, or NO_FIT_NOW where a drained
        node could hold it (it starts there once that node is resumed)."""
        note = drained_note(self.drained, spec, self.fit) if self.drained else ""
        if note and spec.nodes >= 2:
            k = self.gang_nodes(spec)
            return Code.NO_FIT_NOW, (f"{note}needs {describe_gang(spec)}; only {k} node{'s' if k != 1 else ''} "
                                     f"that take{'s' if k == 1 else ''} jobs could hold its share")
        if note:
            return Code.NO_FIT_NOW, f"{note}needs {describe_need(spec)}; no node that takes jobs could hold it"
        return Code.NO_FIT_EVER, self.reason(spec)

    def reason(self, spec: JobSpec) -> str:
        if spec.nodes >= 2:
            need = f"needs {describe_gang(spec)}"
            if not self.gangs:
                return f"{need}; this policy runs no gangs across nodes (gang_across_nodes is off)"
            k = self.gang_nodes(spec)
            return f"{need}; only {k} live node{'s' if k != 1 else ''} could ever hold that"
        need = describe_need(spec)
        if not self.views:
            return f"needs {need}; no live node is registered"
        best = max((v for v, _ in self.groups), key=lambda v: (self.fit.usable_count(spec, v), v.cpus, v.name))
        k = self.fit.usable_count(spec, best)
        whole = ""
        if spec.nodes == 1 and spec.gpus > k:  # (never an auto gang)
            whole = "; a session runs on one node" if spec.interactive else "; --nodes 1 asks for one node"
        elif self.gangs and spec.gpus > k and not spec.share:  # (larger than any node: an auto gang's)
            n = self.whole_gpus(spec)
            whole = f", nor whole nodes together: {n} GPUs on all of them" if n else \
                ", nor whole nodes together: no node has only GPUs it may use"
        return (f"needs {need}; no live node could ever hold it (largest: {best.name} with {k} "
                f"matching GPUs, {best.cpus} CPUs, {best.mem_gb:g} GB RAM){whole}")


def drained_note(drained: list[NodeView], spec: JobSpec, fit: GpuMemo) -> str:
    """'n1 is drained: disk swap; ' for the drained nodes that could hold `spec` (a gang: one node's
    share of it), the first three named; "" for none. It leads a verdict's reason, so that `dispatch
    queue`'s short column shows it."""
    piece = spec.filled(gpus=spec.gpus_per_node) if spec.nodes >= 2 else spec
    hit = [v for v in drained if fit.fits_ever(piece, v)]
    said = "".join(f"{v.name} is {_drain_state(v)}" + (f": {v.drained}" if v.drained else "") + "; " for v in hit[:3])
    return said + (f"{len(hit) - 3} more drained nodes could hold it; " if len(hit) > 3 else "")


def _drain_state(v: NodeView) -> str:
    """"draining" while jobs still hold some of a drained node, as `dispatch nodes` says; then "drained"."""
    held = len(v.free_gpus) < len(v.gpus) or v.free_cpus < v.cpus or v.free_mem_gb + 1e-9 < v.mem_gb
    return "draining" if held else "drained"


def blocked_reason(index: NodeIndex, spec: JobSpec, now_ms: int) -> tuple[Code, str]:
    """Why `spec` cannot start now: a reservation it may not backfill (RESERVED), jobs of this cycle
    that took the room it had (LOWER_SCORE), or the best node's free room (NO_FIT_NOW)."""
    need = describe_need(spec)
    best, best_free, reserved_by = None, -1, None
    for node in index.one_per_group():
        if not index.fit.fits_ever(spec, node.view):
            continue
        free = len(node.pool(spec))
        if node.resv is not None and not node.backfills(spec, now_ms):
            unreserved = node.candidates(spec, now_ms)
            if node.fits_unreserved(spec) and (len(unreserved) < spec.gpus or not node.room(spec, now_ms)):
                reserved_by = node
        if free > best_free or (free == best_free and node.idx < best.idx):
            best, best_free = node, free
    if reserved_by is not None:
        return Code.RESERVED, f"needs {need}; {reserved_by.view.name} {reserved_for(reserved_by.resv, spec, now_ms)}"
    took = took_its_room(index, spec)
    if took:
        return Code.LOWER_SCORE, lower_score_reason(spec, *took)
    if best is None:
        return Code.NO_FIT_NOW, f"needs {need}; no node has room now"
    total = index.fit.usable_count(spec, best.view)
    gpus = f"{best_free} of {total} matching GPUs free, " if spec.gpus else ""  # (a CPU-only job: its CPUs alone)
    mem = f", {best.mem_gb:g} GB memory free" if spec.mem_gb else ""
    return Code.NO_FIT_NOW, f"needs {need}; best node {best.view.name} has {gpus}{best.cpus} CPUs free{mem}"


def reserved_for(r: Reservation, spec: JobSpec, now_ms: int) -> str:
    """'is reserved for job 7 starting in ~14 min, and its estimate 900s does not end before then'."""
    ends = "it has no estimate, so it may not end before then" if spec.est_s is None else \
        f"its estimate {spec.est_s:g}s does not end before then"
    return f"is reserved for job {r.job_id} starting {within(max(0, r.start_ms - now_ms) / 1000)}, and {ends}"


def lower_score_reason(spec: JobSpec, node: str, jobs: list[str]) -> str:
    return (f"needs {describe_need(spec)}; it fitted on {node} at the start of this cycle, but "
            f"higher-ranked jobs took the room there (jobs {', '.join(jobs[-5:])})")


def took_its_room(index: NodeIndex, spec: JobSpec):
    """The first node where `spec` fitted before this cycle's placements, and who took it."""
    for node in (index.nodes[i] for i in index.placed_on):
        free, shared, cpus, mem = index.start[node.view.name]
        pool = sorted(set(free) | set(shared)) if spec.share else sorted(free)
        if spec.share:
            pool = [i for i in pool if node.view.gpu(i).mem_total_gb - shared.get(i, 0.0) >= spec.gpu_mem_gb]
        if len(index.fit.usable(spec, node.view, pool)) >= spec.gpus and spec.cpus <= cpus \
                and spec.mem_gb <= mem + 1e-9:
            return node.view.name, node.placed
    return None


def starving_why(spec: JobSpec, now_ms: int, config: PolicyConfig) -> str:
    """Why `spec` is starving (waited past its class's bound), or "" if it is not."""
    if not past_starvation(spec, now_ms, config):
        return ""
    waited = (now_ms - spec.submit_ms) / 1000.0
    return f"waited {waited:.0f}s, past the {spec.priority} bound of {config.starvation_s[spec.priority]:.0f}s"


def no_fit_now(spec: JobSpec, max_free: int) -> str:
    return f"needs {describe_need(spec)}; no node has more than {max_free} GPUs free"


def rest_reason(max_free: int, considered: int, max_cpus: int | None = None) -> str:
    """Why the jobs a cycle did not reach wait, unless their group's first one says otherwise. `max_cpus`:
    the most CPUs free on one node, named when none is (GPUs free but no CPU to run a job with)."""
    cpus = "" if max_cpus is None or max_cpus > 0 or not max_free else \
        ", but no CPU free on any: each job takes its --cpus, 1 by default"
    room = "no GPU free on any node" if not max_free else \
        f"at most {max_free} GPU{'s' if max_free > 1 else ''} free on one node"
    before = "1 job was" if considered == 1 else f"{considered} jobs were"
    return f"no node has room for it this cycle ({room}{cpus}); {before} considered before it"
