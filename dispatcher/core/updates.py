"""`dispatch update`: what may change in a pending job, checked as submit checks it. Pure."""

from __future__ import annotations

from .errors import InvalidRequestError
from .model import JobSpec
from .spec import check_options

#: The flags update takes (Slurm's `scontrol update` on a pending job: Priority, TimeLimit, StartTime, and the
#: estimate dispatch plans with). "begin" is an instant (ms, in digits) already: dispatcher/begin.py reads the text.
UPDATABLE = ("priority", "est", "time", "begin")
#: What may change on a running job too (scontrol update TimeLimit= of a running job): its node's agent
#: moves the attempt's timer, counted from its start as before.
ON_RUNNING = ("time",)


def amended(spec: JobSpec, changes: dict) -> JobSpec:
    """`spec` with `changes` (of UPDATABLE: text as the flags take it) made, each checked as at submit,
    against the job's other fields (a --time not shorter than its --grace)."""
    unknown = sorted(set(changes) - set(UPDATABLE))
    if unknown:
        raise InvalidRequestError(f"{unknown[0]!r} cannot be updated; only {', '.join(UPDATABLE)}", field=unknown[0])
    if not changes:
        raise InvalidRequestError("nothing to update: give --priority, --est, --time or --begin", field="--priority")
    checked = check_options(user=spec.user, grace=spec.grace_s, priority=changes.get("priority", spec.priority),
                            est=changes.get("est"), time=changes.get("time", spec.time_limit_s),
                            begin=changes.get("begin", spec.begin_ms))
    values = {"priority": checked["priority"], "time_limit_s": checked["time_limit_s"], "begin_ms": checked["begin_ms"]}
    if "est" in changes:
        values["est_s"] = checked["est_s"]
    return spec.filled(**values)
