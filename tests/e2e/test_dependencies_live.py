"""Dependencies as a user meets them: a pipeline of three jobs through `dispatch submit --after`,
run by a real scheduler and a fake-GPU node agent; a failing step fails the rest of the chain, and
`--after-any` runs a clean-up step however the others ended. An array's id waits for every element
(Slurm's afterok:ARRAY, afterany:ARRAY), `ID_INDEX` for that element."""

import json

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


def test_after_an_array_waits_for_every_element_and_fails_as_soon_as_one_fails(cluster, tmp_path):
    cli = cluster
    ends, gate = tmp_path / "ends", tmp_path / "gate"  # the elements wait for the gate: held till it opens
    array = cli.submit("--array", "0-3%1", "--gpus", "1", "--", "sh", "-c",
                       f"until [ -e {gate} ]; do sleep 0.1; done; sleep 1; echo $DISPATCH_ARRAY_INDEX >> {ends}; "
                       "[ $DISPATCH_ARRAY_INDEX != 2 ]")
    after = cli.submit("--after", array, "--", "echo", "dep-on-array")
    cleanup = cli.submit("--after-any", array, "--", "sh", "-c", f"echo cleanup >> {ends}")
    elements = [cli.show(f"{array}_{i}")["id"] for i in range(4)]
    assert cli.show(after)["after"] == elements and cli.show(cleanup)["after_any"] == elements
    lines = tmp_path / "jobs.jsonl"  # --from: the same reading of an array's id
    lines.write_text(json.dumps({"command": ["true"], "after_any": array}) + "\n")
    assert cli.show(cli.run("submit", "--from", str(lines)).stdout.strip())["after_any"] == elements
    held = f"blocked (held): waits for job {array}_0 (running), jobs {array}_[1-3] (pending) to succeed"
    cli.wait_for(lambda: held in cli.run("why", after).stdout, timeout=30, what="why to say what it waits for")
    ends_too = held.replace("blocked (held): ", "").replace("to succeed", "to end")
    cli.wait_for(lambda: cli.show(cleanup)["reason"] == ends_too, timeout=10, what="the --after-any job's reason")
    gate.touch()

    job = final(cli, after, timeout=60)  # not after element 0 alone, as it used to
    assert job["state"] == "failed" and job["reason"] == f"dependency job {array}_2 failed: exit code 1"
    assert job["finished_at"] < final(cli, elements[3])["finished_at"], "failed while element 3 had yet to end"
    assert final(cli, cleanup)["state"] == "succeeded"
    assert ends.read_text().split() == ["0", "1", "2", "3", "cleanup"]  # after the last element ended


def test_after_an_element_id_waits_for_that_element_only(cluster):
    cli = cluster
    array = cli.submit("--array", "0,1,60", "--gpus", "1", "--", "sh", "-c", "sleep $DISPATCH_ARRAY_INDEX")
    one = cli.submit("--after", f"{array}_1", "--", "true")  # as `show 12_1` takes it
    assert cli.show(one)["after"] == [cli.show(f"{array}_1")["id"]]
    assert final(cli, one)["state"] == "succeeded"
    assert cli.show(f"{array}_1")["state"] == "succeeded"
    assert cli.show(f"{array}_60")["state"] in ("assigned", "running")  # not waited for
    p = cli.run("submit", "--after", f"{array}_7", "--", "true", check=False)
    assert p.returncode == errors.EXIT_USAGE
    assert p.stderr.strip() == f"dispatch: error: --after: there is no job {array}_7"
    cli.run("cancel", array)


def test_after_given_twice_waits_for_both_jobs_and_a_failure_of_either_fails_it(cluster):
    cli = cluster
    fails = cli.submit("--gpus", "0", "--", "sh", "-c", "sleep 1; exit 1")
    works = cli.submit("--gpus", "0", "--", "true")
    both = cli.submit("--gpus", "0", "--after", fails, "--after", works, "--after-any", works, "--", "true")
    assert cli.show(both)["after"] == [fails, works]
    job = final(cli, both)
    assert job["state"] == "failed" and fails in job["reason"], job
    empty = cli.run("submit", "--after", "", "--", "true", check=False)
    assert empty.returncode == errors.EXIT_USAGE and empty.stderr.strip() == "dispatch: error: --after: '' is not a job id"
