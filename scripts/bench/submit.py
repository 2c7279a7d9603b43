"""Benchmark 1: submit throughput, and the wall time of one `dispatch submit` process.

- Client.submit, one job at a time, and Client.submit_many in batches: jobs/s, against
  the ceiling: raw redis-py pipelines (transaction=False) writing the same records
  (encoded beforehand with codec.encode_spec) under the same keys and fields as
  store.jobs.write_jobs (rawwrite.py; ours go through lua/submit.lua), in batches of the
  same size.
- `dispatch submit --from FILE.jsonl`, a fresh process, against the same raw writes as a fresh
  process (rawwrite.py's main), both paying their start-up; the in-process ceiling beside it.
- `python -m dispatcher submit --gpus 1 -- true` (a fresh process each time) against
  `python -c 'import click, redis, msgpack'`, run alternately.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import benchlib as bl
from rawwrite import raw_write

REQUEST = {"command": ["python", "train.py", "--lr", "0.1"], "gpus": 2, "name": "train", "est": "2h"}


def _records(n: int) -> list[tuple[bytes, int]]:
    """n copies of REQUEST's record, encoded as write_jobs encodes them (ids 1..n)."""
    from dispatcher.core.spec import build_spec
    from dispatcher.store.codec import encode_spec

    spec = build_spec(command=REQUEST["command"], user="bench", submit_ms=int(time.time() * 1000), cwd=os.getcwd(),
                      gpus=REQUEST["gpus"], name=REQUEST["name"], est=REQUEST["est"])
    return [(encode_spec(spec, str(i + 1)), spec.submit_ms) for i in range(n)]


def _ceiling(bench: bl.Bench, ns: str, records, batch: int) -> float:
    """jobs/s of raw_write over `records` in batches of `batch`, on an empty namespace."""
    bench.drop(ns)
    t, _ = bl.timed(lambda: [raw_write(bench.client, ns, records[i:i + batch]) for i in range(0, len(records), batch)])
    bench.drop(ns)
    return len(records) / t


CEILING = "raw pipelined writes of the same encoded records, batches of {batch}, no MULTI"


def throughput(bench: bl.Bench, repeats: int, n_single: int, n_batch: int, batch: int) -> list[bl.Figure]:
    from dispatcher.api import Client

    ns = bench.namespace("submit")
    client = Client(bench.url, ns)
    records = _records(n_batch)
    single, many, ceiling = [], [], []
    for _ in range(repeats):
        bench.drop(ns)
        t, _ = bl.timed(lambda: [client.submit(**REQUEST) for _ in range(n_single)])
        single.append(n_single / t)
        bench.drop(ns)
        t, _ = bl.timed(lambda: [client.submit_many([REQUEST] * batch) for _ in range(n_batch // batch)])
        many.append(n_batch / t)
        ceiling.append(_ceiling(bench, ns, records, batch))
    bench.drop(ns)
    what = CEILING.format(batch=batch)
    return [
        bl.Figure("submit.single_jobs_per_s", bl.median(single), "jobs/s", bl.median(ceiling), what, None, repeats,
                  note=f"{n_single} x Client.submit, one job each"),
        bl.Figure(f"submit.batch_jobs_per_s[batch={batch}]", bl.median(many), "jobs/s", bl.median(ceiling), what,
                  bl.ratio_at_least(0.5), repeats, note=f"{n_batch} jobs through Client.submit_many"),
    ]


def from_file(bench: bl.Bench, runs: int, n: int) -> list[bl.Figure]:
    """`dispatch submit --from FILE.jsonl` of n lines, a fresh process each run: jobs/s over its whole
    wall time, start-up included, against the raw ceiling as a fresh process too (rawwrite.py: Python,
    redis-py's import, the same n encoded records written in batches of 1,000), run alternately. The
    in-process ceiling (no start-up), measured just before each run, is kept beside it."""
    import json

    import msgpack

    ns = bench.namespace("submit-from")
    path = bench.tmp / f"requests-{n}.jsonl"
    path.write_text("".join(json.dumps({**REQUEST, "name": f"sweep-{i}"}) + "\n" for i in range(n)))
    records = _records(n)
    encoded = bench.tmp / f"records-{n}.msgpack"
    encoded.write_bytes(msgpack.packb([list(r) for r in records]))
    ours = [sys.executable, "-m", "dispatcher", "submit", "--from", str(path)]
    raw = [sys.executable, str(bl.HERE / "rawwrite.py"), bench.url, ns, str(encoded), "1000"]
    rates, raw_rates, in_process = [], [], []
    for _ in range(runs):
        in_process.append(_ceiling(bench, ns, records, 1000))
        for argv, into in ((raw, raw_rates), (ours, rates)):
            t0 = time.perf_counter()
            p = subprocess.run(argv, env=bench.env(ns), capture_output=True, text=True)
            took = time.perf_counter() - t0
            if p.returncode != 0 or (argv is ours and len(p.stdout.split()) != n):
                raise RuntimeError(f"{argv[1:3]} exited {p.returncode}: {p.stderr.strip()[-500:]}")
            into.append(n / took)
            bench.drop(ns)
    return [bl.Figure(f"submit.from_file_jobs_per_s[lines={n}]", bl.median(rates), "jobs/s", bl.median(raw_rates),
                      "a fresh process writing the same encoded records raw (rawwrite.py), batches of 1000",
                      bl.ratio_at_least(0.5), runs,
                      note=f"python -m dispatcher submit --from FILE.jsonl of {n:,} requests, a fresh process each "
                           "run, start-up included (as the baseline's)",
                      extra={"in_process_ceiling_jobs_per_s": bl.median(in_process),
                             "ratio_to_in_process_ceiling": round(bl.median(rates) / bl.median(in_process), 3)})]


def cli_wall(bench: bl.Bench, runs: int) -> list[bl.Figure]:
    ns = bench.namespace("submit-cli")
    env = bench.env(ns)
    submit = [sys.executable, "-m", "dispatcher", "submit", "--gpus", "1", "--", "true"]
    imports = [sys.executable, "-c", "import click, redis, msgpack"]
    bare = [sys.executable, "-c", "pass"]

    def wall(argv):
        t0 = time.perf_counter()
        p = subprocess.run(argv, env=env, capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {p.returncode}: {p.stderr.strip()[-500:]}")
        return time.perf_counter() - t0

    wall(submit), wall(imports)  # warm the page cache
    times = {"submit": [], "imports": [], "bare": []}
    for _ in range(runs):
        for name, argv in (("submit", submit), ("imports", imports), ("bare", bare)):
            times[name].append(wall(argv) * 1000)
    bench.drop(ns)
    return [bl.Figure("submit.cli_wall_ms", bl.median(times["submit"]), "ms", bl.median(times["imports"]),
                      "python -c 'import click, redis, msgpack'", bl.ratio_at_most(1.5), runs,
                      note="python -m dispatcher submit --gpus 1 -- true, a fresh process each run",
                      extra={"python_-c_pass_ms": bl.median(times["bare"])})]


def run(bench: bl.Bench) -> list[bl.Figure]:
    if bench.quick:
        return (throughput(bench, repeats=3, n_single=300, n_batch=5_000, batch=1_000)
                + from_file(bench, 2, 5_000) + cli_wall(bench, runs=5))
    # (the example sweep is 50,000 jobs; at 20,000 the process start-up is a third of the time)
    return (throughput(bench, repeats=5, n_single=2_000, n_batch=20_000, batch=1_000)
            + from_file(bench, 3, 20_000) + from_file(bench, 3, 50_000) + cli_wall(bench, runs=15))
