"""Benchmark: a submit under a running `dispatch up`, as its owner makes it: Client.submit x 300 in
one process (median, p99), then `dispatch submit` x RUNS as fresh processes (median, p90).

    python scripts/bench/up_submit.py [CHECKOUT] [RUNS]

CHECKOUT (default: this one) is the tree whose `dispatcher` runs, so that an older checkout can be
measured the same way. It starts its own `up` with --fake-gpus in a temporary state dir, and stops
it. Prints one JSON object.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

API = """
import json, statistics, time
from dispatcher.api import Client
c = Client()
lat = []
for i in range(300):
    t = time.perf_counter(); c.submit(command=["sleep", "600"], gpus=1); lat.append((time.perf_counter() - t) * 1000)
lat.sort()
print(json.dumps({"api_submit_ms_median": round(statistics.median(lat), 2), "api_submit_ms_p99": round(lat[296], 2)}))
"""


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2])
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    env = dict(os.environ, DISPATCH_HOME=tempfile.mkdtemp(prefix="up-submit-"), PYTHONPATH=str(root),
               DISPATCH_ALLOW_ROOT_JOBS="1")
    env.pop("DISPATCH_REDIS_URL", None)

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "dispatcher", *args], env=env, cwd=root, capture_output=True,
                              text=True)

    up = subprocess.Popen([sys.executable, "-m", "dispatcher", "up", "--fake-gpus", "2xA100-40GB", "--no-dashboard"],
                          env=env, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          start_new_session=True)
    try:
        for _ in range(300):
            if cli("queue").returncode == 0:
                break
            time.sleep(0.2)
        api = json.loads(subprocess.run([sys.executable, "-c", API], env=env, cwd=root, capture_output=True,
                                        text=True, check=True).stdout)
        walls = []
        for _ in range(runs):
            t = time.perf_counter()
            p = cli("submit", "--gpus", "1", "--", "sleep", "600")
            walls.append((time.perf_counter() - t) * 1000)
            if p.returncode != 0:
                raise SystemExit(f"dispatch submit failed: {p.stderr.strip()}")
        walls.sort()
        print(json.dumps({"checkout": str(root), **api, "cli_submit_ms_median": round(statistics.median(walls), 1),
                          "cli_submit_ms_p90": round(walls[int(0.9 * (len(walls) - 1))], 1), "runs": runs,
                          "load": os.getloadavg()[0]}))
    finally:
        os.killpg(up.pid, signal.SIGTERM)
        up.wait(30)


if __name__ == "__main__":
    main()
