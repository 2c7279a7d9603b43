"""Multi-node gangs end to end: real agents as separate processes (one per "host", each advertising its
own loopback address), a real scheduler, and the gang's command run once per node, as srun does.

Each rank writes what it was told into $OUT/rank<NODE_RANK>.<DISPATCH_ATTEMPT>; tests read those
files and the job record (what `dispatch show --json` prints) through the test's own Redis client.
"""

import signal
import sys
import time
from pathlib import Path

import pytest

from dispatcher.store import keys
from dispatcher.store.jobs import read_job
from dispatcher.store.nodes import read_nodes

pytestmark = pytest.mark.slow

FAST = {"DISPATCH_NODE_TIMEOUT_S": "4", "DISPATCH_HEARTBEAT_S": "0.5"}
HOSTS = {"h1": "127.0.0.2", "h2": "127.0.0.3"}

#: Each rank records its variables, then runs {body}.
RANK = ('env | grep -E "^(MASTER_ADDR|MASTER_PORT|WORLD_SIZE|NODE_RANK|NNODES|GPUS_PER_NODE|DISPATCH_NODE_IPS|'
        'DISPATCH_NODE_RANK|CUDA_VISIBLE_DEVICES)=" | sort > "$OUT/rank$NODE_RANK.$DISPATCH_ATTEMPT"; '
        'echo "hello from rank $NODE_RANK"; {body}')


def start_hosts(cli, client, gpus="2xA100-40GB", hosts=HOSTS, **env):
    for name, address in hosts.items():
        cli.start("worker", "--node", name, "--fake-gpus", gpus, "--address", address,
                  "--checkpoint-root", str(cli.home / "shared-ckpt"), log_name=f"worker-{name}", **FAST, **env)
    cli.wait_for(lambda: {n.name for n in read_nodes(client, cli.ns)[0]} >= set(hosts), timeout=30,
                 what="the agents to register")


def told(out: Path, rank: int, attempt: int = 0) -> dict:
    path = out / f"rank{rank}.{attempt}"
    return dict(line.split("=", 1) for line in path.read_text().splitlines()) if path.exists() else {}


def state_of(client, ns, job_id):
    return read_job(client, ns, job_id)["state"]


def test_a_two_node_gang_runs_its_command_once_per_node_with_torchrun_variables(cli, client, tmp_path):
    start_hosts(cli, client)
    cli.start("scheduler", **FAST)
    job = cli.submit("--nodes", "2", "--gpus-per-node", "2", "--env", f"OUT={tmp_path}", "--", "sh", "-c",
                     RANK.format(body="sleep 2"))
    cli.wait_for(lambda: state_of(client, cli.ns, job) == "running", what="the gang to start")
    shown = cli.show(job)
    assert sorted(n for n, _ in shown["ranks"]) == ["h1", "h2"]
    queue = cli.run("queue", "--all").stdout
    assert "+".join(f"{n}:0,1" for n, _ in shown["ranks"]) in queue and " 2x2 " in queue, queue
    nodes = cli.run("nodes").stdout
    assert all(line.split()[-1] == f"0:{job},1:{job}" for line in nodes.splitlines() if line.startswith("h")), nodes
    cli.wait_for(lambda: state_of(client, cli.ns, job) == "succeeded", timeout=30, what="the gang to succeed")
    r0, r1 = told(tmp_path, 0), told(tmp_path, 1)
    nodes = [n for n, _ in shown["ranks"]]
    assert r0["MASTER_ADDR"] == r1["MASTER_ADDR"] == HOSTS[nodes[0]]
    assert r0["MASTER_PORT"] == r1["MASTER_PORT"] and int(r0["MASTER_PORT"]) > 0
    assert r0["DISPATCH_NODE_IPS"] == r1["DISPATCH_NODE_IPS"] == ",".join(HOSTS[n] for n in nodes)
    assert (r0["NODE_RANK"], r1["NODE_RANK"]) == ("0", "1") == (r0["DISPATCH_NODE_RANK"], r1["DISPATCH_NODE_RANK"])
    assert r0["NNODES"] == r0["GPUS_PER_NODE"] == "2" and r0["WORLD_SIZE"] == "4"
    assert r0["CUDA_VISIBLE_DEVICES"] == r1["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert "hello from rank 0" in cli.run("logs", job).stdout
    assert "hello from rank 1" in cli.run("logs", job, "--rank", "1").stdout
    free = {n.name: n.alloc for n in read_nodes(client, cli.ns)[0]}
    assert free == {"h1": {}, "h2": {}}  # every rank's GPUs came back


def test_a_rank_that_fails_stops_the_other_and_the_gang_reruns_as_one_lost_attempt(cli, client, tmp_path):
    start_hosts(cli, client)
    cli.start("scheduler", **FAST)
    # attempt 0: rank 1 fails at once while rank 0 would run for a minute; attempt 1: both succeed
    body = 'if [ "$DISPATCH_ATTEMPT" = 0 ] && [ "$NODE_RANK" = 1 ]; then sleep 1; exit 3; fi; ' \
           'if [ "$DISPATCH_ATTEMPT" = 0 ]; then sleep 60; fi'
    job = cli.submit("--nodes", "2", "--gpus-per-node", "1", "--retries", "2", "--grace", "2",
                     "--env", f"OUT={tmp_path}", "--", "sh", "-c", RANK.format(body=body))
    cli.wait_for(lambda: state_of(client, cli.ns, job) == "succeeded", timeout=60, what="the rerun to succeed")
    j = read_job(client, cli.ns, job)
    assert j["lost"] == 1 and j["attempt"] == 1
    attempts = cli.show(job)["attempts"]
    assert attempts[0]["outcome"] == "lost" and "rank 1" in attempts[0]["reason"], attempts[0]
    assert told(tmp_path, 0, 1) and told(tmp_path, 1, 1)


def test_a_gang_of_one_node_is_told_what_a_multi_node_script_reads(cli, client, tmp_path):
    # `--nodes 1` (a torchrun script tried on one node) got none of them: `torchrun --nnodes $NNODES` failed
    start_hosts(cli, client)
    cli.start("scheduler", **FAST)
    job = cli.submit("--nodes", "1", "--gpus-per-node", "2", "--env", f"OUT={tmp_path}", "--", "sh", "-c",
                     RANK.format(body="sleep 3"))
    cli.wait_for(lambda: told(tmp_path, 0), timeout=30, what="the job to start")
    assert cli.run("queue", "-o", "gpus", "--noheader", job).stdout.split() == ["2"]  # (one node: a count)
    got = told(tmp_path, 0)
    assert (got["NNODES"], got["NODE_RANK"], got["WORLD_SIZE"], got["GPUS_PER_NODE"]) == ("1", "0", "2", "2"), got
    assert got["MASTER_ADDR"] in HOSTS.values() and int(got["MASTER_PORT"]) > 0, got
    assert cli.run("wait", job, "--timeout", "30").returncode == 0


def test_a_gang_whose_rank_the_oom_killer_kills_fails_with_137_as_a_one_node_job(cli, client, tmp_path):
    start_hosts(cli, client)
    cli.start("scheduler", **FAST)
    body = 'if [ "$NODE_RANK" = 1 ]; then kill -9 $$; fi; sleep 60'  # as the kernel's OOM killer
    job = cli.submit("--nodes", "2", "--gpus-per-node", "1", "--retries", "0", "--grace", "1",
                     "--env", f"OUT={tmp_path}", "--", "sh", "-c", RANK.format(body=body))
    p = cli.run("wait", job, "--timeout", "60", check=False)
    assert p.returncode == 137 and "rank 1 on h2 ended (SIGKILL, not sent by dispatch: out of memory" in p.stderr, p
    assert cli.show(job)["exit_code"] == -9


def test_cancel_stops_every_rank_with_one_signal_each_then_its_grace(cli, client, tmp_path):
    start_hosts(cli, client)
    cli.start("scheduler", **FAST)
    # each rank outlives SIGTERM, counting it: was one a heartbeat, all through the grace (torchrun's own
    # shutdown, broken by the next one, left a traceback in the job's log)
    body = 'trap "echo TERM >> $OUT/term$NODE_RANK" TERM; while true; do sleep 0.2; done'
    job = cli.submit("--nodes", "2", "--gpus-per-node", "1", "--grace", "4s", "--env", f"OUT={tmp_path}", "--",
                     "sh", "-c", RANK.format(body=body))
    cli.wait_for(lambda: told(tmp_path, 0) and told(tmp_path, 1), timeout=30, what="both ranks to start")
    assert cli.run("cancel", job).stdout == f"{job}: cancel sent to its nodes\n"  # (every rank's)
    cli.wait_for(lambda: state_of(client, cli.ns, job) == "cancelled", timeout=30, what="the gang to be cancelled")
    assert {n.name: n.alloc for n in read_nodes(client, cli.ns)[0]} == {"h1": {}, "h2": {}}
    assert [(tmp_path / f"term{rank}").read_text() for rank in (0, 1)] == ["TERM\n", "TERM\n"]


def test_a_gang_with_no_progress_past_its_hang_timeout_is_restarted_with_that_reason(cli, client, tmp_path):
    start_hosts(cli, client)
    cli.start("scheduler", **FAST)
    # attempt 0 reports one step, then hangs; attempt 1 runs past the timeout, but only rank 0 reports
    # (`dispatch progress`, every 1.5 s): no rank's report for 3 s is what a hang is, so it runs on
    body = ('echo 1 >> "$DISPATCH_PROGRESS_FILE"; if [ "$DISPATCH_ATTEMPT" = 0 ]; then sleep 120; fi; '
            'for i in 1 2 3 4; do [ "$NODE_RANK" = 0 ] && ' + sys.executable + ' -m dispatcher progress "step $i"; '
            'sleep 1.5; done')
    job = cli.submit("--nodes", "2", "--gpus-per-node", "1", "--hang-timeout", "3s", "--grace", "1",
                     "--env", f"OUT={tmp_path}", "--", "sh", "-c", RANK.format(body=body))
    cli.wait_for(lambda: state_of(client, cli.ns, job) == "succeeded", timeout=60, what="the restart to succeed")
    j = read_job(client, cli.ns, job)
    assert j["attempts"][0]["outcome"] == "lost" and "--hang-timeout" in j["attempts"][0]["reason"], j["attempts"]
    assert j["lost"] == 1 and len(j["attempts"]) == 2, j["attempts"]  # the second ran its 6 s whole


def test_why_explains_a_pending_gang_in_numbers(cli, client, tmp_path):
    start_hosts(cli, client)
    cli.start("scheduler", **FAST)
    blocker = cli.submit("--gpus", "2", "--est", "1h", "--", "sleep", "60")
    cli.wait_for(lambda: state_of(client, cli.ns, blocker) == "running", what="the blocker to start")
    gang = cli.submit("--nodes", "2", "--gpus-per-node", "2", "--", "sh", "-c", "echo rank $NODE_RANK")
    time.sleep(2)
    why = cli.run("why", gang).stdout
    print(why)
    assert "2 nodes" in why and "1" in why, why
    assert state_of(client, cli.ns, gang) == "pending"
    cli.run("cancel", blocker)
    cli.wait_for(lambda: state_of(client, cli.ns, gang) == "succeeded", timeout=30, what="the gang to run")
    assert client.exists(keys.job_log(cli.ns, gang, 1))


def test_a_gang_is_preempted_as_a_unit_and_resumes_as_one_job(cli, client, tmp_path):
    start_hosts(cli, client)
    cli.start("scheduler", **FAST)
    # every rank traps the checkpoint signal: it says so and leaves, as a checkpointing trainer does
    body = 'trap "echo stopped $NODE_RANK >> $OUT/stops; exit 0" TERM; echo $NODE_RANK >> $OUT/ready; ' \
           'if [ "$DISPATCH_ATTEMPT" = 0 ]; then sleep 120 & wait; fi'
    job = cli.submit("--nodes", "2", "--gpus-per-node", "1", "--checkpointable", "--grace", "5",
                     "--env", f"OUT={tmp_path}", "--", "sh", "-c", RANK.format(body=body))
    ready = tmp_path / "ready"
    cli.wait_for(lambda: ready.exists() and len(ready.read_text().split()) == 2, timeout=30,
                 what="both ranks to start and trap the signal")
    cli.run("preempt", job)
    cli.wait_for(lambda: state_of(client, cli.ns, job) == "succeeded", timeout=60, what="the gang to resume and end")
    j = read_job(client, cli.ns, job)
    assert sorted((tmp_path / "stops").read_text().split()) == ["0", "1", "stopped", "stopped"]  # both ranks
    assert j["preemptions"] == 1 and j["lost"] == 0 and j["attempts"][0]["outcome"] == "preempted", j["attempts"]
    assert told(tmp_path, 0, 1) and told(tmp_path, 1, 1)


def test_when_a_ranks_node_is_declared_dead_the_other_rank_stops_and_the_gang_reruns_elsewhere(cli, client, tmp_path):
    hosts = {**HOSTS, "h3": "127.0.0.4"}
    start_hosts(cli, client, gpus="1xA100-40GB", hosts=hosts)
    agents = {p.args[p.args.index("--node") + 1]: p for p in cli.procs if "worker" in p.args}
    cli.start("scheduler", **FAST)
    body = 'if [ "$DISPATCH_ATTEMPT" = 0 ]; then sleep 120; fi'
    job = cli.submit("--nodes", "2", "--gpus-per-node", "1", "--env", f"OUT={tmp_path}", "--", "sh", "-c",
                     RANK.format(body=body))
    cli.wait_for(lambda: told(tmp_path, 0) and told(tmp_path, 1), timeout=30, what="both ranks to start")
    first = read_job(client, cli.ns, job)["ranks"]
    dead = first[1][0]
    agents[dead].send_signal(signal.SIGKILL)  # its host is gone: no agent, no heartbeat
    cli.wait_for(lambda: state_of(client, cli.ns, job) == "succeeded", timeout=60, what="the gang to rerun")
    j = read_job(client, cli.ns, job)
    assert j["lost"] == 1 and "lost: no heartbeat" in j["attempts"][0]["reason"], j["attempts"]
    assert dead not in [n for n, _ in j["ranks"]]  # the rerun is on the two live hosts
    assert {n.name: n.alloc for n in read_nodes(client, cli.ns)[0] if n.name != dead} == \
        {n: {} for n in hosts if n != dead}
