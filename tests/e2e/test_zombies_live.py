"""A GPU held by a process no job owns: reported, not handed out, and killed only when asked."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(120)


def zombie(node: str, gpu: int) -> subprocess.Popen:
    """A process using `gpu` of `node` as a CUDA process would (the fake probe reads its environment)."""
    env = dict(os.environ, DISPATCH_NODE=node, CUDA_VISIBLE_DEVICES=str(gpu))
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env=env,
                            start_new_session=True)


def blocked_gpus(cli, node: str) -> dict:
    import json

    found = [n for n in json.loads(cli.run("nodes", "--json").stdout) if n["name"] == node]
    return {g["index"]: g["blocked"] for n in found for g in n["gpus"] if g["blocked"]}  # {} until it registers


def test_a_zombie_gpu_is_reported_and_not_handed_out(cli, tmp_path):
    z = zombie("zn", 0)
    try:
        cli.start("scheduler")
        cli.start("worker", "--node", "zn", "--fake-gpus", "2xA100-40GB", "--work-dir", str(tmp_path / "zn"))
        cli.wait_for(lambda: 0 in blocked_gpus(cli, "zn"), what="GPU 0 to be reported blocked")
        assert f"pid {z.pid}" in blocked_gpus(cli, "zn")[0]
        assert "1 GPU blocked" in cli.run("nodes").stdout
        jobs = [cli.submit("--gpus", "1", "--", "sleep", "30") for _ in range(2)]
        cli.wait_for(lambda: cli.show(jobs[0])["state"] == "running", what="the first job to run")
        assert cli.show(jobs[0])["gpus"] == [1]  # never the zombie's GPU
        assert cli.show(jobs[1])["state"] == "pending"
        assert 1 not in blocked_gpus(cli, "zn")  # the job's own process is not a zombie
        assert z.poll() is None  # not killed without --kill-zombies
    finally:
        z.kill()
        z.wait()
    cli.wait_for(lambda: cli.show(jobs[1])["state"] == "running", what="GPU 0 to come back once the zombie is gone")


def test_kill_zombies_kills_the_process_and_frees_the_gpu(cli, tmp_path):
    z = zombie("kz", 1)
    try:
        cli.start("scheduler")
        cli.start("worker", "--node", "kz", "--fake-gpus", "2xA100-40GB", "--work-dir", str(tmp_path / "kz"),
                  "--kill-zombies")
        z.wait(timeout=20)  # killed by the agent
        cli.wait_for(lambda: '"kz"' in cli.run("nodes", "--json").stdout and not blocked_gpus(cli, "kz"),
                     what="GPU 1 to be usable again")
        job = cli.submit("--gpus", "2", "--", "true")
        cli.wait_for(lambda: cli.show(job)["state"] == "succeeded", what="a job on both GPUs")
    finally:
        if z.poll() is None:
            z.kill()
            z.wait()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_kill_zombies_never_takes_a_just_started_job_for_a_zombie(cli, client, tmp_path):
    """Heartbeats ten times a second, so that many look at the GPUs while a job is being started."""
    from dispatcher.store.jobs import read_job

    env = {"DISPATCH_HEARTBEAT_S": "0.1"}
    cli.start("scheduler", **env)
    cli.start("worker", "--node", "busy", "--fake-gpus", "4xA100-40GB", "--cpus", "8", "--work-dir",
              str(tmp_path / "busy"), "--kill-zombies", log_name="worker-busy", **env)
    from dispatcher.api import Client

    jobs = Client(cli.url, cli.ns).submit_many([{"command": ["sleep", "0.2"], "gpus": 1}] * 300)
    cli.wait_for(lambda: all(read_job(client, cli.ns, j)["state"] in ("succeeded", "failed") for j in jobs),
                 timeout=240, what="every job to end")
    records = [read_job(client, cli.ns, j) for j in jobs]
    assert [j["id"] for j in records if j["state"] != "succeeded" or int(j.get("attempt") or 0)] == []
    log = next(tmp_path.glob("worker-busy*.log")).read_text()
    assert "which no job owns" not in log, log[-2000:]
