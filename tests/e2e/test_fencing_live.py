"""Nothing runs on two nodes at once and nothing finished runs again, when a node agent is stopped,
silently cut off from Redis, or killed (docs/guarantees.md; test_redis_down_live.py has the server
going away). Every attempt writes its own file of start, ticks and end (ticking.py); overlaps and
reruns are judged from those files."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from dispatcher.config import Timing
from dispatcher.store import keys
from dispatcher.store.connect import connect
from dispatcher.store.jobs import read_job

from ..conftest import Cli
from .linkproxy import LinkProxy
from .ticking import FAST, TICKING, attempts, overlaps, wait_running

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def two_nodes(cli, tmp_path, env, urls=None):
    agents = {}
    for n in ("a", "b"):
        agents[n] = cli.start("worker", "--node", n, "--fake-gpus", "1xA100-40GB", "--work-dir", str(tmp_path / n),
                              log_name=f"worker-{n}", **dict(env, **({"DISPATCH_REDIS_URL": urls[n]} if urls else {})))
    return agents


def ticking_job_on_two_nodes(cli, client, tmp_path, ticks: int, then: str = ""):
    """Agents a and b, a scheduler, and one ticking job (`then`: what its shell does after its ticks);
    returns (its attempts' dir, the agents, the job, its record once running), after its first tick."""
    out = tmp_path / "runs"
    out.mkdir()
    agents = two_nodes(cli, tmp_path, FAST)
    cli.start("scheduler", **FAST)
    job = cli.submit("--gpus", "1", "--env", f"OUT={out}", "--", "sh", "-c", TICKING.format(ticks=ticks) + then)
    first = wait_running(cli, client, job)
    cli.wait_for(lambda: attempts(out, job), what="the first attempt to tick")
    return out, agents, job, first


def test_a_stopped_agent_past_the_node_timeout_has_its_job_killed_before_it_runs_elsewhere(cli, client, tmp_path):
    out, agents, job, first = ticking_job_on_two_nodes(cli, client, tmp_path, ticks=60)
    stopped = agents[first["node"]]

    os.kill(stopped.pid, signal.SIGSTOP)  # a hung host, a long GC: the agent fences nothing itself
    try:
        cli.wait_for(lambda: len(attempts(out, job)) == 2, timeout=40, what="the job to start on the other node")
        time.sleep(2)
    finally:
        os.kill(stopped.pid, signal.SIGCONT)
    assert cli.run("wait", job, "--timeout", "60").returncode == 0, cli.show(job)

    runs = attempts(out, job)
    assert [r["node"] for r in runs] == [first["node"], ({"a", "b"} - {first["node"]}).pop()], runs
    assert overlaps(runs) == [], f"two copies ran at once: {runs}"
    assert [r["ended"] for r in runs] == [False, True], runs
    assert stopped.poll() is None, "the stopped agent should carry on once continued"
    shown = cli.show(job)
    assert "could not heartbeat in time" in shown["attempts"][0]["reason"] or "lost" in shown["attempts"][0]["reason"]


def test_a_silent_partition_kills_the_cut_off_copy_before_the_job_reruns(cli, client, tmp_path, redis_url):
    out = tmp_path / "runs"
    out.mkdir()
    port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    links = {n: LinkProxy(port) for n in ("a", "b")}
    try:
        two_nodes(cli, tmp_path, FAST, urls={n: p.url() for n, p in links.items()})
        cli.start("scheduler", **FAST)
        job = cli.submit("--gpus", "1", "--env", f"OUT={out}", "--", "sh", "-c", TICKING.format(ticks=60))
        first = wait_running(cli, client, job)
        cli.wait_for(lambda: attempts(out, job), what="the first attempt to tick")
        links[first["node"]].cut()  # packets dropped, nothing refused: calls hang until their timeout
        cli.wait_for(lambda: len(attempts(out, job)) == 2, timeout=40, what="the job to start on the other node")
        time.sleep(3)  # the cut lasts: a copy that was not killed keeps ticking beside the rerun
        links[first["node"]].heal()
        assert cli.run("wait", job, "--timeout", "60").returncode == 0, cli.show(job)
    finally:
        for p in links.values():
            p.close()
    runs = attempts(out, job)
    assert len(runs) == 2 and overlaps(runs) == [], f"two copies ran at once: {runs}"
    assert [r["ended"] for r in runs] == [False, True], runs


def test_a_clock_that_cannot_fence_in_time_is_refused_in_one_line(cli):
    p = cli.run("worker", "--node", "a", "--fake-gpus", "1xA100-40GB", check=False, timeout=30,
                DISPATCH_HEARTBEAT_S="1", DISPATCH_NODE_TIMEOUT_S="2")
    assert p.returncode != 0
    assert p.stderr.strip().count("\n") == 0 and "DISPATCH_NODE_TIMEOUT_S" in p.stderr, p.stderr


def _marked(ns: str, job_id: str) -> list[int]:
    """Live processes that carry the job's id in their environment."""
    found = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and f"DISPATCH_JOB_ID={job_id}".encode() in (d / "environ").read_bytes().split(b"\0") \
                    and f"DISPATCH_NAMESPACE={ns}".encode() in (d / "environ").read_bytes().split(b"\0") \
                    and (d / "stat").read_text().rpartition(")")[2].split()[0] not in "ZX":
                found.append(int(d.name))
        except OSError:
            continue
    return found


@pytest.mark.parametrize("cgroups", ["cgroups", "sessions"])
def test_a_job_ends_with_its_main_process_and_takes_its_leftovers_with_it(cli, client, tmp_path, cgroups):
    env = {"DISPATCH_NO_CGROUPS": "1"} if cgroups == "sessions" else {}
    cli.start("worker", "--node", "a", "--fake-gpus", "1xA100-40GB", **env)
    cli.start("scheduler")
    started = time.monotonic()
    job = cli.submit("--gpus", "1", "--", "sh", "-c", "sleep 300 & setsid sleep 301 & echo main done")
    assert cli.run("wait", job, "--timeout", "40").returncode == 0, cli.show(job)
    assert time.monotonic() - started < 30, "the job waited for its background children"
    cli.wait_for(lambda: not _marked(cli.ns, job), timeout=10, what="the job's leftovers to be killed")
    assert read_job(client, cli.ns, job)["state"] == "succeeded"


@pytest.mark.parametrize("cgroups", ["cgroups", "sessions"])
def test_cancel_reaches_a_process_that_left_the_jobs_session(cli, client, tmp_path, cgroups):
    env = {"DISPATCH_NO_CGROUPS": "1"} if cgroups == "sessions" else {}
    cli.start("worker", "--node", "a", "--fake-gpus", "1xA100-40GB", **env)
    cli.start("scheduler")
    pidfile = tmp_path / "escapee.pid"
    job = cli.submit("--gpus", "1", "--", "sh", "-c",
                     f"setsid sh -c 'echo $$ > {pidfile}; exec sleep 302' & sleep 303")
    wait_running(cli, client, job)
    cli.wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), what="the escapee to start")
    escapee = int(pidfile.read_text())
    assert os.getsid(escapee) != int(client.hget(keys.job(cli.ns, job), "pid")), "it left the job's session"
    cli.run("cancel", job)
    cli.wait_for(lambda: read_job(client, cli.ns, job)["state"] == "cancelled", what="the cancel")
    cli.wait_for(lambda: not Path(f"/proc/{escapee}").exists()
                 or Path(f"/proc/{escapee}/stat").read_text().rpartition(")")[2].split()[0] in "ZX",
                 timeout=15, what="the escapee to be killed")


def test_an_agent_leaves_alone_the_same_job_id_of_another_namespace_on_its_host(cli, client, tmp_path):
    """Two labs' agents on one host, both node "a", without cgroups: job 1 of one ends and its
    leftovers are stopped by their marks; job 1 of the other, same id, epoch and node name, runs on."""
    other = Cli(cli.url, f"{cli.ns}b", tmp_path / "other")
    other.home.mkdir()
    try:
        for c in (cli, other):
            c.start("worker", "--node", "a", "--fake-gpus", "1xA100-40GB", "--work-dir", str(c.home / "agent"),
                    DISPATCH_NO_CGROUPS="1")
            c.start("scheduler")
        theirs = other.submit("--gpus", "1", "--", "sleep", "300")
        wait_running(other, client, theirs)
        ours = cli.submit("--gpus", "1", "--", "sh", "-c", "sleep 301 & echo main done")
        assert ours == theirs, "the same job id in both namespaces"
        assert cli.run("wait", ours, "--timeout", "40").returncode == 0, cli.show(ours)
        cli.wait_for(lambda: not _marked(cli.ns, ours), timeout=10, what="our job's leftovers to be killed")
        assert _marked(other.ns, theirs), "the other namespace's job 1 was killed with our leftovers"
        assert read_job(client, other.ns, theirs)["state"] == "running"
    finally:
        other.stop_all()


def test_an_agent_starts_beside_hostile_entries_in_the_active_index(cli, client):
    client.set(keys.job(cli.ns, "666"), "not a hash")
    client.zadd(keys.jobs_active(cli.ns), {"666": 1, "no-such-job": 2, "667": float("inf")})
    cli.start("worker", "--node", "a", "--fake-gpus", "1xA100-40GB")  # no scheduler: nobody quarantines yet
    cli.wait_for(lambda: client.zscore(keys.nodes_heartbeat(cli.ns), "a"), what="the agent to register")


@pytest.mark.parametrize("then,state,code", [("", "succeeded", 0), ("; kill -ABRT $$", "failed", -6)],
                         ids=["exits", "crashes"])
def test_a_job_that_ends_while_its_agent_is_stopped_is_recorded_not_rerun(cli, client, tmp_path, then, state, code):
    # a crash too (a signal dispatch did not send): its keeper reported it as every kill, a lost attempt, and
    # the job ran again (docs/guarantees.md promise 3: it fails once, as in Slurm)
    out, agents, job, first = ticking_job_on_two_nodes(cli, client, tmp_path, ticks=10, then=then)
    stopped = agents[first["node"]]
    os.kill(stopped.pid, signal.SIGSTOP)  # the job ends two seconds later, unreaped, its outcome unwritten
    try:
        cli.wait_for(lambda: read_job(client, cli.ns, job)["state"] != "running", timeout=30,
                     what="the scheduler to give the node up")
        time.sleep(3)
    finally:
        os.kill(stopped.pid, signal.SIGCONT)
    shown = cli.show(job)
    runs = attempts(out, job)
    assert [r["ended"] for r in runs] == [True], f"the finished job ran again: {runs}"
    assert (shown["state"], shown["exit_code"], shown["attempt"]) == (state, code, 0), shown
    if code:
        assert shown["reason"].startswith("killed by signal SIGABRT (not sent by dispatch"), shown["reason"]


def test_a_job_that_ended_while_its_agent_was_stopped_is_recorded_by_the_next_agent(cli, client, tmp_path):
    """The stopped agent is killed and restarted before the scheduler gives the node up."""
    env = dict(FAST, DISPATCH_NODE_TIMEOUT_S="30")
    out = tmp_path / "runs"
    out.mkdir()
    work = tmp_path / "a"
    agent = cli.start("worker", "--node", "a", "--fake-gpus", "1xA100-40GB", "--work-dir", str(work), **env)
    cli.start("scheduler", **env)
    job = cli.submit("--gpus", "1", "--env", f"OUT={out}", "--", "sh", "-c", TICKING.format(ticks=5))
    wait_running(cli, client, job)
    os.kill(agent.pid, signal.SIGSTOP)
    cli.wait_for(lambda: client.exists(keys.job_exit(cli.ns, job)), timeout=40, what="the keeper to record the end")
    os.kill(agent.pid, signal.SIGKILL)
    agent.wait(10)
    cli.start("worker", "--node", "a", "--fake-gpus", "1xA100-40GB", "--work-dir", str(work), log_name="worker-again",
              **env)
    assert cli.run("wait", job, "--timeout", "60").returncode == 0, cli.show(job)
    assert [r["ended"] for r in attempts(out, job)] == [True], attempts(out, job)
    assert cli.show(job)["attempt"] == 0


def test_a_job_that_ended_before_its_resumed_agent_fences_is_recorded_as_it_ended_not_rerun(cli, client, tmp_path):
    """The agent is stopped past its fence (fence_s) but not past the node timeout, and its job ends
    meanwhile. Back, the agent fences its copies at once and reaps the ended one, in either order; the
    copy that had already ended on its own is recorded as it ended (succeeded), not as an attempt lost to
    the fence, and runs once. (The chaos suite met the fence-first order, with the server down too; here
    the reap usually comes first: outcomes._fenced records by the exit code either way.)"""
    env = {"DISPATCH_HEARTBEAT_S": "0.5", "DISPATCH_NODE_TIMEOUT_S": "20"}  # fence at 18 s, the node given up at 20
    out = tmp_path / "runs"
    out.mkdir()
    agent = cli.start("worker", "--node", "a", "--fake-gpus", "1xA100-40GB", "--work-dir", str(tmp_path / "a"),
                      **env)
    cli.start("scheduler", **env)
    job = cli.submit("--gpus", "1", "--env", f"OUT={out}", "--", "sh", "-c", TICKING.format(ticks=5))
    wait_running(cli, client, job)
    os.kill(agent.pid, signal.SIGSTOP)  # the job ends a second later, unreaped
    try:
        time.sleep(Timing(heartbeat_s=0.5, node_timeout_s=20.0).fence_s + 1.0)
    finally:
        os.kill(agent.pid, signal.SIGCONT)
    assert cli.run("wait", job, "--timeout", "60").returncode == 0, cli.show(job)
    assert [r["ended"] for r in attempts(out, job)] == [True], attempts(out, job)
    assert cli.show(job)["attempt"] == 0


def test_a_job_whose_outcome_waits_in_a_stopped_agents_outbox_is_recorded_not_rerun(cli, tmp_path, own_server):
    """The job ends while Redis is down, so its outcome goes to the agent's outbox; then the agent is
    stopped past the node timeout. Its keeper reports the outcome from the outbox, and the scheduler,
    giving the node up, records it: the job ran once though another node had room to rerun it."""
    env = dict(FAST, DISPATCH_REDIS_URL=own_server.url)
    out = tmp_path / "runs"
    out.mkdir()
    agents = two_nodes(cli, tmp_path, env)
    cli.start("scheduler", **env)
    client = connect(own_server.url)
    job = cli.run("submit", "--gpus", "1", "--env", f"OUT={out}", "--", "sh", "-c", TICKING.format(ticks=10),
                  **env).stdout.strip()
    node = wait_running(cli, client, job)["node"]
    client.close()
    own_server.proc.send_signal(signal.SIGKILL)  # Redis away: the outcome cannot be written ...
    own_server.proc.wait()
    cli.wait_for(lambda: any(r["ended"] for r in attempts(out, job)), timeout=30, what="the job to end")
    cli.wait_for(lambda: list((tmp_path / node / "outbox").glob("*.entry")), timeout=10,
                 what="the outcome to wait in the outbox")
    os.kill(agents[node].pid, signal.SIGSTOP)  # ... and the agent holding it stops
    try:
        own_server.start()
        client = connect(own_server.url)
        cli.wait_for(lambda: read_job(client, cli.ns, job)["state"] != "running", timeout=60,
                     what="the scheduler to give the node up")
        shown = read_job(client, cli.ns, job)
    finally:
        os.kill(agents[node].pid, signal.SIGCONT)
    time.sleep(2)
    runs = attempts(out, job)
    assert len(runs) == 1 and runs[0]["ended"], f"the finished job ran again: {runs}"
    assert shown["state"] == "succeeded" and shown["attempt"] == 0, shown
    client.close()


def test_a_second_agent_for_a_node_that_has_a_live_one_is_refused_and_the_job_runs_once(cli, client, tmp_path):
    """Two agents under one node name (a second `dispatch worker --node a` with its own work dir, or two
    hosts of one name) would share its launches: the second requeued the first one's job as lost, and
    the first ran the new attempt beside the old one. The second is refused in one line."""
    out = tmp_path / "runs"
    out.mkdir()
    cli.start("worker", "--node", "a", "--fake-gpus", "1xA100-40GB", "--work-dir", str(tmp_path / "a"), **FAST)
    cli.start("scheduler", **FAST)
    job = cli.submit("--gpus", "1", "--env", f"OUT={out}", "--", "sh", "-c", TICKING.format(ticks=25))
    wait_running(cli, client, job)
    second = cli.run("worker", "--node", "a", "--fake-gpus", "1xA100-40GB", "--work-dir", str(tmp_path / "a2"),
                     check=False, timeout=30, **FAST)
    assert second.returncode != 0 and second.stderr.splitlines()[-1].startswith(
        "dispatch: error: node a has a live agent already"), second.stderr
    cli.wait_for(lambda: read_job(client, cli.ns, job)["state"] == "succeeded", timeout=30, what="the job to end")
    runs = attempts(out, job)
    assert len(runs) == 1 and runs[0]["ended"] and read_job(client, cli.ns, job)["lost"] == 0, runs
