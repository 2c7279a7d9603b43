"""Fake clusters written straight into Redis: nodes (heartbeats), queues of jobs, GPUs held.

Jobs are checked specs (build_spec) with varied users, classes, sizes and estimates,
written with store.jobs.write_jobs; GPUs are held the way the scheduler and an agent
hold them (commit_placement.lua, then mark_running.lua), without any agent.
"""

from __future__ import annotations

import random
from dataclasses import replace

import benchlib as bl  # also puts the repository on sys.path
from dispatcher.clock import now_ms  # also cluster.now_ms for the benches
from dispatcher.config import Timing
from dispatcher.core.gpuspec import parse_fake_gpus
from dispatcher.core.model import JobSpec
from dispatcher.core.spec import build_spec
from dispatcher.store import job_record, keys
from dispatcher.store.connect import text
from dispatcher.store.jobs import write_jobs
from dispatcher.store.nodes import write_heartbeat
from dispatcher.store.scripts import Scripts

NODE_GPUS = "8xA100-80GB"
NODE_CPUS, NODE_MEM_GB = 64, 512.0
#: Fake nodes heartbeat once: the scheduler under test must not declare them dead mid-run.
TIMING = Timing(node_timeout_s=86400.0, lease_s=3600.0)
#: How a node's 8 GPUs are held by running jobs in a full cluster.
FULL_NODE = (4, 2, 1, 1)
#: The GPU fill(free_on_first=1) leaves free on the first node.
FREE_GPU = 7


def node_names(n: int, prefix: str = "n") -> list[str]:
    return [f"{prefix}{i:04d}" for i in range(n)]


def add_nodes(client, ns: str, names: list[str], gpus: str = NODE_GPUS) -> None:
    infos = parse_fake_gpus(gpus)
    now = now_ms()
    for name in names:
        write_heartbeat(client, ns, name, infos, NODE_CPUS, NODE_MEM_GB, now)


def job_specs(n: int, *, gpus: tuple[int, ...], seed: int = 0, users: int = 50,
              priorities: tuple[str, ...] = ("normal",) * 4 + ("low",), est_hours=(None, 0.5, 2, 10)) -> list[JobSpec]:
    """n checked specs drawn from a few hundred templates; submit times spread over the last hour."""
    rnd = random.Random(seed)
    now = now_ms()
    templates = [build_spec(command=["python", "train.py", "--lr", str(rnd.choice((0.1, 0.01, 0.003)))],
                            user=f"user{u:02d}", team=f"team{u % 5}", submit_ms=now, name=f"exp-{u}-{t}",
                            cwd=f"/home/user{u:02d}/project", gpus=rnd.choice(gpus),
                            gpu_type=rnd.choice((None, None, "A100")), cpus=rnd.choice((1, 2, 4)),
                            mem_gb=rnd.choice((0, 16, 32)), priority=rnd.choice(priorities),
                            est=None if (h := rnd.choice(est_hours)) is None else h * 3600)
                 for u in range(users) for t in range(6)]
    return [replace(rnd.choice(templates), submit_ms=now - rnd.randrange(3_600_000)) for _ in range(n)]


def submit(client, ns: str, specs: list[JobSpec], chunk: int = 10_000) -> list[str]:
    ids = []
    for i in range(0, len(specs), chunk):
        ids += write_jobs(client, ns, specs[i:i + chunk])
    return ids


def hold(client, ns: str, placements: list[tuple[str, str, tuple[int, ...]]], chunk: int = 5_000) -> None:
    """Mark pending jobs running on (node, GPUs), as a placement and its agent would."""
    scripts = Scripts(client, ns)
    now = now_ms()
    for i in range(0, len(placements), chunk):
        pipe = client.pipeline(transaction=False)
        for job_id, node, gpus in placements[i:i + chunk]:
            scripts.commit_placement(job_id, node, gpus, 0, now, client=pipe)
            scripts.mark_running(job_id, 1, now, 0, client=pipe)
        codes = pipe.execute()
        if any(c != 1 for c in codes[1::2]):
            raise RuntimeError(f"could not hold GPUs for fake running jobs: codes {set(codes)}")


def fill(client, ns: str, nodes: list[str], *, free_on_first: int = 1) -> str:
    """Every GPU of every node held by a running job (4+2+1+1 GPUs a node, non-checkpointable,
    normal class, so no pending job of the suite may preempt them), except `free_on_first` GPUs
    of the first node. Returns that node's name."""
    layout = []  # (node, gpus)
    for k, node in enumerate(nodes):
        start, sizes = 0, list(FULL_NODE)
        if k == 0:
            while free_on_first > 0:
                free_on_first -= sizes.pop()
        for size in sizes:
            layout.append((node, tuple(range(start, start + size))))
            start += size
    specs = [build_spec(command=["python", "serve.py"], user=f"user{i % 50:02d}", submit_ms=now_ms(),
                        gpus=len(g), priority="normal", est=36000) for i, (_, g) in enumerate(layout)]
    ids = submit(client, ns, specs)
    hold(client, ns, [(j, node, g) for j, (node, g) in zip(ids, layout)])
    return nodes[0]


def active_jobs(client, ns: str) -> list[tuple[str, str, int, int | None]]:
    """(job id, node, epoch, rank) of every assigned or running job; a gang once per rank."""
    ids = [text(i) for i in client.zrange(keys.jobs_active(ns), 0, -1)]
    pipe = client.pipeline(transaction=False)
    for job_id in ids:
        pipe.hmget(keys.job(ns, job_id), "node", "epoch", "gang")
    out = []
    for j, (node, epoch, gang) in zip(ids, pipe.execute()):
        ranks = job_record.gang_ranks(text(gang))
        out += [(j, n, int(epoch), r) for r, (n, _) in enumerate(ranks)] if ranks else [(j, text(node), int(epoch), None)]
    return out


def finish(client, ns: str, jobs: list[tuple[str, str, int, int | None]], chunk: int = 5_000) -> None:
    """End the given (job, node, epoch, rank) as succeeded, as their agents would: frees their GPUs."""
    scripts = Scripts(client, ns)
    now = now_ms()
    for i in range(0, len(jobs), chunk):
        pipe = client.pipeline(transaction=False)
        for job_id, node, epoch, rank in jobs[i:i + chunk]:
            scripts.finish(job_id, node, epoch, "succeeded", 0, now, client=pipe, rank=rank)
        pipe.execute()


def start_live(bench, ns: str, node: str, fake_gpus: str, *worker_args: str) -> list:
    """A real scheduler and one node agent with fake GPUs, as processes; waits for the node's heartbeat."""
    procs = [bench.spawn_dispatch(["scheduler"], ns, f"{ns}-scheduler"),
             bench.spawn_dispatch(["worker", "--node", node, "--fake-gpus", fake_gpus, *worker_args], ns,
                                  f"{ns}-worker")]

    def up():
        for p, name in zip(procs, ("scheduler", "worker")):
            if p.poll() is not None:
                raise RuntimeError(f"dispatch {name} exited: {bench.log_tail(f'{ns}-{name}')}")
        return bench.client.zscore(keys.nodes_heartbeat(ns), node) and bench.client.get(keys.scheduler_leader(ns))

    try:
        bl.wait_until(up, 60, 0.05, f"node {node} and a scheduler in {ns}")
    except BaseException:
        bench.stop(procs)
        raise
    return procs
