"""Nothing finished runs again and no daemon gives up when the Redis server goes away: a job that
ends while the server is down (its agent killed meanwhile) is recorded once, agents outlive a server
killed during submits, and an agent or scheduler started while it is down waits for it."""

from __future__ import annotations

import os
import signal
import time

import pytest

from dispatcher.api import Client
from dispatcher.store.connect import connect
from dispatcher.store.jobs import read_job

from .ticking import FAST, TICKING, attempts, overlaps, wait_running

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def ticking_job_on_own_server(cli, tmp_path, own_server, ticks: int):
    """An agent (node a) and a scheduler on the test's own server, which the test may kill, and a job
    writing its attempts to $OUT, running. Returns env, out, work dir, agent and job."""
    env = dict(FAST, DISPATCH_REDIS_URL=own_server.url, DISPATCH_NODE_TIMEOUT_S="30")
    out = tmp_path / "runs"
    out.mkdir()
    work = tmp_path / "a"
    agent = cli.start("worker", "--node", "a", "--fake-gpus", "1xA100-40GB", "--work-dir", str(work), **env)
    cli.start("scheduler", **env)
    client = connect(own_server.url)
    job = cli.run("submit", "--gpus", "1", "--env", f"OUT={out}", "--", "sh", "-c", TICKING.format(ticks=ticks),
                  **env).stdout.strip()
    wait_running(cli, client, job)
    client.close()
    return env, out, work, agent, job


def server_and_next_agent_back(cli, own_server, env, work) -> None:
    """The server restarted on its files, and a new agent of node a on the same work dir."""
    own_server.start()
    cli.start("worker", "--node", "a", "--fake-gpus", "1xA100-40GB", "--work-dir", str(work), log_name="worker-again",
              **env)


def test_a_job_that_ends_while_redis_is_down_is_recorded_once_though_its_agent_is_killed(cli, tmp_path, own_server):
    env, out, work, agent, job = ticking_job_on_own_server(cli, tmp_path, own_server, ticks=10)
    own_server.proc.send_signal(signal.SIGKILL)  # Redis away ...
    own_server.proc.wait()
    cli.wait_for(lambda: any(r["ended"] for r in attempts(out, job)), timeout=30, what="the job to end")
    time.sleep(1.0)
    os.kill(agent.pid, signal.SIGKILL)  # ... and then the agent holding its outcome dies
    agent.wait(10)
    server_and_next_agent_back(cli, own_server, env, work)
    assert cli.run("wait", job, "--timeout", "60", **env).returncode == 0
    runs = attempts(out, job)
    assert len(runs) == 1 and runs[0]["ended"], f"the finished job ran again: {runs}"
    client = connect(own_server.url)
    assert read_job(client, cli.ns, job)["state"] == "succeeded"
    client.close()


def test_a_job_that_ends_unreaped_while_redis_is_down_and_its_agent_is_killed_is_recorded_not_rerun(
        cli, tmp_path, own_server):
    """The chaos suite's double run: the agent is stopped (its job ends, unreaped), the server goes down,
    the agent is killed. Its keeper sees the exit but cannot write it to Redis; it keeps it in the work
    dir, and the next agent records the job as it ended."""
    env, out, work, agent, job = ticking_job_on_own_server(cli, tmp_path, own_server, ticks=8)
    os.kill(agent.pid, signal.SIGSTOP)  # it reaps nothing now
    own_server.proc.send_signal(signal.SIGKILL)
    own_server.proc.wait()
    cli.wait_for(lambda: any(r["ended"] for r in attempts(out, job)), timeout=30, what="the job to end")
    cli.wait_for(lambda: (work / "exits" / job).exists(), timeout=40, what="the keeper to keep the exit on disk")
    os.kill(agent.pid, signal.SIGKILL)
    agent.wait(10)
    server_and_next_agent_back(cli, own_server, env, work)
    assert cli.run("wait", job, "--timeout", "60", **env).returncode == 0
    runs = attempts(out, job)
    assert len(runs) == 1 and runs[0]["ended"], f"the finished job ran again: {runs}"


def test_agents_outlive_redis_killed_three_times_during_submits(cli, tmp_path, own_server):
    env = dict(FAST, DISPATCH_REDIS_URL=own_server.url)
    out = tmp_path / "runs"
    out.mkdir()
    agents = [cli.start("worker", "--node", n, "--fake-gpus", "2xA100-40GB", "--work-dir", str(tmp_path / n),
                        log_name=f"worker-{n}", **env) for n in ("a", "b", "c")]
    cli.start("scheduler", **env)
    api = Client(own_server.url, cli.ns)
    jobs = []
    for kill in range(3):  # each time while jobs are being placed and launched by the dozen
        jobs += api.submit_many([{"command": ["sh", "-c", TICKING.format(ticks=1)], "gpus": 1, "env": {"OUT": str(out)}}
                                 for _ in range(40)])
        time.sleep(1.0)
        own_server.proc.send_signal(signal.SIGKILL)
        own_server.proc.wait()
        time.sleep(4)  # longer than one retry: agents must wait it out wherever the outage caught them
        own_server.start()
    client = connect(own_server.url)
    cli.wait_for(lambda: all(read_job(client, cli.ns, j)["state"] == "succeeded" for j in jobs), timeout=120,
                 what="every acknowledged job to succeed")
    client.close()
    assert [a.poll() for a in agents] == [None, None, None], "an agent exited on a Redis outage"
    for n in ("a", "b", "c"):  # three outages of ~4 s each: a line when heartbeats fail, one when they are back
        (path,) = cli.home.glob(f"worker-{n}-*.log")  # (none for an outage that redis-py's own retries of a
        log = path.read_text()  # beat outlasted: up to 10 tries, 1 s apart at most, within the one call)
        assert log.count("heartbeat failed") == log.count("heartbeat works again after") <= 3, log[-3000:]
    for j in jobs:
        ended = [r for r in attempts(out, j) if r["ended"]]
        assert len(ended) == 1, (j, attempts(out, j))
        assert overlaps(attempts(out, j)) == [], (j, attempts(out, j))


def test_an_agent_and_a_scheduler_started_while_redis_is_down_wait_for_it(cli, tmp_path, own_server):
    env = dict(FAST, DISPATCH_REDIS_URL=own_server.url)
    own_server.proc.send_signal(signal.SIGKILL)
    own_server.proc.wait()
    agent = cli.start("worker", "--node", "a", "--fake-gpus", "1xA100-40GB", "--work-dir", str(tmp_path / "a"), **env)
    sched = cli.start("scheduler", **env)
    time.sleep(3)
    assert (agent.poll(), sched.poll()) == (None, None), "a daemon gave up on a server that is away"
    own_server.start()
    job = cli.run("submit", "--gpus", "1", "--", "true", **env).stdout.strip()
    assert cli.run("wait", job, "--timeout", "60", **env).returncode == 0
    assert "waiting for the server" in next(tmp_path.glob("worker-*.log")).read_text()
