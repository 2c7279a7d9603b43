"""Builders and readers for the preemption tests (tests/unit/test_policy_preemption*.py): a plan of
a snapshot under a config, full nodes, running jobs with their checkpoint and preemption times, and
the preemptions, placements and verdicts of a plan."""

from __future__ import annotations

from dataclasses import replace

from dispatcher.core.plan import Plan, RunningJob
from dispatcher.policy import PolicyConfig, schedule
from tests.builders import NOW_MS, make_job, make_node, snapshot


def plan_of(pending=(), nodes=(), running=(), config: PolicyConfig | None = None) -> Plan:
    return schedule(snapshot(pending=pending, running=running, nodes=nodes), now_ms=NOW_MS,
                    config=config or PolicyConfig())


def full_node(name: str = "n1", count: int = 2, kind: str = "A100", mem_gb: float = 40.0, free=()):
    """A node whose GPUs are all held (one CPU per held GPU) except the `free` ones."""
    held = [i for i in range(count) if i not in free]
    return make_node(name).gpus(count, kind, mem_gb).held(*held, cpus=len(held))


def running_job(job_id: str, priority: str, *gpus: int, node: str = "n1", started_s_ago: float = 100.0,
                checkpointable: bool = True, checkpoint_s_ago: float | None = None,
                preempted_s_ago: float | None = None, stopping: bool = False, **fields) -> RunningJob:
    r = make_job(job_id).gpus(len(gpus)).priority(priority)._set(checkpointable=checkpointable, **fields) \
        .running_on(node, *gpus, started_s_ago=started_s_ago)
    return replace(r,
                   checkpoint_ms=0 if checkpoint_s_ago is None else NOW_MS - int(checkpoint_s_ago * 1000),
                   preempted_ms=0 if preempted_s_ago is None else NOW_MS - int(preempted_s_ago * 1000),
                   stopping=stopping)


def preempted(plan: Plan) -> list[tuple]:
    """Each preemption as (victim, node, mode, GPUs given up, for job, GPUs kept, GPU-s lost)."""
    return [(p.job_id, p.node, p.mode, p.gpus, p.for_job, p.keep_gpus, p.lost_gpu_s) for p in plan.preemptions]


def placed(plan: Plan) -> dict[str, tuple[str, tuple[int, ...]]]:
    return {p.job_id: (p.node, p.gpus) for p in plan.placements}


def verdict_of(plan: Plan, job_id: str):
    found = [v for v in plan.verdicts if v.job_id == job_id]
    assert len(found) == 1, f"{job_id} has {len(found)} verdicts: {plan.verdicts}; placements {placed(plan)}"
    return found[0]


def critical(job_id: str = "c", gpus: int = 1, *types: str, mem_gb: float = 0.0):
    return make_job(job_id).gpus(gpus, *types, mem_gb=mem_gb).priority("critical")
