"""The suite's own processes: started, killed, stopped and watched by name.

Every dispatch process (scheduler, node agent, `dispatch up`) is a real `python -m dispatcher ...`
child. The suite remembers which ones it ended itself; one that exits without that is a process that
died on its own, which check() reports (and restarts, so the run goes on). The suite makes itself a
child subreaper, so that what a dead process leaves behind (a job's shell, the server of a stopped
`up`) is re-parented here and can be found at the end (leftovers()).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, state letter) of a process, or None."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = raw[raw.rindex(")") + 2:].split()
    return int(rest[1]), rest[0]


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def descendants(root: int) -> list[int]:
    """Every live process below `root` (by parent pid; zombies left out)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st is not None and st[1] != "Z":
                children.setdefault(st[0], []).append(int(name))
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def reap_orphans(known: set[int]) -> None:
    """Reap zombies re-parented to this subreaper that no Popen of ours waits for."""
    me = os.getpid()
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) not in known:
            st = _stat(int(name))
            if st is not None and st[0] == me and st[1] == "Z":
                try:
                    os.waitpid(int(name), os.WNOHANG)
                except ChildProcessError:
                    pass


def alive(pid: int) -> bool:
    st = _stat(pid)
    return st is not None and st[1] != "Z"


@dataclass
class Proc:
    name: str
    role: str
    args: tuple
    prefix: tuple
    env: dict
    popen: subprocess.Popen | None = None
    ended_by_suite: bool = False
    stopped: bool = False
    starts: int = 0
    exits: list = field(default_factory=list)  # (exit code, log tail) of each death on its own


class Fleet:
    def __init__(self, logs: Path, env: dict):
        self.logs, self.env = logs, env
        self.logs.mkdir(parents=True, exist_ok=True)
        self.procs: dict[str, Proc] = {}

    def start(self, name: str, role: str, *args, prefix=(), env=None) -> Proc:
        """Start `python -m dispatcher *args` as `name`; a name started before starts again as it was."""
        p = self.procs.get(name) or Proc(name, role, tuple(args), tuple(prefix), dict(env or {}))
        self.procs[name] = p
        full_env = {k: v for k, v in dict(os.environ, **self.env, **p.env, PYTHONUNBUFFERED="1").items()
                    if v is not None}  # None: not set at all
        log = open(self.logs / f"{name}.log", "ab")
        log.write(f"--- chaos: start {p.starts + 1} at {time.time():.3f}\n".encode())
        log.flush()
        p.popen = subprocess.Popen([*p.prefix, sys.executable, "-m", "dispatcher", *p.args], env=full_env,
                                   stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=str(ROOT))
        log.close()
        p.ended_by_suite, p.stopped = False, False
        p.starts += 1
        return p

    def restart(self, name: str) -> Proc:
        """Start `name` again as it was (nothing if it runs)."""
        p = self.procs[name]
        return p if self.alive(name) else self.start(name, p.role)

    def pid(self, name: str) -> int | None:
        p = self.procs.get(name)
        return p.popen.pid if p and p.popen and p.popen.poll() is None else None

    def alive(self, name: str) -> bool:
        return self.pid(name) is not None

    def by_pid(self, pid: int) -> str | None:
        for p in self.procs.values():
            if p.popen is not None and p.popen.pid == pid and p.popen.poll() is None:
                return p.name
        return None

    def kill(self, name: str) -> bool:
        """SIGKILL, as kill -9 (a stopped process dies too). False if it was not running."""
        p = self.procs.get(name)
        if p is None or p.popen is None or p.popen.poll() is not None:
            return False
        p.ended_by_suite = True
        p.popen.send_signal(signal.SIGKILL)
        p.popen.wait()
        p.stopped = False
        return True

    def pause(self, name: str, on: bool) -> bool:
        """SIGSTOP (on) or SIGCONT; False if it was not running."""
        pid = self.pid(name)
        if pid is None:
            return False
        os.kill(pid, signal.SIGSTOP if on else signal.SIGCONT)
        self.procs[name].stopped = on
        return True

    def names(self, role: str) -> list[str]:
        return [n for n, p in self.procs.items() if p.role == role]

    def check(self) -> list[tuple[str, str, int, str]]:
        """Processes that exited without the suite ending them: (name, role, exit code, log tail), each
        reported once (the caller starts it again)."""
        died = []
        for p in list(self.procs.values()):
            if p.popen is None or p.ended_by_suite or p.popen.poll() is None:
                continue
            tail = self.tail(p.name)
            p.exits.append((p.popen.returncode, tail))
            died.append((p.name, p.role, p.popen.returncode, tail))
            p.popen = None
        return died

    def tail(self, name: str, lines: int = 12) -> str:
        try:
            return "\n".join((self.logs / f"{name}.log").read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def popen_pids(self) -> set[int]:
        return {p.popen.pid for p in self.procs.values() if p.popen is not None}

    def stop_all(self, timeout_s: float = 20.0) -> None:
        live = [p for p in self.procs.values() if p.popen is not None and p.popen.poll() is None]
        for p in live:
            p.ended_by_suite = True
            if p.stopped:
                os.kill(p.popen.pid, signal.SIGCONT)
            p.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for p in live:
            try:
                p.popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.popen.kill()
                p.popen.wait()
