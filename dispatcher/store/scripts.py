"""The Lua scripts in lua/, registered once per client, with typed wrappers.

Each script's header lists its KEYS, ARGV and return codes. The codes are Outcome's: one code means
one thing in every script, and callers compare to the names. A wrapper called at once returns the
Outcome (or, for commit_placement and shrink, the new epoch when it took; for lease the token);
on a pipeline it queues the call, and the reply in the pipeline's results is the raw code, which
compares equal to its Outcome.
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass, fields
from importlib import resources

from redis.client import Pipeline

from ..core.model import FINAL_STATES
from . import keys
from .counters import script_histogram


class Outcome(enum.IntEnum):
    """What a call of a job script came to (the codes the .lua headers list)."""

    DONE = 1  # the write took
    STALE = 0  # refused: the job is not at the epoch, or not in the state, the write needs (moved on)
    CANCEL_REQUESTED = 2  # an active job is to be cancelled: mark_running meets it, cancel asks for it
    NOT_PENDING = -1  # commit_placement: the job is no longer pending
    EPOCH_MOVED = -2  # commit_placement: the job's epoch is not the one the plan saw
    GPU_HELD = -3  # commit_placement: a GPU is held (exclusively, or by sharers when the job wants it alone)
    NOT_LEADER = -4  # the caller's fencing value is not the leader key's: another scheduler leads
    NO_JOB = -5  # cancel: no such job
    ENDED = -6  # cancel: the job had already ended
    NOT_ENDED = -7  # requeue: the job has not ended

    @classmethod
    def name_of(cls, reply) -> str:
        """A reply's name for a log: its outcome's, else the reply itself (an error, or a count made from a
        record's garbage, such as an epoch of -8 moved on to -7)."""
        try:
            return cls(reply).name
        except ValueError:
            return str(reply)


def _typed(reply, *, counts: bool = False):
    """A script's reply as its Outcome; with `counts`, a reply > 0 is a count (an epoch) and stays a
    number. A call queued on a pipeline (the reply is the pipeline) is returned as it is."""
    if not isinstance(reply, int) or (counts and reply > 0):
        return reply
    try:
        return Outcome(reply)
    except ValueError:  # a count from a record's garbage (an epoch of -8 moves to -7): no outcome of ours
        return reply

#: mark_running.lua observes each start's latency, by class (store/counters.py).
_START_LATENCY = script_histogram("start_latency", "class")
_JOB_RUN = script_histogram("job_run", "class")  # finish.lua observes each end's last attempt
_NAMES = ("commit_placement", "commit_gang", "mark_running", "finish", "cancel", "preempt", "shrink", "checkpointed",
          "lease", "idle_warning", "rendezvous", "progress", "hold", "requeue", "set_reason")


@functools.cache
def source(name: str) -> str:
    return resources.files(__package__).joinpath(f"lua/{name}.lua").read_text()


def submit(pipe, ns: str, ids: list[str], args: list) -> None:
    """Queue submit.lua on `pipe` for jobs `ids` (ARGV as its header says). Sent as EVAL with its
    source: no SCRIPT EXISTS round trip first, and nothing to reload after a server restart; the
    server compiles it once and keeps it."""
    pipe.eval(source("submit"), len(ids) + 3, *[keys.job(ns, i) for i in ids], keys.jobs_all(ns),
              keys.jobs_pending(ns), keys.jobs_changed(ns), *args)


def log_append(target, ns: str, job_id: str, rank: int, cap: int, cost: int, chunks: list[bytes]):
    """Run log_append.lua on `target` (a client, or a pipeline to queue it on) for one rank's log stream."""
    keys_, args = [keys.job_log(ns, job_id, rank), keys.job_log_size(ns, job_id)], [cap, cost, rank, *chunks]
    if isinstance(target, Pipeline):
        return _queue(target, _log_script(target), keys_, args)
    return _log_script(target)(keys=keys_, args=args, client=target)


def _log_script(target):
    """log_append.lua registered once per connection pool (a Script: EVALSHA, loaded again if missing)."""
    pool = target.connection_pool
    script = getattr(pool, "dispatch_log_append", None)
    if script is None:
        import redis

        script = pool.dispatch_log_append = redis.Redis(connection_pool=pool).register_script(source("log_append"))
    return script


def read_jobs(pipe, ns: str, ids: list[str], extra: list[str], fields: tuple[str, ...], *,
              scores: str | None = None) -> None:
    """Queue read_jobs.lua on `pipe`: `fields` of each job in `ids`, its `extra` field, and its score in
    the pending index (or in the zset `scores`)."""
    args: list = [len(fields), *fields]
    for job_id, field in zip(ids, extra):
        args += (job_id, field)
    eval_ro(pipe)(source("read_jobs"), len(ids) + 1, *[keys.job(ns, i) for i in ids],
                  scores or keys.jobs_pending(ns), *args)


def eval_ro(pipe):
    """`pipe`'s EVAL_RO, for a script that only reads: a login that may not write (the user role,
    store/roles.py) may run it. Its EVAL on a server without EVAL_RO (before Redis 7.0), asked once
    per connection pool."""
    import redis

    pool = pipe.connection_pool
    known = getattr(pool, "dispatch_eval_ro", None)
    if known is None:
        try:
            redis.Redis(connection_pool=pool).eval_ro("return 1", 0)
            known = True
        except redis.exceptions.ResponseError as e:  # (a login refused EVAL_RO has EVAL refused too)
            known = "unknown command" not in str(e).lower()
        pool.dispatch_eval_ro = known
    return pipe.eval_ro if known else pipe.eval


#: Keys one script call reads or writes at most: the server answers other clients between two.
CHUNK = 5_000


def chunks(n: int):
    """Slices of CHUNK items that cover n: one script call each."""
    return (slice(i, i + CHUNK) for i in range(0, n, CHUNK))


def hget_each(client, hashes: list[str], field: str) -> list:
    """`field` of each hash (None where absent, a ResponseError for a key of the wrong type), in one
    round trip of hget_each.lua calls."""
    pipe = client.pipeline(transaction=False)
    for chunk in chunks(len(hashes)):
        part = hashes[chunk]
        eval_ro(pipe)(source("hget_each"), len(part), *part, field)
    return [value for part in pipe.execute() for value in part]


def _flag(value: bool) -> str:
    return "1" if value else "0"


def _arg(value):
    """One ARGV value as the scripts read it: a flag "1"/"0", None as "", a float in full."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return _flag(value)
    return repr(value) if isinstance(value, float) else value


@dataclass(frozen=True)
class FinishArgs:
    """finish.lua's ARGV, named: the fields are in the script's order (ARGV[1] job_id ... ARGV[14]
    est_s; lua/finish.lua's header says what each means), and argv() lists them so."""

    job_id: str
    epoch: int
    state: str  # the new state: succeeded, failed, cancelled, or pending (back to the queue)
    exit_code: int | None
    now_ms: int
    reason: str
    preempted: bool  # this requeue is a preemption
    keep_wait: bool  # keep the original submit time for aging
    checkpointable: bool  # work lost counts from the last checkpoint
    lost_retries: int | None  # for an attempt lost with its node: the job's retry budget
    fence: str  # the leader's fencing value ("" = not checked)
    kept_per_fingerprint: int | None  # for a success to record: runs the fingerprint's history keeps
    kept_per_user: int  # runs the user's history keeps
    est_s: float | None  # the user's estimate, recorded with the run
    rank: int | None = None  # a gang's rank whose end this is (None: a one-node job)
    for_gang: bool = False  # this rank only stopped because its gang stops
    launch_failed: bool = False  # its node could not start it: lost (with lost_retries) though it never ran
    fail_retries: int | None = None  # for a failed attempt: the job's --retry-failed (within it, it runs again)
    run_prefix: str = _JOB_RUN[0]  # the run-time histogram an end is observed in (store/counters.py)
    run_bounds: str = _JOB_RUN[1]
    own_code: bool = False  # exit_code is the job's own end (a rank killed by a signal dispatch did not send)

    def argv(self) -> list:
        return [_arg(getattr(self, f.name)) for f in fields(self)]


def lost_attempt(spec) -> dict:
    """finish() arguments for an attempt of `spec` lost with its node (or hung, or a gang's failed rank): it
    resumes from its checkpoint if it has one, and counts against its retry budget. For a record whose
    spec cannot be read, `spec` is None: no checkpoint, no retries left."""
    if spec is None:
        return {"checkpointable": False, "lost_retries": 0}
    return {"checkpointable": spec.checkpointable, "lost_retries": spec.retries}


def _queue(pipe, script, keys_: list, args: list):
    """Queue `script` on `pipe`: as EVAL with its source the first time in what the pipeline will send,
    as EVALSHA after (the server runs a pipeline's commands in order, so the EVAL has cached it by
    then). redis-py's own way sends SCRIPT EXISTS first, a round trip of its own every execute()."""
    sent = getattr(pipe, "_dispatch_sent", None)
    if sent is None or sent[0] is not pipe.command_stack:  # execute() and reset() start a new stack
        sent = pipe._dispatch_sent = (pipe.command_stack, set())
    if script.sha in sent[1]:
        return pipe.evalsha(script.sha, len(keys_), *keys_, *args)
    sent[1].add(script.sha)
    return pipe.eval(script.script, len(keys_), *keys_, *args)


class Scripts:
    def __init__(self, client, ns: str):
        self.ns = ns
        self._s = {n: client.register_script(source(n)) for n in _NAMES}

    def _call(self, name: str, keys_: list, args: list, client, *, counts: bool = False):
        script = self._s[name]
        if isinstance(client, Pipeline):
            return _queue(client, script, keys_, args)
        return _typed(script(keys=keys_, args=args, client=client), counts=counts)

    def commit_placement(self, job_id, node, gpus, epoch, now_ms, *, share=False, fence="", client=None):
        """The new epoch (> 0), or NOT_PENDING, EPOCH_MOVED, GPU_HELD, NOT_LEADER."""
        ns = self.ns
        return self._call("commit_placement",
                          [keys.job(ns, job_id), keys.node_alloc(ns, node), keys.jobs_pending(ns), keys.jobs_active(ns),
                           keys.scheduler_leader(ns), keys.jobs_changed(ns)],
                          [job_id, node, ",".join(map(str, gpus)), epoch, now_ms, _flag(share), fence], client,
                          counts=True)

    def commit_gang(self, job_id, pieces, epoch, now_ms, *, fence="", client=None):
        """Hold every rank's GPUs at once (`pieces`: (node, gpus) in rank order): the new epoch (> 0), or
        NOT_PENDING, EPOCH_MOVED, GPU_HELD, NOT_LEADER."""
        from .job_record import gang_text

        ns = self.ns
        return self._call("commit_gang",
                          [keys.job(ns, job_id), keys.jobs_pending(ns), keys.jobs_active(ns), keys.scheduler_leader(ns),
                           *[keys.node_alloc(ns, node) for node, _ in pieces], keys.jobs_changed(ns)],
                          [job_id, epoch, now_ms, fence, gang_text(pieces)], client, counts=True)

    def rendezvous(self, job_id, epoch, where: str, *, client=None):
        """Rank 0's agent writes "address:port" for attempt `epoch` of a gang: DONE or STALE."""
        return self._call("rendezvous", [keys.job(self.ns, job_id)], [epoch, where], client)

    def progress(self, job_id, epoch, at_ms, *, client=None):
        """A rank of attempt `epoch` reported progress at `at_ms`: DONE or STALE."""
        return self._call("progress", [keys.job(self.ns, job_id)], [epoch, int(at_ms)], client)

    def mark_running(self, job_id, epoch, now_ms, pid, *, client=None):
        """DONE, STALE, or CANCEL_REQUESTED (a cancel came first: the agent stops the process)."""
        return self._call("mark_running",
                          [keys.job(self.ns, job_id), keys.metrics(self.ns), keys.jobs_changed(self.ns)],
                          [epoch, now_ms, pid, *_START_LATENCY, job_id], client)

    def finish(self, job_id, node, epoch, state, exit_code, now_ms, reason="", *, preempted=False,
               keep_wait=True, checkpointable=False, lost_retries=None, fence="", spec=None, rank=None,
               for_gang=False, launch_failed=False, fail_retries=None, own_code=False, client=None):
        """End the job (state succeeded/failed/cancelled) or requeue it (state 'pending'): DONE, STALE or
        NOT_LEADER. `lost_retries`: the attempt was lost with its node; the job's retry budget. `fence`:
        the leading scheduler's lease value, for its requeues of dead nodes' jobs. `spec`: the job's
        JobSpec, given by its agent; a success is then recorded in the run history of its fingerprint
        and of its user (dispatcher/core/predict.py). `rank`: a gang's rank whose end this is (`node` is
        its node); `for_gang`: it only stopped because its gang stops; `launch_failed`: its node could not start
        it, a lost attempt all the same; `fail_retries`: a failure's --retry-failed; `own_code`: exit_code is the
        job's own, kept if it fails for its lost attempts (lua/finish.lua says the rest)."""
        from ..core.predict import KEPT_PER_FINGERPRINT, KEPT_PER_USER, fingerprint

        ns = self.ns
        record = spec is not None and state == "succeeded"
        history = ([keys.history(ns, fingerprint(spec)), keys.user_history(ns, spec.user)] if record
                   else [keys.job(ns, job_id)] * 2)  # unused: the script records nothing then
        args = FinishArgs(
            job_id=job_id, epoch=epoch, state=state, exit_code=exit_code, now_ms=now_ms, reason=reason,
            preempted=preempted, keep_wait=keep_wait, checkpointable=checkpointable,
            lost_retries=None if lost_retries is None else int(lost_retries), fence=fence,
            kept_per_fingerprint=KEPT_PER_FINGERPRINT if record else None, kept_per_user=KEPT_PER_USER,
            est_s=None if not record or spec.est_s is None else float(spec.est_s),
            rank=None if rank is None else int(rank), for_gang=for_gang, launch_failed=launch_failed,
            fail_retries=None if not fail_retries else int(fail_retries), own_code=own_code)
        return self._call(
            "finish", [keys.job(ns, job_id), keys.node_alloc(ns, node), keys.jobs_active(ns), keys.jobs_pending(ns),
                       keys.job_attempts(ns, job_id), keys.scheduler_leader(ns), keys.jobs_changed(ns), *history,
                       *[keys.jobs_ended(ns, s) for s in FINAL_STATES], keys.metrics(ns),
                       *([keys.jobs_notify(ns)] if fence else [])],  # (the scheduler's: a dead node's job's end)
            args.argv(), client)

    def cancel(self, job_id, now_ms, reason, *, state="cancelled", client=None):
        """DONE (a pending job ended now), CANCEL_REQUESTED (an active one: its node stops it), ENDED or
        NO_JOB. `state`: what a pending job ends as ("failed": the scheduler failing a job whose
        dependency failed)."""
        ns = self.ns
        return self._call("cancel", [keys.job(ns, job_id), keys.jobs_pending(ns), keys.jobs_changed(ns),
                                     keys.jobs_notify(ns), keys.jobs_ended(ns, state), keys.metrics(ns)],
                          [job_id, now_ms, reason, state], client)

    def requeue(self, job_id, now_ms, who, reason, *, client=None):
        """Put an ended job back in the queue as a new attempt (lua/requeue.lua): DONE, NOT_ENDED (it has not
        ended) or NO_JOB."""
        ns = self.ns
        return self._call("requeue", [keys.job(ns, job_id), keys.jobs_pending(ns), keys.jobs_changed(ns),
                                      *[keys.jobs_ended(ns, s) for s in FINAL_STATES]],
                          [job_id, now_ms, who, reason], client)

    def hold(self, job_id, action, who, reason="", client=None):
        """Hold ("hold") or release ("release") a pending job: DONE, STALE (already so), NOT_PENDING or
        NO_JOB."""
        return self._call("hold", [keys.job(self.ns, job_id), keys.jobs_changed(self.ns)],
                          [job_id, action, who, reason], client)

    def set_reason(self, job_key: str, reason: str, verdict: bytes, client=None):
        """The scheduler's reason and verdict on a pending job ("" : none): DONE, or STALE where the job
        is no longer pending or is held (job_record.set_reason)."""
        return self._call("set_reason", [job_key], [reason, verdict], client)

    def preempt(self, job_id, node, epoch, now_ms, by, mode, why, command: bytes, *, field: bytes, cap: int,
                fence="", client=None):
        """Mark a running job preempting at `epoch` and queue `command` (packed, under `field`, the
        stream capped at `cap`) on `node`'s control stream, in one step: DONE, STALE or NOT_LEADER.
        Called through control.preempt, which builds the command."""
        ns = self.ns
        return self._call("preempt", [keys.job(ns, job_id), keys.scheduler_leader(ns), keys.jobs_changed(ns),
                                      keys.node_control(ns, node)],
                          [epoch, now_ms, by, mode, why, fence, job_id, field, command, cap], client)

    def shrink(self, job_id, node, epoch, keep_gpus, now_ms, *, client=None):
        """The new epoch (> 0), or STALE."""
        ns = self.ns
        return self._call("shrink", [keys.job(ns, job_id), keys.node_alloc(ns, node), keys.job_attempts(ns, job_id),
                                     keys.jobs_changed(ns)],
                          [job_id, epoch, ",".join(map(str, keep_gpus)), now_ms], client, counts=True)

    def checkpointed(self, job_id, epoch, at_ms, *, client=None):
        """DONE or STALE."""
        return self._call("checkpointed", [keys.job(self.ns, job_id), keys.jobs_changed(self.ns)],
                          [epoch, at_ms, job_id], client)

    def idle_warning(self, job_id, epoch, since_ms, warning, *, client=None):
        """Write (since_ms an int) or clear (since_ms None) a running job's idle warning at its epoch:
        DONE or STALE."""
        return self._call("idle_warning", [keys.job(self.ns, job_id), keys.jobs_idle(self.ns)],
                          [epoch, "" if since_ms is None else int(since_ms), warning, job_id], client)

    def lease(self, holder, ttl_ms, op, *, client=None):
        """Not a job script: "hold" returns the fencing token (> 0) while `holder` leads, 0 while another
        does; "release" 1 if it let go, 0 if it did not hold the lease (numbers, not Outcomes)."""
        ns = self.ns
        return self._s["lease"](keys=[keys.scheduler_leader(ns), keys.scheduler_token(ns)], args=[holder, ttl_ms, op],
                                client=client)
