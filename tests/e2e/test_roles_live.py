"""A lab run under the three roles (dispatcher/store/roles.py): the scheduler logs in as the leader, the
node agents as agents, people as users with identity on. Real processes, a real server."""

from __future__ import annotations

import json
import os
import signal
import sys
import urllib.request
import uuid

import pytest

from dispatcher.up.embedded import free_port
from dispatcher.store import roles
from dispatcher.store.requests import identity_on

pytestmark = pytest.mark.timeout(240)

FAST = {"DISPATCH_HEARTBEAT_S": "0.5", "DISPATCH_NODE_TIMEOUT_S": "3"}


@pytest.fixture
def lab(cli, client, tmp_path, redis_url):
    passwords = {r: uuid.uuid4().hex for r in roles.ROLES}
    roles.apply(client, cli.ns, passwords)
    login = {r: roles.role_url(redis_url, cli.ns, r, passwords[r]) for r in roles.ROLES}
    secret = tmp_path / "secret"
    secret.write_bytes(os.urandom(32).hex().encode())
    secret.chmod(0o600)
    cli.start("scheduler", "--secret-file", str(secret), "--admins", "boss", DISPATCH_REDIS_URL=login["leader"], **FAST)

    def agent(node: str):
        return cli.start("worker", "--node", node, "--fake-gpus", "2xA100-40GB", "--work-dir", str(tmp_path / node),
                         "--secret-file", str(secret), log_name=f"worker-{node}", DISPATCH_REDIS_URL=login["agent"],
                         DISPATCH_ALLOW_ROOT_JOBS="1", **FAST)

    first = agent("n1")
    cli.wait_for(lambda: identity_on(client, cli.ns), what="the scheduler to turn identity on")
    token = cli.run("auth", "token", "alice", "--secret-file", str(secret)).stdout.strip()
    alice = {"DISPATCH_REDIS_URL": login["user"], "DISPATCH_USER": "alice", "DISPATCH_TOKEN": token}
    yield alice, first, agent
    cli.stop_all()  # before their logins go
    client.execute_command("ACL", "DELUSER", *[roles.username(cli.ns, r) for r in roles.ROLES])


def test_a_users_job_runs_under_the_roles_and_every_read_command_works_for_the_user(cli, lab, tmp_path):
    alice, _, _ = lab
    done = cli.run("submit", "--gpus", "1", "--", sys.executable, "-c", "print('hello')", **alice).stdout.strip()
    cli.wait_for(lambda: cli.run("show", done, "--json", **alice).stdout.count('"succeeded"'), what="alice's job")
    waiting = cli.run("submit", "--gpus", "4", "--", "true", **alice).stdout.strip()  # more GPUs than the lab has
    port = free_port()
    cli.start("dashboard", "--port", str(port), DISPATCH_REDIS_URL=alice["DISPATCH_REDIS_URL"])

    reads = [("show", done), ("show", done, "--json"), ("logs", done), ("logs", "-f", done), ("wait", done),
             ("queue",), ("queue", "--all", "--json"), ("nodes",), ("nodes", "--json"), ("why", waiting),
             ("why", waiting, "--json"), ("eta", waiting), ("decisions",), ("decisions", "--job", done),
             ("top", "--once"), ("history", "--csv"), ("history",), ("report",), ("report", "--by", "gpu-type", "--json"),
             ("policy", "show"), ("policy", "history"),
             ("policy", "diff", "live", "default"),
             ("tune", "--budget", "1", "--out", str(tmp_path / "tuned.toml"))]
    for args in reads:
        p = cli.run(*args, check=False, timeout=120, **alice)
        assert p.returncode == 0, f"dispatch {' '.join(args)} as a user: {p.stderr.strip()}"
    assert cli.run("logs", done, **alice).stdout == "hello\n"
    cli.wait_for(lambda: _get(port, "/api/board"), what="the dashboard")
    for path in ("/api/board", "/api/queue", "/api/history", f"/api/job/{done}", "/metrics"):
        assert _get(port, path), f"the dashboard's {path} as a user"


def test_cancel_preempt_and_a_lost_node_under_the_roles(cli, lab):
    alice, first, agent = lab
    loop = [sys.executable, "-c", "import time\nwhile True: time.sleep(0.1)"]
    doomed = cli.run("submit", "--gpus", "1", "--", *loop, **alice).stdout.strip()
    moved = cli.run("submit", "--gpus", "1", "--checkpointable", "--", *loop, **alice).stdout.strip()
    cli.wait_for(lambda: all(_state(cli, j, alice) == "running" for j in (doomed, moved)), what="both to run")

    assert "cancel" in cli.run("cancel", doomed, **alice).stdout  # a signed request; the agent stops it
    cli.wait_for(lambda: _state(cli, doomed, alice) == "cancelled", what="the cancel")
    assert "graceful" in cli.run("preempt", moved, **alice).stdout
    cli.wait_for(lambda: _show(cli, moved, alice)["attempt"] == 1 and _state(cli, moved, alice) == "running",
                 what="the preempted job to run again")

    os.kill(first.pid, signal.SIGKILL)  # the leader gives the node up and requeues its job
    agent("n2")
    cli.wait_for(lambda: _show(cli, moved, alice)["node"] == "n2" and _state(cli, moved, alice) == "running",
                 timeout=30, what="the lost node's job to run on n2")
    assert _show(cli, moved, alice)["lost"] == 1
    assert "cancel" in cli.run("cancel", moved, **alice).stdout
    cli.wait_for(lambda: _state(cli, moved, alice) == "cancelled", what="the last cancel")


def _show(cli, job, env) -> dict:
    return json.loads(cli.run("show", job, "--json", **env).stdout)


def _state(cli, job, env) -> str:
    return _show(cli, job, env)["state"]


def _get(port: int, path: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status == 200 and bool(r.read())
    except OSError:
        return False
