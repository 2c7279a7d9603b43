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
from .connect import text
from .job_record import parse, queue_fields, queue_record, record_from_hash
from .jobs import attempt_view, record_view
from .quarantine import tolerant, valid_name
from .samples import SAMPLE_EVERY_MS, read_samples

#: Jobs per pipelined round trip.
BATCH = 1000
_END = ("state", "finished_ms")


def read_ended(client, ns: str, *, ended_since_ms: int | None = None, ended_until_ms: int | None = None,
               submitted_since_ms: int | None = None, batch: int = BATCH) -> tuple[list[dict], int]:
    """The views (job_view, with `attempts`) of the jobs in a final state that ended in the window and
    were submitted from `submitted_since_ms` on (None: no bound), oldest submit first; and how many
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
    return views, skipped


def _inside(finished_ms: int, since_ms: int | None, until_ms: int | None) -> bool:
    if not finished_ms:
        return False
    return (since_ms is None or finished_ms >= since_ms) and (until_ms is None or finished_ms <= until_ms)


def read_history(client, ns: str, since_ms: int | None = None) -> list[dict]:
    """Jobs submitted from `since_ms` on that ran to an end (succeeded, failed, or cancelled while they
    ran: with start and finish times), oldest first."""
    views, _ = read_ended(client, ns, submitted_since_ms=since_ms)
    return [j for j in views if j["started_at"] and j["finished_at"]]


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
