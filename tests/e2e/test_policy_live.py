"""The policy's must-show behaviours, live: real scheduler and worker processes on fake GPUs."""

import json
import time

import pytest

pytestmark = pytest.mark.slow


def running_by_user(cli):
    counts = {}
    for j in json.loads(cli.run("queue", "--json").stdout):
        if j["state"] in ("assigned", "running"):
            counts[j["user"]] = counts.get(j["user"], 0) + 1
    return counts


def test_drf_gives_a_gpu_heavy_and_a_cpu_heavy_user_equal_dominant_shares(cli):
    cli.start("worker", "--node", "big", "--fake-gpus", "8xA100-80GB", "--cpus", "32", "--mem", "512")
    cli.wait_for(lambda: "big" in cli.run("nodes").stdout, what="the node")
    # all submitted before the scheduler starts; submit order alone would give the GPU-heavy user everything
    for _ in range(8):
        cli.submit("--user", "gpuheavy", "--gpus", "2", "--cpus", "2", "--", "sleep", "30")
    for _ in range(8):
        cli.submit("--user", "cpuheavy", "--gpus", "1", "--cpus", "8", "--", "sleep", "30")
    cli.start("scheduler")
    counts = cli.wait_for(lambda: (c := running_by_user(cli)) and sum(c.values()) >= 5 and c,
                          what="the first cycle's placements")
    time.sleep(1.5)  # a few more cycles: nothing else fits, so the counts must stay put
    counts = running_by_user(cli)
    # dominant share per job: 2/8 GPUs = 0.25 for gpuheavy, 8/32 CPUs = 0.25 for cpuheavy
    assert abs(counts.get("gpuheavy", 0) - counts.get("cpuheavy", 0)) <= 1, counts
    assert min(counts.values()) >= 2, counts


def test_a_two_gpu_job_is_not_starved_by_a_stream_of_one_gpu_jobs(cli):
    cli.start("worker", "--node", "pair", "--fake-gpus", "2xA100-40GB")
    cli.start("scheduler")
    cli.wait_for(lambda: "pair" in cli.run("nodes").stdout, what="the node")
    first = [cli.submit("--gpus", "1", "--", "sleep", "1.5") for _ in range(2)]
    cli.wait_for(lambda: all(cli.show(j)["state"] == "running" for j in first), what="the node to fill")
    big = cli.submit("--name", "big", "--gpus", "2", "--", "sleep", "0.5")
    stream = []
    for _ in range(8):  # a steady stream: always a 1-GPU job waiting when a GPU frees
        stream.append(cli.submit("--gpus", "1", "--", "sleep", "1.5"))
        time.sleep(0.25)
    assert cli.run("wait", big, *stream, "--timeout", "90").returncode == 0
    big_started = cli.show(big)["started_at"]
    later = [cli.show(j)["started_at"] for j in stream]
    assert big_started < min(later), f"2-GPU job started at {big_started}, stream jobs from {min(later)}"
    why = [d for d in json.loads(cli.run("decisions", "--json").stdout) if d["job"] == big]
    assert why and why[0]["gpus"] == [0, 1]


def test_the_critical_job_gets_the_only_a100_and_why_explains_the_unschedulable_one(cli):
    cli.start("worker", "--node", "solo", "--fake-gpus", "1xA100-40GB,1xV100-16GB")
    cli.wait_for(lambda: "solo" in cli.run("nodes").stdout, what="the node")
    high = cli.submit("--priority", "high", "--gpus", "1", "--gpu-type", "A100", "--", "sleep", "1")
    crit = cli.submit("--priority", "critical", "--gpus", "1", "--gpu-type", "A100", "--", "sleep", "1")
    two = cli.submit("--gpus", "2", "--gpu-type", "A100", "--", "true")
    other = cli.submit("--gpus", "1", "--gpu-type", "V100", "--", "true")
    cli.start("scheduler")
    assert cli.run("wait", high, crit, other, "--timeout", "60").returncode == 0
    assert cli.show(crit)["started_at"] < cli.show(high)["started_at"]
    why = cli.run("why", two).stdout
    assert "no_fit_ever" in why and "no live node could ever hold it" in why and "1 matching GPUs" in why, why
    out = json.loads(cli.run("why", two, "--json").stdout)
    assert out["outcome"]["code"] == "no_fit_ever" and out["job"]["state"] == "pending"


def test_why_gives_score_terms_rank_and_the_decision_that_started_a_job(cli):
    cli.start("worker", "--node", "n1", "--fake-gpus", "1xA100-40GB")
    cli.start("scheduler")
    hog = cli.submit("--gpus", "1", "--", "sleep", "30")
    cli.wait_for(lambda: cli.show(hog)["state"] == "running", what="the hog to run")
    waiting = cli.submit("--priority", "high", "--gpus", "1", "--est", "5m", "--", "true")
    out = json.loads(cli.run("why", waiting, "--fresh", "--json").stdout)  # the policy run now
    o = out["outcome"]
    assert out["fresh"] and o["code"] == "no_fit_now" and o["rank"] == 1
    assert set(o["terms"]) >= {"priority", "wait", "remaining"}
    assert "best node n1 has 0 of 1 matching GPUs free" in o["reason"], o["reason"]

    def recorded():  # what the scheduler wrote at its last cycle, once a full cycle judged the job
        out = json.loads(cli.run("why", waiting, "--json").stdout)
        return out if out["outcome"]["code"] == "no_fit_now" else None
    out = cli.wait_for(recorded, what="the scheduler's recorded verdict")
    o = out["outcome"]
    assert not out["fresh"] and o["rank"] == 1 and set(o["terms"]) >= {"priority", "wait", "remaining"}
    assert "best node n1 has 0 of 1 matching GPUs free" in o["reason"] and out["as_of"]["stale"] is False
    text = cli.run("why", waiting).stdout
    assert "score" in text and "rank 1 when judged at " in text and "; 1 ranked now" in text, text
    assert "as of the scheduler's last cycle" in text, text
    text = cli.run("why", hog).stdout
    assert "running on n1" in text and "decision" in text and "best fit on n1" in text, text
    cli.run("cancel", hog, waiting)


def test_the_scheduler_picks_up_a_changed_policy_file_without_a_restart(cli, tmp_path):
    policy = tmp_path / "policy.toml"
    policy.write_text('[profiles.default]\nweights = { priority = 1.0, wait = 0.12 }\n')
    cli.start("scheduler", "--policy", str(policy))
    shown = lambda: json.loads(cli.run("policy", "show", "--json").stdout)  # noqa: E731
    cli.wait_for(lambda: shown()["settings"]["weights"]["wait"] == 0.12, what="the first policy")
    time.sleep(0.05)
    policy.write_text('[profiles.default]\nweights = { priority = 1.0, wait = 0.3 }\n')
    cli.wait_for(lambda: shown()["settings"]["weights"]["wait"] == 0.3, what="the changed policy")
    policy.write_text('[profiles.default]\nweights = { wiat = 0.3 }\n')  # a bad edit keeps the last good one
    time.sleep(2.5)
    assert shown()["settings"]["weights"]["wait"] == 0.3
    assert cli.procs[0].poll() is None


def test_a_team_at_its_limit_waits_while_other_teams_run(cli, tmp_path):
    policy = tmp_path / "policy.toml"
    policy.write_text("[teams.vision]\nlimit_gpus = 1\n")
    cli.start("worker", "--node", "n1", "--fake-gpus", "4xA100-40GB")
    cli.start("scheduler", "--policy", str(policy))
    a = cli.submit("--team", "vision", "--gpus", "1", "--", "sleep", "30")
    b = cli.submit("--team", "vision", "--gpus", "1", "--", "true")
    c = cli.submit("--team", "nlp", "--gpus", "2", "--", "true")
    assert cli.run("wait", c, "--timeout", "30").returncode == 0
    cli.wait_for(lambda: cli.show(a)["state"] == "running", what="the first vision job")
    out = json.loads(cli.run("why", b, "--json").stdout)
    assert out["outcome"]["code"] == "over_limit" and "limit of 1 GPUs" in out["outcome"]["reason"], out
    p = cli.run("submit", "--team", "vision", "--gpus", "2", "--", "true")  # never under this limit: said at once
    assert p.stderr == (f"dispatch: warning: job {p.stdout.strip()} asks 2 GPUs; team vision may hold 1 at most (the "
                        "policy's limit_gpus): it waits until the limit is raised\n"), p.stderr
    assert cli.run("submit", "--team", "vision", "--gpus", "1", "--", "true").stderr == ""
    cli.run("cancel", a, b)


def test_sharing_jobs_run_together_on_one_gpu(cli):
    cli.start("worker", "--node", "n1", "--fake-gpus", "1xA100-40GB")
    cli.start("scheduler")
    jobs = [cli.submit("--share", "--gpus", "1", "--gpu-mem", "15", "--", "sh", "-c",
                       "echo gpu=$CUDA_VISIBLE_DEVICES; sleep 4") for _ in range(3)]

    def states():
        return sorted(j["state"] for j in json.loads(cli.run("queue", "--json").stdout))

    # one read of the queue: two sharers run, the third waits (3 x 15 GB > 40 GB)
    cli.wait_for(lambda: states() == ["pending", "running", "running"], what="two sharers running, one waiting")
    assert cli.run("wait", *jobs, "--timeout", "30").returncode == 0
    assert all("gpu=0" in cli.run("logs", j).stdout for j in jobs)


def test_the_interactive_lane_keeps_gpus_free_for_high_work(cli, tmp_path):
    policy = tmp_path / "policy.toml"
    policy.write_text("[defaults]\nreserve = { high = 1 }\n")
    cli.start("worker", "--node", "a", "--fake-gpus", "2xA100-40GB")
    cli.start("scheduler", "--policy", str(policy))
    one = cli.submit("--gpus", "1", "--priority", "normal", "--", "sleep", "60")
    cli.wait_for(lambda: cli.show(one)["state"] == "running", what="a one-GPU job beside the lane")
    batch = cli.submit("--gpus", "1", "--priority", "low", "--", "sleep", "60")  # would fit on the GPU left
    job = cli.wait_for(lambda: (j := cli.show(batch))["reason"] and j, what="the batch job's reason")
    assert job["state"] == "pending" and "kept for high work" in job["reason"], job["reason"]
    shell = cli.submit("--gpus", "1", "--priority", "high", "--", "true")
    assert cli.run("wait", shell, "--timeout", "20").returncode == 0, "high work takes the lane at once"
