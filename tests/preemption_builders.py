"""Builders and readers for the preemption tests (tests/unit/test_policy_preemption*.py): full nodes,
running jobs with their checkpoint and preemption times, critical jobs, and a plan's preemptions
(tests/builders.py has plan_of, placed and verdict_of)."""

from __future__ import annotations

from dataclasses import replace

from dispatcher.core.plan import Plan, RunningJob
from dispatcher.policy import PolicyConfig
from tests import builders
from tests.builders import NOW_MS, make_job, make_node

#: The preemption tests' minimum run: their running jobs started 100 s ago unless they say otherwise,
#: past it (the default is 5 minutes since 2026-12-06; it was 30 s).
MIN_RUN_S = 30.0


def scenario_config(config: PolicyConfig | None = None) -> PolicyConfig:
    """`config` (the default one if None) with the tests' minimum run, unless it sets its own."""
    config = config or PolicyConfig()
    return replace(config, min_run_s=MIN_RUN_S) if config.min_run_s == PolicyConfig().min_run_s else config


def plan_of(pending=(), nodes=(), running=(), config: PolicyConfig | None = None) -> Plan:
    """builders.plan_of under scenario_config(config)."""
    return builders.plan_of(pending, nodes, running, scenario_config(config))


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


def critical(job_id: str = "c", gpus: int = 1, *types: str, mem_gb: float = 0.0):
    return make_job(job_id).gpus(gpus, *types, mem_gb=mem_gb).priority("critical")
