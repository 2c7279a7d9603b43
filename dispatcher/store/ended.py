"""Ended jobs, read in bounded batches: what `dispatch history` exports and `dispatch report` adds up.

The all-jobs index is scored by submit time, so a job that ended in a window may have been submitted
long before it: read_ended takes the ids submitted before the window's end, and reads them BATCH at a
time in two pipelined round trips per batch: the state and end time of each (small replies), then the
whole record and the attempts of those that ended in the window. A report over 100,000 ended jobs is
some hundreds of round trips, never one per job. A record that is not a hash, or whose spec cannot be
read, is skipped and counted (the leading scheduler sets such keys aside: store/quarantine.py).
"""

from __future__ import annotations

from ..core.model import FINAL_STATES
from . import keys
from .connect import text, tolerant
from .job_record import parse, queue_fields, queue_record, record_from_hash
from .jobs import attempt_view, oldest_first, record_view
from .quarantine import valid_name
from .samples import SAMPLE_EVERY_MS, read_samples

#: Jobs per pipelined round trip.
BATCH = 1000
_END = ("state", "finished_ms")


def read_ended(client, ns: str, *, ended_since_ms: int | None = None, ended_until_ms: int | None = None,
               submitted_since_ms: int | None = None, batch: int = BATCH) -> tuple[list[dict], int]:
    """The views (job_view, with `attempts`) of the jobs in a final state that ended in the window and
    were submitted from `submitted_since_ms` on (None: no bound), oldest submit first (ties by numeric id,
    not as Redis orders them, as text); and how many
    records were skipped as unreadable."""
    lo = submitted_since_ms if submitted_since_ms is not None else "-inf"
    hi = ended_until_ms if ended_until_ms is not None else "+inf"
    ids = [text(i) for i in tolerant(lambda: client.zrangebyscore(keys.jobs_all(ns), lo, hi), [])]
    ids = [i for i in ids if valid_name(i)]
    views, skipped = [], 0
    for at in range(0, len(ids), batch):
        part = ids[at:at + batch]
        pipe = client.pipeline(transaction=False)
        for job_id in part:
            queue_fields(pipe, ns, job_id, _END)
        ended = []
        for job_id, reply in zip(part, pipe.execute(raise_on_error=False)):
            if isinstance(reply, Exception):
                skipped += 1
                continue
            state, finished = text(reply[0]), parse("finished_ms", reply[1])
            if state in FINAL_STATES and _inside(finished, ended_since_ms, ended_until_ms):
                ended.append(job_id)
        if not ended:
            continue
        pipe = client.pipeline(transaction=False)
        for job_id in ended:
            queue_record(pipe, ns, job_id)
            pipe.lrange(keys.job_attempts(ns, job_id), 0, -1)
        replies = pipe.execute(raise_on_error=False)
        for job_id, raw, attempts in zip(ended, replies[::2], replies[1::2]):
            if not raw or not isinstance(raw, dict):
                skipped += bool(raw)  # gone since the first read: not a bad record
                continue
            rec = record_from_hash(job_id, raw)
            if rec.spec is None:  # its spec is unreadable
                skipped += 1
                continue
            view = record_view(rec)
            view["attempts"] = [attempt_view(a) for a in attempts] if isinstance(attempts, list) else []
            views.append(view)
    return oldest_first(views), skipped


def _inside(finished_ms: int, since_ms: int | None, until_ms: int | None) -> bool:
    if not finished_ms:
        return False
    return (since_ms is None or finished_ms >= since_ms) and (until_ms is None or finished_ms <= until_ms)


def read_first_attempts(client, ns: str, job_ids: list[str]) -> dict[str, list[dict]]:
    """The first ended attempt (attempt_view, in a list as a view's `attempts`) of each of these jobs that
    has one: what a requeued or preempted job's wait counts to (core.accounting.queue_wait). One round trip."""
    if not job_ids:
        return {}
    pipe = client.pipeline(transaction=False)
    for job_id in job_ids:
        pipe.lindex(keys.job_attempts(ns, job_id), 0)
    return {j: [attempt_view(raw)] for j, raw in zip(job_ids, pipe.execute(raise_on_error=False))
            if isinstance(raw, bytes)}


def read_history(client, ns: str, since_ms: int | None = None, *, ran_only: bool = True) -> list[dict]:
    """Jobs submitted from `since_ms` on that ran to an end (succeeded, failed, or cancelled while they
    ran: with start and finish times), oldest first; without `ran_only`, those that ended without
    starting too (a command that could not start, a failed dependency, cancelled while pending)."""
    from ..core.accounting import first_start

    views, _ = read_ended(client, ns, submitted_since_ms=since_ms)  # (ran: in any attempt, a preempted one too)
    return [j for j in views if j["finished_at"] and (first_start(j) is not None or not ran_only)]


def read_accounting(client, ns: str, since_ms: int, until_ms: int) -> dict:
    """What `dispatch report` adds up: the jobs that ended in the window, the records skipped, the GPU
    types of the nodes known now ((node, index) -> name), and the idle samples of the window."""
    from .nodes import read_nodes

    jobs, skipped = read_ended(client, ns, ended_since_ms=since_ms, ended_until_ms=until_ms)
    nodes, _ = read_nodes(client, ns)
    types = {(n.name, g.index): g.name for n in nodes for g in n.gpus}
    samples = [s for s in read_samples(client, ns, since_ms) if s["t_ms"] <= until_ms]
    return {"jobs": jobs, "skipped": skipped, "types": types, "samples": samples,
            "sample_s": SAMPLE_EVERY_MS / 1000}


# -- the ended-jobs indexes (keys.jobs_ended: one per final state, id -> finished_ms) ------------------
#: Ended jobs read at most per page asked for with a user filter (newest first, `batch` at a time).
LOOK_LIMIT = 5000


def newest_ended(client, ns: str, states=FINAL_STATES, batch: int = 200):
    """(job id, finished_ms) of the ended jobs in `states`, newest end first, the indexes merged as they
    are read: one round trip per `batch` entries of an index, never a read of a whole index."""
    import heapq

    def walk(state):
        key, at = keys.jobs_ended(ns, state), 0
        while True:
            got = tolerant(lambda: client.zrevrange(key, at, at + batch - 1, withscores=True), [])
            for member, score in got:
                yield -score, text(member)
            if len(got) < batch:
                return
            at += batch

    for neg, job_id in heapq.merge(*(walk(s) for s in states)):
        yield job_id, int(-neg)


def ended_ids(client, ns: str, states=FINAL_STATES, *, user: str = "", skip: int = 0, count: int = 25,
              look: int = LOOK_LIMIT) -> dict:
    """One page of the ended jobs in `states`, newest end first: `ids` (at most `count`, after the first
    `skip`), `total` (how many ended so: without a user, the indexes' sizes; with one, None: not counted),
    `more` (whether a next page has any), `looked` (entries read) and `cut` (with a user: `look`
    entries were read before the page filled; older ones were not looked at). Without a user it costs
    one round trip per index of (skip + count) ids; with one, the records' users are read in batches as
    the indexes are walked, at most `look` of them."""
    if not user:
        need = skip + count + 1  # one more: is there a next page
        pipe = client.pipeline(transaction=False)
        for s in states:
            pipe.zrevrange(keys.jobs_ended(ns, s), 0, need - 1, withscores=True)
            pipe.zcard(keys.jobs_ended(ns, s))
        got = pipe.execute(raise_on_error=False)
        merged = sorted(((score, text(m)) for part in got[::2] if isinstance(part, list) for m, score in part),
                        key=lambda e: (-e[0], -int(e[1]) if e[1].isdigit() else 0))
        total = sum(n for n in got[1::2] if isinstance(n, int))
        ids = [i for _, i in merged[skip:skip + count]]
        return {"ids": ids, "total": total, "more": len(merged) > skip + count, "looked": len(merged), "cut": False}
    ids, matched, looked = [], 0, 0
    for chunk in _chunks(newest_ended(client, ns, states), look):
        looked += len(chunk)
        for job_id, owner in zip(chunk, _users(client, ns, chunk)):
            if owner != user:
                continue
            if matched == skip + count:
                return {"ids": ids, "total": None, "more": True, "looked": looked, "cut": False}
            if matched >= skip:
                ids.append(job_id)
            matched += 1
    return {"ids": ids, "total": None, "more": False, "looked": looked, "cut": looked >= look}


def _chunks(walk, look: int, size: int = 200):
    """The ids `walk` gives, `size` at a time, the first `look` of them."""
    chunk: list[str] = []
    for n, (job_id, _) in enumerate(walk, 1):
        chunk.append(job_id)
        if len(chunk) == size or n == look:
            yield chunk
            chunk = []
        if n == look:
            return
    if chunk:
        yield chunk


def _users(client, ns: str, ids: list[str]) -> list[str | None]:
    """Each job's user, read from its spec in one round trip (None: gone, or unreadable)."""
    from .codec import decode_spec

    pipe = client.pipeline(transaction=False)
    for job_id in ids:
        pipe.hget(keys.job(ns, job_id), "spec") if valid_name(job_id) else pipe.echo("")
    out = []
    for raw in pipe.execute(raise_on_error=False):
        try:
            out.append(decode_spec(raw).user if isinstance(raw, bytes) and raw else None)
        except Exception:  # an unreadable record is nobody's (the scheduler sets it aside)
            out.append(None)
    return out


def requeue_job(scripts, client, ns: str, job_id: str, who: str, now_ms: int) -> str:
    """Put an ended job back in the queue under its id, as a new attempt (lua/requeue.lua), as `who`:
    returns "requeued". Raises JobNotFound, or InvalidStateError (saying its state) for a job that has
    not ended."""
    from ..core.errors import InvalidStateError, JobNotFound
    from .job_record import read_fields
    from .scripts import Outcome

    if not valid_name(job_id):
        raise JobNotFound(job_id)
    code = scripts.requeue(job_id, now_ms, f"{who} {now_ms}", f"requeued by {who}")
    if code == Outcome.NO_JOB:
        raise JobNotFound(job_id)
    if code == Outcome.NOT_ENDED:
        raise InvalidStateError(job_id, read_fields(client, ns, job_id, ("state",))["state"] or "gone", "requeue")
    client.publish(keys.events(ns), b"requeue")
    return "requeued"
