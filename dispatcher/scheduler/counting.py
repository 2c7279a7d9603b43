"""The leader's counts of what its mirror saw jobs do (scheduler/mirror.py), for /metrics: each end by
final state and class with its run time, each start's latency from placement to running, and each
requeue by why it went back (store/counters.py); and with the ends, the newest ends and the idle
warnings the board reads (store/cluster.py).

The mirror notes a start when a job it saw waiting (pending, or assigned) is read running, and a
requeue when a job it saw holding resources, or placed itself, is read pending again. A placed job that
ended, or went back, before the mirror read it running may have run all the same (a short job between
two cycles): its record (finish.lua keeps a final job's times), or its last attempt, says when it
started. The leader counts them once a full cycle, in one read and one write.
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
    (another attempt lost: hung, killed from outside, a gang's rank failed, an agent restarted),
    `other` (an agent that stopped, a gang stopped with its rank)."""
    if outcome == "preempted":
        return "idle" if ": idle: " in reason or reason.startswith("idle: ") else "preempted"
    if outcome == "lost":
        return "node_lost" if "lost: no heartbeat" in reason or "could not heartbeat" in reason else "lost"
    return "other"


def count_seen(client, ns: str, mirror) -> None:
    """Count the ends, starts and requeues the mirror saw since the last count: one read (the ended
    jobs' state, times, reason and exit code; the requeued jobs' last attempts; the start times of placed
    jobs that ended before the mirror saw them run), one write; no round trip when it saw none."""
    ended, mirror.ended = mirror.ended, []
    started, mirror.started = mirror.started, []
    requeued, mirror.requeued = mirror.requeued, []
    unseen, mirror.unseen = mirror.unseen, []
    if not ended and not started and not requeued and not unseen:
        return
    pipe = client.pipeline(transaction=False)
    for job_id, _ in ended:
        job_record.queue_fields(pipe, ns, job_id, job_record.ENDED)
    for job_id, _, _ in requeued:
        pipe.lindex(keys.job_attempts(ns, job_id), -1)
    for job_id, _ in unseen:
        pipe.hmget(keys.job(ns, job_id), "assigned_ms", "started_ms")
    replies = pipe.execute(raise_on_error=False) if ended or requeued or unseen else []
    pipe = client.pipeline(transaction=False)
    _count_ends(pipe, ns, ended, replies[:len(ended)])
    replies = replies[len(ended):]
    for (_, cls, waiting), raw in zip(requeued, replies):
        a = _attempt(raw)
        counters.count(pipe, ns, "requeues", kind=requeue_kind(str(a.get("outcome") or ""),
                                                              str(a.get("reason") or "")), **{"class": cls})
        if waiting:  # placed, and back before the mirror saw it run: did it start?
            started.append((cls, _latency(a.get("assigned_ms"), a.get("started_ms"))))
    for (_, cls), got in zip(unseen, replies[len(requeued):]):
        if isinstance(got, list) and len(got) == 2:
            started.append((cls, _latency(*got)))
    for cls, latency_s in started:
        if latency_s is not None:
            counters.observe(pipe, ns, "start_latency", latency_s, **{"class": cls})
    pipe.execute(raise_on_error=False)


def _count_ends(pipe, ns: str, ended, replies) -> None:
    """Each end by final state and class, and how long its last attempt ran; the ends for the board's
    outcomes, and the ended jobs' idle warnings dropped."""
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
        counters.count(pipe, ns, "jobs_ended", state=f["state"], **{"class": cls})
        if f["started_ms"] and f["finished_ms"] >= f["started_ms"]:
            counters.observe(pipe, ns, "job_run", (f["finished_ms"] - f["started_ms"]) / 1000.0, **{"class": cls})
    cluster.record_ends(pipe, ns, ends)


def _latency(assigned_ms, started_ms) -> float | None:
    """Seconds from placement to start, or None when it never started (or the times do not read)."""
    try:
        assigned, started = int(assigned_ms or 0), int(started_ms or 0)
    except (TypeError, ValueError):
        return None
    return max(0.0, (started - assigned) / 1000.0) if assigned and started else None


def _attempt(raw) -> dict:
    """An attempt as finish.lua recorded it ({} when it cannot be read: still a requeue)."""
    import msgpack

    try:
        a = msgpack.unpackb(raw, raw=False)
    except Exception:  # no attempt, not a list, not msgpack
        return {}
    return a if isinstance(a, dict) else {}
