"""What the ids a user gives name: a job's id that job; an array's id (its first element's, as
`cancel 12` and `wait 12` take it) every element of the array; `12_5` element 5 of array 12. One
resolver for the commands that take ids (store/jobs.read_named), for --after at submit
(store/dependencies.expand_dependencies), and for the views of one job (record_id: `why`, `eta`, the
dashboard's job page and its cancel)."""

from __future__ import annotations

from ..core.arrays import element_name, is_number
from ..core.errors import InvalidRequestError, JobNotFound, MalformedRecord
from ..core.selection import expand_ids
from ..core.model import JobSpec
from . import job_record
from .codec import decode_spec

_NAMING = ("spec", *job_record.OUTCOME)  # whether a job exists (its state), and its array


def spec_of(reply) -> JobSpec | None:
    """The spec of a job record's (spec, ...) fields as read; None if absent or unreadable."""
    if isinstance(reply, Exception) or not reply or not isinstance(reply[0], bytes):
        return None
    try:
        return decode_spec(reply[0])
    except MalformedRecord:
        return None


def named_jobs(client, ns: str, given) -> dict[str, tuple[str, ...] | None]:
    """Each id given -> the ids of the jobs it names (an array's elements in index order), or None for
    none. Two round trips at most: the jobs given (an element's array), then the elements of the arrays
    among them."""
    heads = {dep: (element_name(dep) or (dep,))[0] for dep in given}
    read = list(dict.fromkeys(heads.values()))
    pipe = client.pipeline(transaction=False)
    for job_id in read:
        job_record.queue_fields(pipe, ns, job_id, _NAMING)
    found: dict[str, JobSpec | None] = {}  # a job that exists -> its spec (None: unreadable)
    for job_id, reply in zip(read, pipe.execute(raise_on_error=False)):
        if not isinstance(reply, Exception) and job_record.values(job_record.OUTCOME, reply[1:])["state"]:
            found[job_id] = spec_of(reply)
    arrays = {h: s for h, s in found.items()
              if s is not None and s.array_of == h and h.isdigit() and s.array_count > 1}
    members: dict[str, list[tuple[str, int | None]]] = {}  # an array's id -> its elements' (id, index), in order
    if arrays:
        pipe = client.pipeline(transaction=False)
        ids = [(h, str(int(h) + k)) for h, s in arrays.items() for k in range(s.array_count)]
        for _, job_id in ids:
            job_record.queue_fields(pipe, ns, job_id, ("spec",))
        for (h, job_id), reply in zip(ids, pipe.execute(raise_on_error=False)):
            spec = spec_of(reply)
            if spec is not None and spec.array_of == h:
                members.setdefault(h, []).append((job_id, spec.array_index))
    out: dict[str, tuple[str, ...] | None] = {}
    for dep, head in heads.items():
        element = element_name(dep)
        if head not in found:
            out[dep] = None
        elif element is None:  # a job, or an array whole
            out[dep] = tuple(i for i, _ in members.get(head, ())) or (head,)
        else:  # ID_INDEX: that element of the array (an array of one: its id)
            index = element[1]
            spec = found[head]
            one = spec is not None and spec.array_of == head and spec.array_count == 1 and spec.array_index == index
            out[dep] = (head,) if one else next(((i,) for i, n in members.get(head, ()) if n == index), None)
    return out


def record_id(client, ns: str, given: str) -> str:
    """The id of the job record `given` names when it names one job: `12_5` element 5 of array 12's
    record (JobNotFound if the array has no such element); any other text as it is, for its reader to
    find or not (an array's id is its first element's record)."""
    if element_name(given) is None:
        spelled = expand_ids([given])
        if len(spelled) > 1:  # (a range, a list, an array's elements)
            raise InvalidRequestError(f"{given} names several jobs; this command takes one (`dispatch queue -t all "
                                      f"{given}` lists them)", field="JOB")
        if spelled[0] != given:  # one element as queue shows it, 12_[5]
            return record_id(client, ns, spelled[0])
        return str(int(given)) if is_number(given) else given  # (0012: job 12, as 12_05 is 12_5)
    ids = named_jobs(client, ns, [given])[given]
    if not ids:
        raise JobNotFound(given)
    return ids[0]
