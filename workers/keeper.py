"""The node's keeper: a small process beside the agent that stops the node's jobs when the agent
can no longer vouch for them (docs/guarantees.md, "fencing").

The agent fences its own jobs when it cannot heartbeat, but an agent that is stopped (SIGSTOP, a
hung host, a swap storm) or blocked in a socket read fences nothing. So the agent starts this
keeper, and after every heartbeat Redis took it writes one line to the keeper's stdin: the
CLOCK_MONOTONIC time at which it *sent* that heartbeat. The keeper kills every job of the node
(workers/proctrack.py: cgroup, process group, marked escapees) once `fence_s` has passed since the
latest such time, and keeps killing what it finds until a newer heartbeat arrives. The scheduler
requeues a node's jobs only after it has itself seen no new heartbeat for node_timeout_s, which is
fence_s + margin_s (dispatcher/config.py Timing), so a copy is dead before its job starts elsewhere.

It reads the attempt records the agent keeps in its work dir. It talks to Redis only when the
agent is late: an attempt that ended meanwhile, unreaped, has its exit status read from /proc and
recorded (dispatcher/store/exits.py), and so has one whose outcome waits in the agent's outbox (it
ended while Redis was away, then the agent stopped), so the scheduler records that outcome instead of
rerunning a job that finished while its agent was stopped. Each such end is kept in the work dir
first (<work dir>/exits/<job id>): if Redis is down too, the next agent of the node records it from
there (workers/recovery.py). When the agent dies (its stdin closes) the keeper kills the node's jobs
and exits.
Each job it kills is marked in <work dir>/fenced/<job id> (its epoch), so the agent reports it as
fenced rather than as killed by a signal dispatch did not send (a failure).

    python -m workers.keeper <work dir> <fence seconds> <monotonic time of the last heartbeat> <namespace>
"""

from __future__ import annotations

import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from dispatcher.store.exits import crashed, exit_text, parse_exit

from . import outbox, proctrack
from dispatcher.store.repeating import Repeating

log = logging.getLogger("dispatch.keeper")

PID_DIR, FENCED_DIR, EXITS_DIR = "pids", "fenced", "exits"


def read_attempts(work_dir: Path) -> list[proctrack.Attempt]:
    """The attempts the agent recorded as started and not yet ended (<work dir>/pids/<job id>:
    "<pgid> <epoch> <node> <agent>"), and those whose cgroup exists (an attempt being started is in its cgroup
    before its pid is recorded: under this agent's node cgroup, it is this agent's, so the marks it is
    looked for by once its cgroup is gone name the agent too)."""
    root = proctrack.node_cgroup(work_dir)
    out = {}
    pid_dir = work_dir / PID_DIR
    for path in sorted(pid_dir.glob("*")) if pid_dir.is_dir() else []:
        try:
            pgid, epoch, *where = path.read_text().split()  # older agents: no node, no agent
            pgid, epoch = int(pgid), int(epoch)
            node, agent = (where + ["", ""])[:2]
        except (OSError, ValueError):
            continue
        out[(path.name, epoch)] = proctrack.Attempt(path.name, epoch, pgid,
                                                    proctrack.attempt_cgroup(root, path.name, epoch), node, agent)
    for cg in proctrack.leftover_cgroups(root):
        job_id, _, epoch = cg.name.rpartition(".")
        if job_id and epoch.isdigit() and (job_id, int(epoch)) not in out:
            out[(job_id, int(epoch))] = proctrack.Attempt(job_id, int(epoch), 0, cg,
                                                          agent=proctrack.agent_tag(work_dir))
    return list(out.values())


#: How long the agent keeps an end it recorded (<work dir>/exits/<job id>): a server killed while its
#: append-only file lagged (appendfsync everysec under a slow disk) can come back without that write, and
#: the agent's next reconcile (workers/recovery.py, every 10 heartbeats) or the launch it may find again
#: in its RQ queue then records the end again instead of rerunning a job that ended.
KEEP_ENDS_S = 600.0


def keep_exit(work_dir: Path, job_id: str, epoch: int, code: int, at_ms: int, stamp: int = 0) -> None:
    """An end kept in the work dir (<work dir>/exits/<job id>): by the keeper, of an attempt it saw end
    unreaped (when Redis cannot take it: the agent was killed while the server was down), and by the
    agent, of every attempt it reaped that ended on its own, for KEEP_ENDS_S. The next agent of the node
    records it from here (workers/recovery.py) rather than rerun a job that ended. `stamp`: the job's
    submit time (ms), where known, so that a job id Redis issued again after losing a submit is never
    taken for the job that ended."""
    folder = work_dir / EXITS_DIR
    tmp = folder / f".{job_id}.tmp"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp.write_text(exit_text(epoch, code, at_ms) + (f" {stamp}" if stamp else ""))
        tmp.replace(folder / job_id)
    except OSError as e:  # a full disk: the end still goes to Redis (or the outbox), only this copy is lost
        log.warning("cannot keep the end of job %s in %s (%s); recording it all the same", job_id, folder,
                    e.strerror or e)


def _kept(work_dir: Path, job_id: str) -> tuple[tuple[int, int, int], int] | None:
    """((epoch, code, ms), stamp) as keep_exit kept them for `job_id` (stamp 0: not known), or None."""
    try:
        parts = (work_dir / EXITS_DIR / job_id).read_text().split()
    except OSError:
        return None
    report = parse_exit(" ".join(parts[:3]))
    stamp = parts[3] if len(parts) == 4 else "0"
    return (report, int(stamp)) if report is not None and stamp.isdigit() else None


def kept_exit(work_dir: Path, job_id: str) -> tuple[int, int, int] | None:
    """(epoch, code, ms) keep_exit kept for `job_id`, or None."""
    kept = _kept(work_dir, job_id)
    return kept[0] if kept else None


def kept_end(work_dir: Path, job_id: str, epoch: int, stamp: int) -> tuple[int, int, int] | None:
    """The end kept for `job_id` (submitted at `stamp`, ms), as (epoch, code, ms) of attempt `epoch`: one
    kept at that epoch (of the same job where both sides know its submit time), or, for the same job
    known by its submit time, at a later epoch (the server lost the requeue that led there too). None
    for another job, or an earlier attempt."""
    kept = _kept(work_dir, job_id)
    if kept is None:
        return None
    (kept_epoch, code, ms), kept_stamp = kept
    known = bool(kept_stamp and stamp)
    same = known and kept_stamp == stamp
    if kept_epoch == epoch and (same or not known) or kept_epoch > epoch and same:
        return epoch, code, ms
    return None


def prune_exits(work_dir: Path, keep_s: float = KEEP_ENDS_S) -> None:
    """Drop the ends kept longer than `keep_s`."""
    folder = work_dir / EXITS_DIR
    cutoff = time.time() - keep_s
    for path in folder.iterdir() if folder.is_dir() else ():
        try:
            if path.stat().st_mtime < cutoff:
                path.unlink()
        except OSError:
            continue


def fenced_epoch(work_dir: Path, job_id: str) -> int | None:
    try:
        return int((work_dir / FENCED_DIR / job_id).read_text())
    except (OSError, ValueError):
        return None


def fence(work_dir: Path, why: str) -> list[str]:
    """Kill every recorded attempt of the node; returns the job ids killed."""
    killed = []
    for a in read_attempts(work_dir):
        if not proctrack.pids(a) and not proctrack.cgroup_pids(a.cgroup):
            continue
        try:  # the mark tells the agent the kill was the fence's; a full disk must not keep the copy alive
            (work_dir / FENCED_DIR).mkdir(parents=True, exist_ok=True)
            (work_dir / FENCED_DIR / a.job_id).write_text(str(a.epoch))
        except OSError as e:
            log.warning("keeper: cannot mark job %s fenced (%s); killing it all the same", a.job_id, e)
        proctrack.signal_attempt(a, signal.SIGKILL)
        killed.append(a.job_id)
    if killed:
        log.warning("keeper: killed jobs %s: %s", ", ".join(killed), why)
    return killed


def exit_status(pid: int) -> int | None:
    """The exit of a process that ended but that nobody reaped yet (its agent is stopped), as
    Popen.returncode gives it (-N for signal N); None while it runs or once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    if not fields or fields[0] != "Z" or len(fields) < 50:
        return None
    status = int(fields[49])  # field 52, exit_code: the wait status
    return -(status & 0x7F) if status & 0x7F else (status >> 8) & 0xFF


class ExitReports:
    """Ends of attempts the agent could not report (not reaped, or waiting in its outbox), written to
    Redis (store/exits.py) so that the scheduler records them rather than rerun a job that ended while
    its agent was stopped."""

    #: How long a job's signal death waits to be told as a crash, the agent still alive meanwhile.
    SETTLE_S = 0.5

    def __init__(self, url: str, ns: str, agent: int | None = None):
        self.url, self.ns, self.client, self.sent = url, ns, None, set()
        self.failing: dict[str, Repeating] = {}  # job id -> its report's failures (a line a report otherwise)
        self.agent = agent  # the agent's pid (this keeper's parent while it lives)
        self.alive: set[tuple[str, int]] = set()  # attempts this keeper saw running (job id, epoch)
        self.dead: dict[tuple[str, int], float] = {}  # those it then saw killed by a signal, and when

    def report(self, work_dir: Path) -> None:
        if not self.url:
            return
        ended = [e for e in self.ended(work_dir) if (e[0], e[1]) not in self.sent]
        for job_id, epoch, code, at_ms in ended:  # on disk first (once): Redis may be down too
            if (kept_exit(work_dir, job_id) or (None,))[0] != epoch:
                keep_exit(work_dir, job_id, epoch, code, at_ms)
        for job_id, epoch, code, at_ms in ended:
            try:
                if self.client is None:
                    from dispatcher.store.connect import connect

                    self.client = connect(self.url, check=False, socket_timeout=1.0, socket_connect_timeout=1.0)
                from dispatcher.store.exits import write_exit

                write_exit(self.client, self.ns, job_id, epoch, code, at_ms)
                self.sent.add((job_id, epoch))
                self.failing.pop(job_id, None)
                log.warning("keeper: job %s (epoch %d) ended with %d while its agent could not report it; recorded",
                            job_id, epoch, code)
            except Exception as e:  # cut off too: the scheduler will rerun it, as it would have
                self.failing.setdefault(job_id, Repeating(log, f"keeper: recording the end of job {job_id}")) \
                    .failure(e)
                self.client = None
                return

    def reporter(self, work_dir: Path) -> threading.Event:
        """Start reporting, from a thread, while the returned event is set (the agent is late)."""
        late = threading.Event()

        def loop():
            while True:
                late.wait()
                self.report(work_dir)
                time.sleep(0.2)

        threading.Thread(target=loop, name="exit-reports", daemon=True).start()
        return late

    def note_alive(self, work_dir: Path) -> None:
        """The attempts running now (read while the agent is on time too: a crash soon after it stops counts);
        those no longer in the work dir are forgotten."""
        attempts = read_attempts(work_dir)
        here = {(a.job_id, a.epoch) for a in attempts}
        self.alive &= here
        self.dead = {k: v for k, v in self.dead.items() if k in here}
        for a in attempts:
            self._note(a)

    def _note(self, a) -> None:
        if a.pgid and (a.job_id, a.epoch) not in self.alive and exit_status(a.pgid) is None \
                and Path(f"/proc/{a.pgid}").exists():
            self.alive.add((a.job_id, a.epoch))

    def ended(self, work_dir: Path) -> list[tuple[str, int, int, int]]:
        """(job id, epoch, exit code, ms) of the attempts that ended without their end in Redis: those
        not reaped yet (the agent stopped before it saw them end), and those whose outcome waits in the
        agent's outbox (it saw them end while Redis was away, then stopped). A signal that killed one this
        keeper saw alive, while its agent lives (stopped: it sent none), is a crash (store/exits.py crashed)
        unless the fence sent it; any other kill is one of dispatch's (the fence's, or the agent's death's:
        its jobs die with it), that attempt lost."""
        now, out = int(time.time() * 1000), []
        for a in read_attempts(work_dir):
            code = exit_status(a.pgid) if a.pgid else None
            if code is None:
                self._note(a)
                continue
            crash = code < 0 and (a.job_id, a.epoch) in self.alive and fenced_epoch(work_dir, a.job_id) != a.epoch
            if crash:  # told once the agent has still been there a while: a dying agent's threads go one by one,
                # and its jobs (dying with the thread that started them) may end before this keeper is orphaned
                since = self.dead.setdefault((a.job_id, a.epoch), time.monotonic())
                if time.monotonic() - since < self.SETTLE_S:
                    continue
                crash = self.agent is not None and os.getppid() == self.agent
            out.append((a.job_id, a.epoch, crashed(code) if crash else code, now))
        return out + outbox.own_ends(work_dir)


def main(work_dir: Path, fence_s: float, last_sent: float, ns: str = "") -> int:
    """`last_sent`: when the agent sent the last heartbeat Redis took before it started this keeper.

    Reports go to Redis from a thread of their own: a report can block for its socket timeouts (the
    node cut off by dropped packets), and nothing may hold back the kill at the deadline."""
    fd = sys.stdin.fileno()
    deadline = last_sent + fence_s
    exits = ExitReports(os.environ.get("DISPATCH_KEEPER_URL", ""), ns, agent=os.getppid())
    late = exits.reporter(work_dir)
    buf = b""
    while True:
        wait = max(0.0, deadline - time.monotonic())
        ready, _, _ = select.select([fd], [], [], min(wait, 0.5) if wait > 0 else 0.2)
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:  # what ended just before the agent died, if still unreaped, then the kill
                last = threading.Thread(target=exits.report, args=(work_dir,), daemon=True)
                last.start()
                last.join(max(0.0, deadline - time.monotonic() - 0.1))
                fence(work_dir, "the node agent is gone")
                return 0
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                try:
                    deadline = max(deadline, float(line) + fence_s)
                except ValueError:
                    continue
        now = time.monotonic()
        if now >= deadline - fence_s / 2:  # the agent is late: what ended meanwhile is reported
            late.set()
        else:
            late.clear()
            exits.note_alive(work_dir)
        if now >= deadline:
            fence(work_dir, f"the node agent sent no heartbeat Redis took for {now - deadline + fence_s:.1f}s "
                            f"(stopped, hung or cut off)")


class Keeper:
    """The agent's handle on its keeper process."""

    def __init__(self, work_dir: Path, fence_s: float, url: str = "", ns: str = ""):
        self.work_dir, self.fence_s, self.url, self.ns = Path(work_dir), fence_s, url, ns
        self.proc: subprocess.Popen | None = None

    def start(self, last_sent: float) -> None:
        root = str(Path(__file__).resolve().parents[1])
        env = {k: v for k, v in os.environ.items() if not k.startswith("DISPATCH_REDIS")}
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        env["DISPATCH_KEEPER_URL"] = self.url  # in its environment, not its argv: ps shows no password
        # no death signal: the keeper outlives the agent long enough to kill what the agent left
        # (its stdin closes); a session of its own keeps a terminal's Ctrl-C away from it
        self.proc = subprocess.Popen([sys.executable, "-m", "workers.keeper", str(self.work_dir), repr(self.fence_s),
                                      repr(last_sent), self.ns], stdin=subprocess.PIPE, env=env,
                                     start_new_session=True)

    def beat(self, sent: float) -> None:
        """The heartbeat sent at monotonic time `sent` was taken by Redis. Restarts a dead keeper."""
        if self.proc is None or self.proc.poll() is not None:
            if self.proc is not None:
                log.warning("the node's keeper exited (code %s); restarting it", self.proc.returncode)
            self.start(sent)
        try:
            self.proc.stdin.write(f"{sent!r}\n".encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            log.warning("cannot reach the node's keeper (%s); restarting it", e)
            self.start(sent)

    def close(self) -> None:
        """The agent stops on purpose, its jobs already stopped: the keeper goes without killing."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    sys.exit(main(Path(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4] if len(sys.argv) > 4 else ""))
