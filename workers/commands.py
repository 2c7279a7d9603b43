"""Carrying out a node's control commands (dispatcher/store/control.py): cancel, preempt, shrink, time,
requeue.

Each of the first three stops its attempt for its reason (Running.stop_as, workers/running.py); its end
is recorded by that reason (workers/outcomes.py). time moves a running attempt's --time timer."""

from __future__ import annotations

import logging
import signal
import time

from dispatcher.store import control, job_record

from .running import Stopping

#: The longest grace a requeue gives a job (its checkpoint signal, then SIGKILL), as an agent's stop.
STOP_S = 10.0

log = logging.getLogger("dispatch.agent")


def handle(sup, entry_id, cmd: dict) -> None:
    """Carry out one control command; it is acked once the job is down (or at once if moot)."""
    kind, job_id = cmd.get("type"), str(cmd.get("job", ""))
    with sup.lock:
        run = sup.running.get(job_id)
    if kind not in control.COMMANDS:
        log.error("unknown control command %r for job %s; dropped", kind, job_id)
    elif run is None or run.stopping is Stopping.STALE or (cmd.get("epoch") is not None
                                                    and int(cmd["epoch"]) != run.epoch):
        log.info("control %s for job %s: not running here at epoch %s; nothing to do", kind, job_id,
                 cmd.get("epoch"))
    elif run.stopping:  # already on its way down: this command is done when it is
        run.acks.append(entry_id)
        if kind == "cancel":  # a cancel wins over any other reason (but stale)
            run.stop_as(Stopping.CANCEL, cmd)
            if time.monotonic() - run.stopping_since > run.spec.grace_s:  # past its grace and still here (a
                # kill that found none of its processes): a cancel sent again kills it now, as a second scancel
                sup.stop_run(run, 0, signal.SIGKILL)
                log.warning("job %s: still running %.0fs after it was asked to stop; killed now by a cancel sent "
                            "again", job_id, time.monotonic() - run.stopping_since)
        elif cmd.get("mode") == "forced":  # `preempt --force` in a grace: kill it now, for the reason it stops
            sup.stop_run(run, 0, signal.SIGKILL)
            log.info("job %s: stopping (%s); killed now by a forced %s from %s", job_id, run.stopping.value, kind,
                     cmd.get("by", "a user"))
        return
    elif kind == "time":  # `dispatch update --time` of a running job: its timer moved, from its start as before
        limit = cmd.get("time_s")  # (a number of seconds, or None: control.malformed checked it)
        with sup.lock:
            run.spec = run.spec.filled(time_limit_s=None if limit is None else float(limit))
        sup.time_limit(run)
        log.info("job %s: its time limit is now %s", job_id, f"{limit:.0f}s" if run.spec.time_limit_s else "none")
    elif kind in ("preempt", "shrink") and not _marked_preempting(sup, run):
        log.warning("control %s for job %s: its record is not marked preempting at epoch %d; ignored",
                    kind, job_id, run.epoch)
    else:
        run.acks.append(entry_id)
        if kind == "cancel":
            run.stop_as(Stopping.CANCEL, cmd)
            sup.stop_run(run, run.spec.grace_s)
        elif kind == "requeue":  # as at this agent's own stop (Supervisor.stop_all); forced: as its hurry
            run.stop_as(Stopping.REQUEUE, cmd)
            sup.stop_run(run, 0.0 if cmd.get("mode") == "forced" else min(run.spec.grace_s, STOP_S),
                         signal.SIGKILL if cmd.get("mode") == "forced" else signal.SIGTERM)
        elif cmd.get("mode") == "forced":
            run.stop_as(Stopping.PREEMPT, cmd)
            sup.stop_run(run, 0, signal.SIGKILL)
        else:
            run.stop_as(Stopping.SHRINK if kind == "shrink" else Stopping.PREEMPT, cmd)
            sup.stop_run(run, run.spec.grace_s, run.checkpoint_signal)
        log.info("job %s: %s %s by %s", job_id, kind, cmd.get("mode", ""), cmd.get("by") or cmd.get("reason") or "a user")
        return
    control.ack(sup.client, sup.ns, sup.node, entry_id)

def _marked_preempting(sup, run) -> bool:
    """A preempt command counts only if its mark took (preempt.lua): a scheduler that lost
    its lease, or a plan that went stale, sends the command but its mark is refused."""
    r = job_record.read_fields(sup.client, sup.ns, run.job_id, job_record.FENCE)
    return r["state"] == "preempting" and r["epoch"] == run.epoch
