"""A deferred start as a Slurm user types it (sbatch --begin): the job waits, pending, with its start
time as its reason, and starts on its own once the time comes; `dispatch update --begin` moves it (now:
no wait), and a job with both --begin and --after waits for both. A real scheduler and a fake-GPU node."""

import json
import time

import pytest

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def cluster(cli):
    cli.start("scheduler")
    cli.start("worker", "--node", "n1", "--fake-gpus", "2xA100-40GB", "--cpus", "8", "--mem", "16")
    return cli


def test_a_job_submitted_to_begin_in_three_seconds_waits_with_its_start_time_then_runs(cluster):
    cli = cluster
    submitted = time.time()
    job = cli.submit("--begin", "now+3", "--gpus", "1", "--", "true")
    waiting = cli.wait_for(lambda: "--begin" in (cli.show(job)["reason"] or "") and cli.show(job), timeout=10,
                           what="the job's reason to name its start time")
    assert waiting["state"] == "pending" and abs(waiting["begin_at"] - (submitted + 3)) < 1.5, waiting
    assert time.strftime("%H:%M:%S", time.localtime(waiting["begin_at"])) in waiting["reason"]
    assert "--begin" in cli.run("queue").stdout  # its REASON column says why it waits
    done = cli.wait_for(lambda: cli.show(job)["state"] == "succeeded" and cli.show(job), timeout=30,
                        what="the job to run once its time came")
    assert done["started_at"] >= waiting["begin_at"] - 0.01, (done["started_at"], waiting["begin_at"])


def test_update_begin_now_starts_a_deferred_job_and_begin_with_after_waits_for_both(cluster):
    cli = cluster
    first = cli.submit("--gpus", "1", "--", "sleep", "6")
    both = cli.submit("--begin", "now+1", "--after", first, "--gpus", "1", "--", "true")
    cli.wait_for(lambda: f"job {first}" in (cli.show(both)["reason"] or ""), timeout=15,
                 what="the job to wait for its dependency once its start time passed")
    later = cli.submit("--begin", "now+1hour", "--gpus", "1", "--", "true")
    cli.wait_for(lambda: "--begin" in (cli.show(later)["reason"] or ""), what="the deferred job's reason")
    out = cli.run("update", later, "--begin", "now").stdout
    assert "begin" in out and "->" in out, out
    cli.wait_for(lambda: cli.show(later)["state"] == "succeeded", timeout=30, what="the job to start after update")
    cli.wait_for(lambda: cli.show(both)["state"] == "succeeded", timeout=30, what="the job to run after both")
    assert cli.show(both)["started_at"] >= cli.show(first)["finished_at"]


@pytest.mark.parametrize("value", ["soon", "25:00", "now+forever", "2026-13-40", ""])
def test_a_begin_that_names_no_time_is_one_line_and_submits_nothing(cli, value):
    p = cli.run("submit", "--begin", value, "--", "true", check=False)
    assert p.returncode != 0 and p.stderr.strip().count("\n") == 0 and "--begin" in p.stderr, p.stderr
    assert json.loads(cli.run("queue", "--json").stdout) == []
