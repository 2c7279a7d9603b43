"""Idle GPUs end to end: real scheduler and agent processes with fake GPUs, one busy job and one idle
job; the idle one is warned, then requeued by the policy, while the busy one keeps running."""

import pytest

pytestmark = pytest.mark.slow


#: Short thresholds: warned after 2 s idle, requeued after 6 s (4 s to see the warning in between).
IDLE_POLICY = '[defaults]\nidle_warn = "2s"\nidle_requeue = "6s"\n'


def test_an_idle_job_is_warned_then_requeued_while_a_busy_job_keeps_running(cli):
    (cli.home / "idle.toml").write_text(IDLE_POLICY)
    cli.start("scheduler", "--policy", str(cli.home / "idle.toml"))
    cli.start("worker", "--node", "n1", "--fake-gpus", "2xA100-40GB")
    busy = cli.submit("--gpus", "1", "--env", "DISPATCH_FAKE_GPU_UTIL=90", "--", "sleep", "120")
    idle = cli.submit("--gpus", "1", "--", "sleep", "120")
    cli.wait_for(lambda: all(cli.show(j)["state"] == "running" for j in (busy, idle)), what="both jobs to run")

    warned = cli.wait_for(lambda: cli.show(idle)["warning"], timeout=15, what="the idle job's warning")
    assert warned == "GPUs idle: all below 5% utilization for 2s; the policy requeues the job after 6s idle"
    shown = cli.run("show", idle).stdout
    assert f"warning: {warned}" in shown and "idle_since_at: 20" in shown, shown  # 4 s before the requeue

    cli.wait_for(lambda: cli.show(idle)["preemptions"] >= 1, timeout=20, what="the idle job's requeue")
    job = cli.show(idle)
    first = job["attempts"][0]
    assert first["outcome"] == "preempted" and "idle: GPUs below 5% for 6s" in first["reason"], first
    assert job["preempted_by"] == "node n1" and job["preempt_mode"] == "graceful", job
    assert job["state"] in ("pending", "assigned", "running") and job["warning"] in (None, warned), job

    b = cli.show(busy)
    assert (b["state"], b["attempt"], b["preemptions"], b["warning"]) == ("running", 0, 0, None), b
    cli.run("cancel", busy, idle)
