"""The nodes of one cycle, indexed so that a job looks at few of them.

Most of a large cluster is plain nodes of a few kinds: alike GPUs, no reservation, no sharers.
For an exclusive job every such node of one GPU kind, size and free count fits equally well, so
NodeIndex keeps them in groups by that key and best_node looks at the first member of each group
with room; the other nodes are `special`, looked at one by one. It also counts how many nodes have
each number of free GPUs, in all and outside reservations (max_free, max_open: the cycle's quick
"fits nowhere" test), the nodes holding a reservation and the nodes this cycle placed on (both by
name order), and what each node had free when the cycle began (for LOWER_SCORE verdicts).

Every change to a node's free GPUs or reservation goes through refresh(node), which costs the
changed nodes, not the cluster. Pure: no Redis, clock or OS.
"""

from __future__ import annotations

import bisect
from collections import defaultdict

from ..core.model import JobSpec
from ..core.plan import NodeView, Reservation
from .fit import GpuMemo
from .nodes import UNLISTED, NodeState


class NodeIndex:
    def __init__(self, views: list[NodeView], running_on: dict, end_of, fit: GpuMemo):
        """`views` in name order; `running_on`: node name -> its RunningJobs; `end_of(r)`: when running
        job r likely ends."""
        self.views, self.fit = views, fit
        self.nodes = [NodeState(v, fit, set(v.free_gpus), dict(v.shared), v.free_cpus, v.free_mem_gb,
                                running_on[v.name], end_of, idx=i) for i, v in enumerate(views)]
        self.by_name = {n.view.name: n for n in self.nodes}
        self.start = {n.view.name: (set(n.free), dict(n.shared), n.cpus, n.mem_gb) for n in self.nodes}
        self.ref_mem = min((fit.facts(v).min_mem_gb for v in views if v.gpus), default=0.0)
        self.largest_node = max((len(v.gpus) for v in views), default=0)
        self.free_total = sum(len(n.free) for n in self.nodes)
        self.held: list[int] = []  # nodes with a reservation, by idx (a reservation stays on its node)
        self.placed_on: list[int] = []  # nodes this cycle placed on, by idx
        self._alike: dict[tuple, list[NodeState]] | None = None  # (GPU kind, CPUs, memory) -> nodes (fitting)
        self._fitting: dict[tuple, list[NodeState]] = {}
        self.refresh()
        self.start_max_free = self.max_free

    def hold(self, node: NodeState, resv: Reservation, rank: int, cpus: int, mem_gb: float) -> None:
        """Put `resv` (of a job of class `rank` needing `cpus`, `mem_gb`) on `node`. Of what is free now it
        holds back only what the jobs ending before its start will not give back (EASY: a job that runs
        past the start may take CPUs and memory that are free then anyway)."""
        if node.resv is None:
            bisect.insort(self.held, node.idx)
        back = [r for r in node.releases if r.end_ms <= resv.start_ms]
        node.resv, node.resv_rank = resv, rank
        node.resv_cpus = max(0, cpus - sum(r.cpus for r in back))
        node.resv_mem_gb = max(0.0, mem_gb - sum(r.mem_gb for r in back))

    def note_placed(self, node: NodeState, job_id: str) -> None:
        if not node.placed:
            bisect.insort(self.placed_on, node.idx)
        node.placed.append(job_id)

    def refresh(self, *changed: NodeState) -> None:
        """Keep max_free (most GPUs free on one node), max_open (most free outside any reservation,
        for the cycle's quick_block) and the node groups (best_node) current after `changed` nodes
        changed; with no argument, work them out for every node."""
        if not changed:
            self.free_hist, self.open_hist = defaultdict(int), defaultdict(int)
            self.groups: dict[tuple, list[int]] = defaultdict(list)
            self.special: list[int] = []
            changed = self.nodes
            for node in changed:
                node.counted, node.group = (-1, -1), UNLISTED
        for node in changed:
            free = len(node.free)
            opened = len(node.free - set(node.resv.gpus)) if node.resv else free
            was_free, was_open = node.counted
            if was_free >= 0:
                self.free_hist[was_free] -= 1
                self.open_hist[was_open] -= 1
            self.free_hist[free] += 1
            self.open_hist[opened] += 1
            node.counted = (free, opened)
            self.regroup(node)
        self.max_free = max((k for k, n in self.free_hist.items() if n > 0), default=0)
        self.max_open = max((k for k, n in self.open_hist.items() if n > 0), default=0)

    def regroup(self, node: NodeState) -> None:
        """A plain node (alike GPUs, no reservation, no sharers) sits in the group of its GPU kind and
        free count: for an exclusive job, every node of a group fits equally well, so best_node looks
        at the first of each group with room. Other nodes are `special`: looked at one by one."""
        facts = self.fit.facts(node.view)
        plain = facts.alike and node.resv is None and not node.shared
        key = (facts.kind, node.view.cpus, node.view.mem_gb, len(node.free)) if plain else None
        if key == node.group:
            return
        if node.group is None:
            self.special.remove(node.idx)
        elif node.group is not UNLISTED:
            members = self.groups[node.group]
            del members[bisect.bisect_left(members, node.idx)]
        node.group = key
        if key is None:
            bisect.insort(self.special, node.idx)
        else:
            bisect.insort(self.groups[key], node.idx)

    def nodes_for(self, spec: JobSpec, now_ms: int) -> list[NodeState]:
        """The nodes best_node must look at for an exclusive GPU job, in name order: the first node with
        room of each group with enough free GPUs of a kind it may use, and the special nodes."""
        out = [self.nodes[i] for i in self.special if len(self.nodes[i].free) >= spec.gpus]
        for (*_, free), members in self.groups.items():
            if free < spec.gpus or not members:
                continue
            first = self.nodes[members[0]]
            if len(self.fit.usable(spec, first.view, sorted(first.free))) < spec.gpus:
                continue  # the whole group: its GPUs are all alike
            for i in members:
                if self.nodes[i].room(spec, now_ms):
                    out.append(self.nodes[i])
                    break
        out.sort(key=lambda n: n.idx)
        return out

    def fitting(self, spec: JobSpec) -> list[NodeState]:
        """The nodes `spec` could ever run on (fits_ever: it reads the node's GPU kind, CPUs and memory
        only, so one node of each such kind answers for all), in name order; once a cycle per request."""
        key = (spec.gpus, spec.gpu_types, spec.gpu_mem_gb, spec.cpus, spec.mem_gb)
        got = self._fitting.get(key)
        if got is None:
            if self._alike is None:
                self._alike = defaultdict(list)
                for n in self.nodes:
                    self._alike[(self.fit.facts(n.view).kind, n.view.cpus, n.view.mem_gb)].append(n)
            got = [n for alike in self._alike.values() if self.fit.fits_ever(spec, alike[0].view) for n in alike]
            got.sort(key=lambda n: n.idx)
            self._fitting[key] = got
        return got

    def one_per_group(self) -> list[NodeState]:
        """The special nodes (by idx) and the first node of each group: for what a job could get now,
        reservations and sharers aside, a group's members differ only in CPUs and memory free (its
        GPU kind, node size and free GPU count are the group's key)."""
        return [self.nodes[i] for i in self.special] + [self.nodes[m[0]] for m in self.groups.values() if m]

    def held_nodes(self):
        """The nodes holding a reservation, in name order."""
        return (self.nodes[i] for i in self.held)

    def take(self, node: NodeState, gpus) -> None:
        """`gpus` of `node` are no longer free (a placement)."""
        self.free_total -= len(node.free & set(gpus))
        node.free -= set(gpus)
        self.refresh(node)
