"""A real torch.distributed job through dispatch: 2 nodes x 2 ranks (CPU, gloo), one `dispatch worker`
per host, the command run once per node with torchrun and the variables dispatch gives it. The hosts
are network namespaces on one bridge (scripts/chaos/hostfaults.py Lan: each its own address, its own
eth0, reaching the server over the bridge; the agents advertise their route to it) where the test
runs as root with iproute2, else separate processes on loopback with distinct addresses. It must end with the weights of one process
over the same global batches (tests/distributed/ddp_train.py), and still do when one rank's agent is
killed with -9 mid-run: the whole gang restarts from its checkpoint (on the agents' shared
--checkpoint-root) as one lost attempt.
"""

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dispatcher.store import keys
from dispatcher.store.connect import connect
from dispatcher.store.jobs import read_job
from dispatcher.store.nodes import read_nodes
from dispatcher.up.embedded import EmbeddedServer
from tests.conftest import Cli

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


def _lan_module():
    path = Path(__file__).parents[2] / "scripts" / "chaos" / "hostfaults.py"
    spec = importlib.util.spec_from_file_location("chaos_hostfaults", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Hosts:
    """Where the test's agents run: a LAN of network namespaces, or loopback addresses."""

    def __init__(self, tmp: Path, ns: str):
        self.lan = None
        if os.geteuid() == 0 and shutil.which("ip"):
            self.lan = _lan_module().Lan(list(HOSTS), prefix="dddp").create()
        bind = "127.0.0.1" + (f" {self.lan.host_ip}" if self.lan else "")
        self.server = EmbeddedServer(tmp / "redis", appendonly=False, bind=bind).start()
        self.cli = Cli(self.server.url, ns, tmp)
        self.agents: dict[str, subprocess.Popen] = {}
        self.gloo_ifname = "eth0" if self.lan else "lo"

    def address(self, name: str) -> str:
        return self.lan.address(name) if self.lan else HOSTS[name]

    def start_agent(self, name: str) -> subprocess.Popen:
        args = ["worker", "--node", name, "--fake-gpus", "2xA100-40GB",
                "--checkpoint-root", str(self.cli.home / "shared-ckpt")]
        if self.lan is None:
            p = self.cli.start(*args, "--address", HOSTS[name], log_name=f"worker-{name}", **FAST)
        else:  # on its host, through the bridge; it advertises its route to the server
            url = self.server.url.replace("127.0.0.1", self.lan.host_ip)
            log = open(self.cli.home / f"worker-{name}-{len(self.cli.procs)}.log", "wb")
            p = subprocess.Popen([*self.lan.prefix(name), sys.executable, "-m", "dispatcher", *args],
                                 env=self.cli.env(DISPATCH_REDIS_URL=url, **FAST), stdout=log,
                                 stderr=subprocess.STDOUT, start_new_session=True)
            self.cli.procs.append(p)
        self.agents[name] = p
        return p

    def close(self) -> None:
        self.cli.stop_all()
        self.server.stop()
        if self.lan:
            self.lan.delete()


@pytest.fixture
def hosts(tmp_path, ns):
    h = Hosts(tmp_path, ns)
    yield h
    h.close()


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("reference") / "reference.pt"
    p = subprocess.run([sys.executable, str(PROGRAM), "--reference", str(out), "--steps", str(STEPS)],
                       capture_output=True, text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stdout + p.stderr
    return torch.load(out, weights_only=True)


def submit_ddp(hosts: Hosts, out: Path, sleep: float) -> str:
    return hosts.cli.submit("--nodes", "2", "--gpus-per-node", "2", "--checkpointable", "--grace", "5",
                            "--retries", "2", "--env", f"OUT={out}", "--env", f"GLOO_SOCKET_IFNAME={hosts.gloo_ifname}",
                            "--env", "OMP_NUM_THREADS=1", "--", "sh", "-c", TORCHRUN.format(sleep=sleep))


def max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


def up(hosts: Hosts):
    for name in HOSTS:
        hosts.start_agent(name)
    hosts.cli.start("scheduler", **FAST)
    client = connect(hosts.server.url)
    hosts.cli.wait_for(lambda: {n.name for n in read_nodes(client, hosts.cli.ns)[0]} >= set(HOSTS), timeout=30,
                       what="the agents to register")
    return hosts.cli, client


def logs_of(cli, job):
    return "\n".join(f"--- rank {r}\n" + cli.run("logs", job, "--rank", str(r), check=False).stdout[-3000:]
                     for r in (0, 1))


def test_a_two_node_ddp_job_ends_with_the_single_process_weights(hosts, tmp_path, reference):
    cli, client = up(hosts)
    job = submit_ddp(hosts, tmp_path, sleep=0)
    cli.wait_for(lambda: read_job(client, cli.ns, job)["state"] in ("succeeded", "failed"), timeout=240,
                 what="the DDP job to end")
    j = read_job(client, cli.ns, job)
    assert j["state"] == "succeeded", logs_of(cli, job)
    assert max_diff(torch.load(tmp_path / "final.pt", weights_only=True), reference) < 1e-12
    assert f"rank 3 step {STEPS} loss" in cli.run("logs", job, "--rank", "1").stdout  # node 2 ran ranks 2, 3
    nodes = [n for n, _ in j["ranks"]]
    assert sorted(nodes) == sorted(HOSTS)  # both hosts, each advertising its own address
    assert [client.hget(keys.node(cli.ns, n), "address").decode() for n in nodes] == [hosts.address(n) for n in nodes]


def test_killing_one_ranks_agent_restarts_the_whole_gang_from_its_checkpoint(hosts, tmp_path, reference):
    cli, client = up(hosts)
    job = submit_ddp(hosts, tmp_path, sleep=0.4)
    ckpt = cli.home / "shared-ckpt" / job / "ckpt.pt"
    cli.wait_for(lambda: ckpt.exists() and torch.load(ckpt, weights_only=True)["step"] >= 5, timeout=240,
                 what="a few steps checkpointed")
    ranks = read_job(client, cli.ns, job)["ranks"]
    victim = ranks[1][0]  # rank 1's node: not the one the others meet at
    hosts.agents[victim].send_signal(signal.SIGKILL)
    hosts.agents[victim].wait()
    time.sleep(1)
    hosts.start_agent(victim)  # the host's agent comes back (as systemd would restart it)
    cli.wait_for(lambda: read_job(client, cli.ns, job)["state"] in ("succeeded", "failed"), timeout=300,
                 what="the gang to rerun and end")
    j = read_job(client, cli.ns, job)
    assert j["state"] == "succeeded", logs_of(cli, job)
    assert j["lost"] == 1 and j["attempts"][0]["outcome"] == "lost", j["attempts"]
    assert "resumed at step" in cli.run("logs", job).stdout
    assert max_diff(torch.load(tmp_path / "final.pt", weights_only=True), reference) < 1e-12
