"""A real torch.distributed job through dispatch: 2 nodes x 2 ranks (CPU, gloo), one `dispatch worker`
per "host" (separate processes, each advertising its own loopback address), the command run once per
node with torchrun and the variables dispatch gives it. It must end with the weights of one process
over the same global batches (tests/distributed/ddp_train.py), and still do when one rank's agent is
killed with -9 mid-run: the whole gang restarts from its checkpoint (on the agents' shared
--checkpoint-root) as one lost attempt.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dispatcher.store.jobs import read_job
from dispatcher.store.nodes import read_nodes

torch = pytest.importorskip("torch", reason="torch is not installed (the test extra pins a CPU build)")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

PROGRAM = Path(__file__).parents[1] / "distributed" / "ddp_train.py"
STEPS = 30
FAST = {"DISPATCH_NODE_TIMEOUT_S": "6", "DISPATCH_HEARTBEAT_S": "0.5"}
HOSTS = {"h1": "127.0.0.2", "h2": "127.0.0.3"}
#: The user's command, once per node, as docs/distributed.md shows it.
TORCHRUN = (f'exec {sys.executable} -m torch.distributed.run --nnodes "$NNODES" --node-rank "$NODE_RANK" '
            f'--nproc-per-node "$GPUS_PER_NODE" --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" '
            f'{PROGRAM} --out "$OUT/final.pt" --steps {STEPS} --step-sleep {{sleep}}')


def start_agent(cli, name: str):
    return cli.start("worker", "--node", name, "--fake-gpus", "2xA100-40GB", "--address", HOSTS[name],
                     "--checkpoint-root", str(cli.home / "shared-ckpt"), log_name=f"worker-{name}", **FAST)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("reference") / "reference.pt"
    p = subprocess.run([sys.executable, str(PROGRAM), "--reference", str(out), "--steps", str(STEPS)],
                       capture_output=True, text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stdout + p.stderr
    return torch.load(out, weights_only=True)


def submit_ddp(cli, out: Path, sleep: float) -> str:
    return cli.submit("--nodes", "2", "--gpus-per-node", "2", "--checkpointable", "--grace", "5", "--retries", "2",
                      "--env", f"OUT={out}", "--env", "GLOO_SOCKET_IFNAME=lo", "--env", "OMP_NUM_THREADS=1",
                      "--", "sh", "-c", TORCHRUN.format(sleep=sleep))


def max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


def up(cli, client):
    agents = {name: start_agent(cli, name) for name in HOSTS}
    cli.start("scheduler", **FAST)
    cli.wait_for(lambda: {n.name for n in read_nodes(client, cli.ns)[0]} >= set(HOSTS), timeout=30,
                 what="the agents to register")
    return agents


def logs_of(cli, job):
    return "\n".join(f"--- rank {r}\n" + cli.run("logs", job, "--rank", str(r), check=False).stdout[-3000:]
                     for r in (0, 1))


def test_a_two_node_ddp_job_ends_with_the_single_process_weights(cli, client, tmp_path, reference):
    up(cli, client)
    job = submit_ddp(cli, tmp_path, sleep=0)
    cli.wait_for(lambda: read_job(client, cli.ns, job)["state"] in ("succeeded", "failed"), timeout=240,
                 what="the DDP job to end")
    j = read_job(client, cli.ns, job)
    assert j["state"] == "succeeded", logs_of(cli, job)
    assert max_diff(torch.load(tmp_path / "final.pt", weights_only=True), reference) < 1e-12
    assert f"rank 3 step {STEPS} loss" in cli.run("logs", job, "--rank", "1").stdout  # node 2 ran ranks 2, 3


def test_killing_one_ranks_agent_restarts_the_whole_gang_from_its_checkpoint(cli, client, tmp_path, reference):
    agents = up(cli, client)
    job = submit_ddp(cli, tmp_path, sleep=0.4)
    ckpt = cli.home / "shared-ckpt" / job / "ckpt.pt"
    cli.wait_for(lambda: ckpt.exists() and torch.load(ckpt, weights_only=True)["step"] >= 5, timeout=240,
                 what="a few steps checkpointed")
    ranks = read_job(client, cli.ns, job)["ranks"]
    victim = ranks[1][0]  # rank 1's node: not the one the others meet at
    agents[victim].send_signal(signal.SIGKILL)
    agents[victim].wait()
    time.sleep(1)
    start_agent(cli, victim)  # the host's agent comes back (as systemd would restart it)
    cli.wait_for(lambda: read_job(client, cli.ns, job)["state"] in ("succeeded", "failed"), timeout=300,
                 what="the gang to rerun and end")
    j = read_job(client, cli.ns, job)
    assert j["state"] == "succeeded", logs_of(cli, job)
    assert j["lost"] == 1 and j["attempts"][0]["outcome"] == "lost", j["attempts"]
    assert "resumed at step" in cli.run("logs", job).stdout
    assert max_diff(torch.load(tmp_path / "final.pt", weights_only=True), reference) < 1e-12
