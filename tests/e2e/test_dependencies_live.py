"""Dependencies as a user meets them: a pipeline of three jobs through `dispatch submit --after`,
run by a real scheduler and a fake-GPU node agent; a failing step fails the rest of the chain, and
`--after-any` runs a clean-up step however the others ended."""

import pytest

from dispatcher.core import errors


@pytest.fixture
def cluster(cli):
    cli.start("scheduler")
    cli.start("worker", "--node", "n1", "--fake-gpus", "2xA100-40GB", "--cpus", "8", "--mem", "16")
    return cli


def final(cli, job_id, timeout=30.0):
    return cli.wait_for(lambda: cli.show(job_id)["state"] in ("succeeded", "failed", "cancelled")
                        and cli.show(job_id), timeout=timeout, what=f"job {job_id} to end")


def test_a_pipeline_runs_in_order_and_a_failed_step_fails_what_depends_on_it(cluster, tmp_path):
    cli = cluster
    marks = tmp_path / "order"
    step = lambda name, code=0: ["--gpus", "1", "--", "sh", "-c", f"sleep 0.5; echo {name} >> {marks}; exit {code}"]
    prepare = cli.submit(*step("prepare"))
    train = cli.submit("--after", prepare, *step("train"))
    evaluate = cli.submit("--after", train, *step("evaluate"))
    assert final(cli, evaluate)["state"] == "succeeded"
    assert marks.read_text().split() == ["prepare", "train", "evaluate"]  # never two at once, on 2 free GPUs
    assert cli.show(evaluate)["after"] == [train]

    broken = cli.submit(*step("broken", 3))
    skipped = cli.submit("--after", broken, *step("skipped"))
    cleanup = cli.submit("--after-any", f"{broken},{skipped}", *step("cleanup"))
    job = final(cli, skipped)
    assert job["state"] == "failed" and job["reason"] == f"dependency job {broken} failed: exit code 3"
    assert final(cli, cleanup)["state"] == "succeeded"
    assert "skipped" not in marks.read_text().split()


def test_a_missing_dependency_is_refused_in_one_line_and_one_already_cancelled_fails_the_job(cluster):
    cli = cluster
    p = cli.run("submit", "--after", "424242", "--", "true", check=False)
    assert p.returncode == errors.EXIT_USAGE and p.stderr.strip() == "dispatch: error: --after: there is no job 424242"
    gone = cli.submit("--gpus", "1", "--", "sleep", "30")
    cli.run("cancel", gone)
    cli.wait_for(lambda: cli.show(gone)["state"] == "cancelled", what="the cancel")
    then = cli.submit("--after", gone, "--", "true")  # taken: it fails at once, with the reason
    job = final(cli, then)
    assert job["state"] == "failed" and f"dependency job {gone}" in job["reason"] and "cancelled" in job["reason"]
