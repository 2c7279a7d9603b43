"""The leader's counts of what its mirror saw jobs do (scheduler/mirror.py), for /metrics: each requeue by why
it went back (store/counters.py); and with the ends, the newest ends and the idle warnings the board reads
(store/cluster.py). (The ends themselves, by state and class with their run time, are counted where they are
written, by finish.lua and cancel.lua: none is missed while no scheduler leads.)

The mirror notes a requeue when a job it saw holding resources, or placed itself, is read pending again.
The leader counts them once a full cycle, in one read and one write. (A start's latency is counted by
its agent's mark_running.lua, as it records the start.)
"""
from __future__ import annotations

from ..core.model import FINAL_STATES
from ..store import cluster, counters, job_record, keys

#: Why a job went back to the queue, as the requeue counter's `kind` label.
REQUEUE_KINDS = ("preempted", "idle", "node_lost", "lost", "other")


def requeue_kind(outcome: str, reason: str) -> str:
    """The kind of a requeue from its attempt's outcome and reason (lua/finish.lua): `preempted` (for
    another job, or by an operator), `idle` (the node agent's idle requeue, policy/idle.py), `node_lost`
    (the node stopped heartbeating: the leader requeued it, or its keeper cut the copy off), `lost`
    (another attempt lost: hung, a gang's rank failed, an agent restarted),
    `other` (an agent that stopped, a gang stopped with its rank)."""
    if outcome == "preempted":
        return "idle" if ": idle: " in reason or reason.startswith("idle: ") else "preempted"
    if outcome == "lost":
        return "node_lost" if "lost: no heartbeat" in reason or "could not heartbeat" in reason else "lost"
    return "other"


def count_seen(client, ns: str, mirror) -> None:
    """Count the ends and requeues the mirror saw since the last count: one read (the ended jobs' state,
    times, reason and exit code; the requeued jobs' last attempts), one write; no round trip when it saw
    none."""
    ended, mirror.ended = mirror.ended, []
    requeued, mirror.requeued = mirror.requeued, []
    if not ended and not requeued:
        return
    pipe = client.pipeline(transaction=False)
    for job_id, _ in ended:
        job_record.queue_fields(pipe, ns, job_id, job_record.ENDED)
    for job_id, _ in requeued:
        pipe.lindex(keys.job_attempts(ns, job_id), -1)
    replies = pipe.execute(raise_on_error=False)
    pipe = client.pipeline(transaction=False)
    _count_ends(pipe, ns, ended, replies[:len(ended)])
    for (_, cls), raw in zip(requeued, replies[len(ended):]):
        a = _attempt(raw)
        counters.count(pipe, ns, "requeues", kind=requeue_kind(str(a.get("outcome") or ""),
                                                              str(a.get("reason") or "")), **{"class": cls})
    pipe.execute(raise_on_error=False)


def _count_ends(pipe, ns: str, ended, replies) -> None:
    """The ends for the board's outcomes, and the ended jobs' idle warnings dropped."""
    if not ended:
        return
    cluster.forget_idle(pipe, ns, [job_id for job_id, _ in ended])
    ends = []
    for (job_id, cls), reply in zip(ended, replies):
        if not isinstance(reply, list):
            continue
        f = job_record.values(job_record.ENDED, reply)
        if f["state"] not in FINAL_STATES:
            continue
        ends.append((job_id, f["state"], cls, f["reason"], f["exit_code"], f["finished_ms"]))
    cluster.record_ends(pipe, ns, ends)


def _attempt(raw) -> dict:
    """An attempt as finish.lua recorded it ({} when it cannot be read: still a requeue)."""
    import msgpack

    try:
        a = msgpack.unpackb(raw, raw=False)
    except Exception:  # no attempt, not a list, not msgpack
        return {}
    return a if isinstance(a, dict) else {}
