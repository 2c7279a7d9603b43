"""The chaos suite: hundreds of short jobs while node agents, job processes, schedulers and Redis
are killed -9 at random; then every job is checked to have succeeded exactly once.

    python scripts/chaos/run.py [--jobs 300] [--nodes 3] [--gpus-per-node 4] [--fault-every 2.0]
                                [--seed 1] [--netns] [--json FILE]

It starts its own Redis-compatible server (append-only file, fsync always, so that a kill -9 of
the server loses nothing acknowledged), two schedulers (one leads, one stands by) and one node agent
per node with fake GPUs, all as real processes. With --netns (root, iproute2) one more node agent
runs as a separate host in a network namespace, reaching Redis over a veth pair, and the link is
cut mid-run (docs/guarantees.md: the cut-off agent kills its copies before they rerun elsewhere).

Each job is a small resumable shell job, like a training job with checkpoints: it appends
"start <attempt> <node> <time>" to its own file, sleeps, appends "end ...", and, when resumed after
an end was already written (its completion was not recorded before a crash), exits at once as done.
From those files the suite counts:
- losses: jobs that did not end `succeeded`;
- doubles: jobs whose work ran to its end twice, or two attempts alive at once;
- reruns: attempts beyond the first; faults injected, by kind.
It exits 1 if losses or doubles are not 0.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from dispatcher.embedded import EmbeddedServer  # noqa: E402
from dispatcher.store import keys  # noqa: E402
from dispatcher.store.connect import connect, text  # noqa: E402

NS = "chaos"
JOB = r'''f="$CHAOS_DIR/$DISPATCH_JOB_ID"
if grep -q '^end' "$f" 2>/dev/null; then echo "resumed after completion: done"; exit 0; fi
echo "start $DISPATCH_ATTEMPT $DISPATCH_NODE $(date +%s.%N)" >> "$f"
sleep "$1"
echo "end $DISPATCH_ATTEMPT $DISPATCH_NODE $(date +%s.%N)" >> "$f"
'''
TIMING = {"DISPATCH_HEARTBEAT_S": "0.5", "DISPATCH_NODE_TIMEOUT_S": "5", "DISPATCH_LEASE_S": "3",
          "DISPATCH_TICK_S": "0.5"}


class Cluster:
    def __init__(self, base: Path, url: str, env: dict):
        self.base, self.url, self.env = base, url, env
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs = base / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)

    def start(self, name: str, *args, prefix=()) -> subprocess.Popen:
        log = open(self.logs / f"{name}.log", "ab")
        env = dict(os.environ, **self.env, DISPATCH_REDIS_URL=self.url, DISPATCH_NAMESPACE=NS,
                   DISPATCH_HOME=str(self.base / "home"), PYTHONUNBUFFERED="1")
        p = subprocess.Popen([*prefix, sys.executable, "-m", "dispatcher", *args], env=env, stdout=log,
                             stderr=subprocess.STDOUT, cwd=str(ROOT))
        self.procs[name] = p
        return p

    def agent(self, node: str, gpus: int, prefix=()) -> subprocess.Popen:
        return self.start(f"agent-{node}", "worker", "--node", node, "--fake-gpus", f"{gpus}xA100-40GB",
                          "--work-dir", str(self.base / "nodes" / node), prefix=prefix)

    def kill(self, name: str) -> None:
        p = self.procs.get(name)
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait()

    def stop_all(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()


class NetNode:
    """A node agent on its own network host: a namespace joined to this one by a veth pair."""

    def __init__(self, name="dchaos", host_ip="10.251.7.1", node_ip="10.251.7.2"):
        self.name, self.host_ip, self.node_ip = name, host_ip, node_ip
        self.veth_h, self.veth_n = f"{name}-h", f"{name}-n"

    @staticmethod
    def available() -> bool:
        return os.geteuid() == 0 and shutil.which("ip") is not None

    def _ip(self, *args, ns=False):
        cmd = ["ip", "netns", "exec", self.name, "ip", *args] if ns else ["ip", *args]
        subprocess.run(cmd, check=True, capture_output=True)

    def create(self):
        self.delete()
        subprocess.run(["ip", "netns", "add", self.name], check=True)
        self._ip("link", "add", self.veth_h, "type", "veth", "peer", "name", self.veth_n)
        self._ip("link", "set", self.veth_n, "netns", self.name)
        self._ip("addr", "add", f"{self.host_ip}/24", "dev", self.veth_h)
        self._ip("link", "set", self.veth_h, "up")
        self._ip("addr", "add", f"{self.node_ip}/24", "dev", self.veth_n, ns=True)
        self._ip("link", "set", self.veth_n, "up", ns=True)
        self._ip("link", "set", "lo", "up", ns=True)

    def link(self, up: bool):
        self._ip("link", "set", self.veth_n, "up" if up else "down", ns=True)

    @property
    def prefix(self):
        return ("ip", "netns", "exec", self.name)

    def delete(self):
        subprocess.run(["ip", "link", "del", self.veth_h], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)


def read_attempts(path: Path) -> list[dict]:
    out = []
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        kind, attempt, node, at = line.split()
        if kind == "start":
            out.append({"attempt": int(attempt), "node": node, "start": float(at), "end": None})
        elif out:
            for a in reversed(out):
                if a["attempt"] == int(attempt) and a["node"] == node and a["end"] is None:
                    a["end"] = float(at)
                    break
    return out


def judge(client, job_ids: list[str], files: Path) -> dict:
    pipe = client.pipeline(transaction=False)
    for j in job_ids:
        pipe.hmget(keys.job(NS, j), "state", "reason")
    states = {j: (text(s), text(r)) for j, (s, r) in zip(job_ids, pipe.execute())}
    losses, doubles, reruns, overlaps = [], [], 0, []
    for j in job_ids:
        attempts = read_attempts(files / j)
        reruns += max(0, len(attempts) - 1)
        if states[j][0] != "succeeded":
            losses.append((j, states[j]))
        if sum(1 for a in attempts if a["end"] is not None) > 1:
            doubles.append(j)
        spans = sorted((a["start"], a["end"] or a["start"]) for a in attempts)
        if any(b[0] < a[1] for a, b in zip(spans, spans[1:])):
            overlaps.append(j)
    return {"jobs": len(job_ids), "succeeded": sum(1 for s, _ in states.values() if s == "succeeded"),
            "losses": len(losses), "doubles": len(set(doubles) | set(overlaps)), "reruns": reruns,
            "lost_jobs": losses[:10], "double_jobs": sorted(set(doubles) | set(overlaps))[:10]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=300)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--gpus-per-node", type=int, default=4)
    ap.add_argument("--fault-every", type=float, default=2.0, help="mean seconds between faults")
    ap.add_argument("--job-s", default="0.2,2.0", help="job durations, uniform between MIN,MAX seconds")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--netns", action="store_true", help="also cut a node agent in a network namespace off")
    ap.add_argument("--json", default=None)
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs) afterwards")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    lo, hi = (float(x) for x in args.job_s.split(","))
    base = Path(tempfile.mkdtemp(prefix="dispatch-chaos-"))
    files = base / "jobs"
    files.mkdir()
    netnode = None
    if args.netns:
        if not NetNode.available():
            print("--netns needs root and iproute2 (`ip`)", file=sys.stderr)
            return 2
        netnode = NetNode()
        netnode.create()
    bind = "127.0.0.1" + (f" {netnode.host_ip}" if netnode else "")
    server = EmbeddedServer(base / "redis", fsync="always", bind=bind).start()
    cluster = Cluster(base, server.url, dict(TIMING, CHAOS_DIR=str(files)))
    faults: Counter = Counter()
    t0 = time.monotonic()
    try:
        client = connect(server.url)
        for i in range(2):
            cluster.start(f"scheduler-{i}", "scheduler")
        nodes = [f"n{i}" for i in range(args.nodes)]
        for n in nodes:
            cluster.agent(n, args.gpus_per_node)
        if netnode:
            net_url = f"redis://{netnode.host_ip}:{server.port}/0"
            cluster.start("agent-far", "--redis", net_url, "worker", "--node", "far", "--fake-gpus",
                          f"{args.gpus_per_node}xA100-40GB", "--work-dir", str(base / "nodes" / "far"),
                          prefix=netnode.prefix)
        from dispatcher.api import Client

        api = Client(server.url, ns=NS)
        job_ids = api.submit_many([{"command": ["sh", "-c", JOB, "chaos", f"{rng.uniform(lo, hi):.2f}"],
                                    "gpus": rng.choice((1, 1, 1, 2)), "checkpointable": True, "retries": 20,
                                    "cwd": str(base)} for _ in range(args.jobs)])
        print(f"submitted {len(job_ids)} jobs to {args.nodes} nodes of {args.gpus_per_node} fake GPUs"
              + (" + 1 node in a network namespace" if netnode else ""), flush=True)
        cut_done = False
        next_fault = time.monotonic() + rng.expovariate(1.0 / args.fault_every)
        while time.monotonic() - t0 < args.timeout:
            done = client.zcard(keys.jobs_pending(NS)) + client.zcard(keys.jobs_active(NS))
            if done == 0:
                break
            if netnode and not cut_done and time.monotonic() - t0 > 5:
                netnode.link(False)
                faults["network cut (far node)"] += 1
                cut_done = True
                cut_at = time.monotonic()
            if netnode and cut_done and cut_at and time.monotonic() - cut_at > 12:
                netnode.link(True)
                cut_at = None
            if time.monotonic() >= next_fault:
                inject(rng, cluster, client, server, nodes, args.gpus_per_node, faults)
                next_fault = time.monotonic() + rng.expovariate(1.0 / args.fault_every)
            time.sleep(0.1)
        if netnode and cut_done:
            netnode.link(True)
        result = judge(client, job_ids, files)
    finally:
        cluster.stop_all()
        server.stop()
        if netnode:
            netnode.delete()
    result.update({"faults": dict(faults), "faults_total": sum(faults.values()),
                   "wall_s": round(time.monotonic() - t0, 1), "work_dir": str(base) if args.keep else None})
    print(f"jobs {result['jobs']}, succeeded {result['succeeded']}, faults injected {result['faults_total']} "
          f"({', '.join(f'{k} {v}' for k, v in sorted(faults.items()))}), reruns {result['reruns']}, "
          f"losses {result['losses']}, doubles {result['doubles']}, in {result['wall_s']} s")
    if result["losses"] or result["doubles"]:
        print(f"lost: {result['lost_jobs']}; doubles: {result['double_jobs']}; logs in {base}", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    if not args.keep and not (result["losses"] or result["doubles"]):
        shutil.rmtree(base, ignore_errors=True)
    return 1 if result["losses"] or result["doubles"] else 0


def inject(rng, cluster: Cluster, client, server: EmbeddedServer, nodes, gpus, faults: Counter) -> None:
    kind = rng.choices(["agent", "job", "scheduler", "redis"], weights=[4, 4, 2, 1])[0]
    if kind == "agent":
        node = rng.choice(nodes)
        cluster.kill(f"agent-{node}")
        time.sleep(rng.uniform(0.2, 2.0))
        cluster.agent(node, gpus)
        faults["node agent kill -9"] += 1
    elif kind == "job":
        try:
            ids = [text(i) for i in client.zrange(keys.jobs_active(NS), 0, -1)]
            pids = [int(text(client.hget(keys.job(NS, j), "pid")) or 0) for j in ids]
        except Exception:
            return
        pids = [p for p in pids if p]
        if pids:
            try:
                os.kill(rng.choice(pids), signal.SIGKILL)
                faults["job process kill -9"] += 1
            except ProcessLookupError:
                pass
    elif kind == "scheduler":
        i = rng.randrange(2)
        cluster.kill(f"scheduler-{i}")
        time.sleep(rng.uniform(0.1, 1.0))
        cluster.start(f"scheduler-{i}", "scheduler")
        faults["scheduler kill -9"] += 1
    else:
        server.proc.send_signal(signal.SIGKILL)
        server.proc.wait()
        time.sleep(rng.uniform(0.2, 1.0))
        server.start()
        faults["Redis kill -9 and restart"] += 1


if __name__ == "__main__":
    sys.exit(main())
