"""The CLI's own time: `dispatch submit`, `queue` and `show` against `python -c "import redis"`.

Each command is a fresh process, as a user's shell runs it, on a server of its own holding a
realistic small lab (8 registered nodes, 200 pending jobs of 5 users and 4 classes). The baseline, the
interpreter starting and importing redis, is timed in the same run, alternating with the
commands, so a busy machine slows both. Reports medians and each command's ratio to the
baseline (issue 21's target: at most 1.5x).

    python scripts/bench/cli_time.py [--repeats 15]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))


def fill(url: str, ns: str) -> str:
    """A small lab: 8 nodes of 8 GPUs (A100 and V100) that have sent a heartbeat (submit checks that some
    node could hold the job), and 200 pending jobs of 5 users and 4 classes. Returns an id to show."""
    from dispatcher.api import Client
    from dispatcher.core.model import GpuInfo
    from dispatcher.store.nodes import write_heartbeat

    c = Client(url, ns)
    for n in range(8):
        kind, mem = ("A100", 80.0) if n % 2 else ("V100", 32.0)
        gpus = [GpuInfo(i, f"NVIDIA {kind}-{mem:g}GB", mem, uuid=f"GPU-{n}-{i}") for i in range(8)]
        write_heartbeat(c.redis, ns, f"n{n}", gpus, 64, 512.0, int(time.time() * 1000), announce=True)
    reqs = [{"command": ["python", "train.py", f"--lr={i}"], "gpus": 1 + i % 4, "user": f"u{i % 5}",
             "priority": ("low", "normal", "high", "critical")[i % 4], "name": f"run-{i}", "est": "2h"}
            for i in range(200)]
    ids = c.submit_many(reqs)
    return ids[len(ids) // 2]


def timed_run(argv: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    p = subprocess.run(argv, env=env, capture_output=True)
    took = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {p.stderr.decode()[-500:]}")
    return took


def measure(url: str, repeats: int) -> dict:
    ns = "bench-cli"
    job = fill(url, ns)
    env = dict(os.environ, DISPATCH_REDIS_URL=url, DISPATCH_NAMESPACE=ns)
    py = sys.executable
    cases = {
        "import redis": [py, "-c", "import redis"],
        "submit": [py, "-m", "dispatcher", "submit", "--gpus", "1", "--", "python", "train.py"],
        # a typed request: submit checks it against the nodes with the policy's own rule (loads the policy)
        "submit --gpu-type": [py, "-m", "dispatcher", "submit", "--gpus", "2", "--gpu-type", "A100", "--", "python",
                              "train.py"],
        "queue": [py, "-m", "dispatcher", "queue"],
        "show": [py, "-m", "dispatcher", "show", job],
    }
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(repeats):  # interleaved: the baseline sees the same load as the commands
        for name, argv in cases.items():
            times[name].append(timed_run(argv, env))
    base = statistics.median(times["import redis"])
    out = {name: {"median_ms": round(1000 * statistics.median(t), 1),
                  "ratio_to_import_redis": round(statistics.median(t) / base, 2)} for name, t in times.items()}
    out["load_1min"] = os.getloadavg()[0]
    out["repeats"] = repeats
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    from dispatcher.up.embedded import EmbeddedServer

    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedServer(Path(tmp) / "redis", appendonly=False).start()
        try:
            print(json.dumps(measure(server.url, args.repeats), indent=1))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
