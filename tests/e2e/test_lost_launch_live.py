"""A placement whose launch is lost (the node's RQ worker popped it, then stopped on a write error: a
full disk) is not left assigned forever: the node agent puts the job back once it has waited a
minute with no launch left in the node's queue, and the job runs."""

from __future__ import annotations

import time

import pytest

from dispatcher.store.scripts import Scripts
from workers.recovery import ASSIGNED_SETTLE_MS

pytestmark = pytest.mark.timeout(120)


def test_a_job_whose_launch_was_lost_goes_back_to_the_queue_and_runs(cli, client):
    cli.start("worker", "--node", "n1", "--fake-gpus", "1xA100-40GB", DISPATCH_HEARTBEAT_S="0.5")
    job = cli.submit("--gpus", "1", "--", "echo", "ran")
    cli.wait_for(lambda: "n1" in cli.run("nodes").stdout, what="node n1")
    placed_ms = int(time.time() * 1000) - ASSIGNED_SETTLE_MS - 1000  # placed a minute ago; no launch queued
    assert Scripts(client, cli.ns).commit_placement(job, "n1", "0", 0, placed_ms) == 1
    cli.wait_for(lambda: cli.show(job)["state"] == "pending", timeout=30, what="the agent to requeue the job")
    assert "runs no such attempt" in cli.show(job)["attempts"][-1]["reason"]
    cli.start("scheduler")
    cli.wait_for(lambda: cli.show(job)["state"] == "succeeded", what="the job to run after all")
    assert cli.run("logs", job).stdout.strip().endswith("ran")
