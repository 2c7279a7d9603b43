"""Node agents started as root run each job as its submitting Unix user (Slurm's model)."""

from __future__ import annotations

import os

import pytest

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(os.geteuid() != 0, reason="--run-as-user needs the agent to run as root")]


def test_a_job_runs_as_its_user_and_an_unknown_user_fails_with_the_reason(cli, tmp_path):
    cli.start("scheduler")
    cli.start("worker", "--node", "n1", "--fake-gpus", "1xA100-40GB", "--work-dir", str(tmp_path / "n1"),
              "--run-as-user")
    mine = cli.submit("--user", "nobody", "--cwd", "/", "--", "sh", "-c", "id -un; echo $HOME")
    cli.wait_for(lambda: cli.show(mine)["state"] == "succeeded", what="nobody's job")
    assert cli.run("logs", mine).stdout.split() == ["nobody", "/nonexistent"]
    ghost = cli.submit("--user", "no-such-user-x", "--cwd", "/", "--", "true")
    cli.wait_for(lambda: cli.show(ghost)["state"] == "failed", what="the unknown user's job to fail")
    assert "no Unix user 'no-such-user-x'" in cli.show(ghost)["reason"]
    root = cli.submit("--user", "root", "--cwd", "/", "--", "true")
    cli.wait_for(lambda: cli.show(root)["state"] == "failed", what="root's job to be refused")
    assert "not run as root" in cli.show(root)["reason"]

