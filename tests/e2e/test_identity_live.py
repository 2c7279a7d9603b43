"""Identity on: signed requests, owner-or-admin cancel, and agents that start only what a user signed."""

from __future__ import annotations

import os
import sys

import pytest

from dispatcher.core.spec import build_spec
from dispatcher.store.jobs import write_jobs
from dispatcher.store.requests import identity_on

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def lab(cli, tmp_path, client):
    secret = tmp_path / "secret"
    secret.write_bytes(os.urandom(32).hex().encode())
    secret.chmod(0o600)
    cli.start("scheduler", "--secret-file", str(secret), "--admins", "boss")
    cli.start("worker", "--node", "n1", "--fake-gpus", "2xA100-40GB", "--work-dir", str(tmp_path / "n1"),
              "--secret-file", str(secret))
    cli.wait_for(lambda: identity_on(client, cli.ns), what="the scheduler to turn identity on")
    tokens = {u: cli.run("auth", "token", u, "--secret-file", str(secret)).stdout.strip()
              for u in ("alice", "bob", "boss")}
    return tokens


def as_user(tokens, user, token=None):
    return {"DISPATCH_USER": user, "DISPATCH_TOKEN": token or tokens[user]}


def test_a_users_signed_job_runs_and_only_its_owner_or_an_admin_may_cancel(cli, lab):
    alice = as_user(lab, "alice")
    job = cli.run("submit", "--gpus", "1", "--", sys.executable, "-c", "print('hi')", **alice).stdout.strip()
    cli.wait_for(lambda: cli.show(job)["state"] == "succeeded", what="alice's job to succeed")
    assert cli.show(job)["user"] == "alice"

    long = cli.run("submit", "--", "sleep", "60", **alice).stdout.strip()
    cli.wait_for(lambda: cli.show(long)["state"] == "running", what="the long job to run")
    refused = cli.run("cancel", long, check=False, **as_user(lab, "bob"))
    assert refused.returncode != 0 and "belongs to alice" in refused.stderr and "Traceback" not in refused.stderr
    assert cli.show(long)["state"] == "running"
    assert "cancel" in cli.run("cancel", long, **as_user(lab, "boss")).stdout  # an admin may
    cli.wait_for(lambda: cli.show(long)["state"] == "cancelled", what="the admin's cancel")


def test_nobody_submits_as_someone_else_or_with_a_wrong_token(cli, lab):
    as_alice = cli.run("submit", "--user", "alice", "--", "true", check=False, **as_user(lab, "bob"))
    assert as_alice.returncode != 0 and "may not submit a job as 'alice'" in as_alice.stderr
    forged = cli.run("submit", "--", "true", check=False, **as_user(lab, "alice", token="0" * 64))
    assert forged.returncode != 0 and "signature does not match" in forged.stderr
    no_token = cli.run("submit", "--", "true", check=False, DISPATCH_USER="alice", DISPATCH_TOKEN="",
                       XDG_CONFIG_HOME=str(cli.home / "empty"))
    assert no_token.returncode != 0 and "identity on" in no_token.stderr
    assert cli.run("queue", "--all", "--json").stdout.strip() == "[]"  # nothing was written


def test_a_job_written_straight_into_redis_is_refused_by_the_node(cli, lab, client):
    spec = build_spec(command=["true"], user="alice", submit_ms=0, gpus=1)
    (job,) = write_jobs(client, cli.ns, [spec])  # someone with raw Redis access, no signature
    cli.wait_for(lambda: cli.show(job)["state"] == "failed", what="the node to refuse the unsigned job")
    assert "not what user alice signed" in cli.show(job)["reason"]


def test_a_user_limited_by_the_documented_acl_can_submit_but_not_write_records(cli, lab, client):
    """docs/security.md: the user role (store/roles.py) leaves users only reads and signed requests."""
    import redis
    import uuid

    from dispatcher.store import roles

    name = f"labuser{uuid.uuid4().hex[:6]}"
    ns = cli.ns
    client.execute_command("ACL", "SETUSER", name, "on", ">pw", *roles.rules(ns, "user"))
    try:
        host, port = client.connection_pool.connection_kwargs["host"], client.connection_pool.connection_kwargs["port"]
        url = f"redis://{name}:pw@{host}:{port}/0"
        job = cli.run("submit", "--", "true", DISPATCH_REDIS_URL=url, **as_user(lab, "alice")).stdout.strip()
        cli.wait_for(lambda: cli.show(job)["state"] == "succeeded", what="the ACL user's job")
        limited = redis.Redis.from_url(url)
        with pytest.raises(redis.exceptions.NoPermissionError):
            limited.hset(f"{ns}:job:{job}", "state", "pending")
        refused = cli.run("cancel", job, check=False, DISPATCH_REDIS_URL=url, **as_user(lab, "bob"))
        assert refused.returncode != 0 and "belongs to alice" in refused.stderr
    finally:
        client.execute_command("ACL", "DELUSER", name)


def test_a_scheduler_or_agent_without_the_secret_refuses_a_namespace_with_identity_on(cli, lab):
    for part in (("scheduler",), ("worker", "--node", "n2", "--fake-gpus", "1xA100-40GB")):
        p = cli.run(*part, check=False, timeout=60)
        assert p.returncode == 2 and "has identity on" in p.stderr and "--secret-file" in p.stderr, p.stderr
        assert "Traceback" not in p.stderr


def test_a_refusal_exits_with_the_same_code_as_without_identity(cli, lab):
    """QA: under identity every refusal the scheduler answered exited 2 (usage); a job in the wrong state is
    1, as `dispatch hold` of an ended job exits without identity."""
    from dispatcher.core import errors

    alice = as_user(lab, "alice")
    job = cli.run("submit", "--", "true", **alice).stdout.strip()
    cli.wait_for(lambda: cli.show(job)["state"] == "succeeded", what="alice's job to succeed")
    for verb in (["hold"], ["release"], ["update", "--priority", "low"]):
        p = cli.run(*verb, job, check=False, **alice)
        assert p.returncode == errors.EXIT_FAILED and "is succeeded; cannot" in p.stderr, (verb, p.returncode, p.stderr)


def test_a_job_and_its_clean_up_step_cancelled_together_never_start_the_step(cli, lab, tmp_path):
    alice = as_user(lab, "alice")
    for k in range(4):  # (the old order, the job first, started the step 4 times in 5: the leader placed it
        ran = tmp_path / f"ran{k}"  # between the two signed cancels)
        parent = cli.run("submit", "--hold", "--", "true", **alice).stdout.strip()
        step = cli.run("submit", "--after-any", parent, "--", "touch", str(ran), **alice).stdout.strip()
        given = [parent, step] if k % 2 == 0 else ["-u", "alice"]  # by ids, and by a filter
        p = cli.run("cancel", *given, **alice)
        assert p.stdout.splitlines() == [f"{parent}: cancelled", f"{step}: cancelled"], p.stdout  # (as given)
        job = cli.wait_for(lambda: cli.show(step)["state"] == "cancelled" and cli.show(step), what="the cancel")
        assert not job["started_at"] and not ran.exists() and job["reason"] == "cancelled by alice", job


def test_a_running_job_cancelled_with_pending_ones_never_gives_them_its_gpus(cli, lab, tmp_path):
    alice = as_user(lab, "alice")
    ran = tmp_path / "ran"
    waiting = cli.run("submit", "--hold", "--gpus", "2", "--", "touch", str(ran), **alice).stdout.strip()
    held = [cli.run("submit", "--hold", "--", "true", **alice).stdout.strip() for _ in range(3)]
    running = cli.run("submit", "--gpus", "2", "--", "sleep", "60", **alice).stdout.strip()
    cli.wait_for(lambda: cli.show(running)["state"] == "running", what="the running job")
    cli.run("release", waiting, **alice)  # the oldest, pending behind it for the node's 2 GPUs
    # (newest first, the running job's cancel came 4 signed requests before the waiting job's: it was placed)
    p = cli.run("cancel", waiting, *held, running, **alice)
    assert p.stdout.splitlines() == [f"{waiting}: cancelled", *(f"{h}: cancelled" for h in held),
                                     f"{running}: cancel sent to its node"], p.stdout
    job = cli.wait_for(lambda: cli.show(waiting)["state"] == "cancelled" and cli.show(waiting), what="the cancel")
    assert not job["started_at"] and not job["attempts"] and not ran.exists(), job
    cli.wait_for(lambda: cli.show(running)["state"] == "cancelled", what="the running job's end")
