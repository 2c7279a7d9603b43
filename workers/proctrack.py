"""Which processes are a job's, and stopping all of them.

A job is started as the leader of its own session and process group, and every process it
spawns carries its DISPATCH_JOB_ID and DISPATCH_EPOCH. Where the host allows it (cgroup v2,
writable: root, or a delegated subtree), each attempt also gets its own cgroup, as Slurm's
proctrack/cgroup does: a process that leaves the session (`setsid`, a daemon's double fork)
stays in it, and `cgroup.kill` stops them all at once. Without cgroups the session, the
process group and the environment marks are what is left; an escapee that also clears its
environment is then out of reach.

The node agent (workers/jobs.py) and its keeper (workers/keeper.py) both stop jobs through
`stop_attempt`, so the two agree on what belongs to a job.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import logging
import os
import shutil
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .procs import environs

log = logging.getLogger("dispatch.agent")

_PR_SET_PDEATHSIG = 1
try:  # resolved in the agent, so the forked child makes one plain call and nothing else
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux
    _prctl = None


def _die_with_agent() -> None:
    """In the job's process, before exec: SIGKILL it when the agent's spawning thread dies."""
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


#: util-linux's setpriv sets the same death signal and then execs the job. Starting it needs no
#: preexec_fn, so Popen can use vfork instead of copying the agent's address space for every job
#: (a few ms each on a busy node); without setpriv the agent falls back to _die_with_agent.
_SETPRIV = shutil.which("setpriv")


def _dropped(signum, frame) -> None:
    """The handler of a signal the agent came with ignored: it still does nothing here."""


def default_signals_for_jobs() -> None:
    """In the agent (its main thread, before its first job): each signal it came with ignored (nohup's
    SIGHUP, SIGINT and SIGQUIT of a shell's background job) is caught and dropped instead. The agent
    still ignores it, but its jobs start with it at its default, as slurmstepd starts them: exec keeps
    an ignored signal ignored and resets a caught one, and a shell cannot trap a signal ignored at its
    start (a job's checkpoint signal, a session's SIGHUP, would never reach its trap). SIGPIPE and
    SIGXFSZ, which Python ignores itself, Popen restores in the child."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in signal.valid_signals() - {signal.SIGPIPE, signal.SIGXFSZ, signal.SIGKILL, signal.SIGSTOP}:
        try:
            if signal.getsignal(sig) is signal.SIG_IGN:
                signal.signal(sig, _dropped)
        except (OSError, ValueError):  # one the C library keeps for itself
            pass


def spawn_args(command: list[str], cwd: str | None, env: dict) -> tuple[list[str], dict]:
    """argv and extra Popen arguments that start `command` so that it dies with the agent. Raises
    the OSError a shell would report (cannot_exec) for a program that cannot be run, so that the job
    fails with "cannot start" and not with setpriv's or a cgroup wrapper's exit code."""
    error = cannot_exec(command[0], cwd, env.get("PATH", os.defpath))
    if error is not None:
        raise error
    if _SETPRIV is None:
        return command, {"preexec_fn": _die_with_agent}
    return [_SETPRIV, "--pdeathsig", "KILL", "--", *command], {}


def cannot_exec(program: str, cwd: str | None, path: str) -> OSError | None:
    """Why `program` (a path, or a name looked up in `path`) cannot be run, as a shell says it:
    FileNotFoundError where there is nothing by that name (exit 127), PermissionError or
    IsADirectoryError where there is, but not a program (exit 126); None where it can be run."""
    if "/" in program:
        candidates = [os.path.join(cwd or ".", program)]
    else:
        candidates = [os.path.join(d or ".", program) for d in path.split(os.pathsep)]
    found = None
    for c in candidates:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return None
        if found is None and os.path.exists(c) and ("/" in program or not os.path.isdir(c)):
            found = c  # (a shell's PATH search passes over directories, and over files it may not run)
    if found is None:
        return FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
    if os.path.isdir(found):
        return IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), program)
    return PermissionError(errno.EACCES, os.strerror(errno.EACCES), program)


def exit_code_of(error: OSError) -> int:
    """The exit code a shell gives a command it could not start: 127 not found, 126 found but not run."""
    return 127 if isinstance(error, FileNotFoundError) else 126


def enter_cwd(argv: list[str], cwd: str) -> list[str]:
    """argv that first enters `cwd`, as whoever runs it: a job run as its user enters its working
    directory after dropping root (Popen's cwd= would enter it as root), so a directory its user may
    not enter stops the job before its command runs (exit 126)."""
    return ["/bin/sh", "-c", 'cd -- "$0" || exit 126; exec "$@"', cwd, *argv]


def _cgroup2_mount() -> Path | None:
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) > 2 and parts[2] == "cgroup2":
                    return Path(parts[1])
    except OSError:
        pass
    return None


def _own_cgroup() -> str | None:
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                if line.startswith("0::"):
                    return line[3:].strip()
    except OSError:
        pass
    return None


def agent_tag(work_dir: Path) -> str:
    """What names this node agent on its host, whatever its namespace or Redis: its work dir (one
    agent holds a work dir at a time). Its jobs carry it (DISPATCH_AGENT), so that where two agents
    share a host, neither takes the other's job 1 for its own."""
    return hashlib.sha1(str(Path(work_dir).resolve()).encode()).hexdigest()[:10]


def node_cgroup(work_dir: Path) -> Path | None:
    """The cgroup that holds this node agent's job cgroups (created if need be), below the agent's
    own cgroup; None where cgroup v2 is not there or not writable. Named after the work dir, so a
    restarted agent of the same node finds what its predecessor left."""
    if os.environ.get("DISPATCH_NO_CGROUPS") == "1":
        return None
    mount, own = _cgroup2_mount(), _own_cgroup()
    if mount is None or own is None:
        return None
    path = mount / own.lstrip("/") / f"dispatch-{agent_tag(work_dir)}"
    try:
        path.mkdir(exist_ok=True)
        probe = path / "probe"
        probe.mkdir(exist_ok=True)
        probe.rmdir()
    except OSError:
        return None
    return path


@dataclass(frozen=True)
class Attempt:
    """One attempt of a job on this node: what finds its processes."""

    job_id: str
    epoch: int
    pgid: int = 0  # the job's first process, leader of its session and process group
    cgroup: Path | None = None  # its own cgroup, if the node has them
    #: the node it runs on: a gang's ranks share the job's id and epoch, and where two agents share a host
    #: (tests, a workstation with two) one agent must not take the other's rank for its own ("": unknown)
    node: str = ""
    #: the agent that started it (agent_tag): job ids and node names repeat across namespaces and
    #: deployments on one host ("": an older agent's attempt, which did not carry it)
    agent: str = ""

    def marks(self) -> tuple[bytes, ...]:
        job = (f"DISPATCH_JOB_ID={self.job_id}".encode(), f"DISPATCH_EPOCH={self.epoch}".encode())
        return job + ((f"DISPATCH_NODE={self.node}".encode(),) if self.node else ()) \
            + ((f"DISPATCH_AGENT={self.agent}".encode(),) if self.agent else ())


def attempt_cgroup(root: Path | None, job_id: str, epoch: int) -> Path | None:
    return None if root is None else root / f"{job_id}.{epoch}"


def make_cgroup(path: Path | None) -> Path | None:
    if path is None:
        return None
    try:
        path.mkdir(exist_ok=True)
        return path
    except OSError as e:
        log.warning("cannot create cgroup %s (%s); the job is tracked by its session", path, e)
        return None


def into_cgroup(argv: list[str], cgroup: Path | None, identity: dict) -> tuple[list[str], dict, Path | None]:
    """argv, what is left of the Popen identity arguments, and the cgroup it goes into (None where
    it cannot). The argv first moves its process into
    `cgroup` and then execs argv (the shell's builtin echo writes its own pid, "0"), so not one
    child of the job starts outside it. Only root may move a process there, so a job run as its
    user drops its identity after the move, through setpriv (as slurmstepd does), not before."""
    if cgroup is None or (identity and _SETPRIV is None):
        remove_cgroup(cgroup)
        return argv, identity, None
    if identity:
        groups = ",".join(str(g) for g in identity.get("extra_groups") or [identity["group"]])
        argv = [_SETPRIV, f"--reuid={identity['user']}", f"--regid={identity['group']}", f"--groups={groups}",
                "--", *argv]
    return ["/bin/sh", "-c", 'echo 0 > "$0" && exec "$@"', str(cgroup / "cgroup.procs"), *argv], {}, cgroup


def cgroup_pids(cgroup: Path | None) -> list[int]:
    if cgroup is None:
        return []
    try:
        return [int(x) for x in (cgroup / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def pids(attempt: Attempt) -> set[int]:
    """Every live process of the attempt: its cgroup's where it has one (nothing leaves a cgroup
    on its own), else every process anywhere that carries its marks, its agent's among them (an
    escapee from the session included)."""
    if attempt.cgroup is not None and attempt.cgroup.is_dir():
        return set(cgroup_pids(attempt.cgroup))
    marks = attempt.marks()
    out = {pid for pid, env in environs() if all(m in env for m in marks)}
    if not attempt.agent:  # job id and epoch alone are another agent's job 1 as well (a second deployment,
        # a test beside it): an attempt of unknown agent is looked for in its own process group only
        out = {pid for pid in out if attempt.pgid and _pgid(pid) == attempt.pgid}
    out.discard(os.getpid())
    return out


def _pgid(pid: int) -> int:
    try:
        return os.getpgid(pid)
    except OSError:
        return -1


def signal_attempt(attempt: Attempt, sig: signal.Signals) -> int:
    """Send `sig` to every process of the attempt; returns how many got it. Without a cgroup its
    process group is signalled too (members that cleared their environment), but only while a
    marked member shows the group is still the job's and not a reused number."""
    members = pids(attempt)
    if sig == signal.SIGKILL and attempt.cgroup is not None:
        try:
            (attempt.cgroup / "cgroup.kill").write_text("1")
        except OSError:
            pass
    sent = 0
    if attempt.cgroup is None and attempt.pgid and any(_pgid(p) == attempt.pgid for p in members):
        try:
            os.killpg(attempt.pgid, sig)
            sent += 1
        except (ProcessLookupError, PermissionError):
            pass
    # the job's main process first: signalled after its children, a shell that waits for them sees them
    # die and ends its script before its own signal arrives, and never runs its trap (a checkpoint lost)
    for pid in sorted(members, key=lambda p: (p != attempt.pgid, p)):
        try:
            os.kill(pid, sig)
            sent += 1
        except (ProcessLookupError, PermissionError):
            pass
    return sent


def remove_cgroup(cgroup: Path | None) -> None:
    """Remove an attempt's (empty) cgroup; one with processes left is killed first."""
    if cgroup is None or not cgroup.exists():
        return
    if cgroup_pids(cgroup):
        try:
            (cgroup / "cgroup.kill").write_text("1")
        except OSError:
            pass
    for _ in range(50):
        try:
            cgroup.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)
    log.warning("cgroup %s still holds processes; left in place", cgroup)


def remove_node_cgroup(root: Path | None) -> None:
    """At an agent's clean stop: its node cgroup, if no attempt's is left in it (the next agent of the work
    dir makes it again; one left holding a cgroup stays, for that agent to find)."""
    try:
        if root is not None:
            root.rmdir()
    except OSError:
        pass


def leftover_cgroups(root: Path | None) -> list[Path]:
    """Attempt cgroups an earlier agent of this node left."""
    if root is None:
        return []
    try:
        return sorted(p for p in root.iterdir() if p.is_dir())
    except OSError:
        return []


def stop_leftovers(a: Attempt | None, grace_s: float) -> None:
    """The main process ended: SIGTERM what it left (children, daemons, setsid escapees), SIGKILL
    what is still there after the job's grace period, and remove its cgroup."""
    if a is None:
        return
    left = pids(a)
    if left:
        log.warning("job %s: its main process ended and left %d processes; stopping them", a.job_id, len(left))
        signal_attempt(a, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and pids(a):
            time.sleep(0.1)
        signal_attempt(a, signal.SIGKILL)
    remove_cgroup(a.cgroup)
