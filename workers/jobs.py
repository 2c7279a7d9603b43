"""Running jobs on a node: the RQ entry point and the supervisor behind it.

RQ delivers `launch(job_id, epoch)` from the node's queue to the node agent's RQ worker, in the
agent's own process; `launch` returns once the job's process has started, so one RQ worker starts
many jobs and no fork of Python is paid per job. The supervisor streams each job's output into
Redis and a file, and writes the outcome with the epoch it was given: finish.lua refuses a stale
one, and the copy is killed. Each attempt gets its own cgroup where the host allows it and dies
with the agent (PR_SET_PDEATHSIG); its pid is recorded in the work dir for the keeper and the
next agent (workers/proctrack.py, keeper.py, recovery.py); what Redis cannot take waits in the
durable outbox (outbox.py). The steps of a launch: launching.py; an attempt and why it is being
stopped: running.py; what its end is recorded as: outcomes.py; control commands: commands.py.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from dispatcher.clock import now_ms
from dispatcher.core.model import FINAL_STATES
from dispatcher.store import control, job_record, keys
from dispatcher.store.codec import decode_spec, encode_spec
from dispatcher.store.jobs import LOG_CHUNK, append_log
from dispatcher.store.scripts import Outcome

from . import jobenv, launching, outcomes, outputs, proctrack
from .jobchannel import JobChannel
from .keeper import PID_DIR, keep_exit
from .outbox import Outbox
from .running import CHECKPOINT_FILE, Running, Stopping

#: Output that comes within this long of the last write to a job's log stream goes in one entry with
#: what follows it (the first output after a quiet spell goes at once).
LOG_BATCH_S = 0.05

log = logging.getLogger("dispatch.agent")

#: The supervisor of this process, set by the node agent.
_supervisor: "Supervisor | None" = None

def launch(job_id: str, epoch: int, seal: str = "") -> str:
    """RQ entry point. Plain data in (JSON serializer): the job id, its epoch and, under identity, the
    leader's seal of this attempt on this node (identity.seal_attempt)."""
    if _supervisor is None:
        raise RuntimeError("workers.jobs.launch runs only inside a dispatch node agent (dispatch worker)")
    return _supervisor.launch(str(job_id), int(epoch), str(seal or ""))


class Supervisor:
    def __init__(self, client, ns: str, node: str, scripts, work_dir: Path, url: str = "",
                 run_as_user: bool = False, verifier=None, allow_root_jobs: bool = False, address: str = "127.0.0.1",
                 checkpoints: Path | None = None):
        self.client, self.ns, self.node, self.scripts = client, ns, node, scripts
        self.address = address  # where this node's jobs are reached (a gang's rank 0 is met there)
        # DISPATCH_CHECKPOINT_DIR is <checkpoints>/<job id>: shared storage, for a gang's ranks on several hosts
        self.checkpoints = Path(checkpoints) if checkpoints else work_dir / "checkpoints"
        self.work_dir, self.url = work_dir, url
        self.run_as_user = run_as_user  # start each job as its submitting Unix user (the agent is root)
        self.allow_root_jobs = allow_root_jobs  # with run_as_user: a job of user root may run as root
        self.verifier = verifier  # identity on: start only jobs whose record is what their user signed
        # every job starts from the agent's environment less its credentials (workers/jobenv.py)
        self.base_env = jobenv.agent_env(jobenv.secrets_of(url, client, verifier))
        self.channel = JobChannel(self)  # what a job may ask of the agent (workers/jobchannel.py)
        self.running: dict[str, Running] = {}
        self.started: dict[str, int] = {}  # job id -> the last epoch started here (recovery.reconcile), the newest 10k
        self.meeting: set[tuple[str, int]] = set()  # a gang's rank > 0 waiting for rank 0 (workers/gang.py)
        self.gpus: dict | None = None  # index -> GpuInfo, as the last heartbeat found them (launching checks)
        self.fresh_until: float | None = None  # monotonic time past which, without a heartbeat, nothing starts
        self.lock = threading.Lock()
        self.outbox = Outbox(work_dir)  # what Redis did not take yet, on disk, oldest first
        self.cgroups = proctrack.node_cgroup(work_dir)  # None: jobs are tracked by session and marks
        # every job process is forked by this one long-lived thread: PDEATHSIG fires when the
        # forking *thread* ends, so it must not be a job's watcher thread
        self.spawner = ThreadPoolExecutor(1, thread_name_prefix="spawn")
        proctrack.default_signals_for_jobs()  # no job starts with a signal ignored: the agent's nohup is not theirs
        self.pid_dir = work_dir / PID_DIR
        self.agent = proctrack.agent_tag(work_dir)  # every job's DISPATCH_AGENT

    # -- starting ---------------------------------------------------------------------------
    def launch(self, job_id: str, epoch: int, seal: str = "") -> str:
        """Start attempt `epoch` of `job_id` (workers/launching.py has the steps): "started", or why
        not ("refused", "stale", "cancelled", "failed")."""
        return launching.launch(self, job_id, epoch, seal)

    # -- watching ----------------------------------------------------------------------------
    def watch(self, run: Running, log_path: Path) -> None:
        """The job ends when its main process ends: what it left running is stopped (after its grace
        period), then its outcome is written."""
        copy = self._copy_output if run.tty is None else run.tty.copy_output  # a pipe, or a PTY (workers/tty.py)
        reader = threading.Thread(target=copy, args=(run, log_path), name=f"log-{run.job_id}", daemon=True)
        reader.start()
        self.time_limit(run)
        code = run.proc.wait()
        run.ended_ms = now_ms()  # its end's time, whatever delays the record (its output's last copy, Redis)
        ended_alone = not run.stopping  # (not a cancel's, preemption's or fence's end)
        if ended_alone:  # reaped: kept on disk (keeper.KEEP_ENDS_S), so that neither a kill -9 of this agent
            # before its outcome is written nor a server that loses the write makes it run again
            keep_exit(self.work_dir, run.job_id, run.epoch, code, run.ended_ms, run.stamp)
        self.time_limit(run, keep=False)
        proctrack.stop_leftovers(run.attempt, run.spec.grace_s)
        reader.join(5.0)  # the output pipe closes with the last process that held it
        self._forget_pid(run.job_id, run.epoch)
        try:  # a checkpoint saved on the checkpoint signal, just before the job exited: before its end
            self._note_checkpoint(run)
        except Exception as e:
            log.warning("job %s: could not record its last checkpoint (%s)", run.job_id, e)
        try:  # it stays in `running` until its outcome is written (or queued): reconcile must not take it
            if run.unsent:  # (kept in memory if the disk is full too: outbox.add)
                self.outbox.add("log", run.job_id, run.epoch, run.unsent_bytes(), run.rank or 0)
            outcomes.record_end(self, run, code)
            for entry_id in run.acks:
                control.ack(self.client, self.ns, self.node, entry_id)
        except Exception as e:  # Redis away: the outcome waits in the outbox; commands stay unacked
            log.warning("job %s: could not record its end yet (%s)", run.job_id, e)
        finally:
            with self.lock:
                if self.running.get(run.job_id) is run:
                    del self.running[run.job_id]
        if run.tty is not None:  # an interactive session's end, for its client (after the outcome it reads)
            try:
                run.tty.ended(code)
            except Exception as e:
                log.warning("job %s: could not record its session's end (%s)", run.job_id, e)
        if run.spec.notify:  # once the job has ended (not on a requeue; a gang: once)
            outputs.tell_end(self, run.job_id)

    def _copy_output(self, run: Running, log_path: Path) -> None:
        """The job's output, into its node-side log file and its log stream: what comes within LOG_BATCH_S
        of the last write to the stream goes with the next one, as one entry (a job that prints a line at
        a time costs the server a write per batch, not per line). What Redis does not take waits (up to
        UNSENT_MAX, the newest kept; what is cut is said where it was) and goes with the next batch, or into
        the outbox."""
        out, copy = run.proc.stdout, outputs.start(self, run, log_path)  # its --output file (workers/outputs.py)
        more, sent_at = select.poll(), 0.0
        more.register(out.fileno(), select.POLLIN)
        with open(log_path, "ab", buffering=0) as f:
            node_log = f  # (None once the disk refuses it: the pipe is still read, or the job would block)
            while True:
                chunk = out.read1(65536)
                if not chunk:
                    break
                if node_log is not None:
                    node_log = outputs.write(self, run, node_log, chunk, f"its log file {log_path}")
                if copy is not None:
                    copy = outputs.write(self, run, copy, chunk)
                run.keep_unsent(chunk)
                wait_s = sent_at + LOG_BATCH_S - time.monotonic()
                if len(run.unsent) < LOG_CHUNK and wait_s > 0 and more.poll(wait_s * 1000):
                    continue  # more output already: it goes in the same entry
                self._send_output(run)
                sent_at = time.monotonic()
        if run.unsent:
            self._send_output(run)
        if copy is not None:
            copy.close()

    def _send_output(self, run: Running) -> None:
        try:
            append_log(self.client, self.ns, run.job_id, run.unsent_bytes(), rank=run.rank or 0)
            run.sent()
        except Exception as e:  # kept for the next batch, or for the outbox at the end
            log.warning("job %s: log write failed: %s", run.job_id, e)

    def finish(self, job_id, epoch, state, exit_code, reason, **kw) -> None:
        """Record an outcome (finish.lua, fenced by the epoch). If Redis cannot take it now, it waits
        in the outbox on disk, with the time it happened, and flush_outbox() writes it later."""
        kw.setdefault("at_ms", now_ms())
        try:
            self._write_outcome(job_id, epoch, state, exit_code, reason, **kw)
        except Exception:
            if kw.get("spec") is not None:
                kw["spec"] = encode_spec(kw["spec"])
            self.outbox.add("finish", job_id, epoch, state, exit_code, reason, kw)
            raise

    def _write_outcome(self, job_id, epoch, state, exit_code, reason, *, at_ms, say=True, **kw) -> bool:
        ok = self.scripts.finish(job_id, self.node, epoch, state, exit_code, at_ms, reason, **kw)
        self.client.publish(keys.events(self.ns), b"finish")
        if ok != Outcome.DONE and say:
            log.warning("job %s: outcome %s refused (epoch %d is stale)", job_id, state, epoch)
        return ok == Outcome.DONE

    def flush_outbox(self) -> None:
        """Write what waited for Redis, oldest first; stops at the first Redis error. An entry that
        cannot be understood is set aside (outbox/*.unreadable), never retried forever."""
        import redis

        while (first := self.outbox.first()) is not None:
            path, entry = first
            took = None
            try:
                took = self._replay(*entry)
            except (redis.exceptions.RedisError, OSError):
                raise
            except Exception as e:
                log.error("outbox entry %s cannot be replayed (%s); set aside", path.name, e)
                path.rename(path.with_suffix(".unreadable"))
                self.outbox.done(path)
                continue
            self.outbox.done(path)
            if took is False:  # (the keeper recorded that end meanwhile, or the job moved on: not a failure)
                log.info("job %s: its %s, kept while Redis was away, was recorded already or is stale; dropped",
                         entry[1], entry[0])
            else:
                log.info("job %s: %s recorded after Redis came back", entry[1], entry[0])
            if entry[0] == "finish" and entry[3] in FINAL_STATES:  # its --notify, which could not read it then
                outputs.tell_end(self, entry[1])

    def _replay(self, kind, job_id, epoch, *rest) -> bool | None:
        if kind == "log":  # (an entry of an older agent has no rank: rank 0's)
            append_log(self.client, self.ns, job_id, rest[0], rank=rest[1] if len(rest) > 1 else 0)
        elif kind == "running":
            self.scripts.mark_running(job_id, epoch, rest[0], rest[1])  # check() stops a copy now stale
        elif kind == "finish":
            state, exit_code, reason, kw = rest
            kw = dict(kw)
            if kw.get("spec") is not None:
                kw["spec"] = decode_spec(kw["spec"], key="outbox spec")
            return self._write_outcome(job_id, epoch, state, exit_code, reason, say=False, **kw)
        else:
            raise ValueError(f"unknown kind {kind!r}")

    # -- what an earlier agent of this node left --------------------------------------------
    def record_pid(self, job_id: str, epoch: int, pid: int) -> None:
        self.pid_dir.mkdir(parents=True, exist_ok=True)
        (self.pid_dir / job_id).write_text(f"{pid} {epoch} {self.node} {self.agent}")  # proctrack.Attempt.marks

    def _forget_pid(self, job_id: str, epoch: int) -> None:
        path = self.pid_dir / job_id
        try:
            if path.read_text().split()[1] == str(epoch):
                path.unlink()
        except (OSError, IndexError):
            pass

    def stale_all(self) -> list:
        """Kill every job this agent runs as a stale copy (its outcome not recorded: another agent runs
        the node now, and its epochs moved on); returns them."""
        return self._kill_all(Stopping.STALE)

    def fence_all(self, why: str) -> int:
        """This node was cut off from Redis for too long: its jobs are about to be (or were) rerun
        elsewhere, so kill every copy now. Returns how many were stopped."""
        runs = self._kill_all(Stopping.FENCED)
        for r in runs:
            log.warning("job %s: killed, %s", r.job_id, why)
        return len(runs)

    def _kill_all(self, why: Stopping) -> list:
        """SIGKILL every job this agent runs that may be stopped as `why` now (Running.stop_as); returns them."""
        with self.lock:
            runs = [r for r in self.running.values() if r.stop_as(why)]
        for r in runs:
            self.stop_run(r, 0, signal.SIGKILL)
        return runs

    # -- stopping ----------------------------------------------------------------------------
    def stop_run(self, run: Running, grace_s: float, first: signal.Signals = signal.SIGTERM) -> None:
        """Send `first` to every process of the job (its group, its cgroup, escapees that carry its
        marks), then SIGKILL what is left after grace_s (in a thread)."""
        a = run.attempt or proctrack.Attempt(run.job_id, run.epoch, run.proc.pid, node=self.node,
                                                    agent=self.agent)

        def hit(sig):
            found = proctrack.signal_attempt(a, sig)
            if (sig == signal.SIGKILL or not found) and run.proc.poll() is None:
                # its first process may not be in its cgroup yet (the shell that moves it there has not run:
                # a cancel met the launch): its own process group, which this agent's unreaped child leads
                try:
                    os.killpg(run.proc.pid, sig)
                except OSError:
                    pass

        def go():
            hit(first)
            if first == signal.SIGKILL:
                return
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline and run.proc.poll() is None:
                time.sleep(0.05)
            hit(signal.SIGKILL)
        threading.Thread(target=go, name=f"kill-{run.job_id}", daemon=True).start()

    def time_limit(self, run: Running, keep: bool = True) -> None:
        """With --time: the timer that stops the attempt (TIMEOUT) at its spec's limit, counted from its
        start (as Slurm's: the job runs its whole limit, then has its --grace); set again when the limit
        changes (`dispatch update --time`, workers/commands.py). keep=False: no timer any more (its end)."""
        with self.lock:
            if run.time_limit is not None:
                run.time_limit.cancel()
            run.time_limit = None
            limit = run.spec.time_limit_s if keep else None
            if limit:
                timer = threading.Timer(max(0.0, run.started + limit - time.monotonic()), self._time_up, (run,))
                timer.name, timer.daemon = f"time-{run.job_id}", True
                run.time_limit = timer
                timer.start()

    def _time_up(self, run: Running) -> None:
        """The checkpoint signal now (the limit); SIGKILL to what is left its --grace later (Slurm's KillWait)."""
        if run.stop_as(Stopping.TIMEOUT):  # (not once its process has ended: Running.stop_as)
            log.warning("job %s: --time %.0fs ran out; %s now, SIGKILL in %.0fs", run.job_id,
                        run.spec.time_limit_s, run.checkpoint_signal.name, run.spec.grace_s)
            self.stop_run(run, run.spec.grace_s, run.checkpoint_signal)

    def check(self) -> None:
        """Once a heartbeat: stop copies whose epoch moved (fenced), a gang's ranks once their gang stops
        or is cancelled, and jobs past their --hang-timeout; record checkpoints (reported by touching
        DISPATCH_CHECKPOINT_DIR/CHECKPOINTED) and, with --hang-timeout, progress (DISPATCH_PROGRESS_FILE)."""
        with self.lock:
            runs = [r for r in self.running.values() if r.stopping is not Stopping.STALE]
        if not runs:
            return
        pipe = self.client.pipeline(transaction=False)
        for r in runs:
            job_record.queue_fields(pipe, self.ns, r.job_id, job_record.FENCE)
        for r, reply in zip(runs, pipe.execute()):
            rec = job_record.values(job_record.FENCE, reply)
            if rec["epoch"] != r.epoch:
                r.stop_as(Stopping.STALE)
                self.stop_run(r, 0, signal.SIGKILL)
                continue
            if r.rank is not None:
                self._follow_gang(r, rec)
            self._progress(r, rec["progress_ms"])
            self._note_checkpoint(r)

    def _note_checkpoint(self, run: Running) -> None:
        """Record a checkpoint the job reported by touching DISPATCH_CHECKPOINT_DIR/CHECKPOINTED since the
        last look (checkpointed.lua, fenced by the epoch)."""
        try:
            mtime = (run.ckpt_dir / CHECKPOINT_FILE).stat().st_mtime
        except OSError:
            return
        if mtime > run.ckpt_seen:
            run.ckpt_seen = mtime
            self.scripts.checkpointed(run.job_id, run.epoch, int(mtime * 1000))

    def _follow_gang(self, run: Running, rec: dict) -> None:
        """A gang's rank stops with its gang: once the job is stopping (another rank ended, its node
        died, or the gang is preempted), with the checkpoint signal and grace as a preemption; once
        it is cancelled, as a cancel (the command reaches rank 0's node only)."""
        if rec["cancel_ms"] and run.stopping is not Stopping.CANCEL and run.stop_as(Stopping.CANCEL):
            self.stop_run(run, run.spec.grace_s)  # (once: each beat sees the cancel, a signal a beat broke torchrun)
        elif rec["state"] == "preempting" and run.stop_as(Stopping.GANG):
            self.stop_run(run, run.spec.grace_s, run.checkpoint_signal)

    def _progress(self, run: Running, reported_ms: int) -> None:
        """With --hang-timeout: progress is the rank's file growing (recorded for every rank to see) or
        another rank's agent recording some; none for that long stops the attempt as lost (HUNG)."""
        hang = run.spec.hang_timeout_s
        if not hang:  # progress_ms is read for hang checks alone
            return
        now = time.time()
        if not run.progress_at:
            run.progress_at = now  # counted from the start
        try:
            st = run.progress_file.stat() if run.progress_file else None
        except OSError:
            st = None
        mtime = st.st_mtime if st is not None and st.st_size else 0
        if mtime > run.progress_at:
            run.progress_at = mtime
            self.scripts.progress(run.job_id, run.epoch, int(mtime * 1000))
        run.progress_at = max(run.progress_at, reported_ms / 1000)
        if not run.stopping and now - run.progress_at > hang and run.stop_as(Stopping.HUNG):
            log.warning("job %s: no progress for %.0fs (--hang-timeout %.0fs); stopping it", run.job_id,
                        now - run.progress_at, hang)
            self.stop_run(run, run.spec.grace_s)

    def stop_all(self, timeout_s: float = 10.0, hurry: threading.Event | None = None) -> None:
        """Agent shutdown: stop every job and put it back in the queue. Once `hurry` is set (a second
        stop signal) what is still running gets SIGKILL at once, and is still recorded requeued: the
        operator stopped it, it did not fail (recorded after its end, so no copy outlives its record)."""
        with self.lock:
            runs = list(self.running.values())
        for r in runs:
            r.stop_as(Stopping.REQUEUE)  # unless it is already stopping for another reason
            self.stop_run(r, min(r.spec.grace_s, timeout_s))
        deadline, hurried = time.monotonic() + timeout_s + 1, False
        for r in runs:
            while r.thread is not None and r.thread.is_alive() and time.monotonic() < deadline:
                if hurry is not None and hurry.is_set() and not hurried:
                    hurried = True
                    log.warning("stopping now: killing the jobs still running (they go back to the queue)")
                    for x in runs:
                        if x.proc.poll() is None:
                            self.stop_run(x, 0.0, signal.SIGKILL)
                r.thread.join(0.05)
        try:
            self.flush_outbox()
        except Exception as e:
            log.warning("%d job outcomes could not be recorded before shutdown: %s", len(self.outbox), e)
        self.spawner.shutdown(wait=False)
