"""A job that ended is not run again when the server comes back without the writes that said so.

With `appendfsync everysec` (the default of `dispatch up`), a server whose background fsync lags (a
busy disk) postpones its writes to the append-only file for up to two seconds while it still answers
its clients; killed -9 then, it comes back without what it acknowledged last. The chaos suite met this:
a job's end, written by its agent and acknowledged, was gone after the server's restart, and the job ran
again. Here the server is killed and its append-only file cut back to where it stood earlier, which is
what such a kill leaves; the agent's kept end (workers/keeper.py KEEP_ENDS_S) records the job again."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from dispatcher.store import keys
from dispatcher.store.connect import connect
from dispatcher.store.jobs import read_job

from .ticking import FAST, TICKING, attempts, wait_running

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def aof_sizes(server) -> dict[Path, int]:
    """The size of each of the server's incremental append-only files, once what it acknowledged is written."""
    time.sleep(1.5)  # past the postponed write window: everything so far is in the file
    return {p: p.stat().st_size for p in (server.data_dir / "appendonlydir").glob("*.incr.aof")}


def restart_without_writes_since(server, sizes: dict[Path, int]) -> None:
    """kill -9, the append-only file cut back to `sizes` (the writes it had not yet written), start again."""
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait()
    for path, size in sizes.items():
        os.truncate(path, size)
    server.start()


def one_node(cli, tmp_path, own_server):
    env = dict(FAST, DISPATCH_REDIS_URL=own_server.url, DISPATCH_NODE_TIMEOUT_S="30")
    out = tmp_path / "runs"
    out.mkdir()
    agent = cli.start("worker", "--node", "a", "--fake-gpus", "1xA100-40GB", "--work-dir", str(tmp_path / "a"), **env)
    cli.start("scheduler", **env)
    return env, out, agent


def test_a_job_whose_end_the_server_lost_is_recorded_again_not_rerun(cli, tmp_path, own_server):
    env, out, _ = one_node(cli, tmp_path, own_server)
    client = connect(own_server.url)
    job = cli.run("submit", "--gpus", "1", "--env", f"OUT={out}", "--", "sh", "-c", TICKING.format(ticks=10),
                  **env).stdout.strip()
    wait_running(cli, client, job)
    sizes = aof_sizes(own_server)  # the job running, in the file
    assert cli.run("wait", job, "--timeout", "60", **env).returncode == 0
    client.close()
    restart_without_writes_since(own_server, sizes)
    client = connect(own_server.url)
    assert read_job(client, cli.ns, job)["state"] == "running", "the server kept the end: nothing was lost"
    cli.wait_for(lambda: read_job(client, cli.ns, job)["state"] != "running", timeout=60,
                 what="the agent to record the end again")
    record = read_job(client, cli.ns, job)
    runs = attempts(out, job)
    assert [r["ended"] for r in runs] == [True], f"the finished job ran again: {runs}"
    assert record["state"] == "succeeded" and record["attempt"] == 0, record
    client.close()


def test_a_job_whose_requeue_rerun_and_end_the_server_lost_is_not_launched_again(cli, tmp_path, own_server):
    """The server comes back with the job assigned at its first epoch and that launch in the node's RQ
    queue, though the job was requeued, ran at a later epoch, and ended: the launch records that end."""
    env, out, agent = one_node(cli, tmp_path, own_server)
    client = connect(own_server.url)
    cli.wait_for(lambda: client.exists(keys.node(cli.ns, "a")), timeout=30, what="the agent's first heartbeat")
    time.sleep(1.0)  # (and the scheduler's read of it)
    os.kill(agent.pid, signal.SIGKILL)  # no RQ worker takes the launch now; the node is alive for 30 s
    agent.wait(10)
    job = cli.run("submit", "--gpus", "1", "--env", f"OUT={out}", "--", "sh", "-c", TICKING.format(ticks=5),
                  **env).stdout.strip()
    cli.wait_for(lambda: read_job(client, cli.ns, job)["state"] == "assigned", timeout=30, what="the job to be placed")
    sizes = aof_sizes(own_server)  # assigned, its launch queued
    first_epoch = read_job(client, cli.ns, job)["epoch"]
    cli.start("worker", "--node", "a", "--fake-gpus", "1xA100-40GB", "--work-dir", str(tmp_path / "a"),
              log_name="worker-again", **env)  # requeues what was merely assigned here: it runs at epoch 1
    assert cli.run("wait", job, "--timeout", "60", **env).returncode == 0
    assert read_job(client, cli.ns, job)["epoch"] > first_epoch
    client.close()
    restart_without_writes_since(own_server, sizes)
    client = connect(own_server.url)
    assert (read_job(client, cli.ns, job)["state"], read_job(client, cli.ns, job)["epoch"]) == ("assigned", first_epoch)
    cli.wait_for(lambda: read_job(client, cli.ns, job)["state"] not in ("assigned", "running"), timeout=60,
                 what="the agent to record the end again")
    record = read_job(client, cli.ns, job)
    runs = attempts(out, job)
    assert [r["ended"] for r in runs] == [True], f"the finished job ran again: {runs}"
    assert record["state"] == "succeeded", record
    assert "already ended here" in (tmp_path / "worker-again-2.log").read_text()  # by its launch
    client.close()
