"""One node as a cycle sees it: what is free, what it holds for a reservation, what comes back when.

A NodeState starts from the snapshot's NodeView and changes as the cycle places jobs on it,
reserves it or preempts there. Its methods answer what one job may take of it now: GPUs (type and
memory through the cycle's GpuMemo, sharers' memory, the reservation), CPUs and memory.

EASY backfill: a job may use what a reservation holds only if it is the reservation's own job, if
its estimate ends before the reservation starts, or if it is high or critical work and the
reservation a lower class's (`JUMPS`).

Pure: no Redis, clock or OS.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.model import PRIORITIES, JobSpec
from ..core.plan import NodeView, Reservation
from .config import PolicyConfig
from .fit import GpuMemo

#: Interactive and critical work jumps the queue at any time (seed 000): no reservation of a lower class
#: holds back a job of this class or above.
JUMPS = PRIORITIES.index("high")

#: NodeState.group before the node index has placed it (node_index.NodeIndex.regroup).
UNLISTED = ("unlisted",)


#: A job past its estimate is taken to run as much again as it has overrun it by, and this long at least
#: (the forecast's model too: sim/forecast.py). Not the unknown day: a 20 s job 3 s over its estimate
#: made the reservation it held up start a day later, so every job jumped it by backfill.
OVERRUN_MIN_S = 60.0


def end_ms(spec: JobSpec, start_ms: int, now_ms: int, config: PolicyConfig) -> int:
    """When a job started at `start_ms` will likely end: at its estimate; past it, OVERRUN_MIN_S or as much
    again as it has overrun by from now; without one, unknown. Never past its --time and --grace (a hard
    limit: the agent stops it there), whatever its estimate says."""
    end = unknown_end_ms(now_ms, config)
    if spec.est_s is not None:
        end = start_ms + int(spec.est_s * 1000)
        if end <= now_ms:
            end = now_ms + max(int(OVERRUN_MIN_S * 1000), now_ms - end)
    if spec.time_limit_s:
        end = min(end, max(now_ms, start_ms + int((spec.time_limit_s + spec.grace_s) * 1000)))
    return end


def unknown_end_ms(now_ms: int, config: PolicyConfig) -> int:
    """The end the policy assumes for a job with no estimate left (config.unknown_remaining_s from now)."""
    return now_ms + int(config.unknown_remaining_s * 1000)


@dataclass
class Release:
    """What a job on a node gives back, and when it likely does."""

    end_ms: int
    gpus: tuple[int, ...]
    cpus: int
    mem_gb: float


@dataclass
class NodeState:
    view: NodeView
    fit: GpuMemo  # the cycle's (shared by all its nodes)
    free: set[int]
    shared: dict[int, float]
    cpus: int
    mem_gb: float
    running: list = field(default_factory=list)  # its RunningJobs (shared with Cycle.running_on)
    end_of: object = None  # RunningJob -> when it likely ends (ms)
    _releases: list[Release] | None = None
    _first_end: int | None = None  # the earliest end_ms among `releases`, once asked
    resv: Reservation | None = None
    resv_rank: int = -1  # the class of the job holding `resv`: a higher class is not held back by it
    resv_cpus: int = 0  # of the CPUs free now, those the reservation's job needs at its start (NodeIndex.hold)
    resv_mem_gb: float = 0.0
    placed: list[str] = field(default_factory=list)
    shared_now: set = field(default_factory=set)  # GPUs a --share job was placed on this cycle (not preemptible)
    idx: int = 0  # its place in name order (ties go to the first)
    group: tuple | None = UNLISTED  # its NodeIndex.groups key, None while special (see NodeIndex.regroup)
    counted: tuple[int, int] = (-1, -1)  # (free, open) GPUs as counted in NodeIndex's histograms

    @property
    def releases(self) -> list[Release]:
        """What comes back when: the running jobs (worked out on first use: most cycles never ask),
        then whatever this cycle places here."""
        if self._releases is None:
            self._releases = [Release(self.end_of(r), r.gpus, r.spec.cpus, r.spec.mem_gb) for r in self.running]
        return self._releases

    def add_release(self, r: Release) -> None:
        """What a placement this cycle gives back, and when."""
        self.releases.append(r)
        if self._first_end is not None:
            self._first_end = min(self._first_end, r.end_ms)

    def first_end(self) -> int | None:
        """When the first of `releases` comes back; None if nothing is to come back."""
        if self._first_end is None and self.releases:
            self._first_end = min(r.end_ms for r in self.releases)
        return self._first_end

    # -- what one job may take here --------------------------------------------------------------
    def passes(self, spec: JobSpec) -> bool:
        """Is `spec` high or critical work, and the reservation here a lower class's?"""
        return spec.rank >= JUMPS and spec.rank > self.resv_rank

    def backfills(self, spec: JobSpec, now_ms: int) -> bool:
        """May `spec` use what the reservation holds? Its own job, a high or critical job when the
        reservation is a lower class's, or one that ends before the reservation starts."""
        r = self.resv
        return r is None or r.job_id == spec.id or self.passes(spec) \
            or (spec.est_s is not None and now_ms + spec.est_s * 1000 <= r.start_ms)

    def pool(self, spec: JobSpec) -> list[int]:
        """GPUs `spec` could take now, reservations aside: free ones, and for a sharing job also
        GPUs other sharers hold with enough memory left."""
        if spec.share:
            pool = [i for i in sorted(set(self.free) | set(self.shared))
                    if self.view.gpu(i).mem_total_gb - self.shared.get(i, 0.0) + 1e-9 >= spec.gpu_mem_gb]
        else:
            pool = sorted(self.free)
        return self.fit.usable(spec, self.view, pool)

    def candidates(self, spec: JobSpec, now_ms: int) -> list[int]:
        """GPUs `spec` may take now, honouring the reservation."""
        gpus = self.pool(spec)
        if not self.backfills(spec, now_ms):
            gpus = [g for g in gpus if g not in self.resv.gpus]
        return gpus

    def room(self, spec: JobSpec, now_ms: int) -> bool:
        """CPUs and memory; a reservation also holds what its job needs at its start of what is free now."""
        cpus, mem = self.cpus, self.mem_gb
        if not self.backfills(spec, now_ms):
            cpus -= min(self.resv_cpus, self.cpus)
            mem -= min(self.resv_mem_gb, self.mem_gb)
        return spec.cpus <= cpus and spec.mem_gb <= mem + 1e-9

    def fits_unreserved(self, spec: JobSpec) -> bool:
        """Would `spec` fit what is free (GPUs, CPUs, memory) if no reservation held any of it?"""
        return len(self.pool(spec)) >= spec.gpus and spec.cpus <= self.cpus and spec.mem_gb <= self.mem_gb + 1e-9

    def whole(self, spec: JobSpec) -> bool:
        """May a gang member of `spec` take this node whole (whole_node_usable)?"""
        return whole_node_usable(spec, self.view, self.fit)


def whole_node_usable(spec: JobSpec, view: NodeView, fit: GpuMemo) -> bool:
    """May a gang member of `spec` take this node whole (every GPU of the right type and memory)?"""
    return bool(view.gpus) and fit.usable_count(spec, view) == len(view.gpus)


def node_family(spec: JobSpec, view: NodeView, fit: GpuMemo) -> str | None:
    """The GPU family an auto gang of `spec` would use taking this node whole: "" where it may mix
    families; with same_type, the node's one family (None if its GPUs are of several)."""
    return fit.family(view) if spec.same_type else ""
