"""What an earlier agent of this node left, and attempts Redis shows here that nobody runs."""

from __future__ import annotations

import logging
import signal
from pathlib import Path

from dispatcher.clock import now_ms
from dispatcher.core.model import PENDING
from dispatcher.store import job_record, keys
from dispatcher.store.codec import decode_spec
from dispatcher.store.connect import text
from dispatcher.store.exits import read_exits, reported_outcome
from dispatcher.store.scripts import Outcome, lost_attempt

from . import proctrack
from .gang import rank_of
from .keeper import PID_DIR, kept_end, prune_exits, read_attempts

log = logging.getLogger("dispatch.agent")


def kill_leftovers(work_dir: Path) -> list[str]:
    """At agent start: kill what jobs an earlier agent of this node started are still running
    (it was killed -9: PR_SET_PDEATHSIG took the job's first process, not its children). An
    attempt's processes are those of its cgroup, or those that carry its DISPATCH_JOB_ID and
    epoch (workers/proctrack.py), so a reused pid is never killed."""
    killed = []
    for a in read_attempts(work_dir):
        if proctrack.pids(a):
            proctrack.signal_attempt(a, signal.SIGKILL)
            killed.append(a.job_id)
            log.warning("killed job %s (epoch %d), left running by an earlier agent of this node",
                        a.job_id, a.epoch)
        proctrack.remove_cgroup(a.cgroup)
        (work_dir / PID_DIR / a.job_id).unlink(missing_ok=True)
    return killed


#: A job assigned here this long ago, not started, with no launch left in the node's RQ queue, lost its
#: launch (an RQ worker that popped it and then stopped on a write error, a full disk): it goes back.
ASSIGNED_SETTLE_MS = 60_000


def reconcile(sup, reason: str, *, everything: bool = False, settle_ms: int = 5000) -> list[str]:
    """Requeue, as lost attempts, the jobs Redis shows running on this node at an epoch this agent
    does not run (started over `settle_ms` ago, so a launch in flight is left alone), and the jobs
    assigned here over ASSIGNED_SETTLE_MS ago while no launch waits in the node's queue, or at once where
    this agent started that attempt and it ended (the server lost the writes since); a gang's rank
    here, in a gang another rank started, likewise only while no launch waits. With
    `everything` (agent start), every job merely assigned here goes back too; their RQ entries then
    find a moved epoch and do nothing. A requeue is fenced by the epoch: a launch that raced it finds
    the job moved and starts nothing. Returns the ids requeued."""
    from rq import Queue

    ids = [text(i) for i in sup.client.zrange(keys.jobs_active(sup.ns), 0, -1)]
    pipe = sup.client.pipeline(transaction=False)
    for job_id in ids:
        job_record.queue_fields(pipe, sup.ns, job_id, job_record.RECOVERY)
    pipe.llen(Queue.redis_queue_namespace_prefix + keys.rq_queue_name(sup.ns, sup.node))
    *replies, waiting_launches = pipe.execute(raise_on_error=False)
    now = now_ms()
    with sup.lock:  # jobs it runs, and jobs whose outcome waits in the outbox
        mine = {(r.job_id, r.epoch) for r in sup.running.values()}
        mine |= sup.outbox.attempts() | sup.meeting
        started = dict(sup.started)
    requeued = []
    launch_lost = waiting_launches == 0  # (an unreadable queue counts as holding launches)
    for job_id, reply in zip(ids, replies):
        if isinstance(reply, Exception) or not text(reply[1]).isdigit():
            continue  # no job record, or one of the wrong type: the leader's to quarantine
        r = job_record.values(job_record.RECOVERY, reply)
        epoch, state = r["epoch"], r["state"]
        ranks = job_record.gang_ranks(r["gang"])
        rank = rank_of(sup.node, ranks) if ranks else None  # a gang's rank here ends as that rank
        if rank is None and (ranks or r["node"] != sup.node) or (job_id, epoch) in mine:
            continue
        if not everything and not (_settled(r["started_ms"], now, settle_ms) if state in ("running", "preempting")
                                   else state == "assigned" and (launch_lost and _settled(r["assigned_ms"], now,
                                                                                          ASSIGNED_SETTLE_MS)
                                                                 or not ranks and started.get(job_id) == epoch)):
            continue  # (an attempt this agent started, and that ended, still assigned: the server lost its
            # start and its end, or its copy was stopped as stale while the epoch had moved and came back)
        if not everything and rank is not None and not launch_lost and state == "running":
            continue  # a gang another rank started: this rank's launch may still wait in the node's queue
            # (RQ reconnecting after an outage); it is lost once the queue holds none
        ended = reported_outcome(read_exits(sup.client, sup.ns, [job_id]).get(job_id)
                                 or kept_end(sup.work_dir, job_id, epoch, r["submit_ms"]), epoch,
                                 stopping=state == "preempting" or bool(r["cancel_ms"]) or rank is not None)
        if ended is not None:  # it ended while the agent before this one was stopped (its keeper saw it), or
            # this agent recorded its end and the server lost that write (killed while its AOF lagged)
            if sup.scripts.finish(job_id, sup.node, epoch, ended[0], ended[1], ended[2], ended[3],
                                  rank=rank) == Outcome.DONE:
                log.warning("job %s ended here (exit %d), which Redis did not show (its agent could not report "
                            "it, or the server lost the write); recorded", job_id, ended[1])
            continue
        try:
            spec = decode_spec(r["spec"], key=keys.job(sup.ns, job_id))
        except Exception:
            spec = None
        if sup.scripts.finish(job_id, sup.node, epoch, PENDING, None, now, reason, rank=rank,
                              **lost_attempt(spec)) == Outcome.DONE:
            requeued.append(job_id)
    prune_exits(sup.work_dir)  # (after they were read: a restarted agent's first reconcile uses even old ones)
    if requeued:
        log.warning("requeued %d jobs Redis showed on node %s that this agent does not run: %s",
                    len(requeued), sup.node, ", ".join(requeued))
        sup.client.publish(keys.events(sup.ns), b"finish")
    return requeued


def _settled(since_ms: int, now: int, settle_ms: int) -> bool:
    return since_ms > 0 and now - since_ms >= settle_ms
