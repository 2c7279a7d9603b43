"""Job records in Redis: submit, read, cancel and preempt (their logs: store/logs.py).

A job is one hash (keys.job): the immutable msgpack spec under `spec` plus the
mutable state fields of store/job_record.py. Submitting writes the hashes and adds the
ids to the pending and all-jobs indexes with lua/submit.lua, in one MULTI/EXEC.
"""

from __future__ import annotations

from ..core.arrays import NEW, element_name, first_ids, is_number, label
from ..core.errors import DispatcherError, InvalidRequestError, JobNotFound, MalformedRecord, exit_fields
from ..core.model import FINAL_STATES, JobSpec
from ..core.outputs import is_url, output_path
from ..core.predict import fingerprint
from . import control, counters, keys, scripts
from .codec import encode_spec
from .connect import text, tolerant, wrong_type
from .dependencies import expand_dependencies
from .history import Predictor, plan_estimate
from .job_record import gang_ranks, queue_record, read_fields, record_from_hash, verdict_of
from .logs import LOG_CHUNK, append_log, log_trimmed, read_log, read_log_tail  # noqa: F401 (their home)
from .naming import named_jobs
from .pending import held_fields
from .quarantine import valid_name
from .scripts import Outcome


def write_jobs(client, ns: str, specs: list[JobSpec], *, sealed=None, also=None, held_by: str = "") -> list[str]:
    """Submit specs (their id is assigned here); returns the new ids, in order; `held_by` holds them.

    `sealed(job_id, spec_bytes)`: under identity, the leader's seal of each stored spec under its id
    (identity.seal_job), kept so that agents check it before they start the job; `also(pipe, ids)` adds
    writes to the same transaction."""
    if not specs:
        return []
    if any(s.array_of and not s.array_of.startswith(NEW) for s in specs):
        raise InvalidRequestError("an array's elements are submitted together with --array; a job cannot join "
                                  "an array that exists", field="--array")
    specs = expand_dependencies(client, ns, specs)  # an array's id: its elements (store/dependencies.py)
    predictor = Predictor(ns)  # the ids and the run histories of the jobs' fingerprints: one round trip
    read = client.pipeline(transaction=False)
    read.incrby(keys.job_seq(ns), len(specs))
    predictor.queue(read, specs)
    replies = read.execute(raise_on_error=False)  # a history key of the wrong type is no history
    if isinstance(replies[0], Exception):
        raise replies[0]
    last, predicted = replies[0], predictor.fields(replies[1:])
    ids = [str(last - len(specs) + 1 + i) for i in range(len(specs))]
    firsts = first_ids(specs, ids)  # an array is named by its first element's id (core/arrays.py)
    pipe = client.pipeline(transaction=True)
    # One script call per CHUNK jobs, all in one MULTI: the batch is written atomically, and no call runs
    # long enough for the server to answer other clients BUSY while a huge batch is written.
    for chunk in scripts.chunks(len(ids)):
        args: list = []
        for job_id, spec, extra in zip(ids[chunk], specs[chunk], predicted[chunk]):
            if spec.array_of:
                spec = spec.filled(array_of=firsts[spec.array_of])
            stored = encode_spec(spec, job_id)
            fields = [b"spec", stored]
            if spec.notify:  # cancel.lua queues a URL's end for the leading scheduler (dispatcher/notify.py)
                fields += (b"notify", b"url" if is_url(spec.notify) else b"cmd")
            if extra:
                fields += (x for kv in extra.items() for x in kv)
            if sealed is not None:
                fields += (b"seal", sealed(job_id, stored))
            if held_by:
                fields += held_fields(held_by, spec.submit_ms, label({"id": job_id, "array_of": spec.array_of, "array_index": spec.array_index}))
            args += (job_id, spec.submit_ms, len(fields) // 2, *fields)
        scripts.submit(pipe, ns, ids[chunk], args)
    if also is not None:
        also(pipe, ids)
    pipe.publish(keys.events(ns), b"submit")
    try:
        pipe.execute()
    except Exception as e:
        if wrong_type(e):  # nothing was written (submit.lua checks first)
            raise DispatcherError(f"cannot submit: {str(e).partition('WRONGTYPE ')[2] or e}; the scheduler sets "
                                  f"it aside within seconds (see {keys.quarantine(ns)}): submit again") from None
        raise
    return ids


def job_view(job_id: str, raw: dict) -> dict:
    """A job hash as the plain dict `dispatch show --json` prints (times in epoch seconds)."""
    return record_view(record_from_hash(job_id, raw))


def record_view(rec) -> dict:
    """job_view of a JobRecord already read."""
    job_id, spec = rec.id, rec.spec

    def secs(ms: int) -> float | None:
        return ms / 1000.0 if ms else None

    requeued_by, _, requeued_ms = rec.requeued.rpartition(" ")
    return {
        "id": job_id,
        "name": spec.name if spec else "",
        "state": rec.state or "unknown",
        "user": spec.user if spec else "",
        "team": spec.team if spec else "",
        "priority": spec.priority if spec else "",
        "command": list(spec.command) if spec else [],
        "gpus_requested": spec.gpus if spec else 0,
        "gpu_types": list(spec.gpu_types) if spec else [],
        "gpu_mem_gb": spec.gpu_mem_gb if spec else 0,
        "cpus": spec.cpus if spec else 0, "mem_gb": spec.mem_gb if spec else 0,
        "share": spec.share if spec else False,  # --share
        "est_s": spec.est_s if spec else None,
        "checkpointable": spec.checkpointable if spec else False,
        "after": list(spec.after) if spec else [],
        "after_any": list(spec.after_any) if spec else [],
        "node": rec.node or None,
        "gpus": list(rec.gpus),
        # a gang: every rank's node and GPUs, rank 0 first (its current run's, or its last one's)
        "ranks": [[node, list(gpus)] for node, gpus in gang_ranks(rec.gang)],
        "nodes": spec.nodes if spec else 0, "gpus_per_node": spec.gpus_per_node if spec else 0,
        "hang_timeout_s": spec.hang_timeout_s if spec else None,
        "time_limit_s": spec.time_limit_s if spec else None,  # --time
        "begin_at": secs(spec.begin_ms) if spec else None,  # --begin: not started before
        # an element of a job array (--array): the array's id, this element's index, the array's size and cap
        "array_of": spec.array_of if spec else "",
        "array_index": spec.array_index if spec else None,
        "array_count": spec.array_count if spec else 0,
        "array_limit": spec.array_limit if spec else 0,
        "attempt": rec.attempt,
        "epoch": rec.epoch,
        "submitted_at": secs(rec.submit_ms),
        "assigned_at": secs(rec.assigned_ms),
        "started_at": secs(rec.started_ms),
        "finished_at": secs(rec.finished_ms),
        "exit_code": rec.exit_code, **exit_fields(rec.exit_code),  # -9; and 137, "SIGKILL"
        # who held it (dispatch hold), and when
        "hold": _who(rec.hold), "held_at": _when(rec.hold),
        # who last put it back in the queue after it ended, and when (dispatch requeue)
        "requeued_by": requeued_by or None,
        "requeued_at": secs(int(requeued_ms)) if requeued_ms.isdigit() else None,
        "reason": rec.reason or rec.spec_error,
        "verdict": verdict_of(rec),  # the scheduler's numbers behind its reason, while they still hold
        "cancel_requested": bool(rec.cancel_ms),
        "cancel_requested_at": secs(rec.cancel_ms),  # the first cancel sent to its node; SIGKILL after grace_s
        "grace_s": spec.grace_s if spec else None,
        "min_gpus": spec.min_gpus if spec else None,
        "preemptions": rec.preemptions,
        "gpu_s_lost": round(rec.gpu_s_lost, 1),
        "preempted_by": rec.preempted_by or None,
        "preempt_mode": rec.preempt_mode or None,
        "preempt_reason": rec.preempt_reason or None,
        "last_preempted_at": secs(rec.last_preempted_ms),
        "checkpoint_at": secs(rec.checkpoint_ms),
        "retries": spec.retries if spec else None, "lost": rec.lost,  # and --retry-failed's budget, what it spent
        "retry_failed": spec.fail_retries if spec else None, "failures": rec.failures,
        "fingerprint": fingerprint(spec) if spec else None,
        "prediction": _prediction(rec),
        "plan_est_s": plan_estimate(rec.plan_est_s) or (spec.est_s if spec else None),
        "peak_gpu_mem_gb": rec.peak_gpu_mem_gb,
        "warning": rec.warning or None,  # its node agent's, while its GPUs idle (workers/idle.py)
        "idle_since_at": secs(rec.idle_since_ms),
        # --output as written on its node (rank 0's), the agent's own log file there, and --notify
        "output": output_path(spec, job_id, rec.node), "log_file": rec.log_path or None,
        "notify": spec.notify or None if spec else None,
        # who told its end and when; why that failed (not retried)
        "notified": _who(rec.notified), "notified_at": _when(rec.notified), "notify_error": rec.notify_error or None,
    }


def _who(said: str) -> str | None:
    """The who of a record's "who when_ms" field (hold, notified)."""
    return said.rsplit(" ", 1)[0] if said else None


def _when(said: str) -> float | None:
    """The when of a "who when_ms" field, in epoch seconds as every time a view shows."""
    last = said.rsplit(" ", 1)[-1] if said else ""
    return int(last) / 1000.0 if last.isdigit() else None


def _prediction(rec) -> dict | None:
    """What submit predicted from the job's run history (store/history.py); None if it had too little."""
    duration = plan_estimate(rec.pred_s)  # a positive, finite number of seconds, or None
    if duration is None:
        return None
    return {"duration_s": duration, "confidence": rec.pred_conf or 0.0, "runs": rec.pred_runs,
            "source": rec.pred_src or None, "peak_gpu_mem_gb": rec.pred_mem_gb}


def prediction_error(view: dict) -> dict | None:
    """For a job that succeeded with a prediction: its run time over all attempts against the
    prediction (error_s = predicted - actual; rel_error = |error| / actual)."""
    p = view.get("prediction")
    if view["state"] != "succeeded" or not p:
        return None
    actual = sum(a["ended_at"] - a["started_at"] for a in view.get("attempts", [])
                 if a.get("started_at") and a.get("ended_at"))
    if actual <= 0:
        return None
    error = p["duration_s"] - actual
    return {"actual_s": round(actual, 3), "predicted_s": p["duration_s"], "error_s": round(error, 3),
            "rel_error": round(abs(error) / actual, 3)}


def read_job(client, ns: str, job_id: str) -> dict:
    if ":" in job_id or not job_id:
        raise JobNotFound(job_id)
    pipe = client.pipeline(transaction=True)
    queue_record(pipe, ns, job_id)
    pipe.lrange(keys.job_attempts(ns, job_id), 0, -1)
    raw, attempts = pipe.execute(raise_on_error=False)
    if isinstance(raw, Exception):
        if wrong_type(raw):
            raise MalformedRecord(f"job {job_id}", "its record is not a hash")
        raise raw
    if not raw:
        raise JobNotFound(job_id)
    rec = record_from_hash(job_id, raw)
    view = {**record_view(rec), **request_view(rec.spec)}
    view["attempts"] = [attempt_view(a) for a in attempts] if isinstance(attempts, list) else [
        {"outcome": "unreadable attempt record"}]
    view["prediction_error"] = prediction_error(view)
    return view


def request_view(spec: JobSpec | None) -> dict:
    """The rest of what a job asked for, which one job shown in full (`dispatch show`) adds to its
    record_view: its working directory, environment, and how it may be preempted or share."""
    if spec is None:
        return {"cwd": None, "env": {}, "preemptible": False,
                "checkpoint_signal": None, "scaling": None, "same_type": None}
    return {"cwd": spec.cwd or None, "env": dict(spec.env), "preemptible": spec.preemptible,
            "checkpoint_signal": spec.checkpoint_signal, "scaling": spec.scaling or None,
            "same_type": spec.same_type}


def attempt_view(raw: bytes) -> dict:
    """One ended attempt, as finish.lua recorded it (times in epoch seconds)."""
    import msgpack

    try:
        a = msgpack.unpackb(raw, raw=False)
        if not isinstance(a, dict):
            raise ValueError
    except Exception:
        return {"outcome": "unreadable attempt record"}

    def secs(name):
        v = a.get(name)
        return v / 1000.0 if isinstance(v, (int, float)) and v else None
    code = int(a["exit_code"]) if str(a.get("exit_code", "")).lstrip("-").isdigit() else None
    return {"attempt": a.get("attempt"), "node": a.get("node") or None,
            "ranks": [[n, list(g)] for n, g in gang_ranks(str(a.get("gang") or ""))],
            "gpus": [int(g) for g in str(a.get("gpus") or "").split(",") if g.isdigit()],
            "started_at": secs("started_ms") or secs("assigned_ms"), "ended_at": secs("ended_ms"),
            "outcome": a.get("outcome"), "reason": a.get("reason") or "",
            "exit_code": code, **exit_fields(code)}


def read_jobs(client, ns: str, job_ids: list[str]) -> list[dict]:
    """The views of these jobs; ids that are not job ids, and records that are absent or not hashes,
    are left out."""
    job_ids = [j for j in job_ids if valid_name(j)]
    pipe = client.pipeline(transaction=False)
    for job_id in job_ids:
        queue_record(pipe, ns, job_id)
    return [job_view(j, raw) for j, raw in zip(job_ids, pipe.execute(raise_on_error=False))
            if raw and isinstance(raw, dict)]


def read_named(client, ns: str, ids, *, missing: list | None = None) -> list[dict]:
    """The jobs these ids name, in order: a job; an array's id (its first element's) is every element
    of the array; ID_INDEX one element (store/naming.py). Every id must name something (JobNotFound,
    one line), unless `missing` is given: then the ids that name nothing are appended to it and the
    others are read (as scancel does with a list); an id that cannot name a job (`abc`) is still
    JobNotFound, before anything is read."""
    if missing is not None:
        bad = next((i for i in ids if not (is_number(i) or element_name(i))), None)
        if bad is not None:
            raise JobNotFound(bad)
    names = named_jobs(client, ns, ids)
    for i in ids:
        if names[i] is None:
            if missing is not None:
                missing.append(i)
                continue
            if not element_name(i):
                read_job(client, ns, i)  # its own error: a bad id, or no such job
            raise JobNotFound(i)
    return read_jobs(client, ns, list(dict.fromkeys(j for i in ids if names[i] for j in names[i])))


def read_queue(client, ns: str, *, include_final: bool = False, limit: int = 1000) -> list[dict]:
    """Every active job and the oldest `limit` pending ones (with include_final, the finished ones among the
    latest `limit` jobs too), oldest first. An index of the wrong type (the leading scheduler sets it aside
    and rebuilds it) is stood in for by the latest `limit` jobs of the all-jobs index that are not finished."""
    def latest():
        n = tolerant(lambda: client.zcard(keys.jobs_all(ns)), 0)
        return [i for i, _ in tolerant(lambda: index_window(client, keys.jobs_all(ns), max(0, n - limit), limit), [])]

    if include_final:  # (a job that runs or waits is listed however old it is)
        jobs = read_queue(client, ns, limit=limit)
        seen = {j["id"] for j in jobs}
        return oldest_first(jobs + [j for j in read_jobs(client, ns, [i for i in latest() if i not in seen])
                                    if is_final(j["state"])])
    ids, broken = [], False
    for read in (lambda: [text(i) for i in client.zrange(keys.jobs_active(ns), 0, -1)],
                 lambda: [i for i, _ in index_window(client, keys.jobs_pending(ns), 0, limit)]):
        try:
            ids += read()
        except Exception as e:
            if not wrong_type(e):
                raise
            broken = True
    ids = list(dict.fromkeys(ids))
    jobs = read_jobs(client, ns, ids)
    if broken:
        seen = set(ids)
        jobs += [j for j in read_jobs(client, ns, [i for i in latest() if i not in seen]) if not is_final(j["state"])]
    return oldest_first(jobs)


def index_window(client, key: str, start: int, count: int) -> list[tuple[str, float]]:
    """Entries start..start+count-1 (ids and scores) of a job index ordered by (score, numeric id).
    Redis orders equal scores by member as text ("1003" before "157": jobs of one `submit --from`
    share a submit time), so the ties at the window's two edge scores are read whole (ZRANGEBYSCORE)
    and placed by number; the rest of the index is not read."""
    got = [(text(m), t) for m, t in client.zrange(key, start, start + count - 1, withscores=True)]
    if not got or count <= 0:
        return []
    lo, hi = got[0][1], got[-1][1]
    pipe = client.pipeline(transaction=False)
    pipe.zcount(key, "-inf", f"({lo!r}")
    for edge in {lo, hi}:
        pipe.zrangebyscore(key, edge, edge, withscores=True)
    before, *edges = pipe.execute()
    near = dict(p for p in got if lo < p[1] < hi)
    near.update((text(m), t) for part in edges for m, t in part)
    ordered = sorted(near.items(), key=lambda p: (p[1], int(p[0]) if p[0].isdigit() else 0, p[0]))
    return ordered[start - before:start - before + count]


def oldest_first(jobs: list[dict]) -> list[dict]:
    """Job views by (submit time, numeric id): the jobs of one `submit --from` or array share a submit time."""
    return sorted(jobs, key=lambda j: (j["submitted_at"] or 0, int(j["id"]) if j["id"].isdigit() else 0))


def rebuild_indexes(client, ns: str, which: str, now_ms: int) -> int:
    """Add back to the job indexes what the job records say belongs there (which: any of "a" the
    all-jobs index, "p" pending, "x" active), after an index of the wrong type was set aside; adds
    only. The ids come from the all-jobs index, or, to rebuild that one, from a SCAN of the job
    hashes. Returns the entries added."""
    if "a" in which:
        ids = [text(k)[len(keys.job(ns, "")):] for k in client.scan_iter(match=keys.job_pattern(ns), count=1000,
                                                                          _type="hash")]
    else:
        ids = [text(i) for i in tolerant(lambda: client.zrange(keys.jobs_all(ns), 0, -1), [])]
    ids = sorted({i for i in ids if valid_name(i)}, key=lambda i: (len(i), i))
    pipe = client.pipeline(transaction=False)
    for chunk in scripts.chunks(len(ids)):
        part = ids[chunk]
        pipe.eval(scripts.source("rebuild_index"), len(part) + 3, *[keys.job(ns, i) for i in part],
                  keys.jobs_all(ns), keys.jobs_pending(ns), keys.jobs_active(ns), now_ms, which, *part)
    return sum(pipe.execute()) if len(pipe) else 0


def cancel_job(scripts, client, ns: str, job_id: str, now_ms: int, reason: str = "cancelled by user") -> str:
    """Returns 'cancelled', 'requested' (its node will stop it: the command is queued with the cancel,
    control.cancel) or the final state it already had."""
    if ":" in job_id or not job_id:
        raise JobNotFound(job_id)
    code = control.cancel(scripts, client, ns, job_id, now_ms, reason)
    if code == Outcome.NO_JOB:
        raise JobNotFound(job_id)
    client.publish(keys.events(ns), b"cancel")
    if code == Outcome.DONE:
        return "cancelled"
    if code == Outcome.CANCEL_REQUESTED:
        return "requested"
    return read_fields(client, ns, job_id, ("state",))["state"]


def is_final(state: str) -> bool:
    return state in FINAL_STATES


def preempt_job(scripts, client, ns: str, job_id: str, now_ms: int, *, force: bool, by: str) -> str:
    """An operator's preemption: graceful for a checkpointable job, forced with `force` (marked and its
    command sent in one step: control.preempt). Returns the mode."""
    from ..core.errors import InvalidRequestError, InvalidStateError

    job = read_job(client, ns, job_id)
    if job["state"] != "running":
        raise InvalidStateError(job_id, job["state"], "preempt")
    if not job["checkpointable"] and not force:
        raise InvalidRequestError(f"job {job_id} is not checkpointable: preempting it loses its work; add --force to "
                                  "kill it (it goes back to the queue; a session ends)", field="--force")
    mode = "forced" if force else "graceful"
    if control.preempt(scripts, job["node"], job_id, job["epoch"], now_ms, by=by, mode=mode,
                       reason="dispatch preempt") != Outcome.DONE:
        raise InvalidStateError(job_id, read_job(client, ns, job_id)["state"], "preempt")
    counters.count(client, ns, "preemptions", mode=mode, **{"class": job["priority"]})  # (an operator's too)
    return mode
