"""Failures end to end (docs/guarantees.md): real scheduler and agent processes killed with SIGKILL.

Polling goes through the test's own Redis client (read_job), which is what `dispatch show --json`
prints, so that a slow machine is not also busy starting a `dispatch` process ten times a second;
what a user would check is then checked with the CLI.
"""

import json
import os
import signal
import time
from pathlib import Path

import pytest

from dispatcher.store import keys
from dispatcher.store.jobs import read_job
from workers.proctrack import agent_tag
from dispatcher.store.leader import current_leader
from dispatcher.store.nodes import read_nodes

pytestmark = pytest.mark.slow

#: Shared by every process of a test: a dead node is noticed within seconds.
FAST = {"DISPATCH_NODE_TIMEOUT_S": "3", "DISPATCH_HEARTBEAT_S": "0.5"}

#: Each attempt says when it starts and when it ends, in the file $OUT.
STEPS = ('echo "start $DISPATCH_ATTEMPT $DISPATCH_NODE" >> "$OUT"; sleep {s}; '
         'echo "end $DISPATCH_ATTEMPT $DISPATCH_NODE" >> "$OUT"')


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def live_processes_of(ns: str, job_id: str, epoch: int) -> list[int]:
    """Live (not zombie) processes that carry this attempt's environment: the job and its children."""
    marks = {f"DISPATCH_NAMESPACE={ns}".encode(), f"DISPATCH_JOB_ID={job_id}".encode(),
             f"DISPATCH_EPOCH={epoch}".encode()}
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            state = (d / "stat").read_text().rpartition(")")[2].split()[0]
            environ = set((d / "environ").read_bytes().split(b"\0"))
        except (OSError, IndexError):
            continue
        if state not in ("Z", "X") and marks <= environ:
            found.append(int(d.name))
    return found


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] not in ("Z", "X")
    except OSError:
        return False


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def wait_nodes(cli, client, names, timeout=30):
    cli.wait_for(lambda: {n.name for n in read_nodes(client, cli.ns)[0]} >= set(names), timeout=timeout,
                 what=f"nodes {', '.join(names)} to register")


def running(client, ns, job_id):
    j = read_job(client, ns, job_id)
    return j if j["state"] == "running" else None


def test_a_job_whose_agent_is_killed_reruns_on_the_other_node_and_succeeds(cli, client):
    agents = {n: cli.start("worker", "--node", n, "--fake-gpus", "1xA100-40GB", log_name=f"worker-{n}", **FAST)
              for n in ("a", "b")}
    cli.start("scheduler", **FAST)
    wait_nodes(cli, client, "ab")
    out = cli.home / "runs.txt"
    job = cli.submit("--gpus", "1", "--env", f"OUT={out}", "--", "sh", "-c", STEPS.format(s=4))

    first = cli.wait_for(lambda: running(client, cli.ns, job), what="the job to run")
    cli.wait_for(lambda: lines(out), what="the first attempt to write its start")
    dead, other = first["node"], ({"a", "b"} - {first["node"]}).pop()
    pid = int(client.hget(keys.job(cli.ns, job), "pid"))
    assert alive(pid)

    os.kill(agents[dead].pid, signal.SIGKILL)  # the agent only, not its process group
    agents[dead].wait(10)
    try:
        cli.wait_for(lambda: not alive(pid), timeout=5, what="the job process to die with its agent (PDEATHSIG)")
        killed_at = time.monotonic()
        assert cli.run("wait", job, "--timeout", "30").returncode == 0, cli.show(job)
    finally:
        kill_group(pid)  # whatever the first attempt left (nothing, if all went well)
    rerun_took = time.monotonic() - killed_at

    assert lines(out) == [f"start 0 {dead}", f"start 1 {other}", f"end 1 {other}"], lines(out)
    shown = cli.show(job)
    assert (shown["state"], shown["node"], shown["attempt"], shown["lost"], shown["retries"]) == (
        "succeeded", other, 1, 1, 3), shown
    assert [(a["attempt"], a["node"], a["outcome"]) for a in shown["attempts"]] == [
        (0, dead, "lost"), (1, other, "succeeded")], shown["attempts"]
    assert f"node {dead} lost" in shown["attempts"][0]["reason"]
    assert shown["attempts"][1]["exit_code"] == 0
    assert rerun_took < 25, f"the rerun ended {rerun_took:.1f}s after the kill"


def test_when_the_leading_scheduler_is_killed_the_standby_places_the_next_job(cli, client):
    env = dict(FAST, DISPATCH_LEASE_S="2")
    cli.start("worker", "--node", "a", "--fake-gpus", "1xA100-40GB", **env)
    scheds = {p.pid: p for p in (cli.start("scheduler", log_name="scheduler-1", **env),
                                 cli.start("scheduler", log_name="scheduler-2", **env))}
    wait_nodes(cli, client, "a")
    warmup = cli.submit("--gpus", "1", "--", "true")
    assert cli.run("wait", warmup, "--timeout", "30").returncode == 0

    token, holder = cli.wait_for(lambda: current_leader(client, cli.ns), what="a leader")
    leader_pid = int(holder.split(":")[-2])
    assert leader_pid in scheds, (holder, list(scheds))
    os.kill(leader_pid, signal.SIGKILL)
    scheds.pop(leader_pid).wait(10)
    (standby,) = scheds.values()
    assert standby.poll() is None

    submitted = time.time()
    job = cli.submit("--gpus", "1", "--", "true")
    assert cli.run("wait", job, "--timeout", "30").returncode == 0, cli.show(job)
    shown = cli.show(job)
    assert shown["state"] == "succeeded" and shown["attempt"] == 0
    assert shown["started_at"] - submitted < 10, f"started {shown['started_at'] - submitted:.1f}s after submit"
    new_token, new_holder = current_leader(client, cli.ns)
    assert int(new_holder.split(":")[-2]) == standby.pid and new_token > token


def node_a_and_a_patient_scheduler(cli):
    """One agent on node a and a scheduler that gives a node up only after 20 s, so that what
    happens after a kill -9 of the agent is the next agent's own recovery. Returns what restarts it."""
    env = dict(FAST, DISPATCH_NODE_TIMEOUT_S="20")
    work = cli.home / "node-a"
    worker = ("worker", "--node", "a", "--fake-gpus", "1xA100-40GB", "--work-dir", str(work))
    agent = cli.start(*worker, log_name="worker-first", **env)
    cli.start("scheduler", **env)
    return env, work, worker, agent


def test_a_restarted_agent_requeues_the_job_the_dead_one_left_and_runs_it_again(cli, client):
    env, work, worker, agent = node_a_and_a_patient_scheduler(cli)
    out = cli.home / "runs.txt"
    job = cli.submit("--gpus", "1", "--env", f"OUT={out}", "--", "sh", "-c", STEPS.format(s=3))
    first = cli.wait_for(lambda: running(client, cli.ns, job), what="the job to run")
    cli.wait_for(lambda: lines(out), what="the first attempt to write its start")
    pid = int(client.hget(keys.job(cli.ns, job), "pid"))
    assert (work / "pids" / job).read_text().split() == [str(pid), str(first["epoch"]), "a", agent_tag(work)]

    os.kill(agent.pid, signal.SIGKILL)
    agent.wait(10)
    try:
        cli.start(*worker, log_name="worker-second", **env)
        requeued = cli.wait_for(lambda: read_job(client, cli.ns, job)["attempts"], timeout=20,
                                what="the new agent to requeue the job")
        assert not alive(pid), "the first attempt's process outlived its agent"
        assert cli.run("wait", job, "--timeout", "30").returncode == 0, cli.show(job)
    finally:
        kill_group(pid)

    assert requeued[0]["outcome"] == "lost" and "agent restarted" in requeued[0]["reason"], requeued
    assert lines(out) == ["start 0 a", "start 1 a", "end 1 a"], lines(out)
    shown = cli.show(job)
    assert (shown["state"], shown["attempt"], shown["lost"]) == ("succeeded", 1, 1), shown
    assert [(a["node"], a["outcome"]) for a in shown["attempts"]] == [("a", "lost"), ("a", "succeeded")]
    assert not (work / "pids" / job).exists()
    assert "[dispatch: attempt 1 on a at " in cli.run("logs", job).stdout, "a line between the attempts' output"


def test_a_restarted_agent_kills_the_children_the_dead_ones_job_left(cli, client):
    env, work, worker, agent = node_a_and_a_patient_scheduler(cli)
    # a helper (say a data loader) lives as long as the job, in the job's process group
    job = cli.submit("--gpus", "1", "--", "sh", "-c", "sleep 60 & helper=$!; sleep 30; kill $helper")
    first = cli.wait_for(lambda: running(client, cli.ns, job), what="the job to run")
    cli.wait_for(lambda: len(live_processes_of(cli.ns, job, first["epoch"])) == 3, what="the job and its children")
    pid = int(client.hget(keys.job(cli.ns, job), "pid"))

    os.kill(agent.pid, signal.SIGKILL)
    agent.wait(10)
    try:
        cli.start(*worker, log_name="worker-second", **env)
        cli.wait_for(lambda: read_job(client, cli.ns, job)["attempts"], timeout=20,
                     what="the new agent to requeue the job")
        cli.wait_for(lambda: not live_processes_of(cli.ns, job, first["epoch"]), timeout=5,
                     what="every process of the first attempt to be gone")
    finally:
        kill_group(pid)
        cli.run("cancel", job, check=False)


def test_an_agent_restarted_with_other_gpus_never_runs_a_job_on_gpus_it_no_longer_has(cli, client):
    env = dict(FAST, DISPATCH_NODE_TIMEOUT_S="20")  # the node stays up across the restart: its old inventory
    work = cli.home / "node-a"
    agent = cli.start("worker", "--node", "a", "--fake-gpus", "4xA100-40GB", "--work-dir", str(work),
                      log_name="worker-first", **env)
    cli.start("scheduler", **env)
    job = cli.submit("--gpus", "4", "--gpu-type", "A100", "--", "sleep", "60")
    cli.wait_for(lambda: running(client, cli.ns, job), what="the job to run")
    pid = int(client.hget(keys.job(cli.ns, job), "pid"))
    os.kill(agent.pid, signal.SIGKILL)  # and it comes back with two V100s (a card swapped, two off the bus)
    agent.wait(10)
    cli.start("worker", "--node", "a", "--fake-gpus", "2xV100-16GB", "--work-dir", str(work),
              log_name="worker-second", **env)
    try:
        cli.wait_for(lambda: read_job(client, cli.ns, job)["attempts"], timeout=20, what="the job to be requeued")
        time.sleep(3)  # (the cycles that follow: it was placed back on a's four A100s from their old record)
        shown = read_job(client, cli.ns, job)
        assert shown["state"] == "pending", shown
        assert [a["node"] for a in shown["attempts"]] in (["a"], ["a", "a"]), shown["attempts"]
        assert "started on GPUs [0,1,2,3]" not in (cli.home / "worker-second-2.log").read_text()
    finally:
        kill_group(pid)


def test_an_agent_taken_for_dead_and_replaced_stops_when_it_wakes_and_leaves_the_node_to_the_new_one(cli, client):
    first = cli.start("worker", "--node", "a", "--fake-gpus", "1xA100-40GB", "--work-dir", str(cli.home / "w1"),
                      log_name="worker-first", **FAST)
    cli.start("scheduler", **FAST)
    job = cli.submit("--gpus", "1", "--", "sleep", "60")
    cli.wait_for(lambda: running(client, cli.ns, job), what="the job to run")
    os.kill(first.pid, signal.SIGSTOP)  # a hung agent: node a is taken for dead, its job requeued
    cli.wait_for(lambda: read_job(client, cli.ns, job)["state"] == "pending", timeout=20, what="the job requeued")
    cli.start("worker", "--node", "a", "--fake-gpus", "1xA100-40GB", "--work-dir", str(cli.home / "w2"),
              log_name="worker-second", **FAST)  # the operator starts a new agent for the node
    time.sleep(3)  # (a launch may wait in the stopped agent's socket: its BLPOP took it from RQ's queue)
    os.kill(first.pid, signal.SIGCONT)  # the old one wakes: it must not take the node back, nor kill its job
    first.wait(20)
    again = cli.wait_for(lambda: running(client, cli.ns, job), timeout=20, what="the job to run on the new agent")
    time.sleep(3)
    now = read_job(client, cli.ns, job)
    assert (now["state"], now["epoch"], now["lost"]) == ("running", again["epoch"], 1), now  # (was: each agent
    # requeued the other's jobs, every ~10 s, until they failed)
    assert "is run by another agent now" in (cli.home / "worker-first-0.log").read_text()
    assert [n["name"] for n in json.loads(cli.run("nodes", "--json").stdout) if n["state"] == "up"] == ["a"]
    cli.run("cancel", job)


def test_a_scheduler_with_a_shorter_node_timeout_than_the_agent_waits_the_agents_before_a_rerun(cli, client):
    agent = cli.start("worker", "--node", "a", "--fake-gpus", "1xA100-40GB", DISPATCH_HEARTBEAT_S="0.5",
                      DISPATCH_NODE_TIMEOUT_S="8")  # its keeper fences its jobs 7.2 s after its last heartbeat
    cli.start("scheduler", **FAST)  # 3 s: it would rerun the job while its first copy still runs
    job = cli.submit("--gpus", "1", "--", "sleep", "60")
    cli.wait_for(lambda: running(client, cli.ns, job), what="the job to run")
    os.kill(agent.pid, signal.SIGSTOP)
    try:
        time.sleep(5)
        assert read_job(client, cli.ns, job)["state"] == "running"  # (was requeued at 3 s)
        cli.wait_for(lambda: read_job(client, cli.ns, job)["state"] == "pending", timeout=10, what="the job requeued")
        assert "its agent's node timeout is 8s" in (cli.home / "scheduler-1.log").read_text()
    finally:
        os.kill(agent.pid, signal.SIGCONT)


def test_a_rerun_on_a_node_without_its_checkpoint_says_so_in_its_log(cli, client):
    import sys

    for n in ("a", "b"):  # each with its own (default) checkpoint root: no shared storage
        cli.start("worker", "--node", n, "--fake-gpus", "1xA100-40GB", log_name=f"worker-{n}", **FAST)
    cli.start("scheduler", **FAST)
    cli.wait_for(lambda: len(read_nodes(client, cli.ns)[0]) == 2, what="both nodes")
    cli.run("drain", "b")
    body = f'echo saved > "$DISPATCH_CHECKPOINT_DIR/state"; {sys.executable} -m dispatcher checkpointed; sleep 60'
    job = cli.submit("--gpus", "1", "--checkpointable", "--grace", "2s", "--", "sh", "-c", body)
    cli.wait_for(lambda: read_job(client, cli.ns, job)["checkpoint_at"], what="its checkpoint")
    cli.run("resume", "b")
    cli.run("drain", "a")
    cli.run("preempt", job)
    cli.wait_for(lambda: (j := running(client, cli.ns, job)) and j["node"] == "b", timeout=30, what="the rerun on b")
    cli.wait_for(lambda: "its checkpoint is not here" in cli.run("logs", job).stdout, what="the separator's note")
    cli.run("cancel", job)


def test_a_node_that_cannot_prepare_a_jobs_start_loses_the_attempt_and_says_why_within_its_retries(cli, tmp_path):
    work = tmp_path / "n1"
    cli.start("worker", "--node", "n1", "--fake-gpus", "1xA100-40GB", "--work-dir", str(work))
    cli.start("scheduler")
    cli.wait_for(lambda: "n1" in cli.run("nodes").stdout, what="the node to register")
    (work / "logs").write_text("in the way")  # its log directory cannot be made: no job can start here
    job = cli.submit("--gpus", "1", "--retries", "1", "--", "true")
    cli.wait_for(lambda: cli.show(job)["state"] == "failed", timeout=60, what="the job to fail, its retries spent")
    shown = cli.show(job)
    assert shown["reason"].startswith("node n1 could not start it: ") and \
        shown["reason"].endswith("gave up after 2 lost attempts (retries 1)"), shown["reason"]
    assert [a["outcome"] for a in shown["attempts"]] == ["lost", "lost"], shown["attempts"]
