"""Hostile index entries under live processes (store/quarantine.py): a `dispatch scheduler` that meets
them keeps running and keeps scheduling; before, one +inf score made every scheduler exit at its first
cycle, and a pending index of the wrong type stopped all scheduling and every submit."""

import math

import pytest

from dispatcher.store import keys
from dispatcher.store.jobs import read_job

pytestmark = pytest.mark.slow


def state(client, ns, job_id) -> str:
    return read_job(client, ns, job_id)["state"]


def test_a_scheduler_that_meets_an_infinite_score_keeps_scheduling(cli, client):
    cli.start("worker", "--node", "n1", "--fake-gpus", "1xA100-40GB")
    first = cli.submit("--gpus", "1", "--", "sleep", "1")
    second = cli.submit("--gpus", "1", "--", "true")
    client.zadd(keys.jobs_pending(cli.ns), {second: math.inf, "ghost": math.inf})  # before any scheduler reads them
    sched = cli.start("scheduler")
    cli.wait_for(lambda: state(client, cli.ns, first) == "succeeded", timeout=30, what="the first job")
    cli.wait_for(lambda: state(client, cli.ns, second) == "succeeded", timeout=30, what="the +inf job")
    third = cli.submit("--", "true")
    cli.wait_for(lambda: state(client, cli.ns, third) == "succeeded", timeout=30, what="a job submitted after")
    assert sched.poll() is None, "the scheduler exited"
    assert "2 entries quarantined (`dispatch quarantine` lists them" in cli.run("queue").stdout
    listed = cli.run("quarantine").stdout.splitlines()
    assert listed[0].split() == ["TIME", "KEY", "MEMBER", "REASON", "NOW"] and len(listed) == 3, listed
    assert {line.split()[3] for line in listed[1:]} == {"ghost", second}, listed
    cleared = cli.run("quarantine", "--clear")
    assert "cleared 2 entries" in cleared.stderr
    assert "quarantined" not in cli.run("queue").stdout and cli.run("quarantine").stdout == "nothing quarantined\n"


def test_a_pending_index_of_the_wrong_type_is_set_aside_under_a_running_scheduler(cli, client):
    cli.start("worker", "--node", "n1", "--fake-gpus", "1xA100-40GB")
    sched = cli.start("scheduler")
    hog = cli.submit("--gpus", "1", "--", "sleep", "3")
    cli.wait_for(lambda: state(client, cli.ns, hog) == "running", timeout=30, what="the first job to run")
    waiting = cli.submit("--gpus", "1", "--", "true")
    client.delete(keys.jobs_pending(cli.ns))
    client.set(keys.jobs_pending(cli.ns), "x")  # DEL <ns>:jobs:pending; SET <ns>:jobs:pending x
    p = cli.run("queue", check=False)
    assert p.returncode == 0 and waiting in p.stdout.split(), p.stderr
    cli.wait_for(lambda: client.type(keys.jobs_pending(cli.ns)) != b"string", timeout=10,
                 what="the scheduler to set the index aside")
    cli.wait_for(lambda: state(client, cli.ns, waiting) == "succeeded", timeout=30, what="the waiting job")
    after = cli.submit("--", "true")
    cli.wait_for(lambda: state(client, cli.ns, after) == "succeeded", timeout=30, what="a job submitted after")
    assert sched.poll() is None, "the scheduler exited"
    assert client.keys(f"{keys.quarantine(cli.ns)}:jobs:pending:*")
