"""hold and release, as Slurm's `scontrol hold/release`: a held job stays pending through free GPUs
and starts once released; only pending jobs are held; under identity only the owner or an admin."""

from __future__ import annotations

import time

from .test_identity_live import as_user, lab  # noqa: F401 - the identity fixture


def test_a_held_job_waits_through_free_gpus_and_runs_once_released(cli):
    cli.start("worker", "--node", "a", "--fake-gpus", "1xA100-40GB")
    cli.start("scheduler")
    busy = cli.submit("--gpus", "1", "--", "sleep", "60")
    cli.wait_for(lambda: cli.show(busy)["state"] == "running", what="the first job to run")
    held = cli.submit("--gpus", "1", "--name", "later", "--", "true")
    assert cli.run("hold", held).stdout.strip() == f"{held}: held"
    assert cli.run("hold", held).stdout.strip() == f"{held}: already held"
    shown = cli.show(held)  # who and when, a time in epoch seconds as every other
    assert shown["hold"] == cli.show(busy)["user"] and shown["held_at"] >= shown["submitted_at"], shown

    cli.run("cancel", busy)
    cli.wait_for(lambda: cli.show(busy)["state"] == "cancelled", what="the GPU to free")
    time.sleep(3)  # many scheduling cycles with the GPU free
    job = cli.show(held)
    assert job["state"] == "pending" and job["reason"].startswith("held by "), job
    assert "held by" in cli.run("queue").stdout
    assert f"blocked (held): held by " in cli.run("why", held).stdout

    refused = cli.run("hold", busy, check=False)
    assert refused.returncode != 0 and refused.stderr.strip() == f"dispatch: error: job {busy} is cancelled; cannot hold it"
    assert cli.run("release", "--name", "later").stdout.strip() == f"{held}: released"
    cli.wait_for(lambda: cli.show(held)["state"] == "succeeded", what="the released job to run")
    assert cli.show(held)["reason"] == ""
    assert cli.run("release", held, check=False).returncode != 0  # no longer pending


def test_under_identity_only_the_owner_or_an_admin_holds_a_job(cli, lab):  # noqa: F811
    alice, bob, boss = (as_user(lab, u) for u in ("alice", "bob", "boss"))
    cli.run("submit", "--gpus", "2", "--", "sleep", "60", **alice)  # fills n1's two GPUs
    job = cli.run("submit", "--gpus", "1", "--", "true", **alice).stdout.strip()
    refused = cli.run("hold", job, check=False, **bob)
    assert refused.returncode != 0 and "belongs to alice" in refused.stderr and "Traceback" not in refused.stderr
    assert cli.run("hold", job, **alice).stdout.strip() == f"{job}: held"
    assert cli.show(job)["reason"] == f"held by alice (dispatch release {job})"
    assert cli.run("release", job, **boss).stdout.strip() == f"{job}: released"


def test_an_updated_priority_reorders_the_queue_and_an_update_is_checked_as_submit_is(cli):
    cli.start("worker", "--node", "a", "--fake-gpus", "1xA100-40GB")
    cli.start("scheduler")
    busy = cli.submit("--gpus", "1", "--", "sleep", "60")
    cli.wait_for(lambda: cli.show(busy)["state"] == "running", what="the GPU to be taken")
    first = cli.submit("--gpus", "1", "--priority", "normal", "--", "sleep", "60")
    later = cli.submit("--gpus", "1", "--priority", "low", "--est", "2h", "--", "true")
    said = cli.run("update", later, "--priority", "critical", "--est", "10m").stdout.strip()
    assert said == f"{later}: updated: priority low -> critical, est 2h -> 10m", said
    job = cli.show(later)
    assert (job["priority"], job["est_s"]) == ("critical", 600.0)
    for args, says in ((["--time", "5x"], "not a duration"), (["--priority", "urgent"], "unknown class"),
                       ([], "nothing to update")):
        p = cli.run("update", later, *args, check=False)
        assert p.returncode == 2 and says in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    refused = cli.run("update", busy, "--priority", "low", check=False)
    assert refused.returncode != 0 and f"job {busy} is running; cannot update it" in refused.stderr
    cli.run("cancel", busy)
    cli.wait_for(lambda: cli.show(later)["state"] == "succeeded", what="the now-critical job to run first")
    assert cli.show(first)["state"] in ("pending", "assigned", "running")
    assert (cli.show(first)["started_at"] or float("inf")) >= cli.show(later)["started_at"]


def test_under_identity_only_the_owner_or_an_admin_updates_a_job_and_it_still_runs(cli, lab):  # noqa: F811
    alice, bob = as_user(lab, "alice"), as_user(lab, "bob")
    hog = cli.run("submit", "--gpus", "2", "--", "sleep", "60", **alice).stdout.strip()
    job = cli.run("submit", "--gpus", "1", "--priority", "low", "--", "true", **alice).stdout.strip()
    refused = cli.run("update", job, "--priority", "high", check=False, **bob)
    assert refused.returncode != 0 and "belongs to alice" in refused.stderr
    assert "priority low -> high" in cli.run("update", job, "--priority", "high", **alice).stdout
    cli.run("cancel", hog, **alice)
    cli.wait_for(lambda: cli.show(job)["state"] == "succeeded", what="the updated job to pass its node's seal check")


def test_holding_an_array_whose_first_element_runs_holds_the_rest_and_says_which_could_not(cli):
    cli.start("worker", "--node", "a", "--fake-gpus", "1xA100-40GB")
    cli.start("scheduler")
    array = cli.submit("--array", "0-3", "--gpus", "1", "--", "sleep", "60")
    cli.wait_for(lambda: cli.show(f"{array}_0")["state"] == "running", what="element 0 to run")
    held = cli.run("hold", array, check=False)
    assert held.returncode != 0, "one element refused: the command says so in its exit status"
    assert held.stderr.strip() == f"dispatch: error: job {array}_0 is running; cannot hold it " \
                                  "(only a pending job can be held; `dispatch preempt` sends it back to the queue)"
    rest = [str(int(array) + k) for k in (1, 2, 3)]
    assert held.stdout.split("\n")[:3] == [f"{array}_{k}: held" for k in (1, 2, 3)], held.stdout  # (as queue names them)
    cli.wait_for(lambda: all(cli.show(j)["reason"].startswith("held by ") for j in rest), what="the held reasons")
    assert cli.run("release", array, check=False).stdout.split("\n")[:3] == [f"{array}_{k}: released" for k in (1, 2, 3)]


def test_a_job_submitted_held_waits_on_a_free_gpu_until_released_as_sbatch_hold(cli):
    cli.start("worker", "--node", "a", "--fake-gpus", "2xA100-40GB")
    cli.start("scheduler")
    held = cli.submit("--hold", "--gpus", "1", "--", "true")
    array = cli.submit("-H", "--array", "0-1", "--gpus", "1", "--", "true")
    time.sleep(3)  # many scheduling cycles with both GPUs free
    job = cli.show(held)
    assert job["state"] == "pending" and job["hold"] == cli.show(array)["user"], job
    assert job["reason"] == f"held by {job['user']} (dispatch release {held})", job
    assert cli.show(f"{array}_1")["reason"].endswith(f"(dispatch release {array}_1)")
    assert cli.run("hold", held).stdout.strip() == f"{held}: already held"
    assert cli.run("release", held, array).stdout.split("\n")[0] == f"{held}: released"
    for name in (held, f"{array}_0", f"{array}_1"):
        cli.wait_for(lambda: cli.show(name)["state"] == "succeeded", what=f"released job {name} to run")


def test_under_identity_a_job_submitted_held_is_held_by_its_owner(cli, lab):  # noqa: F811
    alice, bob = as_user(lab, "alice"), as_user(lab, "bob")
    job = cli.run("submit", "--hold", "--gpus", "1", "--", "true", **alice).stdout.strip()
    assert cli.show(job)["reason"] == f"held by alice (dispatch release {job})"
    assert cli.run("release", job, check=False, **bob).returncode != 0
    assert cli.run("release", job, **alice).stdout.strip() == f"{job}: released"
    cli.wait_for(lambda: cli.show(job)["state"] == "succeeded", what="the released job to run")


def test_a_held_arrays_queue_line_names_the_array_to_release_and_every_class_of_its_elements(cli):
    array = cli.submit("--hold", "--array", "0-2", "--", "true")  # no node: they stay pending
    cli.run("update", f"{array}_1", "--priority", "high")
    line = cli.run("queue").stdout.splitlines()[1]
    assert f"(dispatch release {array})" in line and f"release {array}_0" not in line, line
    assert " normal|high " in line, line
    cli.run("release", f"{array}_2")  # one element released: each element's own release is named again
    assert f"(dispatch release {array}_0)" in cli.run("queue").stdout


def test_a_pending_jobs_time_limit_is_cleared_with_slurms_unlimited(cli):
    job = cli.submit("--time", "1h", "--", "true")  # no node: it stays pending
    said = cli.run("update", job, "--time", "UNLIMITED").stdout.strip()
    assert said.startswith(f"{job}: updated: ") and cli.show(job)["time_limit_s"] is None, said
    assert cli.show(cli.submit("-t", "unlimited", "--", "true"))["time_limit_s"] is None
