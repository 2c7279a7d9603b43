"""The operators' views on the realistic queue (realqueue.py): what `dispatch why`, the job page
(/api/job/ID), the board (/api/board), /metrics and `top --once` cost at 10k and 100k pending.

For each size the parent writes the realistic cluster (about 3.4 running jobs a node, all four
classes, types, memory, estimates, waits up to 3 days) and runs one cycle of the real Scheduler
(its default Timing and lease), so the leader has recorded its verdicts and published its figures,
as on a live cluster. Then, in this process, alternating so that a busy machine slows each alike:

- why (recorded): views.explain.recorded, the answer `dispatch why JOB` prints, for pending jobs
  the cycle judged and jobs it did not reach;
- job page: Board.job, what /api/job/ID returns;
- why --fresh: views.explain.what_if, the policy and the forecast run on the whole queue (the old
  `why`), twice, given up after FRESH_S (reported as inf);
- board, metrics: Board.overview and the /metrics exposition, each from a Board with no cache
  (what `dispatch top --once` pays); served: the same from a Board that has read within the second,
  as the dashboard answers /api/board and /metrics (views/fresh.py: past the second, an answer waits
  for a new read).
- eta: views.forecast.read_eta, what `dispatch eta JOB` prints, for the same jobs (past EXACT_UP_TO
  pending, the approximate forecast from the jobs the cycle ranked ahead: sim/list_forecast.py);
- CLI: `dispatch why JOB`, `dispatch eta JOB` and `dispatch top --once` as fresh processes, against
  `python -c "import redis"` in the same run (the floor of any Python process that talks to Redis);
- over HTTP: GET /api/board and /metrics from a real `dispatch dashboard` process, the leader cycling;
- board JSON: the size of /api/board's answer and what encoding it costs; an answer as the dashboard
  makes it, plain and gzipped (the first gzipped answer of a read compresses the read's part).

Reports medians (and p95 where there are enough samples) in ms.

    python scripts/bench/views.py [--sizes 10000x1000,100000x1000] [--repeats 15] [--json F]
"""

from __future__ import annotations

import gc
import json
import os
import random
import subprocess
import sys
import time

import benchlib as bl
from realqueue import command_line


#: The longest the what-if (why --fresh) is waited for.
FRESH_S = 120


def timed_ms(fn, *args) -> float:
    dt, _ = bl.timed(fn, *args)
    return dt * 1000


def _served(scrape) -> bytes:
    """/metrics's plain answer, as the dashboard makes it."""
    head, body = scrape.answer()
    return head + body.data


def measure(bench: bl.Bench, ns: str, repeats: int) -> dict:
    from dispatcher.config import Timing
    from dispatcher.scheduler.loop import Scheduler
    from dispatcher.store import keys
    from dispatcher.views.board import Board
    from dispatcher.views.explain import recorded
    from dispatcher.views.forecast import read_eta
    from dispatcher.views.metrics import ClusterCollector, Scrape, exposition

    client, timing = bench.client, Timing(node_timeout_s=86400.0)
    sched = Scheduler(client, ns, timing=timing)
    sched.lease.keep()
    cycle_s, _ = bl.timed(sched.cycle)
    # this process holds what it wrote and the scheduler's mirror of the whole queue, which a viewer's
    # process does not: out of the garbage collector's passes, so that they do not make a cold board
    # read here pay for the queue (dispatch top --once below, a process of its own, shows the same)
    gc.freeze()
    pending = [i.decode() for i in client.zrange(keys.jobs_pending(ns), 0, -1)]
    judged = [j for j in pending if client.hexists(keys.job(ns, j), "verdict")]
    rng = random.Random(1)
    sample = rng.sample(judged, min(len(judged), repeats)) + rng.sample(pending, repeats)
    out = {"pending": len(pending), "judged": len(judged), "cycle_ms": round(cycle_s * 1000)}
    why, page, fresh, eta = [], [], [], []
    board = Board(client, ns, timing=timing)
    for j in sample:
        why.append(timed_ms(recorded, client, ns, j, timing))
        page.append(timed_ms(board.job, j))
        eta.append(timed_ms(read_eta, client, ns, j, timing))
    boards, metrics = [], []
    for _ in range(5):  # each right after a cycle, as on a live cluster (the leader publishes every second)
        sched.cycle()
        boards.append(timed_ms(Board(client, ns, timing=timing).overview))
        metrics.append(timed_ms(lambda: exposition(ClusterCollector(Board(client, ns, timing=timing)))))
    # what /api/board and /metrics answer from a dashboard that has read once (a read serves every
    # answer for a second, then the next answer waits for a new one: views/fresh.py)
    warm = Board(client, ns, timing=timing)
    scrape = Scrape(warm)  # as dashboard/__init__.py serves /metrics
    warm.overview()
    scrape.answer()
    served_board, served_metrics = [], []
    for _ in range(repeats):
        time.sleep(0.2)
        served_board.append(timed_ms(warm.overview))
        served_metrics.append(timed_ms(lambda: _served(scrape)))
    out.update(served_board_ms=bl.median(served_board), served_board_max_ms=max(served_board),
               served_metrics_ms=bl.median(served_metrics), served_metrics_max_ms=max(served_metrics))
    encoded = [timed_ms(json.dumps, warm.overview()) for _ in range(3)]
    out.update(board_json_kb=round(len(json.dumps(warm.overview())) / 1024), board_json_ms=bl.median(encoded))
    # /api/board's answer as the dashboard makes it: the read's JSON (and its gzip) once, a head per
    # answer; plain and gzipped alternating, spaced as served_board's
    gz_first = timed_ms(lambda: warm.overview_json(gzip=True))  # compresses the read's part
    answers, answers_gz = [], []
    for _ in range(repeats):
        time.sleep(0.2)
        answers.append(timed_ms(warm.overview_json))
        answers_gz.append(timed_ms(lambda: warm.overview_json(gzip=True)))
    out.update(board_answer_ms=bl.median(answers), board_gzip_first_ms=gz_first, board_gzip_answer_ms=bl.median(
        answers_gz), board_gzip_kb=round(len(warm.overview_json(gzip=True)) / 1024))
    env = dict(os.environ, DISPATCH_REDIS_URL=bench.url, DISPATCH_NAMESPACE=ns, DISPATCH_NODE_TIMEOUT_S="86400")
    cli, cli_eta, top, base = [], [], [], []
    for j in sample[:repeats]:
        base.append(_run([sys.executable, "-c", "import redis"], env))
        cli.append(_run([sys.executable, "-m", "dispatcher", "why", j], env))
        cli_eta.append(_run([sys.executable, "-m", "dispatcher", "eta", j], env))
    top_base = []
    for _ in range(5):
        sched.cycle()
        top_base.append(_run([sys.executable, "-c", "import redis"], env))
        top.append(_run([sys.executable, "-m", "dispatcher", "top", "--once"], env))
    out.update(_over_http(env, sched, repeats))
    sched.lease.release()
    # the what-if as `dispatch why --fresh` runs it, a process of its own: given up, it would run on in
    # the background of this one (as on the dashboard) and share it with every measure after it
    for j in sample[:2]:
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "dispatcher", "why", "--fresh", "--timeout", str(FRESH_S), j],
                           env=env, capture_output=True)
        fresh.append((time.perf_counter() - t0) * 1000 if p.returncode == 0 else float("inf"))
        if p.returncode != 0:
            break
    out.update(why_ms=bl.median(why), why_p95_ms=bl.pct(why, 95), job_page_ms=bl.median(page),
               job_page_p95_ms=bl.pct(page, 95), why_fresh_ms=bl.median(fresh), board_ms=bl.median(boards),
               eta_ms=bl.median(eta), eta_p95_ms=bl.pct(eta, 95), eta_max_ms=max(eta),
               metrics_ms=bl.median(metrics), cli_why_ms=bl.median(cli), cli_eta_ms=bl.median(cli_eta),
               cli_top_once_ms=bl.median(top), cli_top_baseline_ms=bl.median(top_base),
               cli_top_over_baseline_ms=bl.median(top) - bl.median(top_base), cli_baseline_ms=bl.median(base),
               cli_ratio=round(bl.median(cli) / bl.median(base), 2))
    return {k: (round(v, 1) if isinstance(v, float) else v) for k, v in out.items()}


def _over_http(env: dict, sched, repeats: int) -> dict:
    """/api/board and /metrics as a browser and Prometheus get them: GETs to a real `dispatch dashboard`
    process, the leader cycling beside it (a cycle, then the requests, as pages poll); the first
    answer (the dashboard reads once at its start) and the medians after it."""
    import urllib.request

    dash = subprocess.Popen([sys.executable, "-m", "dispatcher", "dashboard", "--port", "0"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        line = dash.stderr.readline()
        url = line.split(" on ", 1)[1].split()[0] if " on " in line else None
        if url is None:
            raise SystemExit(f"dispatch dashboard did not start: {line}")

        def get(path: str) -> float:
            t0 = time.perf_counter()
            with urllib.request.urlopen(url.rstrip("/") + path, timeout=60) as r:
                r.read()
            return (time.perf_counter() - t0) * 1000

        time.sleep(1.0)  # its warm-up read
        first = {"board": get("/api/board"), "metrics": get("/metrics")}
        board, metrics = [], []
        for _ in range(repeats):
            sched.cycle()
            time.sleep(0.3)
            board.append(get("/api/board"))
            metrics.append(get("/metrics"))
    finally:
        dash.terminate()
        dash.wait(timeout=30)
    return {"http_board_first_ms": first["board"], "http_board_ms": bl.median(board), "http_board_max_ms": max(board),
            "http_metrics_first_ms": first["metrics"], "http_metrics_ms": bl.median(metrics),
            "http_metrics_max_ms": max(metrics)}


def _run(argv: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    p = subprocess.run(argv, env=env, capture_output=True)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {p.stderr.decode()[-500:]}")
    return (time.perf_counter() - t0) * 1000


def main() -> None:
    command_line("views", lambda bench, ns, size, nodes, args: measure(bench, ns, args.repeats), repeats=15)


if __name__ == "__main__":
    main()
