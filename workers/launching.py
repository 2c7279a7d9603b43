"""Starting one attempt of a job on this node (Supervisor.launch), step by step.

The steps, in order (launch, then _start): the leader's seal of the attempt; the job record, still this
node's at this epoch, assigned and not cancelled; its spec and its user's signature; the job's environment
(a gang's rank meets rank 0 first: workers/gang.py, in a thread for a rank > 0);
the Unix identity it runs as and its working directory; its log file, checkpoint dir and cgroup;
the process (forked by the supervisor's one spawner thread); its pid file and its entry in
sup.running; its start in Redis (or the outbox); the thread that watches it. A step that will not
start the job raises NotStarted, which says what launch returns and what outcome, if any, is
recorded first.
"""

from __future__ import annotations

import hmac
import logging
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from dispatcher.auth.identity import seal_attempt
from dispatcher.clock import now_ms
from dispatcher.core.model import CANCELLED, FAILED, FINAL_STATES, PENDING, JobSpec
from dispatcher.store import job_record, keys
from dispatcher.store.codec import decode_spec
from dispatcher.store.exits import reported_outcome
from dispatcher.store.jobs import append_log
from dispatcher.store.scripts import Outcome, lost_attempt

from . import gang, jobenv, outputs, proctrack, tty, unix_user
from .keeper import FENCED_DIR, kept_end
from .running import CHECKPOINT_FILE, Running, Stopping

log = logging.getLogger("dispatch.agent")


#: How many jobs' last started epoch an agent remembers (Supervisor.started).
STARTED_KEPT = 10_000


class NotStarted(Exception):
    """The launch ends before the job's process starts: `result` is what launch returns; with a
    `state`, that outcome (`exit_code`, `reason`, and finish()'s keywords `kw`) is recorded first."""

    def __init__(self, result: str, state: str | None = None, reason: str = "", exit_code: int | None = None, **kw):
        super().__init__(reason or result)
        self.result, self.state, self.reason, self.exit_code, self.kw = result, state, reason, exit_code, kw


def launch(sup, job_id: str, epoch: int, seal: str) -> str:
    """Start attempt `epoch` of `job_id` under `sup` (the Supervisor): "started", or why not
    ("refused", "stale", "cancelled", "failed", "ended": it ran here already); a gang's rank > 0 "waiting"
    (for rank 0, in a thread)."""
    rank: list = [None]  # a gang's rank here, once the record says
    try:
        _check_seal(sup, job_id, epoch, seal)
        record = _assigned_record(sup, job_id, epoch, rank)
        _check_fresh(sup)
        _not_ended_here(sup, job_id, epoch, record["submit_ms"])
        spec = _signed_spec(sup, job_id, record["spec"], record["seal"])
        _check_gpus(sup, spec, record["gpus"])
        if spec.interactive:
            _check_client(sup, job_id)
        if rank[0]:  # it meets rank 0 there: waited for off the RQ worker's thread
            threading.Thread(target=_guarded, args=(sup, job_id, epoch, spec, record, rank[0]),
                             name=f"meet-{job_id}", daemon=True).start()
            return "waiting"
        return _start(sup, job_id, epoch, spec, record, rank[0])
    except NotStarted as e:
        stopped = e
    _record(sup, job_id, epoch, rank[0], stopped)
    return stopped.result


def _guarded(sup, job_id: str, epoch: int, spec: JobSpec, record: dict, rank: int) -> None:
    """_start for a gang's rank > 0, in its own thread (in sup.meeting meanwhile: not a lost attempt)."""
    sup.meeting.add((job_id, epoch))
    try:
        _start(sup, job_id, epoch, spec, record, rank)
    except NotStarted as e:
        _record(sup, job_id, epoch, rank, e)
    except Exception:
        log.exception("job %s: rank %s could not be started", job_id, rank)
    finally:
        sup.meeting.discard((job_id, epoch))


def _check_fresh(sup) -> None:
    """No start on a node whose agent has not heartbeat within the fence time (it was stopped, or cut off:
    its node may be taken for dead, its name another agent's): back to the queue, not a lost attempt."""
    if sup.fresh_until is not None and time.monotonic() > sup.fresh_until:
        raise NotStarted("stale", PENDING, f"node {sup.node}'s agent had no heartbeat taken in time (stopped, or "
                         "cut off from Redis); back to the queue")


def _check_client(sup, job_id: str) -> None:
    """An interactive session whose client went away while it waited (killed outright: a hangup or a Ctrl-C
    cancels it) is cancelled, not started for nobody, holding its GPUs until its --idle-timeout."""
    from dispatcher.store.tty import client_gone

    silent_s = client_gone(sup.client, sup.ns, job_id, now_ms())
    if silent_s is not None:
        raise NotStarted("cancelled", CANCELLED, f"its client went away while it waited (not heard from for "
                         f"{silent_s:.0f}s); nobody to start the session for")


def _check_gpus(sup, spec: JobSpec, gpus: list[int]) -> None:
    """The GPUs it was placed on are this node's, of the type and memory it asks: a node whose agent came
    back with other GPUs (one fell off the bus, a card swapped) may have been planned on from its old
    inventory. Else it goes back to the queue (not a lost attempt), to be placed on the GPUs there are."""
    from dispatcher.policy.fit import gpu_ok

    here = sup.gpus
    if here is None:
        return
    wrong = [g for g in gpus if g not in here or not gpu_ok(spec, here[g])]
    if wrong:
        have = ", ".join(f"{g.index}:{g.name}" for g in here.values()) or "none"
        raise NotStarted("stale", PENDING, f"node {sup.node} has no GPU {','.join(map(str, wrong))} of the kind it "
                         f"was placed on now (its GPUs: {have}); back to the queue")


def _record(sup, job_id: str, epoch: int, rank, stopped: NotStarted) -> None:
    if stopped.state is not None:  # out of the handler: a Redis error here is the only one raised
        sup.finish(job_id, epoch, stopped.state, stopped.exit_code, stopped.reason, rank=rank, **stopped.kw)
        if stopped.state in FINAL_STATES:  # (ended before it ran: cancelled as it was placed, a bad cwd)
            outputs.tell_end(sup, job_id)


def _start(sup, job_id: str, epoch: int, spec: JobSpec, record: dict, rank: int | None) -> str:
    """The steps from the job's environment on (a gang's rank meets rank 0 first)."""
    gpu_list, ckpt = ",".join(map(str, record["gpus"])), sup.checkpoints / job_id
    env = jobenv.attempt_env(sup.base_env, spec, job_id=job_id, epoch=epoch, node=sup.node, agent=sup.agent,
                             address=sup.address, ns=sup.ns, gpu_list=gpu_list, attempt=record["attempt"], ckpt=ckpt,
                             socket_path=str(sup.channel.path),
                             cap=sup.channel.capability(job_id, epoch, spec.user),
                             secret=sup.verifier.secret if sup.verifier is not None else None)
    if rank is not None:
        where = gang.announce(sup, job_id, epoch) if rank == 0 else \
            gang.wait_for_rank0(sup, job_id, epoch, spec, NotStarted)
        env.update(gang.env(sup, rank, record["ranks"], where))
    elif spec.nodes == 1:  # (--nodes 1 --gpus-per-node G: no rank 0 to meet, the same variables)
        env.update(gang.one_node_env(sup, record["gpus"]))
    identity, cwd = _identity(sup, spec, env)
    try:
        log_path, progress = _private_files(sup, job_id, ckpt, identity)
        env["DISPATCH_PROGRESS_FILE"] = str(progress)
        if record["attempt"]:  # a rerun: `dispatch logs` shows where one attempt's output ends and the next begins
            _separate(sup, job_id, record["attempt"], rank, _no_checkpoint_here(sup, spec, record, ckpt))
        cgroup = proctrack.make_cgroup(proctrack.attempt_cgroup(sup.cgroups, job_id, epoch))
    except OSError as e:  # the node's own files (its work dir unusable): a lost attempt, charged to --retries,
        # that says why; else it stayed assigned, holding its GPUs, and was launched here again every minute
        log.error("job %s: node %s could not prepare its start: %s", job_id, sup.node, e)
        raise NotStarted("failed", PENDING, f"node {sup.node} could not start it: {e}", launch_failed=True,
                         **lost_attempt(spec)) from e
    proc, cgroup, term = _spawn(sup, job_id, epoch, spec, cwd, env, identity, cgroup)
    run = _register(sup, job_id, epoch, proc, spec, ckpt, gpu_list, cgroup)
    run.rank, run.progress_file, run.tty, run.owner = rank, progress, term, jobenv.owner_of(identity)
    run.stamp = record["submit_ms"]
    _mark_running(sup, run)
    run.thread = threading.Thread(target=sup.watch, args=(run, log_path), name=f"job-{job_id}", daemon=True)
    run.thread.start()
    log.info("job %s%s started on GPUs [%s], pid %d", job_id, "" if rank is None else f" rank {rank}", gpu_list,
             proc.pid)
    return "started"


def _no_checkpoint_here(sup, spec: JobSpec, record: dict, ckpt: Path) -> str:
    """What a rerun's separator adds when the job reported a checkpoint but its checkpoint directory is
    empty on this node: it was saved under another node's own --checkpoint-root, and the job starts
    over (with DISPATCH_RESUME=1, and nothing to resume from)."""
    try:
        empty = not (ckpt.is_dir() and any(ckpt.iterdir()))
    except OSError:
        return ""
    if not (spec.checkpointable and record.get("checkpoint_ms") and empty):
        return ""
    log.warning("job %s: reran on %s with no checkpoint in %s, though it reported one: give every agent one "
                "shared --checkpoint-root", spec.id, sup.node, ckpt)
    return (f"; its checkpoint is not here: {ckpt} is empty on {sup.node}, though the job reported one (saved "
            "under another node's own --checkpoint-root: give every agent one shared --checkpoint-root)")


def _separate(sup, job_id: str, attempt: int, rank, note: str = "") -> None:
    """A line in the job's log stream before a rerun's output (best effort: a failed write starts it anyway)."""
    line = f"[dispatch: attempt {attempt} on {sup.node} at {time.strftime('%Y-%m-%d %H:%M:%S')}{note}]\n"
    try:
        append_log(sup.client, sup.ns, job_id, line.encode(), rank=rank or 0)
    except Exception as e:
        log.warning("job %s: could not write its attempt separator (%s)", job_id, e)


def _check_seal(sup, job_id: str, epoch: int, seal: str) -> None:
    """Under identity, only the leader may start an attempt here: it sealed this one for this node."""
    if sup.verifier is not None and not hmac.compare_digest(
            seal_attempt(sup.verifier.secret, job_id, epoch, sup.node), seal):
        log.warning("job %s epoch %s: a launch without the leader's seal for node %s; not started (the record "
                    "is left as it is)", job_id, epoch, sup.node)
        raise NotStarted("refused")


def _assigned_record(sup, job_id: str, epoch: int, rank: list) -> dict:
    """The record's spec, seal, attempt, and this node's GPUs (a gang's: its rank's, with `ranks`, and
    the rank in rank[0]), if it is still this node's at `epoch`, not cancelled, and not started here."""
    r = job_record.read_fields(sup.client, sup.ns, job_id, job_record.LAUNCH)
    ranks = job_record.gang_ranks(r["gang"])
    here = gang.rank_of(sup.node, ranks) if ranks else (0 if r["node"] == sup.node else None)
    if r["epoch"] == epoch and ranks and here is not None and job_id not in sup.running:
        rank[0] = here
        if r["state"] == "preempting":  # its gang stops before this rank started: its end is the gang's
            raise NotStarted("stale", PENDING, "its gang stopped before this rank started", for_gang=True)
    if r["epoch"] != epoch or rank[0] is None and (here is None or ranks or r["state"] != "assigned") \
            or ranks and r["state"] not in ("assigned", "running"):
        log.info("job %s epoch %s is stale here (now epoch %s, node %s, %s); not started",
                 job_id, epoch, r["epoch"], r["node"], r["state"])
        raise NotStarted("stale")
    if r["cancel_ms"]:
        raise NotStarted("cancelled", CANCELLED, "cancelled before it started")
    return {**r, "ranks": ranks, "gpus": ranks[here][1] if ranks else r["gpus"]}


def _not_ended_here(sup, job_id: str, epoch: int, stamp: int) -> None:
    """This attempt has not already run here: a server that lost the writes of its start and end (killed
    while its append-only file lagged) hands back its launch; the end this agent kept is recorded again."""
    ended = reported_outcome(kept_end(sup.work_dir, job_id, epoch, stamp), epoch)
    if ended is not None:
        state, code, at_ms, reason = ended
        log.warning("job %s epoch %d already ended here (exit %d); Redis had lost its end: recorded again",
                    job_id, epoch, code)
        raise NotStarted("ended", state, reason, code, at_ms=at_ms)


def _signed_spec(sup, job_id: str, spec_raw, seal) -> JobSpec:
    """The job's spec; under identity, only if the record is what its user signed."""
    try:
        spec = decode_spec(spec_raw, key=keys.job(sup.ns, job_id))
    except Exception as e:
        raise NotStarted("failed", FAILED, f"unusable job record: {e}") from e
    if sup.verifier is not None and not sup.verifier.seal_ok(spec.user, job_id, spec_raw, seal):
        raise NotStarted("failed", FAILED, f"refused by node {sup.node}: the job record is not what "
                                           f"user {spec.user} signed")
    return spec


def _identity(sup, spec: JobSpec, env: dict) -> tuple[dict, str | None]:
    """The Popen arguments that make the job its user's ({} to run as the agent's), and its working
    directory (None: the agent's), which must exist here and be one its user may enter."""
    identity, cwd = {}, spec.cwd or None
    try:
        if sup.run_as_user:
            identity = unix_user.popen_identity(spec.user, env, sup.allow_root_jobs)
            if cwd and (why := unix_user.cannot_enter(cwd, spec.user, identity)):
                raise LookupError(why)
        elif sup.verifier is not None and os.geteuid() != 0 and (why := unix_user.refuse_other_user(spec.user)):
            raise LookupError(why)
    except LookupError as e:
        raise NotStarted("failed", FAILED, f"refused by node {sup.node}: {e}") from e
    if cwd and not os.path.isdir(cwd):
        what = "is not a directory" if os.path.exists(cwd) else "does not exist"
        raise NotStarted("failed", FAILED, f"working directory {cwd} {what} on node {sup.node}")
    return identity, cwd


def _private_files(sup, job_id: str, ckpt: Path, identity: dict) -> tuple[Path, Path]:
    """The job's checkpoint dir, log file and progress file, its user's only; a fence mark of an earlier
    attempt goes. Returns the log file and the progress file (emptied: this attempt's steps)."""
    log_path, progress = sup.work_dir / "logs" / f"{job_id}.log", sup.work_dir / "logs" / f"{job_id}.progress"
    owner = jobenv.owner_of(identity)
    jobenv.private_dir(ckpt, owner)
    jobenv.private_log(log_path, owner)
    progress.unlink(missing_ok=True)
    jobenv.private_log(progress, owner)
    (sup.work_dir / FENCED_DIR / job_id).unlink(missing_ok=True)
    return log_path, progress


def _spawn(sup, job_id: str, epoch: int, spec: JobSpec, cwd, env: dict, identity: dict, cgroup):
    """The job's process, in its own session and cgroup, dying with the agent; its cgroup; an interactive
    job's terminal (its process on a PTY, workers/tty.py; else None, its output a pipe)."""
    term = None
    try:
        term = tty.Terminal(sup, job_id, epoch, spec) if spec.interactive else None
        argv, dying = proctrack.spawn_args(tty.command(spec) if term else list(spec.command), cwd, env)
        io = term.popen_io(dying, jobenv.owner_of(identity)) if term else \
            {"stdin": subprocess.DEVNULL, "stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, **dying}
        if identity:  # its working directory is entered as its user, after the drop, never as root
            argv, cwd = (proctrack.enter_cwd(argv, cwd) if cwd else argv), "/"
        argv, identity, cgroup = proctrack.into_cgroup(argv, cgroup, identity)
        proc = sup.spawner.submit(subprocess.Popen, argv, cwd=cwd, env=env, start_new_session=True, **io,
                                  **identity).result()
        if term:
            term.spawned()
    except (OSError, ValueError) as e:  # (ValueError: a NUL byte in an argument, a variable or the directory)
        if term:
            term.close()
        proctrack.remove_cgroup(cgroup)
        msg = f"cannot start {spec.command[0]!r}: {getattr(e, 'strerror', None) or e}"
        append_log(sup.client, sup.ns, job_id, (msg + "\n").encode())
        raise NotStarted("failed", FAILED, msg, proctrack.exit_code_of(e)) from e
    return proc, cgroup, term


def _register(sup, job_id: str, epoch: int, proc, spec: JobSpec, ckpt: Path, gpu_list: str, cgroup) -> Running:
    """Its pid file (for the keeper and the next agent) and its entry in sup.running."""
    sup.record_pid(job_id, epoch, proc.pid)
    ckpt_file = ckpt / CHECKPOINT_FILE
    run = Running(job_id, epoch, proc, spec, ckpt,
                  ckpt_seen=ckpt_file.stat().st_mtime if ckpt_file.exists() else 0.0,
                  gpus=tuple(int(g) for g in gpu_list.split(",") if g.strip().isdigit()),
                  attempt=proctrack.Attempt(job_id, epoch, proc.pid, cgroup, sup.node, sup.agent))
    with sup.lock:  # before Redis hears of it: its GPU processes are never taken for zombies
        older = sup.running.get(job_id)
        sup.running[job_id] = run
        sup.started.pop(job_id, None)
        sup.started[job_id] = epoch
        if len(sup.started) > STARTED_KEPT:
            del sup.started[next(iter(sup.started))]
    if older is not None and older.epoch != epoch and older.stop_as(Stopping.STALE):
        # a newer attempt of the job came here while an older one still ran (its node was taken for
        # dead meanwhile): the older copy is stale, and would otherwise run on beside it, unfenced
        log.warning("job %s: attempt epoch %d starts; its stale copy (epoch %d) is killed", job_id, epoch, older.epoch)
        sup.stop_run(older, 0, signal.SIGKILL)
    return run


def _mark_running(sup, run: Running) -> None:
    """Its start, in Redis (mark_running.lua); a copy that went stale meanwhile is stopped at once, one
    cancelled meanwhile as any cancel (its checkpoint signal, its grace)."""
    try:
        started = sup.scripts.mark_running(run.job_id, run.epoch, now_ms(), run.proc.pid)
    except Exception as e:  # Redis away: the job runs; its start is written when Redis is back
        log.warning("job %s: could not record its start yet (%s)", run.job_id, e)
        sup.outbox.add("running", run.job_id, run.epoch, now_ms(), run.proc.pid)
        started = Outcome.DONE
    if started == Outcome.CANCEL_REQUESTED:  # cancelled as it started: stopped as any cancel is (its grace)
        run.stop_as(Stopping.CANCEL)
        sup.stop_run(run, run.spec.grace_s)
    elif started != Outcome.DONE:  # STALE: a copy no longer current is killed at once
        run.stop_as(Stopping.STALE)
        sup.stop_run(run, grace_s=0)
