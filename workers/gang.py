"""A gang's rank on this node: which rank it is, where the ranks meet, and what each rank is told.

A gang (a job on several nodes, `dispatch submit --nodes N --gpus-per-node G`) is launched on every
node it holds; each node's agent finds its rank in the job's `gang` field (rank 0 first). Rank 0's
agent picks a free port on its advertised address and writes "address:port" (rendezvous.lua, fenced by
the epoch); the other ranks wait for it, off the RQ worker's thread (a rank never blocks the launches
of other jobs on its node, so two gangs placed crosswise cannot wait on each other). Every rank gets
the variables torchrun, DeepSpeed and Accelerate read (env()), and the user's command runs once per
node, as with srun. How the ranks end together: lua/finish.lua and Supervisor.check.
"""

from __future__ import annotations

import socket
import time

from dispatcher.core.model import PENDING
from dispatcher.store import job_record
from dispatcher.store.nodes import read_addresses
from dispatcher.store.scripts import lost_attempt

#: How long a rank waits for rank 0 to say where to meet before its attempt counts as lost.
RENDEZVOUS_WAIT_S = 120.0


def rank_of(node: str, ranks) -> int | None:
    """This node's rank in the gang (`ranks`: (node, gpus) in rank order), None if it holds none."""
    return next((i for i, (name, _) in enumerate(ranks) if name == node), None)


def free_port(address: str) -> int:
    """A TCP port free on `address` now (the kernel's pick; rank 0's torchrun binds it next); on every
    address where this host does not hold `address` itself (an --address behind NAT)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    for where in (address, "::" if family == socket.AF_INET6 else "0.0.0.0"):
        with socket.socket(family) as s:
            try:
                s.bind((where, 0))
            except OSError:
                continue
            return s.getsockname()[1]
    raise OSError(f"no free port on {address}")


def announce(sup, job_id: str, epoch: int) -> str:
    """Rank 0: choose the port and write where the ranks meet; returns "address:port"."""
    where = f"{sup.address}:{free_port(sup.address)}"
    sup.scripts.rendezvous(job_id, epoch, where)
    return where


def wait_for_rank0(sup, job_id: str, epoch: int, spec, not_started, deadline_s: float = RENDEZVOUS_WAIT_S) -> str:
    """A rank > 0: rank 0's "address:port" for this attempt. Raises `not_started` (launching.NotStarted)
    if the attempt moved on, its gang is stopping (this rank's end is then only its gang's), or rank 0
    said nothing in time (a lost attempt)."""
    deadline = time.monotonic() + deadline_s
    while True:
        r = job_record.read_fields(sup.client, sup.ns, job_id, job_record.RENDEZVOUS)
        if r["epoch"] != epoch:
            raise not_started("stale")
        if r["state"] not in ("assigned", "running"):
            raise not_started("stale", PENDING, "its gang stopped before this rank started", for_gang=True)
        if r["rendezvous"]:
            return r["rendezvous"]
        if time.monotonic() > deadline:
            raise not_started("failed", PENDING, f"rank 0 gave no address to meet within {deadline_s:.0f}s; "
                                                 "attempt lost", **lost_attempt(spec))
        time.sleep(0.1)


def one_node_env(sup, gpus) -> dict:
    """--nodes 1: a gang of one node, told the same variables (a multi-node script tried on one node)."""
    return env(sup, 0, [(sup.node, list(gpus))], f"{sup.address}:{free_port(sup.address)}")


def env(sup, rank: int, ranks, where: str) -> dict:
    """What every rank is told: torchrun's, DeepSpeed's and Accelerate's variables, and dispatch's."""
    addresses = read_addresses(sup.client, sup.ns, [name for name, _ in ranks])
    host, _, port = where.rpartition(":")
    per_node = len(ranks[rank][1])
    return {
        "MASTER_ADDR": host, "MASTER_PORT": port,
        "WORLD_SIZE": str(per_node * len(ranks)),  # one process per GPU, as torchrun starts them
        "NODE_RANK": str(rank), "NNODES": str(len(ranks)), "GPUS_PER_NODE": str(per_node),
        "DISPATCH_NODE_RANK": str(rank), "DISPATCH_NNODES": str(len(ranks)),
        "DISPATCH_NODE_IPS": ",".join(addresses.get(name) or name for name, _ in ranks),
        "DISPATCH_NODES": ",".join(name for name, _ in ranks),
    }
