"""Builders for policy tests: make_node("n1").gpus(2, "A100", 40).obj(), make_job("j1").gpus(1).obj();
plan_of(pending, nodes, running, config) runs one cycle of schedule() on them, and placed and
verdict_of read its Plan."""

from __future__ import annotations

from dataclasses import replace

from dispatcher.core.plan import NodeView, PendingJob, Plan, RunningJob, Snapshot, Verdict
from dispatcher.core.model import GpuInfo, JobSpec
from dispatcher.policy import PolicyConfig
from dispatcher.policy.schedule import schedule

NOW_MS = 1_000_000_000


class NodeBuilder:
    def __init__(self, name: str):
        self.name, self._gpus, self._cpus, self._mem = name, [], 32, 256.0
        self._held: set[int] = set()
        self._cpus_used, self._mem_used = 0, 0.0

    def gpus(self, count: int, kind: str = "A100", mem_gb: float = 40.0) -> "NodeBuilder":
        for _ in range(count):
            i = len(self._gpus)
            self._gpus.append(GpuInfo(i, f"NVIDIA {kind}-{mem_gb:g}GB", mem_gb, uuid=f"GPU-{self.name}-{i}"))
        return self

    def cpus(self, n: int) -> "NodeBuilder":
        self._cpus = n
        return self

    def mem(self, gb: float) -> "NodeBuilder":
        self._mem = gb
        return self

    def held(self, *indices: int, cpus: int = 0, mem_gb: float = 0.0) -> "NodeBuilder":
        """Mark GPUs (and CPUs/memory) as taken by running jobs."""
        self._held |= set(indices)
        self._cpus_used += cpus
        self._mem_used += mem_gb
        return self

    def obj(self) -> NodeView:
        return NodeView(self.name, tuple(self._gpus), self._cpus, self._mem,
                        tuple(g.index for g in self._gpus if g.index not in self._held),
                        self._cpus - self._cpus_used, self._mem - self._mem_used)


class JobBuilder:
    def __init__(self, job_id: str):
        self.spec = JobSpec(id=job_id, command=("true",), name=job_id, user="alice", submit_ms=NOW_MS)

    def _set(self, **kw) -> "JobBuilder":
        self.spec = replace(self.spec, **kw)
        return self

    def gpus(self, n: int, *types: str, mem_gb: float = 0.0) -> "JobBuilder":
        return self._set(gpus=n, gpu_types=tuple(types), gpu_mem_gb=mem_gb)

    def cpus(self, n: int) -> "JobBuilder":
        return self._set(cpus=n)

    def mem(self, gb: float) -> "JobBuilder":
        return self._set(mem_gb=gb)

    def priority(self, p: str) -> "JobBuilder":
        return self._set(priority=p)

    def user(self, u: str) -> "JobBuilder":
        return self._set(user=u)

    def elastic(self, low: int, high: int, scaling: str = "linear") -> "JobBuilder":
        """--gpus LOW-HIGH --scaling SCALING."""
        return self._set(gpus=high, min_gpus=low, scaling=scaling)

    def est(self, s: float | None) -> "JobBuilder":
        return self._set(est_s=s)

    def waited(self, s: float) -> "JobBuilder":
        return self._set(submit_ms=NOW_MS - int(s * 1000))

    def obj(self) -> JobSpec:
        return self.spec

    def pending(self) -> PendingJob:
        return PendingJob(self.spec)

    def running_on(self, node: str, *gpus: int, started_s_ago: float = 0.0) -> RunningJob:
        return RunningJob(self.spec, node, tuple(gpus), NOW_MS - int(started_s_ago * 1000))


def make_node(name: str) -> NodeBuilder:
    return NodeBuilder(name)


def make_job(job_id: str) -> JobBuilder:
    return JobBuilder(job_id)


def snapshot(pending=(), running=(), nodes=()) -> Snapshot:
    return Snapshot(tuple(j.pending() if isinstance(j, JobBuilder) else j for j in pending), tuple(running),
                    tuple(n.obj() if isinstance(n, NodeBuilder) else n for n in nodes))


def plan_of(pending=(), nodes=(), running=(), config: PolicyConfig | None = None) -> Plan:
    """One cycle of schedule() at NOW_MS (the default config unless given)."""
    return schedule(snapshot(pending=pending, running=running, nodes=nodes), now_ms=NOW_MS,
                    config=config or PolicyConfig())


def placed(plan: Plan) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Each placement as job id -> (node, GPUs)."""
    return {p.job_id: (p.node, p.gpus) for p in plan.placements}


def verdict_of(plan: Plan, job_id: str) -> Verdict:
    """The one verdict of `job_id` in `plan` (fails if it has none or several)."""
    found = [v for v in plan.verdicts if v.job_id == job_id]
    assert len(found) == 1, f"{job_id} has {len(found)} verdicts: {plan.verdicts}; placements {placed(plan)}"
    return found[0]


def seed_node():
    """The seed scenario's node: n1 with two A100 40 GB (GPUs 0, 1) and two V100 16 GB (2, 3)."""
    return make_node("n1").gpus(2, "A100", 40).gpus(2, "V100", 16)


def seed_jobs():
    """The seed scenario's queue: four jobs of four classes, of A100s and a V100, with memory needs."""
    return [
        make_job("JOB-001").gpus(1, "A100", mem_gb=20).priority("high").est(15).waited(30),
        make_job("JOB-002").gpus(2, "A100", mem_gb=30).priority("low").est(60).waited(20),
        make_job("JOB-003").gpus(1, "V100", mem_gb=10).priority("normal").est(30).waited(10),
        make_job("JOB-004").gpus(1, "A100", mem_gb=15).priority("critical").est(10).waited(0),
    ]
