"""The seed document's acceptance scenario, end to end in separate processes.

Four GPUs on one node: 0,1 A100-40GB and 2,3 V100-16GB. JOB-004 (critical),
JOB-001 (high) and JOB-003 (normal, V100) start in the first cycle on the right
GPU types; JOB-002 (low, 2xA100) starts only once both A100s are free.
"""

import pytest

from dispatcher.store.connect import connect

pytestmark = pytest.mark.slow


def test_seed_scenario_runs_every_job_that_fits_in_the_first_cycle(cli):
    cli.start("worker", "--node", "gpu-box", "--fake-gpus", "2xA100-40GB,2xV100-16GB", "--cpus", "8")
    cli.wait_for(lambda: "gpu-box" in cli.run("nodes").stdout, what="the node to register")

    jobs = {
        "JOB-001": cli.submit("--name", "JOB-001", "--priority", "high", "--gpus", "1", "--gpu-type", "A100",
                              "--gpu-mem", "20", "--est", "15s", "--", "sleep", "1.5"),
        "JOB-002": cli.submit("--name", "JOB-002", "--priority", "low", "--gpus", "2", "--gpu-type", "A100",
                              "--gpu-mem", "30", "--est", "60s", "--", "sleep", "0.5"),
        "JOB-003": cli.submit("--name", "JOB-003", "--priority", "medium", "--gpus", "1", "--gpu-type", "V100",
                              "--gpu-mem", "10", "--est", "30s", "--", "sleep", "0.5"),
        "JOB-004": cli.submit("--name", "JOB-004", "--priority", "critical", "--gpus", "1", "--gpu-type", "A100",
                              "--gpu-mem", "15", "--est", "10s", "--", "sleep", "1"),
    }
    cli.start("scheduler")  # all four are pending before the first cycle

    assert cli.run("wait", *jobs.values(), "--timeout", "60").returncode == 0
    shown = {name: cli.show(job_id) for name, job_id in jobs.items()}
    assert all(j["state"] == "succeeded" for j in shown.values()), {n: j["state"] for n, j in shown.items()}

    first = {n for n, j in shown.items() if j["assigned_at"] == min(x["assigned_at"] for x in shown.values())}
    assert first == {"JOB-001", "JOB-003", "JOB-004"}, f"started in the first cycle: {sorted(first)}"
    a100s, v100s = {0, 1}, {2, 3}
    assert set(shown["JOB-004"]["gpus"]) <= a100s and set(shown["JOB-001"]["gpus"]) <= a100s
    assert set(shown["JOB-004"]["gpus"]) != set(shown["JOB-001"]["gpus"])
    assert set(shown["JOB-003"]["gpus"]) <= v100s
    assert set(shown["JOB-002"]["gpus"]) == a100s
    both_free = max(shown["JOB-001"]["finished_at"], shown["JOB-004"]["finished_at"])
    assert shown["JOB-002"]["started_at"] >= both_free, (
        f"JOB-002 started at {shown['JOB-002']['started_at']}, A100s both free at {both_free}")


def test_a_job_sees_its_gpus_and_identity_in_its_environment(cli):
    cli.start("worker", "--node", "n1", "--fake-gpus", "2xA100-40GB")
    cli.start("scheduler")
    job = cli.submit("--gpus", "2", "--", "sh", "-c",
                     "echo gpus=$CUDA_VISIBLE_DEVICES id=$DISPATCH_JOB_ID node=$DISPATCH_NODE "
                     "attempt=$DISPATCH_ATTEMPT ckpt=${DISPATCH_CHECKPOINT_DIR:+set}")
    assert cli.run("wait", job, "--timeout", "30").returncode == 0
    out = cli.run("logs", job).stdout
    assert f"gpus=0,1 id={job} node=n1 attempt=0 ckpt=set" in out, out


def test_a_job_no_node_can_hold_stays_pending_with_its_reason_and_blocks_no_one(cli):
    cli.start("worker", "--node", "n1", "--fake-gpus", "1xA100-40GB")
    cli.start("scheduler")
    too_big = cli.submit("--gpus", "2", "--gpu-type", "A100", "--", "true")
    small = cli.submit("--gpus", "1", "--", "true")
    assert cli.run("wait", small, "--timeout", "30").returncode == 0
    job = cli.wait_for(lambda: (j := cli.show(too_big))["reason"] and j, what="a reason on the blocked job")
    assert job["state"] == "pending"
    assert "no live node could ever hold it" in job["reason"] and "1 matching GPUs" in job["reason"], job["reason"]
    assert "no live node could ever hold it" in cli.run("queue").stdout


def test_failed_and_cancelled_jobs_report_their_outcome(cli):
    cli.start("worker", "--node", "n1", "--fake-gpus", "1xA100-40GB")
    cli.start("scheduler")
    failing = cli.submit("--", "sh", "-c", "echo oops; exit 7")
    missing = cli.submit("--", "no-such-program-xyz")
    long = cli.submit("--gpus", "1", "--grace", "5s", "--", "sh", "-c", "trap 'echo bye; exit 0' TERM; sleep 60 & wait")
    assert cli.run("wait", failing, missing, "--timeout", "30", check=False).returncode == 1
    assert cli.show(failing)["exit_code"] == 7 and cli.show(failing)["reason"] == "exit code 7"
    assert cli.show(missing)["state"] == "failed" and "cannot start" in cli.show(missing)["reason"]
    cli.wait_for(lambda: cli.show(long)["state"] == "running", what="the long job to run")
    assert "cancel sent" in cli.run("cancel", long).stdout
    assert cli.run("wait", long, "--timeout", "30", check=False).returncode == 1
    shown = cli.show(long)
    assert shown["state"] == "cancelled" and shown["gpus"] == [0]
    assert "bye" in cli.run("logs", long).stdout  # it got SIGTERM, not SIGKILL
    pending = cli.submit("--gpus", "4", "--", "true")  # never fits: cancelled straight from the queue
    assert cli.run("cancel", pending).stdout.strip() == f"{pending}: cancelled"
    assert cli.show(pending)["state"] == "cancelled"


def test_submit_warns_of_a_request_no_registered_node_could_hold_and_still_queues_it(cli):
    quiet = cli.run("submit", "--gpus", "9", "--", "true")  # no node registered yet: nothing to judge by
    assert quiet.stderr == ""
    cli.start("worker", "--node", "n1", "--fake-gpus", "2xA100-40GB")
    cli.wait_for(lambda: cli.run("nodes", "--json").stdout.strip() not in ("", "[]"), what="the node to register")
    ok = cli.run("submit", "--gpus", "2", "--gpu-type", "A100", "--", "true")
    assert ok.stderr == "" and ok.stdout.strip().isdigit()
    for args, says in ((["--gpus", "1", "--gpu-type", "H100"], "no registered node could ever hold it"),
                       (["--gpus", "1", "--gpu-mem", "80"], "no registered node could ever hold it"),
                       (["--array", "0-9", "--gpus", "4", "--gpu-type", "V100"], "array ")):
        p = cli.run("submit", *args, "--", "true")
        job = p.stdout.strip()
        assert job.isdigit(), p.stderr
        assert p.stderr.startswith("dispatch: warning: ") and says in p.stderr and len(p.stderr.splitlines()) == 1
        assert "stays queued" in p.stderr and cli.show(job)["state"] == "pending"


def test_a_submit_to_a_namespace_where_nothing_runs_beside_the_default_ones_scheduler_is_warned(cli, own_server):
    env = {"DISPATCH_REDIS_URL": own_server.url}
    cli.start("scheduler", DISPATCH_NAMESPACE="dispatch", **env)
    cli.wait_for(lambda: cli.run("nodes", DISPATCH_NAMESPACE="dispatch", **env).returncode == 0 and
                 connect(own_server.url).exists("dispatch:scheduler:leader"), what="the default namespace's scheduler")
    p = cli.run("submit", "--", "true", DISPATCH_NAMESPACE="dispatch-typo", **env)
    assert p.stdout.strip() == "1" and p.stderr == (
        "dispatch: warning: nothing runs jobs in namespace 'dispatch-typo' (no scheduler, no node; one runs in "
        "'dispatch'): it waits until one starts; is --namespace (or DISPATCH_NAMESPACE) the cluster's?\n"), p
    assert cli.run("submit", "--", "true", DISPATCH_NAMESPACE="dispatch", **env).stderr == ""  # up just started
