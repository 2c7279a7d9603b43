"""Changes to a pending job after its submit, as Slurm's `scontrol hold/release/update`: hold and
release (lua/hold.lua) and update (priority, estimate, time limit). Each moves the job's epoch on
(hold, update) so that a plan made before it cannot place the job as it was, and puts the job in the
changed set so the scheduler's mirror reads it again. A running job's time limit changes too: its
spec, and a "time" command to each node it runs on, whose agent moves its timer (workers/commands.py);
its epoch stays, as it is the attempt's."""

from __future__ import annotations

from ..core.errors import InvalidStateError, JobNotFound
from ..core.updates import ON_RUNNING, amended
from . import control, keys
from .codec import decode_spec, encode_spec
from .connect import text
from .job_record import gang_ranks, read_fields
from .scripts import Outcome


def hold_job(scripts, client, ns: str, job_id: str, action: str, who: str, now_ms: int) -> str:
    """Hold a pending job out of scheduling, or release it (action "hold" or "release"): returns "held",
    "released", "already held" or "not held". Raises JobNotFound, or InvalidStateError for a job that is
    not pending."""
    if ":" in job_id or not job_id:
        raise JobNotFound(job_id)
    reason = _held_reason(who, _named(client, ns, job_id)) if action == "hold" else ""
    code = scripts.hold(job_id, action, f"{who} {now_ms}", reason)
    if code == Outcome.NO_JOB:
        raise JobNotFound(job_id)
    if code == Outcome.NOT_PENDING:
        raise InvalidStateError(job_id, read_fields(client, ns, job_id, ("state",))["state"] or "gone", action)
    if code == Outcome.DONE:
        client.publish(keys.events(ns), action.encode())
        return "held" if action == "hold" else "released"
    return "already held" if action == "hold" else "not held"


def held_fields(who: str, now_ms: int, name: str) -> tuple:
    """The record fields of a job held by `who` from its submit (submit --hold), as lua/hold.lua writes
    them; `name` is how people name it (core.arrays.label)."""
    return (b"hold", f"{who} {now_ms}".encode(), b"reason", _held_reason(who, name).encode())


def _held_reason(who: str, name: str) -> str:
    return f"held by {who} (dispatch release {name})"


def _named(client, ns: str, job_id: str) -> str:
    """How people name the job (core.arrays.label): an array's element as 12_5; its id if unreadable."""
    from ..core.arrays import label
    from ..core.errors import MalformedRecord

    try:
        spec = decode_spec(client.hget(keys.job(ns, job_id), "spec") or b"")
    except MalformedRecord:
        return job_id
    return label({"id": job_id, "array_of": spec.array_of, "array_index": spec.array_index})


def update_job(client, ns: str, job_id: str, changes: dict, *, sealed=None) -> str:
    """Make `changes` (core/updates.UPDATABLE) to a pending job's spec, in one transaction watched on
    its record: returns what changed, in words. A changed estimate replaces the one the policy derived
    from history (plan_est_s). `sealed(job_id, spec_bytes)`: under identity, the leader's new seal of
    the spec (agents check it). Raises JobNotFound, InvalidStateError, InvalidRequestError."""
    import redis

    if ":" in job_id or not job_id:
        raise JobNotFound(job_id)
    key = keys.job(ns, job_id)
    with client.pipeline(transaction=True) as pipe:
        while True:
            try:
                pipe.watch(key)
                state, raw, epoch, node, gang = pipe.hmget(key, "state", "spec", "epoch", "node", "gang")
                if state is None:
                    raise JobNotFound(job_id)
                running = text(state) == "running" and set(changes) <= set(ON_RUNNING)
                if text(state) != "pending" and not running:
                    raise InvalidStateError(job_id, text(state), "update")
                old = decode_spec(raw, key=f"job {job_id}")
                new = amended(old, changes)
                stored = encode_spec(new, job_id)
                pipe.multi()
                fields = {"spec": stored} if running else {"spec": stored, "epoch": int(text(epoch) or 0) + 1}
                if sealed is not None:
                    fields["seal"] = sealed(job_id, stored)
                pipe.hset(key, mapping=fields)
                if running:  # (its nodes, rank 0 first: a gang's ranks each keep a timer)
                    for where in dict.fromkeys([n for n, _ in gang_ranks(text(gang))] or [text(node)]):
                        control.send(pipe, ns, where, {"type": "time", "job": job_id, "epoch": int(text(epoch)),
                                                       "time_s": new.time_limit_s})
                else:
                    if "est" in changes:
                        pipe.hdel(key, "plan_est_s")
                    pipe.sadd(keys.jobs_changed(ns), job_id)
                    pipe.publish(keys.events(ns), b"update")
                pipe.execute()
                return _said(old, new)
            except redis.WatchError:
                continue


def _said(old, new) -> str:
    from ..begin import when
    from ..core.units import span

    parts = [f"{what} {a} -> {b}" for what, a, b in (  # (durations as people write them: 1h, 1h30m)
        ("priority", old.priority, new.priority),
        ("est", "none" if old.est_s is None else span(old.est_s), "none" if new.est_s is None else span(new.est_s)),
        ("time", "none" if old.time_limit_s is None else span(old.time_limit_s),
         "none" if new.time_limit_s is None else span(new.time_limit_s)),
        ("begin", when(old.begin_ms) if old.begin_ms else "none", when(new.begin_ms) if new.begin_ms else "none"))
        if a != b]
    return "updated: " + ", ".join(parts) if parts else "unchanged"
