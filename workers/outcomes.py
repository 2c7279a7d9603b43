"""What an attempt's end is recorded as: by why it was stopped (Running.stopping, one function per
reason in ENDINGS), else by how its process ended. Outcomes go through Supervisor.finish
(finish.lua, fenced by the epoch); a shrink goes through shrink.lua and starts its next attempt.
A gang's rank records its own end (its rank); any end of a rank but a success or a stop for its gang
(GANG) is what the gang ends as, and a rank that fails loses the gang's attempt (rerun within --retries).
"""

from __future__ import annotations

import logging
import signal

import redis

from dispatcher.auth.identity import seal_attempt
from dispatcher.clock import now_ms
from dispatcher.core.errors import signal_name
from dispatcher.core.model import CANCELLED, FAILED, PENDING, SUCCEEDED
from dispatcher.core.units import span
from dispatcher.store import keys
from dispatcher.store.scripts import lost_attempt

from .keeper import fenced_epoch
from .running import Running, Stopping

log = logging.getLogger("dispatch.agent")


def record_end(sup, run: Running, code: int) -> None:
    """Record the end of `run`, whose main process exited with `code`, on `sup` (the Supervisor).
    Should describing the end fail before anything is written (a bug, never Redis), the attempt still
    ends, as failed with what went wrong: dropped, it would read as lost and run again."""
    if not run.stopping and code == -signal.SIGKILL and fenced_epoch(sup.work_dir, run.job_id) == run.epoch:
        run.stop_as(Stopping.FENCED)  # killed by the node's keeper (workers/keeper.py)
    run.end_sent = False
    try:
        ENDINGS[run.stopping](sup, run, code)
    except Exception as e:
        if run.end_sent or _is_io(e):  # written, or waiting in the outbox; or Redis itself: reconcile's
            raise
        log.exception("job %s: its end could not be described; recorded as failed", run.job_id)
        _end(sup, run, FAILED, code, f"ended with exit code {code}; dispatch could not record why "
                                     f"({type(e).__name__}: {e}): a bug to report")


def _is_io(e: Exception) -> bool:
    return isinstance(e, (redis.exceptions.RedisError, OSError))


def _end(sup, run: Running, state: str, code, reason: str, **kw) -> None:
    """Supervisor.finish of this attempt; a gang's rank says which rank ended (lua/finish.lua)."""
    run.end_sent = True  # (finish keeps it in the outbox if Redis does not take it)
    if run.ended_ms:
        kw.setdefault("at_ms", run.ended_ms)
    sup.finish(run.job_id, run.epoch, state, code, reason, rank=run.rank, **kw)


def _stale(sup, run: Running, code: int) -> None:
    log.warning("job %s: stale copy (epoch %d) stopped; outcome not reported", run.job_id, run.epoch)


def _cancelled(sup, run: Running, code: int) -> None:
    _end(sup, run, CANCELLED, code, run.command.get("reason") or "cancelled by user")


def _fenced(sup, run: Running, code: int) -> None:
    if code != -signal.SIGKILL:  # it ended on its own before the fence's kill (while its agent was stopped)
        _exited(sup, run, code)
        return
    _end(sup, run, PENDING, None,
               f"node {sup.node} could not heartbeat in time (cut off from Redis, or its agent "
               f"stopped); its copy was killed and the attempt lost",
               **lost_attempt(run.spec))


#: Why an interactive session that was stopped to go back to the queue ends instead: its terminal, its
#: shell's state and its user are gone, and a rerun would hold GPUs for a shell nobody attends.
NOT_AGAIN = "; an interactive session is not run again (dispatch shell starts a new one)"


def _requeued(sup, run: Running, code: int) -> None:
    why = run.command.get("reason") or f"node {sup.node} agent stopped"  # (a requeue command's: up stopped)
    if run.spec.interactive:
        _end(sup, run, FAILED, code, why + NOT_AGAIN)
        return
    _end(sup, run, PENDING, None, f"{why}; requeued", checkpointable=run.spec.checkpointable)


def _preempted(sup, run: Running, code: int) -> None:
    cmd = run.command
    why = f"preempted ({cmd.get('mode')}) by {cmd.get('by')}: {cmd.get('reason', '')}"
    if run.spec.interactive:
        _end(sup, run, FAILED, code, why + NOT_AGAIN)
        return
    _end(sup, run, PENDING, None, why, preempted=True, keep_wait=bool(cmd.get("keep_wait", True)),
               checkpointable=run.spec.checkpointable)


def _shrunk(sup, run: Running, code: int) -> None:
    keep = [int(g) for g in run.command.get("keep", [])]
    epoch = sup.scripts.shrink(run.job_id, sup.node, run.epoch, keep, now_ms())
    sup.client.publish(keys.events(sup.ns), b"finish")
    if epoch:
        log.info("job %s shrunk to GPUs %s; restarting", run.job_id, keep)
        # the shrink's new attempt is this node's own (shrink.lua moved the epoch, fenced): sealed here
        sup.launch(run.job_id, int(epoch), "" if sup.verifier is None else
                   seal_attempt(sup.verifier.secret, run.job_id, int(epoch), sup.node))


def _with_gang(sup, run: Running, code: int) -> None:
    _end(sup, run, PENDING, code, f"rank {run.rank} stopped with its gang", for_gang=True)


def _hung(sup, run: Running, code: int) -> None:
    _end(sup, run, PENDING, code,
               f"no progress reported for {run.spec.hang_timeout_s:.0f}s (--hang-timeout); attempt lost",
               **lost_attempt(run.spec))


def _timed_out(sup, run: Running, code: int) -> None:
    """Its --time ran out (Slurm's TIMEOUT): the job fails, whatever its exit; not requeued, not retried."""
    how = f"exit code {code}" if code >= 0 else f"killed by {signal_name(-code)}"
    _end(sup, run, FAILED, code, f"time limit {span(run.spec.time_limit_s)} reached (--time); stopped ({how})")


def _idle_session(sup, run: Running, code: int) -> None:
    """An interactive session nobody typed into for its --idle-timeout: ended, the job fails (not requeued)."""
    _end(sup, run, FAILED, code, f"interactive session idle for {span(run.spec.idle_timeout_s or 0)}")


#: Why a job may get a SIGKILL that dispatch did not send: it fails once, as in Slurm, and is not
#: rerun (the same command would run out of memory again).
UNSENT_KILL = " (not sent by dispatch: out of memory, or someone's kill -9)"


def _exited(sup, run: Running, code: int) -> None:
    """Nobody stopped it: its exit code says, and a signal that killed it fails the job, SIGKILL
    included (a gang's rank that failed loses the gang's attempt: the gang starts again from its
    checkpoint, within its retries)."""
    if code == 0:
        _end(sup, run, SUCCEEDED, 0, "", spec=run.spec)  # into its run history
    elif run.rank is not None:
        how = f"exit code {code}" if code > 0 else signal_name(-code)
        if code == -signal.SIGKILL:
            how += ", " + UNSENT_KILL.strip(" ()")  # (out of memory, most likely)
        _end(sup, run, PENDING, code, f"rank {run.rank} on {sup.node} ended ({how}); attempt lost", own_code=True,
             **lost_attempt(run.spec))
    elif code < 0:  # a SIGKILL too: every one dispatch sends is for a reason (ENDINGS), so this one was not
        _end(sup, run, FAILED, code, f"killed by signal {signal_name(-code)}"
             + (UNSENT_KILL if code == -signal.SIGKILL else ""), fail_retries=run.spec.fail_retries)
    else:  # (within its --retry-failed, finish.lua puts it back in the queue)
        _end(sup, run, FAILED, code, f"exit code {code}", fail_retries=run.spec.fail_retries)


#: What an end is recorded as, by why the attempt was stopped.
ENDINGS = {
    Stopping.NO: _exited,
    Stopping.STALE: _stale,
    Stopping.CANCEL: _cancelled,
    Stopping.FENCED: _fenced,
    Stopping.REQUEUE: _requeued,
    Stopping.PREEMPT: _preempted,
    Stopping.SHRINK: _shrunk,
    Stopping.GANG: _with_gang,
    Stopping.HUNG: _hung,
    Stopping.TIMEOUT: _timed_out,
    Stopping.IDLE_SESSION: _idle_session,
}
