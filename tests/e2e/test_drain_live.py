"""`dispatch drain NODE` and `dispatch resume NODE` against real agents and a real scheduler: a drained
node finishes what it runs and takes no new job, `dispatch why` names the drain, the mark outlives the
agent's and the scheduler's restarts, and resume puts the node back to work."""

from __future__ import annotations

import json

import pytest

from dispatcher.store import keys
from dispatcher.store.jobs import read_job

from .test_fencing_live import two_nodes
from .ticking import FAST, wait_running
from .test_identity_live import as_user, lab  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

#: A job that runs until the test creates $OUT/go-<its id>.
HELD = 'while [ ! -e "$OUT/go-$DISPATCH_JOB_ID" ]; do sleep 0.1; done'


def held_job(cli, out) -> str:
    return cli.submit("--gpus", "1", "--env", f"OUT={out}", "--", "sh", "-c", HELD)


def let_go(out, job: str) -> None:
    (out / f"go-{job}").touch()


def cycles(client, ns: str) -> int:
    return int(client.hget(keys.scheduler_stats(ns), "cycles") or 0)


def stays_pending(cli, client, job: str, n: int = 3) -> None:
    """The job is still pending after `n` more scheduler cycles."""
    start = cycles(client, cli.ns)
    cli.wait_for(lambda: cycles(client, cli.ns) >= start + n, what=f"{n} scheduler cycles")
    assert read_job(client, cli.ns, job)["state"] == "pending"


def node_states(cli) -> dict:
    nodes = json.loads(cli.run("nodes", "--json").stdout)
    return {n["name"]: (n["state"], (n["drain"] or {}).get("reason")) for n in nodes}


def test_a_drained_node_finishes_its_job_takes_no_new_one_and_works_again_once_resumed(cli, client, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    two_nodes(cli, tmp_path, FAST)
    cli.start("scheduler", **FAST)
    first = held_job(cli, out)
    busy = wait_running(cli, client, first)["node"]
    other = "b" if busy == "a" else "a"

    said = cli.run("drain", busy, "--reason", "disk swap").stdout
    assert f"{busy}: draining: 1 job still running there; no new job starts there" in said
    assert node_states(cli) == {busy: ("draining", "disk swap"), other: ("up", None)}
    assert f"{busy} drained by " in cli.run("nodes").stdout

    second = held_job(cli, out)
    assert wait_running(cli, client, second)["node"] == other  # new work goes only to the other node
    third = held_job(cli, out)  # both nodes taken: one drained, one busy
    stays_pending(cli, client, third)
    why = cli.run("why", third).stdout
    assert f"{busy} is draining: disk swap" in why, why

    let_go(out, first)  # the drained node's job ends as it would have
    cli.wait_for(lambda: read_job(client, cli.ns, first)["state"] == "succeeded", what="the first job to succeed")
    cli.wait_for(lambda: node_states(cli)[busy] == ("drained", "disk swap"), what=f"{busy} to show drained, idle")
    stays_pending(cli, client, third)  # its GPU is free, and still nothing starts there

    assert cli.run("resume", busy).stdout.startswith(f"{busy}: resumed; it takes new jobs again")
    assert wait_running(cli, client, third)["node"] == busy
    assert node_states(cli)[busy] == ("up", None)
    for job in (second, third):
        let_go(out, job)
    for job in (second, third):
        cli.wait_for(lambda: read_job(client, cli.ns, job)["state"] == "succeeded", what=f"job {job} to succeed")


def test_a_drained_node_takes_no_job_through_agent_and_scheduler_restarts(cli, client, tmp_path):
    worker = ("worker", "--node", "n1", "--fake-gpus", "1xA100-40GB", "--work-dir", str(tmp_path / "n1"))
    agent = cli.start(*worker, **FAST)
    scheduler = cli.start("scheduler", **FAST)
    cli.wait_for(lambda: client.zscore(keys.nodes_heartbeat(cli.ns), "n1"), what="the agent to register")

    unknown = cli.run("drain", "n9", check=False)
    assert unknown.returncode == 4 and unknown.stderr.strip() == "dispatch: error: no node 'n9'; known nodes: n1"
    assert cli.run("resume", "n1").stdout.strip() == "n1: not drained; nothing to resume"
    empty = cli.run("drain", "n1", "--reason", " ", check=False)  # (--reason "$WHY", WHY unset): nothing drained
    assert (empty.returncode, empty.stderr) == (2, "dispatch: error: --reason: empty; say why, or leave --reason out\n")
    assert cli.run("drain", "n1").stdout.startswith("n1: drained: idle; no new job starts there")
    again = cli.run("drain", "n1", "--reason", "bad fan").stdout
    assert again.startswith("n1: already drained (was: n1 drained by ")
    assert again.strip().endswith("reason now: bad fan")

    job = cli.submit("--gpus", "1", "--", "true")
    stays_pending(cli, client, job)
    assert "n1 is drained: bad fan" in cli.run("why", job).stdout

    for proc in (agent, scheduler):  # the mark is Redis's, not theirs
        proc.terminate()
        proc.wait(timeout=30)
    cli.start(*worker, **FAST)
    cli.start("scheduler", **FAST)
    cli.wait_for(lambda: node_states(cli).get("n1") == ("drained", "bad fan"), what="the new agent's heartbeat")
    stays_pending(cli, client, job)

    cli.run("resume", "n1")
    cli.wait_for(lambda: read_job(client, cli.ns, job)["state"] == "succeeded", what="the job to run after resume")


def test_with_identity_on_only_an_admin_drains_or_resumes(cli, lab, client):  # noqa: F811 (lab: a fixture)
    cli.wait_for(lambda: client.zscore(keys.nodes_heartbeat(cli.ns), "n1"), what="the agent to register")
    refused = cli.run("drain", "n1", "--reason", "mine now", check=False, **as_user(lab, "bob"))
    assert refused.returncode != 0 and "only an admin may drain a node; 'bob' is none" in refused.stderr
    assert "Traceback" not in refused.stderr and client.hlen(keys.nodes_drain(cli.ns)) == 0

    said = cli.run("drain", "n1", "--reason", "reboot", **as_user(lab, "boss")).stdout
    assert said.startswith("n1: drained: idle")
    assert json.loads(cli.run("nodes", "--json").stdout)[0]["drain"]["by"] == "boss"
    assert cli.run("resume", "n1", check=False, **as_user(lab, "bob")).returncode != 0
    assert "n1: resumed" in cli.run("resume", "n1", **as_user(lab, "boss")).stdout
    assert client.hlen(keys.nodes_drain(cli.ns)) == 0
