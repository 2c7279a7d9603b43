"""The benchmark suite of issue 7: every figure next to its baseline and its target.

    python scripts/bench/run.py [--quick] [--json FILE] [--only submit,cycle,...] [--plot PNG]

Starts its own Redis-compatible server (the embedded Valkey, no persistence, on a
temp dir) and runs, each in its own namespace:

  submit     jobs/s of Client.submit, Client.submit_many and `dispatch submit --from FILE.jsonl`
             against raw pipelined writes of the same records; wall time of one
             `python -m dispatcher submit`
  cycle      Scheduler.cycle() with 1k..100k pending jobs over 10..1,000 full nodes:
             time, reaction to one submit, commands and round trips, RSS
  placement  job starts committed per second for a burst onto idle nodes, against RQ enqueue_many
  latency    submit -> job process started on an idle node (scheduler and agent processes),
             against plain RQ enqueue -> job started (SimpleWorker and forking Worker)
  drain      `true` jobs completed per second on one 8-GPU node, against plain RQ workers
  memory     Redis bytes per pending job, against an RQ job of a comparable enqueue

Every figure is a median over repeated runs. --quick (small sizes, few repeats) runs
in under a minute on a 2-core machine. The cycle and placement benchmarks each stop
at --budget seconds (30 with --quick, else 480): a size whose smallest run is
predicted not to fit is skipped and named in the notes (with today's code the full
run takes about 15 minutes and skips the largest cycle sizes). Prints a table and
writes JSON (default: a file in the temp dir, named on the last line): for each
figure value, unit, baseline, baseline_what, ratio (value / baseline), target,
meets_target, repeats (and a note or extra), plus the machine and the notes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import benchlib as bl  # noqa: E402

BENCHMARKS = ("submit", "cycle", "placement", "latency", "drain", "memory")

NOTES = [
    "ratio = value / baseline: above 1 means more jobs/s, or more time, bytes or commands than the baseline.",
]


def fmt(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "NO"
    if isinstance(x, int) or (isinstance(x, float) and x.is_integer() and abs(x) >= 100):
        return f"{int(x):,}"
    return f"{x:,.3g}" if abs(x) < 100 else f"{x:,.0f}"


def table(figures: list[bl.Figure]) -> str:
    rows = [["figure", "value", "unit", "baseline", "ratio", "target", "met"]]
    for f in figures:
        rows.append([f.name, fmt(f.value), f.unit, fmt(f.baseline), fmt(f.ratio),
                     f.target.desc if f.target else "-", fmt(f.meets_target)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    right = {1, 3, 4}
    lines = ["  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
             for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def plot_cycles(figures: dict, path: Path) -> None:
    """Full, cold and reacting cycle times against pending jobs, one line per node count, log-log."""
    import re

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[tuple[str, int], list[tuple[int, float]]] = {}
    for name, f in figures.items():
        m = re.fullmatch(r"cycle\.(full|cold|react)_ms\[(\d+)(k?)x(\d+)(k?)\]", name)
        if m:
            pending = int(m[2]) * (1000 if m[3] else 1)
            nodes = int(m[4]) * (1000 if m[5] else 1)
            series.setdefault((m[1], nodes), []).append((pending, f["value"]))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    styles = {"full": "-o", "cold": ":s", "react": "--^"}
    labels = {"full": "full cycle", "cold": "first (cold) cycle", "react": "reacting to one submit"}
    for (kind, nodes), points in sorted(series.items(), key=lambda kv: (kv[0][0] != "full", kv[0])):
        points.sort()
        ax.plot([p for p, _ in points], [v for _, v in points], styles[kind], label=f"{labels[kind]}, {nodes:,} nodes")
    ax.axhline(100, color="grey", lw=0.8)
    ax.text(0.01, 100, "100 ms target (full cycle)", va="bottom", fontsize=8, color="grey",
            transform=ax.get_yaxis_transform())
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("pending jobs")
    ax.set_ylabel("ms (median)")
    ax.set_title("dispatch scheduling cycle against pending jobs (8-GPU nodes, all full)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot: {path}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, few repeats (under a minute)")
    ap.add_argument("--json", default=None, metavar="FILE", help="where to write the results")
    ap.add_argument("--only", default=",".join(BENCHMARKS), metavar="LIST",
                    help=f"comma-separated subset of {','.join(BENCHMARKS)}")
    ap.add_argument("--budget", type=float, default=None, metavar="S",
                    help="seconds each of the cycle and placement benchmarks may spend (default 30 with --quick, "
                         "else 480); a size whose smallest run would not fit is skipped and named in the notes")
    ap.add_argument("--plot", default=None, metavar="PNG",
                    help="also draw the cycle times against pending jobs (needs matplotlib)")
    args = ap.parse_args()
    chosen = [b.strip() for b in args.only.split(",") if b.strip()]
    unknown = set(chosen) - set(BENCHMARKS)
    if unknown:
        ap.error(f"--only: unknown benchmark(s) {', '.join(sorted(unknown))}")
    out_path = Path(args.json or Path(tempfile.gettempdir()) /
                    f"dispatch-bench-{'quick' if args.quick else 'full'}-{time.strftime('%Y%m%d-%H%M%S')}.json")

    tmp = Path(tempfile.mkdtemp(prefix="dispatch-bench-"))
    t_start = time.perf_counter()
    bench = bl.Bench(tmp, args.quick)
    if args.budget is not None:
        bench.budget_s = args.budget
    figures: list[bl.Figure] = []
    errors, timings = {}, {}
    try:
        machine = bench.machine()
        for name in BENCHMARKS:
            if name not in chosen:
                continue
            t0 = time.perf_counter()
            print(f"[{name}] ...", file=sys.stderr, flush=True)
            try:
                module = __import__(name)
                figures += module.run(bench)
            except Exception as e:
                errors[name] = f"{type(e).__name__}: {e}"
                traceback.print_exc()
            timings[name] = round(time.perf_counter() - t0, 1)
            print(f"[{name}] {timings[name]} s", file=sys.stderr, flush=True)
    finally:
        bench.close()
        shutil.rmtree(tmp, ignore_errors=True)
    machine["loadavg_at_end"] = os.getloadavg()
    wall = time.perf_counter() - t_start

    print(table(figures))
    missed = [f.name for f in figures if f.meets_target is False]
    print(f"\n{len(figures)} figures, {sum(f.meets_target is True for f in figures)} meet their target, "
          f"{len(missed)} miss it{': ' + ', '.join(missed) if missed else ''}")
    for line in bench.notes:
        print(f"note: {line}")
    for name, err in errors.items():
        print(f"ERROR in {name}: {err}")
    result = {"mode": "quick" if args.quick else "full", "wall_s": round(wall, 1), "benchmark_s": timings,
              "machine": machine, "notes": NOTES + bench.notes, "errors": errors,
              "figures": {f.name: f.as_json() for f in figures}}
    out_path.write_text(json.dumps(result, indent=1))
    if args.plot:
        plot_cycles(result["figures"], Path(args.plot))
    print(f"wall {wall:.1f} s; JSON: {out_path}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
