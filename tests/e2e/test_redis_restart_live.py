"""Redis killed -9 and restarted under load: with the append-only file on, no acknowledged
submission is lost, and the scheduler and node agents reconnect by themselves."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest

from dispatcher.store import keys
from dispatcher.store.connect import connect

pytestmark = pytest.mark.timeout(180)


def test_a_redis_crash_loses_no_acknowledged_submission(cli, tmp_path, own_server):
    env = {"DISPATCH_REDIS_URL": own_server.url, "DISPATCH_HEARTBEAT_S": "0.5", "DISPATCH_NODE_TIMEOUT_S": "6"}
    cli.start("scheduler", **env)
    cli.start("worker", "--node", "n1", "--fake-gpus", "4xA100-40GB", "--work-dir", str(tmp_path / "n1"), **env)
    jobs = [cli.run("submit", "--gpus", "1", "--", "sleep", "0.5", **env).stdout.strip() for _ in range(12)]
    # every id above was acknowledged; the server dies at once, with jobs pending and running
    own_server.proc.send_signal(signal.SIGKILL)
    own_server.proc.wait()
    own_server.start()
    client = connect(own_server.url)

    def states():
        return [client.hget(keys.job(cli.ns, j), "state") for j in jobs]

    assert None not in states(), "a submission was lost"
    cli.wait_for(lambda: all(s == b"succeeded" for s in states()), timeout=60,
                 what="every job to succeed after the restart")
    client.close()


def test_wait_and_logs_follow_ride_out_a_server_restart(cli, tmp_path, own_server):
    # `dispatch up` brings its server back within a second or so: a user's `wait` and `logs -f` in
    # another shell go on through it and end as the job does, not with "Redis failed"
    env = {"DISPATCH_REDIS_URL": own_server.url}
    cli.start("scheduler", **env)
    cli.start("worker", "--node", "n1", "--fake-gpus", "1xA100-40GB", "--work-dir", str(tmp_path / "n1"), **env)
    job = cli.run("submit", "--gpus", "1", "--", "sh", "-c", "for i in 1 2 3 4 5 6; do echo line$i; sleep 1; done",
                  **env).stdout.strip()
    client = connect(own_server.url)
    cli.wait_for(lambda: client.hget(keys.job(cli.ns, job), "state") == b"running", timeout=30, what="the job to run")
    client.close()
    wait = cli.start("wait", job, log_name="wait", **env)
    follow = cli.start("logs", "-f", job, log_name="follow", **env)
    log = cli.home / "follow-3.log"
    cli.wait_for(lambda: "line" in log.read_text(), what="logs -f to print")
    own_server.proc.send_signal(signal.SIGKILL)
    own_server.proc.wait()
    time.sleep(2)  # away longer than redis-py's own retries
    own_server.start()
    assert wait.wait(timeout=60) == 0
    assert follow.wait(timeout=60) == 0
    out = log.read_text()
    assert "line6" in out and "does not answer" in out


def test_wait_and_logs_follow_started_while_the_server_is_away_wait_for_it(cli, tmp_path, own_server):
    # started during the restart itself, before their first read (in CI, a loaded machine started them
    # just as the server died): they exited 3 ("cannot connect") instead of waiting
    env = {"DISPATCH_REDIS_URL": own_server.url}
    cli.start("scheduler", **env)
    cli.start("worker", "--node", "n1", "--fake-gpus", "1xA100-40GB", "--work-dir", str(tmp_path / "n1"), **env)
    job = cli.run("submit", "--gpus", "1", "--", "sh", "-c", "echo hello; sleep 3", **env).stdout.strip()
    own_server.proc.send_signal(signal.SIGKILL)
    own_server.proc.wait()
    wait = cli.start("wait", job, log_name="wait", **env)
    follow = cli.start("logs", "-f", job, log_name="follow", **env)
    time.sleep(3)  # they start, and find no server
    own_server.start()
    assert wait.wait(timeout=60) == 0
    assert follow.wait(timeout=60) == 0
    assert "hello" in next(cli.home.glob("follow-*.log")).read_text()


def test_a_worker_stops_on_sigterm_while_its_server_is_down(cli, tmp_path, own_server):
    # Ctrl-C of `dispatch up` while its server restarts (or an `up` stopping because its server cannot
    # come back) sends the agent one SIGTERM: RQ took it while it retried the lost server, its teardown
    # could not reach the server either, and the agent took that for a lost server and started a new
    # RQ worker, so `up` hung a minute and then killed it
    env = {"DISPATCH_REDIS_URL": own_server.url}
    worker = cli.start("worker", "--node", "n1", "--fake-gpus", "1xA100-40GB", "--work-dir", str(tmp_path / "n1"),
                       **env)
    log = cli.home / "worker-0.log"
    cli.wait_for(lambda: "listening on RQ queue" in log.read_text(), what="the agent to listen")
    time.sleep(0.5)
    own_server.proc.send_signal(signal.SIGKILL)
    own_server.proc.wait()
    cli.wait_for(lambda: "could not connect to Redis" in log.read_text(), what="RQ to retry the lost server")
    worker.send_signal(signal.SIGTERM)
    try:
        code = worker.wait(timeout=20)
    except subprocess.TimeoutExpired:
        raise AssertionError("the agent did not stop on SIGTERM while its server was down\n"
                             + log.read_text()[-3000:]) from None
    assert code == 0, log.read_text()[-3000:]


def test_a_server_whose_disk_is_full_is_said_so_not_taken_for_a_restart(tmp_path):
    # a full disk under the append-only file: the server answers but refuses writes (MISCONF), and
    # every command said "the embedded server of `dispatch up` is restarting; try again in a moment"
    # (or, with --redis, "is the server up?"): no restart was coming. Here no file of the server may
    # grow past 16 KiB, which fails its AOF writes as a full disk does
    import os
    import resource
    import sys

    from dispatcher.up.embedded import free_port, server_binary

    def small_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a short write, as ENOSPC gives, not a kill
        resource.setrlimit(resource.RLIMIT_FSIZE, (16 << 10, 16 << 10))

    port = free_port()
    server = subprocess.Popen([server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path),
                               "--save", "", "--appendonly", "yes", "--appendfsync", "everysec"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=small_files)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        client = None
        for _ in range(100):
            try:
                client = connect(url)
                break
            except Exception:
                time.sleep(0.05)
        client.set("filler", b"x" * (64 << 10))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                client.set("probe", b"1")
            except Exception as e:
                assert "MISCONF" in str(e), e
                break
            time.sleep(0.1)
        else:
            raise AssertionError("the server never refused a write")
        env = {k: v for k, v in os.environ.items() if not k.startswith("DISPATCH_")}
        env.update(DISPATCH_HOME=str(tmp_path / "home"), DISPATCH_REDIS_URL=url)
        p = subprocess.run([sys.executable, "-m", "dispatcher", "submit", "--", "true"], env=env, capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 3 and len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert "the server cannot write its data" in p.stderr and "make room on its disk" in p.stderr, p.stderr
        assert "restarting" not in p.stderr and "is the server up" not in p.stderr and "start one" not in p.stderr, \
            p.stderr
        client.close()
    finally:
        server.kill()
        server.wait()


def test_wait_gives_up_at_its_timeout_while_the_server_is_away_and_launches_resume_promptly(cli, tmp_path,
                                                                                             own_server):
    env = {"DISPATCH_REDIS_URL": own_server.url}
    cli.start("scheduler", **env)
    cli.start("worker", "--node", "n1", "--fake-gpus", "1xA100-40GB", "--work-dir", str(tmp_path / "n1"), **env)
    job = cli.run("submit", "--gpus", "1", "--", "sleep", "60", **env).stdout.strip()
    own_server.proc.send_signal(signal.SIGKILL)
    own_server.proc.wait()
    started = time.monotonic()
    p = cli.run("wait", job, "--timeout", "3s", check=False, **env)  # as --help says: exit 5 past it (was 3, at 60 s)
    assert (p.returncode, time.monotonic() - started < 20) == (5, True), p
    assert p.stderr.splitlines()[-1] == "dispatch: not done after 3s: the server does not answer", p.stderr
    time.sleep(5)  # (RQ's own back-off grows to 60 s between tries; the agent's worker waits 2 s at most)
    own_server.start()
    client = connect(own_server.url)
    second = cli.run("submit", "--gpus", "0", "--", "true", **env).stdout.strip()
    cli.wait_for(lambda: client.hget(keys.job(cli.ns, second), "state") == b"succeeded", timeout=10,
                 what="a job placed once the server is back to start within seconds, not after RQ's back-off")
    client.close()
