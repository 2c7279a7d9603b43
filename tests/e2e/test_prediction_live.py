"""Runtime prediction, live: a scheduler and a node agent with fake GPUs run a job twice; the third
submit of it is predicted from those runs, and `dispatch show` gives the prediction, the peak GPU
memory the agent measured, and, after the run, the prediction's error."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.timeout(120)


def test_two_runs_of_a_job_make_the_third_predicted_and_show_shows_it(cli, tmp_path):
    cli.start("scheduler")
    cli.start("worker", "--node", "pn", "--fake-gpus", "2xA100-40GB", "--work-dir", str(tmp_path / "pn"))
    job = ["--gpus", "1", "--env", "DISPATCH_FAKE_GPU_MEM_GB=3.5", "--", "sh", "-c", "sleep 2.5"]
    first = [cli.submit(*job) for _ in range(2)]
    for j in first:
        cli.wait_for(lambda: cli.show(j)["state"] == "succeeded", what=f"job {j} to succeed")
        assert cli.show(j)["peak_gpu_mem_gb"] == 3.5  # measured by the agent through the (fake) probe
    assert cli.show(first[0])["prediction"] is None  # nothing had finished yet
    third = cli.submit("--gpus", "1", "--env", "DISPATCH_FAKE_GPU_MEM_GB=3.5", "--", "sh", "-c", "sleep 1.5")
    p = cli.show(third)["prediction"]
    assert p is not None and (p["runs"], p["source"], p["peak_gpu_mem_gb"]) == (2, "command", 3.5), p
    assert 2.4 <= p["duration_s"] <= 4.5, p  # the two runs took about 2.5 s each
    assert cli.show(third)["plan_est_s"] == p["duration_s"]  # no --est: the policy is told the prediction
    text = cli.run("show", third).stdout
    assert "from 2 runs of this command" in text and "peak GPU memory 3.5 GB" in text, text
    cli.wait_for(lambda: cli.show(third)["state"] == "succeeded", what="the third job to succeed")
    err = cli.show(third)["prediction_error"]
    assert err is not None and err["error_s"] > 0 and 1.4 <= err["actual_s"] <= 3.5, err  # over-predicted
    assert "ran " in cli.run("show", third).stdout and "(over," in cli.run("show", third).stdout
