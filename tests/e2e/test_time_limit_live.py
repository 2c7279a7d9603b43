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
