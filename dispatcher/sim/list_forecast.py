"""A quick start-time forecast for a long queue (`dispatch eta` past views/forecast.EXACT_UP_TO pending
jobs), where running the policy forward (sim/forecast.py) costs a policy cycle per event on every node.

List scheduling by estimates instead: the jobs the scheduler ranked ahead of this one take GPUs first,
in that order, each at the earliest instant a node it fits has enough GPUs free for its whole estimated
run (conservative backfilling), as the running jobs free theirs at their estimated ends (the same work
left as the forecast assumes: forecast.work_left). Then the job itself, the same way. What it leaves
out, and the caller says so: the policy's scores beyond the given order (jobs behind it that would
backfill first), CPUs and memory, preemption, and sharing. A gang takes its nodes at the first
instant enough of them hold its GPUs per node for its run; so does a job larger than any node (whole
nodes, as the policy's auto gangs).

Pure: no Redis, no clock. Cost: O(jobs ahead x nodes it could use x the changes ahead on each node).
"""

from __future__ import annotations

import bisect

from ..core.plan import Snapshot
from ..policy.fit import GpuMemo
from .forecast import Start


class _Free:
    """The GPUs free on one node from now on, as a step function: free[i] from times[i] until times[i+1]."""

    def __init__(self, now_ms: int, free_now: int, releases: list[tuple[int, int]]):
        self.times, self.free = [now_ms], [free_now]
        self._first: dict[int, int | None] = {}  # need -> the first instant that many are free (kept until a take)
        for at, n in sorted(releases):
            self._add(max(at, now_ms), n, None)

    def _split(self, at: int) -> int:
        """The index of a step starting exactly at `at` (made if need be)."""
        i = bisect.bisect_right(self.times, at) - 1
        if self.times[i] != at:
            self.times.insert(i + 1, at)
            self.free.insert(i + 1, self.free[i])
            i += 1
        return i

    def _add(self, start: int, n: int, end: int | None) -> None:
        """n more GPUs free from `start` until `end` (None: for good)."""
        i = self._split(start)
        j = len(self.times) if end is None else self._split(end)
        for k in range(i, j):
            self.free[k] += n

    def holds(self, at: int, need: int, run_ms: int) -> bool:
        """Are `need` GPUs free from `at` (now or later) for `run_ms`?"""
        times, free = self.times, self.free
        j = bisect.bisect_right(times, at) - 1  # the step `at` falls in (times[0] is now)
        while j < len(times) and times[j] < at + run_ms:
            if free[j] < need:
                return False
            j += 1
        return True

    def earliest(self, need: int, run_ms: int) -> int | None:
        """The first instant from which `need` GPUs stay free for `run_ms`, or None."""
        return next((at for i, at in enumerate(self.times) if self.free[i] >= need and self.holds(at, need, run_ms)),
                    None)

    def first(self, need: int) -> int | None:
        """The first instant `need` GPUs are free, however briefly: no run of them starts earlier here."""
        if need not in self._first:
            self._first[need] = next((at for at, n in zip(self.times, self.free) if n >= need), None)
        return self._first[need]

    def take(self, start: int, need: int, run_ms: int) -> None:
        self._add(start, -need, start + run_ms)
        self._first.clear()


def _shape(spec, nodes) -> tuple[int, int]:
    """How many nodes a job takes and how many GPUs on each: a gang's --nodes N --gpus-per-node G; a job
    larger than any node, as many whole nodes of the largest size as its GPUs fill (as the policy's auto
    gangs); else one node."""
    if spec.nodes > 1:
        return spec.nodes, spec.gpus_per_node
    biggest = max((len(v.gpus) for v in nodes), default=0)
    if spec.gpus <= biggest or biggest == 0:
        return 1, spec.gpus
    return -(-spec.gpus // biggest), biggest


def _one(free: dict, fits: list[str], need: int, run_ms: int) -> tuple[int, list[str]] | None:
    """The node (the first of `fits` on a tie) where `need` GPUs are free soonest for the run: nodes
    tried in the order of the first instant they have that many free at all, until none can do better."""
    order = sorted((at, i) for i, n in enumerate(fits) if (at := free[n].first(need)) is not None)
    best = None
    for bound, i in order:
        if best is not None and bound > best[0]:
            break
        at = free[fits[i]].earliest(need, run_ms)
        if at is not None and (best is None or (at, i) < best):
            best = (at, i)
    return None if best is None else (best[0], [fits[best[1]]])


def _many(free: dict, fits: list[str], count: int, per: int, run_ms: int) -> tuple[int, list[str]] | None:
    """The first instant at which `count` of the nodes each hold `per` GPUs for the run, and those nodes."""
    starts = sorted({at for n in fits if (at := free[n].earliest(per, run_ms)) is not None})
    for at in starts:
        ok = [n for n in fits if free[n].holds(at, per, run_ms)]
        if len(ok) >= count:
            return at, ok[:count]
    return None


def list_start(snapshot: Snapshot, job_id: str, ahead: list[str], now_ms: int, work: dict[str, float]) -> Start:
    """When and where `job_id` (pending in `snapshot`) starts if the pending jobs named in `ahead`, in
    that order, go first (Start(None): no node could ever hold it). `work`: seconds each job runs from
    now (forecast.work_left). KeyError if the job is not pending in `snapshot`."""
    pending = {p.spec.id: p for p in snapshot.pending}
    memo = GpuMemo()
    ends: dict[str, list[tuple[int, int]]] = {v.name: [] for v in snapshot.nodes}
    ending: dict[tuple[str, int], list[str]] = {}
    for r in snapshot.running:
        if r.node in ends:
            at = now_ms + int(work.get(r.spec.id, 0.0) * 1000)
            ends[r.node].append((at, len(r.gpus)))
            ending.setdefault((r.node, at), []).append(r.spec.id)
    free = {v.name: _Free(now_ms, len(v.free_gpus), ends[v.name]) for v in snapshot.nodes}
    target = pending[job_id].spec
    fitting: dict[tuple, list[str]] = {}  # the nodes a request shape fits, by shape
    for spec in [pending[j].spec for j in ahead if j in pending and j != job_id] + [target]:
        count, per = _shape(spec, snapshot.nodes)
        piece = spec if count == 1 else spec.filled(gpus=per, nodes=0)
        run_ms = max(1, int(work.get(spec.id, 0.0) * 1000))
        shape = (piece.gpus, piece.gpu_types, piece.gpu_mem_gb, piece.cpus, piece.mem_gb)
        fits = fitting.get(shape)
        if fits is None:
            fits = fitting[shape] = [v.name for v in snapshot.nodes if memo.fits_ever(piece, v)]
        chosen = _one(free, fits, per, run_ms) if count == 1 else _many(free, fits, count, per, run_ms)
        if spec is target:
            if chosen is None:
                return Start(None)
            at, where = chosen
            after = sorted({j for n in where for j in ending.get((n, at), [])}, key=lambda i: (len(i), i))
            return Start(at, "+".join(where), (), tuple(after) if at > now_ms else ())
        if chosen is not None:
            for n in chosen[1]:
                free[n].take(chosen[0], per, run_ms)
    return Start(None)
