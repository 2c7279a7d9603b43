"""Job dependencies: `--after` (start once these succeeded) and `--after-any` (once they ended).

A job may only wait for jobs that exist when it is submitted, so no cycle can
form. At submit each id given is replaced by the jobs it names (expand_dependencies):
an array's id (its first element's, as `cancel 12` and `wait 12` take it) by every
element of the array, as Slurm's afterok:ARRAY and afterany:ARRAY; `12_5` by that
element; any other id by that job. The stored spec holds job ids only, so all that
follows treats an array's elements as so many jobs. A dependency already failed or
cancelled is no error at submit: the job fails at once, as below.
While a dependency runs or waits, the job is held: the scheduler's mirror keeps it
out of the policy's backlog (scheduler/mirror.py). When a dependency of `--after`
fails or is cancelled later (for an array: any one element), the scheduler fails
the job with that reason, and so on down the chain.
"""

from __future__ import annotations

from ..core.arrays import MAX_WAITED, element_of, ranges
from ..core.errors import InvalidRequestError
from ..core.model import FINAL_STATES, JobSpec
from . import job_record
from .naming import named_jobs, spec_of

READY, HELD, DOOMED = "ready", "held", "doomed"
#: The runs of ids a held job's reason lists for one state, then "and N more".
LISTED = 6


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


def _failed(spec: JobSpec, states: dict[str, tuple[str, str]]) -> str | None:
    """The first job of spec's --after that failed, was cancelled or is gone; None if none."""
    for dep in spec.after:
        state = states.get(dep, ("", ""))[0]
        if state in ("failed", "cancelled") or not state:
            return dep
    return None


def judge(spec: JobSpec, states: dict[str, tuple[str, str]], names=None) -> tuple[str, str]:
    """(READY | HELD | DOOMED, why) for a job with dependencies, given their states (read_states).
    `names`: how to call a dependency in the reason (an array's element: `12_5`), else by its id."""
    names = names or {}
    dep = _failed(spec, states)
    if dep is not None:
        state, why = states.get(dep, ("", ""))
        what = f"{state}: {why}" if state else "no longer exists"
        return DOOMED, f"dependency job {names.get(dep, dep)} {what}"
    succeed = [(d, states[d][0]) for d in spec.after if states[d][0] != "succeeded"]
    end = [(d, s) for d in spec.after_any for s in [states.get(d, ("", ""))[0]] if s and s not in FINAL_STATES]
    waiting = [f"{_listed(items, names)} to {verb}" for items, verb in ((succeed, "succeed"), (end, "end")) if items]
    if waiting:
        return HELD, "waits for " + ", ".join(waiting)
    return READY, ""


def _listed(items: list[tuple[str, str]], names: dict[str, str]) -> str:
    """[(id, state)] -> 'job 12 (running), jobs 13-40 (pending)': by state, in the order first met; an
    array's elements by their names, 'jobs 12_[0-3] (pending)'."""
    by_state: dict[str, list[str]] = {}
    for dep, state in items:
        by_state.setdefault(state, []).append(names.get(dep, dep))
    return ", ".join(f"{'job' if len(ids) == 1 else 'jobs'} {_ids(ids)} ({state})" for state, ids in by_state.items())


def _ids(ids: list[str]) -> str:
    """Job ids as ranges (13-40), elements of one array as Slurm writes them (12_[0-3]), at most LISTED
    runs of them."""
    if all(i.isdigit() for i in ids):
        return ranges(map(int, ids), LISTED, steps=False)
    arrays = {i.partition("_")[0] for i in ids}
    if len(arrays) == 1 and all(i.partition("_")[2].isdigit() for i in ids):
        indices = [int(i.partition("_")[2]) for i in ids]
        return ids[0] if len(ids) == 1 else f"{arrays.pop()}_[{ranges(indices, LISTED, steps=False)}]"
    return ",".join(ids[:LISTED]) + (f" and {len(ids) - LISTED} more" if len(ids) > LISTED else "")


def judge_all(client, ns: str, specs, known=None) -> dict[str, tuple[str, str]]:
    """judge() for each of these specs, their dependencies' states read in one round trip (and, only
    when one failed, how a failed array element is called: one more). `known`: job id -> spec of the
    jobs the caller holds (the queue's), which name the array elements waited for (12_5) without a read."""
    deps = {d for s in specs for d in (*s.after, *s.after_any)}
    states = read_states(client, ns, deps)
    names = {d: name for d in deps for name in [element_of((known or {}).get(d))] if name}
    failed = {d for d in (_failed(s, states) for s in specs) if d is not None} - names.keys()
    if failed:
        names.update(element_names(client, ns, failed))
    return {s.id: judge(s, states, names) for s in specs}


def element_names(client, ns: str, ids) -> dict[str, str]:
    """Of these jobs, the elements of an array: id -> `12_5` (array id _ index)."""
    ids = list(ids)
    pipe = client.pipeline(transaction=False)
    for job_id in ids:
        job_record.queue_fields(pipe, ns, job_id, ("spec",))
    out = {}
    for job_id, reply in zip(ids, pipe.execute(raise_on_error=False)):
        if name := element_of(spec_of(reply)):
            out[job_id] = name
    return out


def expand_dependencies(client, ns: str, specs: list[JobSpec]) -> list[JobSpec]:
    """At submit: the specs, with each id they wait for replaced by the jobs it names (an array's id:
    every element, in index order; `12_5`: that element; another id: that job). Raises
    InvalidRequestError naming the first id that names no job (`--after: there is no job 25_3`), or a
    list past MAX_WAITED jobs. An `--after` job that has already failed or been cancelled is no error (a
    pipeline script must not work or break by timing, as Slurm's DependencyNeverSatisfied): the
    scheduler fails the new job at once with that reason, as it does when the dependency fails later."""
    given = {d for s in specs for d in (*s.after, *s.after_any)}
    if not given:
        return specs
    named = named_jobs(client, ns, given)
    done: dict[tuple, tuple] = {}  # (after, after_any) given -> as stored: an array's elements share it
    out = []
    for spec in specs:
        key = (spec.after, spec.after_any)
        if key not in done:
            done[key] = tuple(_expanded(flag, ids, named) for flag, ids in (("--after", spec.after),
                                                                            ("--after-any", spec.after_any)))
        after, after_any = done[key]
        out.append(spec if (after, after_any) == key else spec.filled(after=after, after_any=after_any))
    return out


def _expanded(flag: str, ids: tuple[str, ...], named: dict[str, tuple[str, ...] | None]) -> tuple[str, ...]:
    jobs: dict[str, None] = {}
    for dep in ids:
        got = named[dep]
        if got is None:
            raise InvalidRequestError(f"{flag}: there is no job {dep}", field=flag)
        jobs.update(dict.fromkeys(got))
    if len(jobs) > MAX_WAITED:
        raise InvalidRequestError(f"{flag}: {','.join(ids)} name {len(jobs):,} jobs (an array's elements counted "
                                  f"one by one); at most {MAX_WAITED:,}", field=flag)
    return tuple(jobs)
