"""Time to terminal: `dispatch shell` started -> the shell's first prompt on the user's terminal.

An embedded server of its own (benchlib.Bench), a real `dispatch scheduler` and one `dispatch worker
--fake-gpus 1xA100-40GB` as processes (cluster.start_live). Each session is `dispatch shell --gpus 1 -- bash
--norc --noprofile` on a PTY of this script's (Python's pty module), one at a time on the idle node: the clock
starts as the client process is spawned (what a user waits for after pressing Enter: the client's own start,
the submit, the scheduler's placement, the agent's launch on its PTY, the prompt's way back through Redis) and
stops at the first byte of the prompt ("dsh$ ", the agent's PS1) on the terminal. Then `exit` is typed and the
client's exit awaited. Also reported: the part from the job's submit_ms (as the record says) to the prompt,
and the machine's load before and after. Issue 21's target: p50 under 1 s on an idle node.

    python scripts/bench/shell_latency.py [--sessions 20] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import benchlib as bl  # also puts the repository on sys.path
import cluster

PROMPT = b"dsh$ "
TARGET_P50_S = 1.0


def one_session(bench: bl.Bench, ns: str) -> tuple[float, float]:
    """(spawn -> prompt, the job's submit_ms -> prompt), in seconds."""
    from dispatcher.store import keys

    master, slave = os.openpty()
    t0 = time.time()
    client = subprocess.Popen([sys.executable, "-m", "dispatcher", "shell", "--gpus", "1", "--", "bash", "--norc",
                               "--noprofile"], env=bench.env(ns), stdin=slave, stdout=slave, stderr=slave,
                              start_new_session=True)
    os.close(slave)
    seen = b""
    try:
        while PROMPT not in seen:
            if not select.select([master], [], [], 30)[0]:
                raise RuntimeError(f"no prompt within 30 s; the terminal shows {seen[-500:]!r}; "
                                   f"{bench.log_tail(f'{ns}-worker')}")
            seen += os.read(master, 4096)
        t_prompt = time.time()
        os.write(master, b"exit\r")
        client.wait(30)
        while select.select([master], [], [], 0.05)[0]:
            try:
                if not os.read(master, 4096):
                    break
            except OSError:
                break
    finally:
        if client.poll() is None:
            client.kill()
        os.close(master)
    job_ids = bench.client.zrevrange(keys.jobs_all(ns), 0, 0)
    submit_ms = int(bench.client.hget(keys.job(ns, job_ids[0].decode()), "submit_ms") or 0)
    return t_prompt - t0, t_prompt - submit_ms / 1000


def measure(sessions: int, quick: bool = False) -> dict:
    os.environ["PS1"] = PROMPT.decode()  # the agent's environment, so the shell's prompt
    with tempfile.TemporaryDirectory() as tmp:
        bench = bl.Bench(Path(tmp), quick)
        try:
            ns = bench.namespace("shell")
            load_before = os.getloadavg()
            procs = cluster.start_live(bench, ns, "s1", "1xA100-40GB")
            time.sleep(1.0)  # the agent's first heartbeats and the scheduler's first cycle are behind us
            spawn, submit = [], []
            for _ in range(sessions):
                a, b = one_session(bench, ns)
                spawn.append(a)
                submit.append(b)
                time.sleep(0.3)
            load_after = os.getloadavg()
            bench.stop(procs)
            machine = bench.machine()
        finally:
            bench.close()
    return {"sessions": sessions,
            "spawn_to_prompt_s": {"p50": bl.pct(spawn, 50), "p90": bl.pct(spawn, 90), "max": max(spawn)},
            "submit_to_prompt_s": {"p50": bl.pct(submit, 50), "p90": bl.pct(submit, 90), "max": max(submit)},
            "target_p50_s": TARGET_P50_S, "meets_target": bl.pct(spawn, 50) < TARGET_P50_S,
            "loadavg_before": load_before, "loadavg_after": load_after, "cpu_count": machine["cpu_count"],
            "server": f"{machine['server']} {machine['server_version']}", "python": machine["python"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=20)
    ap.add_argument("--json", action="store_true", help="Print the result as JSON.")
    args = ap.parse_args()
    r = measure(args.sessions)
    if args.json:
        print(json.dumps(r, indent=1))
        return
    s, u = r["spawn_to_prompt_s"], r["submit_to_prompt_s"]
    print(f"{r['sessions']} sessions, one at a time, on an idle node ({r['cpu_count']} CPUs, {r['server']}, "
          f"Python {r['python']})")
    print(f"  dispatch shell started -> first prompt byte: p50 {s['p50']:.3f} s, p90 {s['p90']:.3f} s, "
          f"max {s['max']:.3f} s (target p50 < {r['target_p50_s']:.0f} s: {'met' if r['meets_target'] else 'MISSED'})")
    print(f"  job submitted (submit_ms) -> first prompt byte: p50 {u['p50']:.3f} s, p90 {u['p90']:.3f} s")
    print("  load average (1, 5, 15 min) before: " + ", ".join(f"{x:.2f}" for x in r["loadavg_before"]) +
          "; after: " + ", ".join(f"{x:.2f}" for x in r["loadavg_after"]))


if __name__ == "__main__":
    main()
