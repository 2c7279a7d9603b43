"""The job hash (`<ns>:job:<id>`): its one field table, its typed record, and every Python read of it.

The table below is the job hash: every field, its type and who writes it. keys.py's docstring lists the
same fields, and tests/unit/test_job_record.py checks that the two agree and that the Lua scripts write
no other field. The scripts (store/lua/, called through store/scripts.py) write the record's state; the
few Python writes are here too. Readers either take the whole record (`read_record`, one decode of its
spec) or one of the named selections below, read with `queue_fields`/`values` (the agent's launch, its
recovery, the dependency check, the scheduler's mirror), so no module spells a field list of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, make_dataclass
from dataclasses import field as dataclass_field

import msgpack

from ..core.errors import MalformedRecord
from ..core.model import FAILED
from . import keys
from .codec import decode_spec
from .connect import text, tolerant


@dataclass(frozen=True)
class Field:
    name: str
    kind: type  # str, int, float; "gpus" and "spec" have their own parsing (below)
    writers: str
    meaning: str
    optional: bool = False  # absent reads as None (a measurement or prediction that may not exist)


FIELDS: tuple[Field, ...] = (
    Field("spec", bytes, "submit, update (store/pending.py)", "the msgpack JobSpec (store/codec.py)"),
    Field("seal", str, "submit and update under identity", "the leader's seal of the spec under its id (auth/identity.py)"),
    Field("state", str, "every job script", "pending, assigned, running, preempting, succeeded, failed, cancelled"),
    Field("node", str, "commit_placement", "the node holding it, while held"),
    Field("gpus", tuple, "commit_placement, shrink", "the GPU indices held, as text \"0,1\""),
    Field("attempt", int, "submit, finish, shrink", "attempts started so far"),
    Field("epoch", int, "submit, commit, finish, shrink, hold, update", "the fencing counter every write about the job checks"),
    Field("submit_ms", int, "submit", "when it was submitted"),
    Field("assigned_ms", int, "commit_placement, shrink", "when its current attempt was placed"),
    Field("started_ms", int, "mark_running", "when its current attempt started"),
    Field("finished_ms", int, "finish, cancel", "when it ended"),
    Field("exit_code", int, "finish", "its last exit code", optional=True),
    Field("reason", str, "scheduler (why it waits), finish, cancel", "why it waits or how it ended"),
    Field("verdict", bytes, "scheduler (with reason)", "the numbers behind the scheduler's reason (msgpack: reason, "
          "code, score, rank, terms, at_ms); stale once reason changes"),
    Field("pid", int, "mark_running", "the current attempt's main process on its node"),
    Field("cancel_ms", int, "cancel", "when a cancel of a held job was asked"),
    Field("cancel_reason", str, "cancel", "that cancel's reason (who asked), for an end it outruns"),
    Field("preempting_ms", int, "preempt", "when it was told to stop for another job"),
    Field("preempted_by", str, "preempt", "the job (or operator) it stops for"),
    Field("preempt_mode", str, "preempt", "checkpoint, kill or shrink"),
    Field("preempt_reason", str, "preempt", "why, in words"),
    Field("preemptions", int, "finish, shrink", "times preempted"),
    Field("last_preempted_ms", int, "finish", "when it was last preempted"),
    Field("gpu_s_lost", float, "finish, shrink", "GPU-seconds of work lost to preemption and node failures"),
    Field("checkpoint_ms", int, "checkpointed", "when the job last said it had checkpointed"),
    Field("lost", int, "finish", "attempts lost with their node"),
    Field("failures", int, "finish", "attempts that failed, counted against --retry-failed"),
    Field("pred_s", float, "submit", "predicted run time from the run history (core/predict.py)", optional=True),
    Field("pred_conf", float, "submit", "the prediction's confidence", optional=True),
    Field("pred_runs", int, "submit", "runs the prediction is from"),
    Field("pred_src", str, "submit", "fingerprint or user history"),
    Field("pred_mem_gb", float, "submit", "predicted peak GPU memory", optional=True),
    Field("plan_est_s", float, "submit", "the estimate the policy uses, when not the user's own", optional=True),
    Field("peak_gpu_mem_gb", float, "agent (workers/usage.py)", "the most GPU memory an attempt used", optional=True),
    Field("warning", str, "idle_warning", "the idle warning, while all its GPUs idle"),
    Field("idle_since_ms", int, "idle_warning", "since when its GPUs idle"),
    Field("gang", str, "commit_gang", "a gang's ranks while held (and of its last run), \"node:0,1;node:0,1\", rank 0 first"),
    Field("ranks_left", int, "commit_gang, finish", "a gang's ranks whose end is not recorded yet"),
    Field("ranks_ended", str, "finish", "a gang's ranks whose end is recorded, \"0,2,\""),
    Field("gang_end", bytes, "finish", "a gang's first end that was no success (msgpack): what the gang ends as"),
    Field("rendezvous", str, "rendezvous", "a gang's MASTER_ADDR:MASTER_PORT, chosen by rank 0's agent"),
    Field("progress_ms", int, "progress", "when a rank of the current attempt last reported progress"),
    Field("hold", str, "hold", "who held a pending job and when (\"alice 1700000000000\"; dispatch hold), \"\" if not"),
    Field("notify", str, "submit", "\"url\" or \"cmd\": the job has a --notify of that kind (cancel.lua queues a URL's)"),
    Field("notified", str, "the notifier (claim_notify)", "who told the job's end and when (\"node 1700000000000\"): once"),
    Field("notify_error", str, "the notifier (notify.failed)", "why telling the job's end failed (not retried)"),
    Field("log_path", str, "agent, as an attempt starts", "its node-side log file, on its node (rank 0's)"),
    Field("requeued", str, "requeue", "who last put the ended job back in the queue and when (\"alice 1700000000000\"; "
          "dispatch requeue)"),
    Field("fp", str, "submit", "its run history's fingerprint (core/predict.py): the scheduler's twins "
          "(store/spec_cache.py) without hashing each command again", optional=True),
)
NAMES = tuple(f.name for f in FIELDS)
_KIND = {f.name: f.kind for f in FIELDS}
_OPTIONAL = {f.name for f in FIELDS if f.optional}

#: The named selections readers take (each a subset of FIELDS; tests check it).
SCHEDULER = ("state", "epoch", "attempt", "node", "gpus", "assigned_ms", "started_ms", "checkpoint_ms",
             "last_preempted_ms", "plan_est_s", "gang", "ranks_ended", "hold", "fp", "preempted_by")  # the mirror's (scripts.read_jobs; the spec too until cached)
OUTCOME = ("state", "reason", "exit_code")  # a dependency's, a recent end's
NOTIFY = ("spec", "state", "reason", "exit_code", "notified")  # a notifier's, of an ended job
LAUNCH = ("spec", "epoch", "node", "gpus", "attempt", "cancel_ms", "state", "seal", "gang",
          "submit_ms", "checkpoint_ms")  # the agent's, at launch
RECOVERY = ("node", "epoch", "state", "started_ms", "spec", "assigned_ms", "gang", "submit_ms",
            "cancel_ms")  # a restarted agent's
PLACED = ("state", "node", "gpus")  # the index repair's
IDLE = ("warning", "idle_since_ms")  # the board's, of a running job
ENDED = ("state", "started_ms", "finished_ms", "reason", "exit_code")  # the leader's counters and recent ends
WHERE = ("state", "node", "epoch")  # a cancel's: is it held, and where
FENCE = ("state", "epoch", "cancel_ms", "progress_ms")  # the agent's check that a copy is still current
RENDEZVOUS = ("state", "epoch", "rendezvous")  # a gang's rank > 0 waiting for rank 0's address
SEARCH = ("state", "epoch", "node", "gpus", "submit_ms", "started_ms", "finished_ms")  # the dashboard's search


def parse(name: str, raw):
    """One field's stored bytes as its type (absent: str "", int/float 0, gpus (), an optional field None;
    the spec stays bytes).
    A value that is not a number of its kind reads as absent."""
    kind = _KIND[name]
    if kind is bytes:
        return raw
    value = text(raw)
    if kind is str:
        return value or ""
    try:
        if kind is tuple:
            return tuple(int(g) for g in value.split(",") if g.isascii() and g.isdigit())
        return kind(value) if value not in ("", None) else _absent(name)
    except (ValueError, OverflowError):
        return _absent(name)


def _absent(name: str):
    kind = _KIND[name]
    return None if name in _OPTIONAL else () if kind is tuple else kind()


#: A job hash read whole: `id`, the spec decoded once (None, with `spec_error`, when the stored spec
#: cannot be read), and every other field of FIELDS as an attribute of its type (absent: "", 0, (), or
#: None for an optional one). Made from the table, so the two cannot drift.
JobRecord = make_dataclass(
    "JobRecord",
    [("id", str), ("spec", "JobSpec | None"), ("spec_error", str)]
    + [(f.name, f.kind, dataclass_field(default=_absent(f.name))) for f in FIELDS if f.name != "spec"],
    frozen=True)
JobRecord.__module__ = __name__


#: The fields record_from_hash parses, by their stored name.
_PARSED = {n.encode(): n for n in NAMES if n != "spec"}


def record_from_hash(job_id: str, raw: dict, key: str | None = None):
    """The JobRecord of an HGETALL reply (bytes keys); `key` names the record in a malformed spec's error.
    Only the fields present are parsed (a record holds about a third of them); the others take the
    dataclass's defaults, which are what parse() gives an absent field."""
    values = {_PARSED[k]: parse(_PARSED[k], v) for k, v in raw.items() if k in _PARSED}
    try:
        return JobRecord(job_id, decode_spec(raw.get(b"spec"), key=key or f"job {job_id}"), "", **values)
    except MalformedRecord as e:
        return JobRecord(job_id, None, str(e), **values)


def queue_record(pipe, ns: str, job_id: str) -> None:
    """Queue the read of a whole record on `pipe`; its reply goes to record_from_hash."""
    pipe.hgetall(keys.job(ns, job_id))


def queue_fields(pipe, ns: str, job_id: str, selection: tuple[str, ...]) -> None:
    """Queue the read of one named selection (SCHEDULER, OUTCOME, ...) of a record on `pipe`."""
    pipe.hmget(keys.job(ns, job_id), *selection)


def values(selection: tuple[str, ...], reply) -> dict:
    """The reply to queue_fields as {name: typed value} (the spec stays bytes: decode it once, where used)."""
    return {n: parse(n, v) for n, v in zip(selection, reply)}


def placed_on(client, ns: str, node: str) -> list[str]:
    """The active jobs placed on `node`, GPUs or none (the node's allocation names only GPU holders):
    one pipeline over the active index."""
    ids = [text(i) for i in tolerant(lambda: client.zrange(keys.jobs_active(ns), 0, -1), []) or []]
    pipe = client.pipeline(transaction=False)
    for job_id in ids:
        pipe.hget(keys.job(ns, job_id), "node")
    return [job_id for job_id, at in zip(ids, pipe.execute(raise_on_error=False)) if at == node.encode()]


def read_fields(client, ns: str, job_id: str, selection: tuple[str, ...]) -> dict:
    return values(selection, client.hmget(keys.job(ns, job_id), *selection))


def set_reason(scripts, pipe, ns: str, job_id: str, reason: str | None, verdict: dict | None = None) -> None:
    """The scheduler's word on why a pending job waits (None: it has none now), with the numbers behind
    it (`verdict`: code, score, rank, terms, at_ms) for `dispatch why` to show without a policy run.
    Queued on `pipe` (lua/set_reason.lua): nothing is written on a job that is no longer pending, or
    that was held, since the cycle judged it."""
    packed = b"" if verdict is None or reason is None else msgpack.packb({**verdict, "reason": reason},
                                                                         use_bin_type=True)
    scripts.set_reason(keys.job(ns, job_id), reason or "", packed, client=pipe)


def verdict_of(rec) -> dict | None:
    """The scheduler's recorded verdict on a record, if it still explains the record's reason (a commit,
    an end or a hold rewrites the reason and leaves an old verdict behind); None otherwise."""
    if not rec.verdict or not rec.reason:
        return None
    try:
        v = msgpack.unpackb(rec.verdict, raw=False)
    except Exception:
        return None
    if not isinstance(v, dict) or v.get("reason") != rec.reason or not isinstance(v.get("code"), str):
        return None
    num = (int, float)
    return {"code": v["code"], "reason": rec.reason,
            "score": float(v["score"]) if isinstance(v.get("score"), num) else 0.0,
            "rank": int(v["rank"]) if isinstance(v.get("rank"), int) else None,
            "terms": {k: float(t) for k, t in v.get("terms", {}).items() if isinstance(k, str) and isinstance(t, num)}
            if isinstance(v.get("terms"), dict) else {},
            "at_ms": int(v["at_ms"]) if isinstance(v.get("at_ms"), int) else 0}


def set_failed(pipe, ns: str, job_id: str, reason: str, now_ms: int) -> None:
    """A record the scheduler cannot read, set aside as failed (its index entries are the caller's, but
    for the ended-jobs index, where it is listed as failed)."""
    pipe.hset(keys.job(ns, job_id), mapping={"state": FAILED, "reason": reason, "finished_ms": now_ms})
    pipe.zadd(keys.jobs_ended(ns, FAILED), {job_id: now_ms})


def set_log_path(client, ns: str, job_id: str, path: str) -> None:
    client.hset(keys.job(ns, job_id), "log_path", path)


def claim_notify(client, ns: str, job_id: str, who: str) -> bool:
    """Take the telling of the job's end (`who`: "<node or scheduler> <ms>"): True for the one caller that
    gets it, so an end is told once, whoever sees it (a gang's ranks, the scheduler's queue)."""
    return bool(client.hsetnx(keys.job(ns, job_id), "notified", who))


def set_peak_memory(pipe, ns: str, job_id: str, gb: float) -> None:
    pipe.hset(keys.job(ns, job_id), "peak_gpu_mem_gb", gb)


def gang_text(pieces) -> str:
    """A gang's ranks as the `gang` field holds them: (node, gpus) in rank order -> "n1:0,1;n2:0,1"."""
    return ";".join(f"{node}:{','.join(map(str, gpus))}" for node, gpus in pieces)


def gang_ranks(value: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The `gang` field as (node, gpus) in rank order; () for a one-node job (or an unreadable field)."""
    out = []
    for piece in (value or "").split(";"):
        node, sep, gpus = piece.partition(":")
        if not sep or not node:
            return () if piece else tuple(out)
        out.append((node, tuple(int(g) for g in gpus.split(",") if g.isascii() and g.isdigit())))
    return tuple(out)
