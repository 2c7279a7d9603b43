"""The workload suite: many kinds of week, every policy on each, one score card.

A policy is judged on the shared Philly and Alibaba weeks and on the generated lab
weeks (sim/generator.py), each against the baselines fifo, fifo-easy, las and the
srtf oracle. `promises(row, bases)` holds the default policy's promises on every
workload:

- average JCT below both las and fifo-easy;
- critical jobs wait at most 1 min on average, high jobs at most 5 min;
- the low class's p99 wait at most 1.5x FIFO's;
- the p99 wait of jobs of 8+ GPUs no worse than fifo-easy's;
- the run finishes (one that stalls, sim/engine.py STALL_WINDOW_S, breaks "finishes").

Pure: workloads come as trace text or from a seeded random.Random; running them is
the caller's (dispatcher/lab/suite_run.py runs them in parallel processes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..policy.promises import short_span
from .compare import stalled_note
from .generator import MIXES, generate
from .workload import TraceJob, parse_trace

BASELINES = ("fifo", "fifo-easy", "las", "srtf")

#: The shared traces the suite runs when it finds them: (name, file, cluster, what).
TRACES = (
    ("philly", "philly_week.csv", "32x8xGPU-80GB", "the Philly week, 3,760 jobs of one class on 256 GPUs"),
    ("alibaba", "alibaba_gpu2023_week.csv", "1x8xG2:24,1x8xT4:16,1x2xP100:16,1x2xV100M16:16,1x2xV100M32:32,1x2xG3:24",
     "the Alibaba GPU week, 1,138 jobs of four classes on 24 heterogeneous GPUs"),
)


@dataclass(frozen=True)
class Workload:
    name: str
    about: str
    nodes: str  # a `--nodes` spec
    jobs: tuple[TraceJob, ...]


def generated(rng_for, names=None) -> list[Workload]:
    """The generated weeks (`rng_for(name)`: a seeded random.Random for that week)."""
    return [Workload(m.name, m.about, m.nodes, tuple(generate(m, rng_for(m.name))))
            for m in MIXES if names is None or m.name in names]


def from_trace(name: str, text: str, *, nodes: str, about: str) -> Workload:
    return Workload(name, about, nodes, tuple(parse_trace(text, name=name)))


def row(metrics: dict, bases: dict[str, dict]) -> dict:
    """One line of the score card: a policy's figures on one workload, with its JCT against each
    baseline that ran (`bases`: baseline name -> its metrics on the same workload)."""
    out = {"avg_jct_s": metrics["avg_jct_s"], "p99_wait_8plus_gpus_s": metrics["p99_wait_8plus_gpus_s"],
           "jain": metrics["jain_fairness"], "preemptions": metrics["preemptions"],
           "gpu_hours_lost": metrics["gpu_hours_lost"], "utilization": metrics["utilization"],
           "classes": {c: {"avg_wait_s": s["avg_wait_s"], "p99_wait_s": s["p99_wait_s"], "jobs": s["jobs"]}
                       for c, s in metrics["per_class"].items()}}
    for name, b in bases.items():
        if b["avg_jct_s"] and metrics["avg_jct_s"] is not None:
            out[f"vs_{name}"] = round(metrics["avg_jct_s"] / b["avg_jct_s"], 3)
    if metrics.get("stalled_at_s"):
        out["stalled"] = stalled_note("", metrics).lstrip()
    return out


def _limits(r: dict, bases: dict[str, dict]) -> dict[str, tuple[float, float | None, bool]]:
    """Each promise as (value, limit, strict): kept when value < limit (strict) or <= limit; a limit of
    None (a baseline that did not run, or finished none of those jobs) keeps it, a value of None (this
    policy finished none of them) breaks it, and a class the workload lacks has value 0."""
    cls = r["classes"]
    fifo, easy, las = bases.get("fifo"), bases.get("fifo-easy"), bases.get("las")
    fifo_low = fifo and fifo["per_class"].get("low")
    return {
        "jct<las": (r["avg_jct_s"], las and las["avg_jct_s"], True),
        "jct<fifo-easy": (r["avg_jct_s"], easy and easy["avg_jct_s"], True),
        "critical<=1m": (cls.get("critical", {}).get("avg_wait_s", 0.0), 60.0, False),
        "high<=5m": (cls.get("high", {}).get("avg_wait_s", 0.0), 300.0, False),
        "low p99<=1.5x fifo": (cls.get("low", {}).get("p99_wait_s", 0.0),
                               fifo_low and 1.5 * fifo_low["p99_wait_s"] + 60, False),
        "8+ p99<=fifo-easy": (r["p99_wait_8plus_gpus_s"], _plus(easy and easy["p99_wait_8plus_gpus_s"], 60), False),
    }


def _plus(limit: float | None, slack: float) -> float | None:
    return None if limit is None else limit + slack


def promises(r: dict, bases: dict[str, dict]) -> dict[str, bool]:
    """Which of the default's promises `r` (a row) keeps on its workload; a promise about a class
    the workload lacks, or a baseline that did not run, is kept. A run that stalled breaks "finishes"."""
    kept = {k: not lim or (v is not None and (v < lim if strict else v <= lim))
            for k, (v, lim, strict) in _limits(r, bases).items()}
    return kept | {"finishes": not r.get("stalled")}


def shortfall(r: dict, bases: dict[str, dict]) -> dict[str, float]:
    """How far `r` misses each promise: ln(value / limit) where it is over the limit, else 0 (a JCT
    10% above las's is 0.095; the search adds these up, so a large miss counts more than a small one); inf
    where it finished none of the jobs the promise is about."""
    miss = {k: 0.0 if not lim else math.inf if v is None else math.log(v / lim) if v > lim else 0.0
            for k, (v, lim, _) in _limits(r, bases).items()}
    return miss | {"finishes": math.inf if r.get("stalled") else 0.0}


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and abs(v) < 10:
        return f"{v:.3f}".rstrip("0").rstrip(".") if v else "0"
    return f"{v:,.0f}"


def _span(seconds: float | None) -> str:
    return "-" if seconds is None else short_span(seconds)


def format_card(card: dict) -> str:
    """The score card as text: a row per workload and policy, then each policy's broken promises."""
    head = ["workload", "policy", "avg JCT", "/fifo", "/easy", "/las", "/srtf", "crit", "high", "normal", "low",
            "8+ p99", "Jain", "preempt", "GPU-h lost"]
    lines = []
    for w, entry in card["workloads"].items():
        for p, r in entry["rows"].items():
            cls = r["classes"]

            def wait(c):
                s = cls.get(c)
                return f"{short_span(s['avg_wait_s'])}/{short_span(s['p99_wait_s'])}" if s else "-"
            lines.append([w, p + (" *" if r.get("stalled") else ""), _span(r["avg_jct_s"]), _fmt(r.get("vs_fifo")),
                          _fmt(r.get("vs_fifo-easy")), _fmt(r.get("vs_las")), _fmt(r.get("vs_srtf")), wait("critical"), wait("high"),
                          wait("normal"), wait("low"), _span(r["p99_wait_8plus_gpus_s"]), _fmt(r["jain"]),
                          str(r["preemptions"]), _fmt(r["gpu_hours_lost"])])
    widths = [max(len(x[i]) for x in [head] + lines) for i in range(len(head))]
    out = ["  ".join(h.ljust(wd) if i < 2 else h.rjust(wd) for i, (h, wd) in enumerate(zip(x, widths)))
           for x in [head] + lines]
    out.insert(1, "-" * len(out[0]))
    out.append("class columns: average/p99 wait. /fifo etc.: average JCT against that baseline on the same week.")
    out += [f"* {w} {p}: {r['stalled']}" for w, entry in card["workloads"].items() for p, r in entry["rows"].items()
            if r.get("stalled")]
    for p, broken in card.get("broken", {}).items():
        if broken:
            out.append(f"{p}: broken promises: " + "; ".join(f"{w}: {', '.join(b)}" for w, b in broken.items()))
        else:
            out.append(f"{p}: every promise kept on every workload")
    return "\n".join(out)


def make_card(workloads: list[Workload], results: dict, policies: list[str]) -> dict:
    """`results[(workload, policy)]` -> metrics; the card holds every row, and per non-baseline
    policy the promises it broke on each workload."""
    card = {"workloads": {}, "broken": {}}
    for w in workloads:
        bases = {b: results[(w.name, b)] for b in BASELINES if (w.name, b) in results}
        rows = {p: row(results[(w.name, p)], bases) for p in policies if (w.name, p) in results}
        card["workloads"][w.name] = {"about": w.about, "nodes": w.nodes, "jobs": len(w.jobs), "rows": rows}
        for p in policies:
            if p in BASELINES or p not in rows:
                continue
            broken = [k for k, ok in promises(rows[p], bases).items() if not ok]
            card["broken"].setdefault(p, {})
            if broken:
                card["broken"][p][w.name] = broken
    return card
