"""What the leading scheduler does about what store/quarantine.py finds: keys of the wrong type set
aside and the indexes rebuilt behind them, bad entries quarantined, commands sent again, GPUs
that no job holds freed.

Nothing here runs on a cycle where nothing is wrong: the readers flag what they meet as they
read it (ReadResult.stray and .aside; RedisPlanner.failed and .held_gpus, scheduler/planner.py),
and a WRONGTYPE error from anywhere in a cycle makes the scheduler sweep the namespace's keys once
and try the cycle again.
"""

from __future__ import annotations

import logging

from . import control, job_record, keys
from .connect import text, tolerant
from .jobs import rebuild_indexes
from .nodes import holder_ids
from .quarantine import ACTIVE, Entry, quarantine, set_aside, sweep
from .snapshot import Strays, read_jobs
from .spec_cache import SpecCache

log = logging.getLogger("dispatch.store")


def repair_types(client, ns: str, now_ms: int) -> list[tuple[str, str]]:
    """Set aside every key of the wrong type (quarantine.sweep) and rebuild behind it: the job indexes
    from the job records, a node's GPU holders from the active jobs, a node's control stream with its
    consumer group. Returns (key, the type it had) for each key moved."""
    moved = sweep(client, ns, now_ms)
    gone = {key for key, _ in moved}
    which = "".join(flag for key, flag in ((keys.jobs_all(ns), "a"), (keys.jobs_pending(ns), "p"),
                                           (keys.jobs_active(ns), "x")) if key in gone)
    if which:
        added = rebuild_indexes(client, ns, which, now_ms)
        log.warning("rebuilt the job indexes (%s) from the job records: %d entries", which, added)
    names = [text(n) for n in tolerant(lambda: client.zrange(keys.nodes_heartbeat(ns), 0, -1), [])]
    for name in names:
        if keys.node_alloc(ns, name) in gone:
            rebuild_alloc(client, ns, name)
        if keys.node_control(ns, name) in gone:
            control.ensure_group(client, ns, name)
    return moved


def set_aside_all(client, ns: str, aside, now_ms: int) -> int:
    """Set aside the keys of the wrong type a read met ((key, the type it should have)); returns how many."""
    return sum(1 for key, want in dict.fromkeys(aside) if set_aside(client, ns, key, want, now_ms))


def rebuild_alloc(client, ns: str, node: str) -> int:
    """Write the GPU holders of `node` (keys.node_alloc) from the records of the active jobs on it;
    returns the GPUs written. A job that ended meanwhile leaves a holder no job backs:
    free_stale_gpus frees it when a placement meets it."""
    ids = [text(i) for i in tolerant(lambda: client.zrange(keys.jobs_active(ns), 0, -1), [])]
    alloc: dict[str, list[str]] = {}
    shared: set[str] = set()
    for job_id, got in read_jobs(client, ns, ids, SpecCache()):
        if isinstance(got, tuple) and not isinstance(got, Strays) and getattr(got[0], "node", None) == node:
            job = got[0]
            for g in job.gpus:
                alloc.setdefault(str(g), []).append(job.spec.id)
                if job.spec.share:
                    shared.add(str(g))
    if alloc:
        client.hset(keys.node_alloc(ns, node), mapping={
            g: ("~" + ",".join(held)) if g in shared else held[0] for g, held in alloc.items()})
    log.warning("rebuilt the GPU holders of node %s from its active jobs: %d GPUs", node, len(alloc))
    return len(alloc)


def free_stale_gpus(client, ns: str, placements, now_ms: int) -> list[Entry]:
    """For placements refused because a GPU was held: quarantine each holder entry (keys.node_alloc)
    that names no job active on that node with that GPU (hostile, or left behind). Two round trips,
    on refusals only; returns the entries moved."""
    wanted = [(p.node, str(g)) for p in placements for g in p.gpus]
    if not wanted:
        return []
    pipe = client.pipeline(transaction=False)
    for node, g in wanted:
        pipe.hget(keys.node_alloc(ns, node), g)
    values = pipe.execute(raise_on_error=False)
    held = [(node, g, v) for (node, g), v in zip(wanted, values) if isinstance(v, bytes)]
    holders = sorted({h for _, _, v in held for h in holder_ids(v)})
    pipe = client.pipeline(transaction=False)
    for h in holders:
        job_record.queue_fields(pipe, ns, h, job_record.PLACED)
    records = dict(zip(holders, pipe.execute(raise_on_error=False)))
    stale = []
    for node, g, v in held:
        if not any(_holds(records.get(h), node, g) for h in holder_ids(v)):
            stale.append(Entry(keys.node_alloc(ns, node), g, "held by no job active there", "value", v,
                               kind="hash"))
    return quarantine(client, ns, stale, now_ms) if stale else []


def _holds(record, node: str, gpu: str) -> bool:
    if not isinstance(record, list) or len(record) != len(job_record.PLACED):
        return False
    r = job_record.values(job_record.PLACED, record)
    return r["state"] in ACTIVE.split(",") and r["node"] == node and gpu in {str(g) for g in r["gpus"]}
