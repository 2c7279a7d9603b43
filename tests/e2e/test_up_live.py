"""`dispatch up` as an operator meets it: one per state directory, a takeover after a kill -9, its
server, scheduler and agent restarted when they die, a clean stop when the server cannot come back,
and no silent default server. Every job writes its own start and end lines to a file, so a job
that ran twice is counted, whatever dispatch's own records say."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from dispatcher.core import errors

from ..processes import stop_processes, wait_for

DISPATCH = [sys.executable, "-m", "dispatcher"]
UP = ["up", "--fake-gpus", "2xA100-40GB", "--node", "box", "--no-dashboard"]


def _env(home: Path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISPATCH_")}
    env.update(DISPATCH_HOME=str(home), PYTHONUNBUFFERED="1", **extra)
    return env


class UpHarness:
    """`dispatch up` processes on one state directory, and commands run against it as a user would."""

    def __init__(self, home: Path):
        self.home, self.runs_file = home, home / "runs.txt"
        self.procs: list[subprocess.Popen] = []

    def start(self, name: str, **env) -> subprocess.Popen:
        log = open(self.home / f"{name}.log", "wb")
        p = subprocess.Popen(DISPATCH + UP, env=_env(self.home, **env), stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
        self.procs.append(p)
        return p

    def run(self, *args, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(DISPATCH + list(args), env=_env(self.home), capture_output=True, text=True,
                              timeout=timeout)

    def record(self) -> dict:
        try:
            return json.loads((self.home / "server.json").read_text())
        except (OSError, ValueError):
            return {}

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-4000:]}" for p in sorted(self.home.glob("*.log")))

    def wait_for(self, predicate, timeout: float = 30.0, what: str = "condition"):
        return wait_for(predicate, timeout, what, self.logs)

    def wait_running(self, up: subprocess.Popen) -> dict:
        def running():
            assert up.poll() is None, f"up exited with {up.returncode}\n{self.logs()}"
            rec = self.record()
            return rec if rec.get("pid") == up.pid and rec.get("status", "running") == "running" else None
        return self.wait_for(running, what=f"up (pid {up.pid}) to record its server running")

    def submit_counted(self, seconds: float, *flags) -> str:
        """A job that appends `start <id> <attempt>` and, `seconds` later, `end <id>` to runs.txt."""
        script = (f'echo "start $DISPATCH_JOB_ID $DISPATCH_ATTEMPT" >> {self.runs_file}; sleep {seconds}; '
                  f'echo "end $DISPATCH_JOB_ID" >> {self.runs_file}')
        p = self.run("submit", *flags, "--", "sh", "-c", script)
        assert p.returncode == 0 and p.stdout.strip(), p.stderr + self.logs()
        return p.stdout.strip()

    def counts(self) -> Counter:
        """(start|end, job id) -> how many times it was written."""
        if not self.runs_file.exists():
            return Counter()
        return Counter((line.split()[0], line.split()[1]) for line in self.runs_file.read_text().splitlines()
                       if line.strip())

    def wait_jobs(self, *jobs: str, timeout: float = 45) -> None:
        p = self.run("wait", *jobs, "--timeout", f"{timeout:g}", timeout=timeout + 15)
        assert p.returncode == 0, p.stdout + p.stderr + self.logs()

    def assert_ran_once(self, *jobs: str) -> None:
        counts = self.counts()
        for job in jobs:
            assert (counts[("start", job)], counts[("end", job)]) == (1, 1), (job, counts, self.logs())

    def stop_all(self) -> None:
        stop_processes(self.procs, timeout_s=30)


@pytest.fixture
def ups(tmp_path):
    h = UpHarness(tmp_path)
    yield h
    h.stop_all()


def pid_alive(pid) -> bool:
    """Whether `pid` runs (not gone, not a zombie), read from /proc."""
    try:
        stat = Path(f"/proc/{int(pid)}/stat").read_text()
    except (OSError, TypeError, ValueError):
        return False
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def _servers_in(data_dir: Path) -> list[int]:
    """The server processes working in `data_dir` (a Redis or Valkey server chdirs to its --dir, and
    rewrites its command line), found from /proc independently of dispatch's own lock."""
    want, found = data_dir.resolve(), []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and Path(os.readlink(entry / "cwd")) == want and \
                    os.path.basename(os.readlink(entry / "exe")) in ("valkey-server", "redis-server"):
                found.append(int(entry.name))
        except OSError:
            pass
    return found


def _port(rec: dict) -> int:
    return int(urlsplit(rec["url"]).port)


def _the_server(home: Path) -> int:
    (pid,) = _servers_in(home / "data")
    return pid


def _hold_port(port: int, timeout: float = 5.0) -> socket.socket:
    """Listen on `port` as soon as it is free (the killed server's socket closes with it)."""
    deadline = time.monotonic() + timeout
    while True:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past the TIME_WAIT of its connections
        try:
            s.bind(("127.0.0.1", port))
            s.listen(1)
            return s
        except OSError:
            s.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.005)


def _one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr and "Usage:" not in stderr, stderr
    return lines[0]


def test_a_command_with_no_server_configured_errors_in_one_line(tmp_path):
    for command in (["queue"], ["submit", "--", "true"], ["show", "1"], ["nodes"]):
        p = subprocess.run(DISPATCH + command, env=_env(tmp_path), capture_output=True, text=True, timeout=30)
        assert p.returncode == errors.EXIT_CONNECT, (command, p.returncode, p.stderr)
        line = _one_line(p.stderr)
        assert "no server" in line and "dispatch up" in line and "--redis" in line, line
        assert "localhost" not in line
    dead = subprocess.Popen(["true"])
    dead.wait()  # a server.json whose `up` is gone is no server either
    (tmp_path / "server.json").write_text(json.dumps({"url": "redis://127.0.0.1:1/0", "pid": dead.pid}))
    p = subprocess.run(DISPATCH + ["queue"], env=_env(tmp_path), capture_output=True, text=True, timeout=30)
    assert p.returncode == errors.EXIT_CONNECT and "no server" in _one_line(p.stderr), p.stderr


@pytest.mark.slow
def test_a_second_up_on_the_same_state_dir_refuses_in_one_line_and_the_first_keeps_working(ups):
    first = ups.start("up1")
    rec = ups.wait_running(first)
    second = subprocess.Popen(DISPATCH + UP, env=_env(ups.home), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, start_new_session=True)
    try:
        _, err = second.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(second.pid, signal.SIGTERM)
        second.communicate(timeout=30)
        raise AssertionError(f"a second `dispatch up` on {ups.home} kept running\n{ups.logs()}")
    assert second.returncode != 0, err
    line = _one_line(err)
    url = urlsplit(rec["url"])
    assert f"pid {first.pid}" in line and f"127.0.0.1:{url.port}" in line and f"kill {first.pid}" in line, line
    assert url.password and url.password not in line  # the server's password is never shown
    assert ups.record() == rec  # server.json untouched
    assert len(_servers_in(ups.home / "data")) == 1  # no second server on the data dir
    job = ups.submit_counted(0.2)
    ups.wait_jobs(job)
    ups.assert_ran_once(job)
    assert first.poll() is None and ups.record()["pid"] == first.pid


@pytest.mark.slow
def test_a_killed_up_leaves_a_stale_lock_that_the_next_up_takes_over(ups):
    first = ups.start("up1")
    rec = ups.wait_running(first)
    done = ups.submit_counted(0.1)
    ups.wait_jobs(done)
    running = ups.submit_counted(3)
    ups.wait_for(lambda: ups.counts()[("start", running)], what=f"job {running} to start")
    later = ups.submit_counted(0.1, "--after", running)
    os.kill(first.pid, signal.SIGKILL)
    first.wait()

    second = ups.start("up2")
    rec2 = ups.wait_running(second)
    assert len(_servers_in(ups.home / "data")) == 1, ups.logs()  # the dead up's server is gone
    assert _port(rec2) == _port(rec), (rec, rec2)  # clients that kept the URL find it again
    for part in ("server_pid", "scheduler_pid", "agent_pid"):
        assert not pid_alive(rec[part]), (part, rec)
    ups.wait_jobs(running, later)
    counts = ups.counts()
    ups.assert_ran_once(done, later)  # the finished one is not rerun; the pending one runs once
    assert counts[("end", running)] == 1, counts  # the one killed with its agent finishes once


@pytest.mark.slow
def test_the_embedded_server_killed_under_up_is_restarted_on_its_port_and_jobs_run_once(ups):
    up = ups.start("up")
    rec = ups.wait_running(up)
    before = ups.submit_counted(1.5)
    ups.wait_for(lambda: ups.counts()[("start", before)], what=f"job {before} to start")
    server = _the_server(ups.home)
    os.kill(server, signal.SIGKILL)
    held = _hold_port(_port(rec))  # keeps the server down a moment, long enough to ask the CLI
    try:
        ups.wait_for(lambda: ups.record().get("status") == "restarting", what="up to mark its server restarting")
        p = ups.run("queue")
        assert p.returncode == errors.EXIT_CONNECT, p.stderr
        line = _one_line(p.stderr)
        assert "restarting" in line and f"pid {up.pid}" in line, line
    finally:
        held.close()
    rec2 = ups.wait_running(up)
    assert _port(rec2) == _port(rec) and _the_server(ups.home) != server, (rec, rec2)
    after = ups.submit_counted(0.1)
    ups.wait_jobs(before, after)
    ups.assert_ran_once(before, after)  # the one that ended during the outage too
    assert up.poll() is None


@pytest.mark.slow
def test_append_only_files_removed_under_up_are_written_again_and_a_server_that_died_without_them_is_not_started_empty(ups):
    import shutil

    up = ups.start("up")
    ups.wait_running(up)
    job = ups.submit_counted(0.1)
    ups.wait_jobs(job)
    aof = ups.home / "data" / "appendonlydir"
    shutil.rmtree(aof)  # a cleanup script gone wrong: the server keeps its data in memory only
    ups.wait_for(lambda: aof.is_dir(), what="up to have the server write its files again")
    server = _the_server(ups.home)
    time.sleep(1.5)  # (its appends reach the disk every second)
    os.kill(server, signal.SIGKILL)
    ups.wait_for(lambda: _servers_in(ups.home / "data") not in ([], [server]), what="the server's restart")
    ups.wait_running(up)
    assert ups.run("show", job).returncode == 0, "the job is still there after the restart"

    os.kill(up.pid, signal.SIGSTOP)  # files removed, and the server dies before up looks again
    try:
        shutil.rmtree(aof)
        os.kill(_the_server(ups.home), signal.SIGKILL)
    finally:
        os.kill(up.pid, signal.SIGCONT)
    up.wait(60)
    last = (ups.home / "up.log").read_text().strip().splitlines()[-1]
    assert up.returncode != 0 and last.startswith("dispatch: error:") and "append-only files" in last and \
        "no empty server is started" in last, ups.logs()
    assert _servers_in(ups.home / "data") == [], "no empty server over the lost data"


@pytest.mark.slow
def test_the_scheduler_and_agent_of_up_killed_are_restarted(ups):
    up = ups.start("up")
    rec = ups.wait_running(up)
    os.kill(rec["scheduler_pid"], signal.SIGKILL)
    os.kill(rec["agent_pid"], signal.SIGKILL)

    def restarted():
        now = ups.record()
        return all(now.get(k) not in (None, rec[k]) and pid_alive(now[k]) for k in ("scheduler_pid", "agent_pid"))
    ups.wait_for(restarted, what="a new scheduler and agent")
    job = ups.submit_counted(0.1)
    ups.wait_jobs(job)
    ups.assert_ran_once(job)
    assert up.poll() is None


@pytest.mark.slow
def test_a_stopped_scheduler_under_up_is_killed_and_restarted_once_its_lease_lapses(ups):
    up = ups.start("up", DISPATCH_LEASE_S="1")  # restarted after 12 leases without a leader: 12 s
    rec = ups.wait_running(up)
    os.kill(rec["scheduler_pid"], signal.SIGSTOP)  # alive, but doing nothing: as a hung one
    job = ups.submit_counted(0.1)
    ups.wait_for(lambda: ups.record().get("scheduler_pid") not in (None, rec["scheduler_pid"]), timeout=60,
                 what="up to restart its stopped scheduler")
    assert not pid_alive(rec["scheduler_pid"])
    ups.wait_jobs(job)
    ups.assert_ran_once(job)
    assert "has not led for" in (ups.home / "up.log").read_text() and up.poll() is None


@pytest.mark.slow
def test_up_stops_cleanly_when_its_server_cannot_come_back(ups):
    up = ups.start("up")
    rec = ups.wait_running(up)
    os.kill(_the_server(ups.home), signal.SIGKILL)
    held = _hold_port(_port(rec))
    try:
        up.wait(50)
    finally:
        held.close()
    assert up.returncode not in (0, None), ups.logs()
    last = (ups.home / "up.log").read_text().strip().splitlines()[-1]
    assert last.startswith("dispatch: error:") and "cannot come back" in last and str(_port(rec)) in last, last
    assert not (ups.home / "server.json").exists()
    for part in ("scheduler_pid", "agent_pid"):
        assert not pid_alive(rec[part]), (part, ups.logs())
    p = ups.run("queue")
    assert "no server" in _one_line(p.stderr)


@pytest.mark.slow
def test_up_stops_in_one_line_when_its_state_directory_is_removed(tmp_path):
    # rm -rf of the state dir under a running `up` took its lock and server.json: commands then said
    # "no server: start one with `dispatch up`", and that second `up` started beside the first, its
    # agent killing the first one's running job as a leftover, while the first's data was gone
    home = tmp_path / "state"
    home.mkdir()
    ups = UpHarness(home)
    log = tmp_path / "up.log"
    with open(log, "wb") as out:
        up = subprocess.Popen(DISPATCH + UP, env=_env(home), stdout=out, stderr=subprocess.STDOUT,
                              start_new_session=True)
    ups.procs.append(up)
    try:
        rec = ups.wait_running(up)
        job = ups.run("submit", "--gpus", "1", "--", "sleep", "60").stdout.strip()
        ups.wait_for(lambda: json.loads(ups.run("show", job, "--json").stdout)["state"] == "running",
                     what=f"job {job} to run")
        shutil.rmtree(home)
        try:
            up.wait(60)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"up kept running without its state directory\n{log.read_text()[-3000:]}") from None
        text = log.read_text()
        assert up.returncode not in (0, None) and "Traceback" not in text, text
        last = text.strip().splitlines()[-1]
        assert last.startswith("dispatch: error:") and f"{home} was removed" in last, last
        for part in ("server_pid", "scheduler_pid", "agent_pid"):
            assert not pid_alive(rec[part]), (part, text)
    finally:
        ups.stop_all()


def test_up_on_a_state_dir_that_takes_no_write_says_so_in_one_line(tmp_path):
    # a full disk under the state dir (here: no file may grow past 64 bytes, EFBIG as ENOSPC) was
    # "dispatch: internal error: OSError: [Errno 28] No space left on device"
    import resource

    def tiny_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))

    p = subprocess.run(DISPATCH + UP, env=_env(tmp_path), capture_output=True, text=True, timeout=60,
                       preexec_fn=tiny_files)
    line = _one_line(p.stderr)
    assert p.returncode == errors.EXIT_USAGE and "internal error" not in line, p.stderr
    assert f"cannot write the record of `dispatch up` in {tmp_path} (File too large)" in line, line


@pytest.mark.slow
def test_up_goes_on_when_its_record_cannot_be_written_as_it_restarts_a_part(ups):
    # the same full disk while `up` runs: the record it rewrites when it restarts its scheduler raised,
    # and `up` died with an internal error, everything with it
    up = ups.start("up")
    rec = ups.wait_running(up)
    (ups.home / "server.json").unlink()
    (ups.home / "server.json").mkdir()  # no record can replace it
    os.kill(rec["scheduler_pid"], signal.SIGKILL)
    ups.wait_for(lambda: "the scheduler is running again" in (ups.home / "up.log").read_text(),
                 what="the scheduler's restart")
    assert up.poll() is None, ups.logs()
    up.send_signal(signal.SIGTERM)
    assert up.wait(60) == 0, ups.logs()
    text = (ups.home / "up.log").read_text()
    assert "cannot write the record of `dispatch up`" in text and "internal error" not in text, text
    assert "Traceback" not in text and text.strip().endswith("dispatch: stopped"), text
