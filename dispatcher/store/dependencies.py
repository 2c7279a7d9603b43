"""Job dependencies: `--after` (start once these succeeded) and `--after-any` (once they ended).

A job may only wait for jobs that exist when it is submitted, so no cycle can
form; a dependency already failed or cancelled is refused at submit, since
`--after` could never be met. While a dependency runs or waits, the job is held:
the scheduler's mirror keeps it out of the policy's backlog (scheduler/mirror.py).
When a dependency of `--after` fails or is cancelled later, the scheduler fails
the job with that reason, and so on down the chain.
"""

from __future__ import annotations

from ..core.errors import InvalidRequestError
from ..core.model import FINAL_STATES, JobSpec
from . import job_record

READY, HELD, DOOMED = "ready", "held", "doomed"


def read_states(client, ns: str, ids) -> dict[str, tuple[str, str]]:
    """job id -> (state, why it ended) for the given jobs, in one round trip; state "" if no such job."""
    ids = list(dict.fromkeys(ids))
    pipe = client.pipeline(transaction=False)
    for job_id in ids:
        job_record.queue_fields(pipe, ns, job_id, job_record.OUTCOME)
    out = {}
    for job_id, reply in zip(ids, pipe.execute(raise_on_error=False)):
        if isinstance(reply, Exception):
            out[job_id] = ("", "")
            continue
        v = job_record.values(job_record.OUTCOME, reply)
        code = v["exit_code"]
        out[job_id] = (v["state"], v["reason"] or (f"exit code {code}" if code is not None else v["state"]))
    return out


def judge(spec: JobSpec, states: dict[str, tuple[str, str]]) -> tuple[str, str]:
    """(READY | HELD | DOOMED, why) for a job with dependencies, given their states (read_states)."""
    waiting = []
    for dep in spec.after:
        state, why = states.get(dep, ("", ""))
        if state in ("failed", "cancelled") or not state:
            what = f"{state}: {why}" if state else "no longer exists"
            return DOOMED, f"dependency job {dep} {what}"
        if state != "succeeded":
            waiting.append(f"job {dep} ({state}) to succeed")
    for dep in spec.after_any:
        state, _ = states.get(dep, ("", ""))
        if state and state not in FINAL_STATES:
            waiting.append(f"job {dep} ({state}) to end")
    if waiting:
        return HELD, "waits for " + ", ".join(waiting)
    return READY, ""


def judge_all(client, ns: str, specs) -> dict[str, tuple[str, str]]:
    """judge() for each of these specs, their dependencies' states read in one round trip."""
    states = read_states(client, ns, {d for s in specs for d in (*s.after, *s.after_any)})
    return {s.id: judge(s, states) for s in specs}


def check_dependencies(client, ns: str, specs) -> None:
    """At submit: every job waited for exists. Raises InvalidRequestError naming the first that does not.
    An `--after` job that has already failed or been cancelled is no error (a pipeline script must not
    work or break by timing, as Slurm's DependencyNeverSatisfied): the scheduler fails the new job at
    once with that reason, as it does when the dependency fails later."""
    deps = {d for s in specs for d in (*s.after, *s.after_any)}
    if not deps:
        return
    states = read_states(client, ns, deps)
    for spec in specs:
        for flag, ids in (("--after", spec.after), ("--after-any", spec.after_any)):
            for dep in ids:
                state, _ = states[dep]
                if not state:
                    raise InvalidRequestError(f"{flag}: there is no job {dep}", field=flag)

