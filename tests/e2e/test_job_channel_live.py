"""A job holds no credential: no Redis URL, password or token in its environment. What it may ask of
dispatch (record a checkpoint, submit follow-up work) goes through its node agent's job channel, with a
capability that is good for its own attempt only."""

from __future__ import annotations

import os
import shlex
import socket
import sys
import time
import uuid

import msgpack
import pytest

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(os.geteuid() != 0, reason="these agents are root's, as in CI")]

PY = shlex.quote(sys.executable)


def start_node(cli, tmp_path, *flags, **env):
    cli.start("worker", "--node", "n1", "--fake-gpus", "1xA100-40GB", "--work-dir", str(tmp_path / "n1"), *flags,
              **env)


def test_a_jobs_environment_holds_no_redis_url_password_or_token(cli, tmp_path, client):
    password = f"pw-{uuid.uuid4().hex}"
    name = f"agent{uuid.uuid4().hex[:6]}"
    client.execute_command("ACL", "SETUSER", name, "on", f">{password}", "~*", "&*", "+@all")
    try:
        kw = client.connection_pool.connection_kwargs
        url = f"redis://{name}:{password}@{kw['host']}:{kw['port']}/0"
        cli.start("scheduler")
        start_node(cli, tmp_path, "--allow-root-jobs", DISPATCH_REDIS_URL=url, DISPATCH_TOKEN="tok-of-the-agent",
                   LAB_NOTE=f"the password is {password}")
        job = cli.submit("--", "env")
        cli.wait_for(lambda: cli.show(job)["state"] == "succeeded", what="the env job")
        env = cli.run("logs", job).stdout
        assert "PATH=" in env and f"DISPATCH_JOB_ID={job}" in env and "DISPATCH_JOB_SOCKET=" in env  # the rest is kept
        for secret in (password, "redis://", "tok-of-the-agent", "LAB_NOTE", "DISPATCH_REDIS_URL"):
            assert secret not in env, secret
        on_node = tmp_path / "n1" / "logs" / f"{job}.log"
        assert on_node.read_text() == env and on_node.stat().st_mode & 0o777 == 0o600
    finally:
        client.execute_command("ACL", "DELUSER", name)


def test_a_job_records_its_checkpoint_and_submits_follow_up_work_through_its_agent(cli, tmp_path):
    cli.start("scheduler")
    start_node(cli, tmp_path, "--allow-root-jobs")
    script = (f"{PY} -m dispatcher checkpointed && "
              f"{PY} -m dispatcher submit --name follow-up -- sh -c 'echo from the follow-up'")
    parent = cli.submit("--name", "parent", "--user", "ada", "--", "sh", "-c", script)
    cli.wait_for(lambda: cli.show(parent)["state"] in ("succeeded", "failed"), what="the parent job")
    out = cli.run("logs", parent).stdout
    assert cli.show(parent)["state"] == "succeeded", out
    assert cli.show(parent)["checkpoint_at"]
    child = out.split()[-1]
    assert cli.show(child)["name"] == "follow-up" and cli.show(child)["user"] == "ada"
    cli.wait_for(lambda: cli.show(child)["state"] == "succeeded", what="the follow-up job")
    assert cli.run("logs", child).stdout == "from the follow-up\n"


def test_a_job_submits_follow_up_work_held_through_its_agent(cli, tmp_path):
    cli.start("scheduler")
    start_node(cli, tmp_path, "--allow-root-jobs")
    parent = cli.submit("--user", "ada", "--", "sh", "-c", f"{PY} -m dispatcher submit --hold -- true")
    cli.wait_for(lambda: cli.show(parent)["state"] in ("succeeded", "failed"), what="the parent job")
    child = cli.run("logs", parent).stdout.split()[-1]
    assert cli.show(child)["reason"] == f"held by ada (dispatch release {child})", cli.show(child)
    time.sleep(2)  # cycles with the node free
    assert cli.show(child)["state"] == "pending"


def test_a_capability_is_good_for_its_own_attempt_only(cli, tmp_path):
    cli.start("scheduler")
    start_node(cli, tmp_path, "--allow-root-jobs")
    holder = cli.submit("--", "sh", "-c", 'echo "$DISPATCH_EPOCH $DISPATCH_JOB_CAP $DISPATCH_JOB_SOCKET"; sleep 60')
    other = cli.submit("--", "sleep", "60")
    cli.wait_for(lambda: cli.run("logs", holder).stdout.strip() and cli.show(other)["state"] == "running",
                 what="both jobs to run")
    epoch, cap, sock = cli.run("logs", holder).stdout.split()

    def as_job(job_id, job_epoch, job_cap):
        return cli.run("checkpointed", check=False, DISPATCH_JOB_SOCKET=sock, DISPATCH_JOB_CAP=job_cap,
                       DISPATCH_JOB_ID=job_id, DISPATCH_EPOCH=str(job_epoch))

    assert as_job(holder, epoch, cap).returncode == 0
    assert cli.show(holder)["checkpoint_at"]
    forged = as_job(other, cli.show(other)["epoch"], cap)  # the holder's capability, for another job
    assert forged.returncode != 0 and "capability is not" in forged.stderr
    assert len(forged.stderr.strip().splitlines()) == 1 and "Traceback" not in forged.stderr
    assert not cli.show(other)["checkpoint_at"]

    with socket.socket(socket.AF_UNIX) as s:  # not even msgpack: refused, and the agent goes on
        s.connect(sock)
        s.sendall(b"\xc1 not a request")
        s.shutdown(socket.SHUT_WR)
        assert msgpack.unpackb(s.recv(4096))["ok"] is False

    assert "cancel" in cli.run("cancel", holder).stdout
    cli.wait_for(lambda: cli.show(holder)["state"] == "cancelled", what="the holder to be cancelled")
    expired = as_job(holder, epoch, cap)
    assert expired.returncode != 0 and "capability has expired" in expired.stderr
    assert cli.run("checkpointed", check=False, DISPATCH_JOB_SOCKET=sock, DISPATCH_JOB_CAP="0" * 64,
                   DISPATCH_JOB_ID=other, DISPATCH_EPOCH=str(cli.show(other)["epoch"])).returncode != 0


def test_a_root_agent_runs_jobs_as_root_only_when_told_to(cli, tmp_path):
    node = ["worker", "--node", "n1", "--fake-gpus", "1xA100-40GB", "--work-dir", str(tmp_path / "n1")]
    plain = cli.run(*node, check=False, DISPATCH_ALLOW_ROOT_JOBS="")
    assert plain.returncode == 2 and len(plain.stderr.strip().splitlines()) == 1
    assert "--run-as-user" in plain.stderr and "--allow-root-jobs" in plain.stderr
    as_users = cli.run(*node, "--run-as-user", check=False, DISPATCH_ALLOW_ROOT_JOBS="")
    assert as_users.returncode == 2
    assert "--run-as-user needs identity (--secret-file): without it any user can submit as another" in as_users.stderr

    cli.start(*node, "--allow-root-jobs", log_name="root-agent")
    cli.wait_for(lambda: "every job on this node runs as root" in
                 "".join(p.read_text() for p in cli.home.glob("root-agent-*.log")), what="the agent's warning")
