"""`dispatch submit --time` end to end (Slurm's --time): a real agent (--fake-gpus) and scheduler. At the
limit the job gets its checkpoint signal; its --grace later what is left is killed (Slurm's KillWait);
either way the job fails, once, with the time limit as its reason. A job well within its limit is
untouched."""

import pytest

from dispatcher.store.jobs import read_job
from dispatcher.store.nodes import read_nodes

from .test_gangs_live import FAST, start_hosts

pytestmark = pytest.mark.slow

#: Says it started, then sleeps; {trap} decides what the checkpoint signal does to it.
SLEEPER = '{trap}; echo started; sleep 60 & wait'


def final(cli, client, job_id: str) -> dict:
    cli.wait_for(lambda: read_job(client, cli.ns, job_id)["state"] in ("succeeded", "failed", "cancelled"),
                 timeout=30, what=f"job {job_id} to end")
    return read_job(client, cli.ns, job_id)


def ran_s(job: dict) -> float:
    (attempt,) = job["attempts"]
    return attempt["ended_at"] - attempt["started_at"]


def test_a_job_gets_its_checkpoint_signal_at_the_limit_and_is_killed_its_grace_later(cli, client):
    cli.start("worker", "--node", "n1", "--fake-gpus", "4xA100-40GB", **FAST)
    cli.start("scheduler", **FAST)
    limited = ("--gpus", "1", "--time", "3s", "--grace", "1s", "--", "sh", "-c")
    quits = cli.submit(*limited, SLEEPER.format(trap='trap "echo got TERM; exit 3" TERM'))
    stays = cli.submit(*limited, SLEEPER.format(trap='trap "" TERM'))
    within = cli.submit("--gpus", "1", "--time", "10s", "--grace", "1s", "--", "sh", "-c", "sleep 0.5; echo done")

    j = final(cli, client, quits)  # TERM at 3 s, the limit: it leaves with its own exit code
    assert (j["state"], j["exit_code"]) == ("failed", 3), j
    assert j["reason"] == "time limit 3s reached (--time); stopped (exit code 3)", j
    assert 2.8 <= ran_s(j) < 3.9, j["attempts"]
    assert "got TERM" in cli.run("logs", quits).stdout
    assert j["attempts"][0]["outcome"] == "failed" and "--time" in j["attempts"][0]["reason"], j["attempts"]
    assert j["time_limit_s"] == 3.0 and j["attempt"] == 0 and j["lost"] == 0

    j = final(cli, client, stays)  # ignores TERM: SIGKILL its grace (1 s) after the limit, not requeued
    assert (j["state"], j["exit_code"]) == ("failed", -9), j
    assert j["reason"] == "time limit 3s reached (--time); stopped (killed by SIGKILL)", j
    assert 3.8 <= ran_s(j) < 5.5, j["attempts"]
    assert len(j["attempts"]) == 1

    j = final(cli, client, within)
    assert (j["state"], j["reason"]) == ("succeeded", ""), j
    assert "done" in cli.run("logs", within).stdout

    queue = cli.run("queue", "--all").stdout
    assert queue.count("time limit 3s reached (--time)") == 2, queue
    shown = cli.run("show", stays).stdout
    assert "time limit 3s reached (--time); stopped (killed by SIGKILL)" in shown and "time_limit_s: 3.0" in shown
    assert {n.name: n.alloc for n in read_nodes(client, cli.ns)[0]} == {"n1": {}}


def test_every_rank_of_a_gang_is_stopped_at_its_time_limit_and_the_gang_fails_once(cli, client, tmp_path):
    start_hosts(cli, client)
    cli.start("scheduler", **FAST)
    job = cli.submit("--nodes", "2", "--gpus-per-node", "1", "--time", "3s", "--grace", "1s", "--env",
                     f"OUT={tmp_path}", "--", "sh", "-c",
                     SLEEPER.format(trap='trap "echo $NODE_RANK >> $OUT/stopped; exit 0" TERM'))
    j = final(cli, client, job)
    assert j["state"] == "failed" and j["reason"].startswith("time limit 3s reached (--time); stopped"), j
    assert len(j["attempts"]) == 1 and j["lost"] == 0, j["attempts"]
    assert sorted((tmp_path / "stopped").read_text().split()) == ["0", "1"]  # each rank had its signal
    assert {n.name: n.alloc for n in read_nodes(client, cli.ns)[0]} == {"h1": {}, "h2": {}}


def test_a_running_jobs_time_limit_can_be_cut_or_lengthened_and_its_node_keeps_to_the_new_one(cli, client):
    """scontrol update TimeLimit= on a running job: `dispatch update --time` moves the limit its node
    counts from the job's start: cut below what it has run, the job is stopped now (TIMEOUT); lengthened,
    it runs past its old limit and succeeds. Only --time changes while it runs."""
    cli.start("worker", "--node", "n1", "--fake-gpus", "2xA100-40GB", **FAST)
    cli.start("scheduler", **FAST)
    cut = cli.submit("--gpus", "1", "--time", "10m", "--grace", "1s", "--", "sh", "-c",
                     SLEEPER.format(trap='trap "exit 0" TERM'))
    lengthened = cli.submit("--gpus", "1", "--time", "3s", "--", "sh", "-c", "sleep 5; echo done")
    for job in (cut, lengthened):
        cli.wait_for(lambda: read_job(client, cli.ns, job)["state"] == "running", what=f"job {job} to run")
    assert cli.run("update", lengthened, "--time", "1h").stdout == f"{lengthened}: updated: time 3s -> 1h\n"
    refused = cli.run("update", cut, "--time", "1s", "--priority", "high", check=False)
    assert refused.returncode != 0 and "a running job's --time can be changed" in refused.stderr, refused.stderr
    assert cli.run("update", cut, "--time", "1s").stdout == f"{cut}: updated: time 10m -> 1s\n"

    j = final(cli, client, cut)
    assert (j["state"], j["reason"]) == ("failed", "time limit 1s reached (--time); stopped (exit code 0)"), j
    assert ran_s(j) < 8, j["attempts"]
    j = final(cli, client, lengthened)
    assert (j["state"], j["time_limit_s"], j["epoch"]) == ("succeeded", 3600.0, 1), j
    assert "done" in cli.run("logs", lengthened).stdout
