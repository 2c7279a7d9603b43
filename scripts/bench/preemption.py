"""Preemption latency on an otherwise idle machine.

Starts its own server, one fake-GPU node agent (2 GPUs) and a scheduler, then
repeats: fill the node with two low-priority checkpointable jobs, submit a
critical 1-GPU job, and measure
  - critical submit -> victim signalled (the victim's SIGTERM trap stamps the time),
  - critical submit -> critical running (its started_at).
Prints p50/p99 and writes JSON with --json FILE.

    python scripts/bench/preemption.py [--runs 30] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import benchlib as bl  # noqa: E402 (beside this file)
from dispatcher.api import Client  # noqa: E402
from dispatcher.up.embedded import EmbeddedServer  # noqa: E402
from dispatcher.store.jobs import read_log  # noqa: E402

VICTIM = "trap 'echo SIGNALLED $(date +%s.%N); exit 0' TERM; while :; do sleep 0.05; done"


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]



def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dispatch-bench-"))
    server = EmbeddedServer(tmp / "redis", appendonly=False).start()
    policy = tmp / "policy.toml"
    policy.write_text('[defaults]\nmin_run = "0s"\npreempt_cooldown = "0s"\n')
    env = dict(os.environ, DISPATCH_REDIS_URL=server.url, DISPATCH_HOME=str(tmp), PYTHONPATH=str(ROOT), **bl.ROOT_JOBS)
    procs = [subprocess.Popen([sys.executable, "-m", "dispatcher", *a], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
             for a in (["worker", "--node", "n1", "--fake-gpus", "2xA100-40GB"], ["scheduler", "--policy", str(policy)])]
    c = Client(server.url)
    to_signal, to_running = [], []
    try:
        bl.wait_until(lambda: c.redis.zcard("dispatch:nodes:heartbeat"))
        for _ in range(args.runs):
            lows = [c.submit(["sh", "-c", VICTIM], priority="low", gpus=1, checkpointable=True, grace="5s")
                    for _ in range(2)]
            bl.wait_until(lambda: all(c.show(j)["state"] == "running" for j in lows))
            t0 = time.time()
            crit = c.submit(["true"], priority="critical", gpus=1)
            started = bl.wait_until(lambda: c.show(crit)["started_at"])
            signalled = bl.wait_until(lambda: [float(chunk.split()[1]) for j in lows
                                      for _, chunk in read_log(c.redis, c.ns, j) if chunk.startswith(b"SIGNALLED")])
            to_signal.append(min(signalled) - t0)
            to_running.append(started - t0)
            for j in lows:
                c.cancel(j)
            c.wait(lows + [crit], timeout_s=30)
    finally:
        for p in procs:
            os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            p.wait(20)
        server.stop()
    result = {
        "runs": args.runs,
        "submit_to_victim_signalled_ms": {"p50": round(pct(to_signal, 50) * 1000, 1),
                                          "p99": round(pct(to_signal, 99) * 1000, 1),
                                          "median": round(statistics.median(to_signal) * 1000, 1)},
        "submit_to_critical_running_ms": {"p50": round(pct(to_running, 50) * 1000, 1),
                                          "p99": round(pct(to_running, 99) * 1000, 1),
                                          "median": round(statistics.median(to_running) * 1000, 1)},
    }
    print(f"{'measure':<36}{'p50 ms':>10}{'p99 ms':>10}")
    for k in ("submit_to_victim_signalled_ms", "submit_to_critical_running_ms"):
        print(f"{k:<36}{result[k]['p50']:>10}{result[k]['p99']:>10}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
