"""One `dispatch up` per state directory: a lock held for the life of `up`, and the safe takeover of
what an `up` that died left behind.

The lock is fcntl.flock on `<state dir>/up.lock`. The kernel releases it when its holder exits,
however it exits (kill -9 included), so a lock that can be taken is never held by a live `up`;
a stale one needs no timeout or pid check. The file also holds a JSON record of the `up` that
holds it (pid, start time, command line, server URL and port, the pids of its server, scheduler
and agent), rewritten in place as they change: a second `up` reads it to say where the first
runs, and the next `up` after a crash reads it to find what the dead one left running.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
import time
from pathlib import Path

from ..config import pid_alive, private_dir, read_server_file
from .embedded import cmdline, data_dir_server
from ..core.errors import UpAlreadyRunning

log = logging.getLogger("dispatch.up")

LOCK_NAME = "up.lock"


def read_lock_info(path: Path, wait_s: float = 2.0) -> dict:
    """The record in a lock file ({} if there is none). A lock just taken is empty, and a record
    being rewritten may read as garbage, for an instant: retried for up to `wait_s`."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            info = json.loads(path.read_text())
            if isinstance(info, dict):
                return info
        except (OSError, ValueError):
            pass
        if time.monotonic() >= deadline:
            return {}
        time.sleep(0.05)


class UpLock:
    """The state directory's lock. acquire() raises UpAlreadyRunning (touching nothing) when a live
    `up` holds it; `previous` is then the record the last holder left ({} if none)."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self.path = self.directory / LOCK_NAME
        self.fd: int | None = None
        self.previous: dict = {}

    def acquire(self) -> "UpLock":
        private_dir(self.directory)
        # never inherited by children; its owner's alone (it names the server, the URL masked)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        if os.fstat(fd).st_mode & 0o077:
            os.fchmod(fd, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            info = read_lock_info(self.path)
            raise UpAlreadyRunning(str(self.directory), info.get("pid"), info.get("url")) from None
        self.fd = fd
        self.previous = read_lock_info(self.path, wait_s=0)
        other = _live_up_in_server_file()
        if other is not None:  # the lock file was removed under a running `up`: still one per dir
            self.release()
            raise UpAlreadyRunning(str(self.directory), other.get("pid"), other.get("url"))
        return self

    def refuse_if_held(self) -> None:
        """UpAlreadyRunning if a live `up` holds this lock (taken and let go at once; nothing made where
        there is no lock file): a second `up` names the first before it checks its own flags or GPUs."""
        if self.path.exists():
            self.acquire().release()

    def write(self, info: dict) -> None:
        """Replace the record (in place: a new file would be a new inode, not the one locked)."""
        assert self.fd is not None, "write() before acquire()"
        data = (json.dumps(info) + "\n").encode()
        os.pwrite(self.fd, data, 0)
        os.ftruncate(self.fd, len(data))

    def release(self) -> None:
        """Idempotent. The file stays: removing a lock file races with the next `up` opening it."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _live_up_in_server_file() -> dict | None:
    """server.json's record if another `dispatch up` that still runs wrote it."""
    info = read_server_file()
    pid = info.get("pid") if info else None
    if isinstance(pid, int) and pid != os.getpid() and pid_alive(pid) and looks_like(pid, "up"):
        return info
    return None


def looks_like(pid: int, command: str) -> bool:
    """Whether `pid` still runs `dispatch <command>` (the child an earlier `up` started), not a
    process that reused its pid."""
    args = cmdline(pid)
    return command in args and any(a == "dispatcher" or os.path.basename(a) == "dispatch" for a in args)


def _stop(pid: int, what: str, timeout_s: float, gone) -> None:
    """SIGTERM `pid`, and SIGKILL it if gone() is not true within `timeout_s`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
            os.kill(pid, signal.SIGCONT)  # a stopped process acts on SIGTERM only once continued
        except ProcessLookupError:
            return
        deadline = time.monotonic() + (timeout_s if sig == signal.SIGTERM else 5.0)
        while time.monotonic() < deadline:
            if gone():
                log.warning("stopped the %s (pid %d) an earlier `dispatch up` left running", what, pid)
                return
            time.sleep(0.05)
    log.error("the %s (pid %d) an earlier `dispatch up` left running does not stop", what, pid)


def clear_leftovers(previous: dict, data_dir: Path) -> None:
    """After taking a stale lock: stop what the dead `up` left running, in the order a live one stops
    it (scheduler, agent, server), so that no two agents serve one node and no two servers append to
    one AOF. Its children get SIGTERM when it dies (PR_SET_PDEATHSIG); this catches the ones still
    shutting down, stopped, or started without it. The server is whichever holds the data dir's
    lock (embedded.data_dir_server), recorded or not."""
    for part, key, command in (("scheduler", "scheduler_pid", "scheduler"), ("node agent", "agent_pid", "worker")):
        pid = previous.get(key)
        if isinstance(pid, int) and pid_alive(pid) and looks_like(pid, command):
            _stop(pid, part, 30.0, lambda pid=pid: not pid_alive(pid) or not cmdline(pid))  # zombies: gone
    pid = data_dir_server(data_dir)
    if pid is not None and pid > 0:
        _stop(pid, "embedded server", 15.0, lambda: data_dir_server(data_dir) is None)
    if data_dir_server(data_dir) is not None:
        from ..core.errors import ConfigError

        raise ConfigError(f"a server still holds {data_dir} and does not stop; stop it and start `dispatch up` again",
                          key="server")
