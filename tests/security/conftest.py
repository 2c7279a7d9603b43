"""Two real local accounts, as on a lab's shared login host: a victim and an attacker, both ordinary
users (useradd, as root: CI runs as root; elsewhere these tests are skipped). Each test gets them
with an empty dispatch state and config, and runs `dispatch` as them through setpriv, with their own
HOME and nothing of the test's environment but PATH."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import stop_processes, wait_for

ACCOUNTS = ("dsp-alice", "dsp-mallory")


class Account:
    def __init__(self, name: str, logs: Path):
        entry = pwd.getpwnam(name)
        self.name, self.uid, self.gid, self.home = name, entry.pw_uid, entry.pw_gid, Path(entry.pw_dir)
        self.logs = logs
        self.procs: list[subprocess.Popen] = []

    def argv(self, *args) -> list[str]:
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--init-groups", *args]

    def env(self, **extra) -> dict:
        env = {"PATH": os.environ["PATH"], "HOME": str(self.home), "USER": self.name, "LOGNAME": self.name,
               "PYTHONUNBUFFERED": "1", "DISPATCH_NODE_TIMEOUT_S": "6"}
        env.update(extra)
        return env

    def run(self, *args, timeout: float = 60, **env) -> subprocess.CompletedProcess:
        """`dispatch ARGS` as this user; never raises on a non-zero exit (attacks are expected to fail)."""
        return subprocess.run(self.argv(sys.executable, "-m", "dispatcher", *args), env=self.env(**env),
                              capture_output=True, text=True, timeout=timeout, cwd=self.home)

    def ok(self, *args, **env) -> str:
        p = self.run(*args, **env)
        assert p.returncode == 0, f"{self.name}: dispatch {' '.join(args)} exited {p.returncode}: {p.stderr.strip()}"
        return p.stdout

    def sh(self, command: str) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv("sh", "-c", command), env=self.env(), capture_output=True, text=True,
                              timeout=30, cwd=self.home)

    def start(self, *args, **env) -> subprocess.Popen:
        log = open(self.logs / f"{self.name}-{args[0]}-{len(self.procs)}.log", "wb")
        p = subprocess.Popen(self.argv(sys.executable, "-m", "dispatcher", *args), env=self.env(**env),
                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=self.home)
        self.procs.append(p)
        return p

    def login_file(self) -> dict:
        return json.loads((self.home / ".config" / "dispatch" / "login.json").read_text())

    def forget(self) -> None:
        for path in (self.home / ".local" / "state" / "dispatch", self.home / ".config" / "dispatch"):
            shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def local_users():
    if os.geteuid() != 0:
        pytest.skip("the attack suite makes two local accounts (useradd): run it as root, as CI does")
    made = []
    for name in ACCOUNTS:
        try:
            pwd.getpwnam(name)
        except KeyError:
            subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", name], check=True)
            made.append(name)
    for name in ACCOUNTS:
        os.chmod(pwd.getpwnam(name).pw_dir, 0o700)  # as a careful user keeps it
    yield ACCOUNTS
    for name in made:
        subprocess.run(["userdel", "--remove", name], capture_output=True)


def _let_others_reach(*paths: Path) -> list[tuple[Path, int]]:
    """The accounts run the same Python and project as the test: each directory above them that
    others may not enter (a Python under /root/.pyenv) gets o+x, traverse only, not list, for the
    test. Returns what to restore."""
    opened = []
    for path in paths:
        for d in reversed(path.parents):
            mode = d.stat().st_mode & 0o7777
            if not mode & 0o001:
                os.chmod(d, mode | 0o001)
                opened.append((d, mode))
    return opened


@pytest.fixture
def users(local_users, tmp_path):
    """{"alice": victim, "mallory": attacker}, with empty dispatch state; their processes stopped after."""
    logs = tmp_path / "logs"
    logs.mkdir()
    logs.chmod(0o777)
    accounts = {name.split("-", 1)[1]: Account(name, logs) for name in local_users}
    for a in accounts.values():
        a.forget()
    opened = _let_others_reach(Path(os.path.realpath(sys.executable)), Path(__file__).resolve().parents[2])
    try:
        yield accounts
    finally:
        for a in accounts.values():
            stop_processes(a.procs)
            a.forget()
        for path, mode in opened:  # (other tests count on /root being closed)
            os.chmod(path, mode)


def show_logs(logs: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted(logs.glob("*.log")))


def wait(predicate, what: str, logs: Path, timeout: float = 30.0):
    return wait_for(predicate, timeout, what, lambda: show_logs(logs))
