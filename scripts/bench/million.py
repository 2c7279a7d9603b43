"""A million pending jobs (issue 16's last targets): what the server holds per job on Valkey and on
Redis 7, and a new leader's read of the whole queue (time, peak RSS, and a second whole read, as
after a Redis error, that must not double it).

For each server (the embedded Valkey, and Debian's redis-server 7 when /usr/bin/redis-server is
there) and each size, a fresh server with no persistence gets the realistic cluster and queue
(realqueue.py: 1,000 nodes, ~3,100 running jobs, `pending` jobs of 50 users' templates). Bytes
per pending job are INFO's used_memory after the write less before it, over the pending jobs (the
running jobs' and nodes' records are in it too: ~0.3% at 1M), and again after the leader's first
cycle, which writes each judged job's verdict. The read runs in a child process (its own RSS):
`Scheduler.cycle()` with the default Timing, then `mirror.invalidate()` and a second cycle.

    python scripts/bench/million.py [--sizes 1000000x1000] [--servers valkey,redis7,redis7-defaults]
                                    [--read valkey] [--json F]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import benchlib as bl
from realqueue import Realistic

REDIS7 = "/usr/bin/redis-server"


def start(kind: str, tmp: Path, compact: bool = True):
    """(url, stop) of a fresh server of `kind` with no persistence: the embedded Valkey as `dispatch up`
    runs it, or Redis 7 with its defaults or (`compact`) with the hash setting docs/performance.md
    recommends (embedded.COMPACT_HASHES)."""
    from dispatcher.up.embedded import COMPACT_HASHES, EmbeddedServer, free_port

    if kind == "valkey":
        server = EmbeddedServer(tmp / kind, appendonly=False).start()
        return server.url, server.stop
    port = free_port()
    (tmp / kind).mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([REDIS7, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(tmp / kind), *(COMPACT_HASHES if compact else ())], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    from dispatcher.store.connect import connect

    for _ in range(100):
        try:
            connect(url).ping()
            break
        except Exception:
            time.sleep(0.1)

    def stop():
        proc.terminate()
        proc.wait(timeout=30)
    return url, stop


def measure(kind: str, size: str, read: bool) -> dict:
    compact = kind != "redis7-defaults"
    kind = "redis7" if kind.startswith("redis7") else kind
    from dispatcher.store.connect import connect

    pending, nodes = (int(x) for x in size.split("x"))
    tmp = Path(tempfile.mkdtemp(prefix=f"million-{kind}-"))
    url, stop = start(kind, tmp, compact)
    try:
        client = connect(url)
        info = client.info("server")
        before = client.info("memory")["used_memory"]
        t0 = time.perf_counter()
        Realistic(size, nodes).write(client, "bench-million", pending)
        row = {"server": kind + ("" if compact else " (defaults)"), "version": info.get("valkey_version") or info.get("redis_version"), "size": size,
               "write_s": round(time.perf_counter() - t0, 1)}
        row["bytes_per_pending_job"] = round((client.info("memory")["used_memory"] - before) / pending)
        if read:
            row.update(bl.run_child("million.py", {"url": url, "ns": "bench-million"}))
            row["bytes_per_pending_job_after_a_cycle"] = round((client.info("memory")["used_memory"] - before)
                                                               / pending)
        return row
    finally:
        stop()


def child(args: dict) -> dict:
    __import__("rq")
    from dispatcher.config import Timing
    from dispatcher.scheduler.loop import Scheduler
    from dispatcher.store.connect import connect

    rss0, _ = bl.rss_mb()
    sched = Scheduler(connect(args["url"]), args["ns"], timing=Timing(node_timeout_s=86400.0))
    sched.lease.keep()
    cold_s, _ = bl.timed(sched.cycle)
    _, peak_first = bl.rss_mb()
    sched.mirror.invalidate()  # as after a Redis error: everything is read again
    again_s, _ = bl.timed(sched.cycle)
    now, peak = bl.rss_mb()
    sched.lease.release()
    return {"cold_cycle_s": round(cold_s, 1), "reread_cycle_s": round(again_s, 1), "rss_base_mb": round(rss0),
            "rss_peak_after_first_mb": round(peak_first), "rss_peak_after_reread_mb": round(peak),
            "rss_now_mb": round(now), "pending_read": len(sched.mirror.backlog)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000000x1000")
    ap.add_argument("--servers", default="valkey,redis7,redis7-defaults",
                    help="valkey (as dispatch up runs it), redis7 (with the recommended hash setting), "
                         "redis7-defaults (as installed)")
    ap.add_argument("--read", default="valkey", help="the servers on which a scheduler reads the queue too")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rows = []
    for kind in args.servers.split(","):
        if kind.startswith("redis7") and not Path(REDIS7).exists():
            print(json.dumps({"server": kind, "skipped": f"no {REDIS7} (apt-get install redis-server)"}), flush=True)
            continue
        for size in args.sizes.split(","):
            rows.append(measure(kind, size, kind in args.read.split(",")))
            print(json.dumps(rows[-1]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        print(json.dumps(child(json.loads(sys.argv[2]))))
    else:
        main()
