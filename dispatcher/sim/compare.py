"""Run several policies over one trace and cluster, and lay the results side by side."""

from __future__ import annotations

from . import metrics
from .engine import Engine
from .nodes import never_fits
from .policies import SimPolicy, estimates_for
from .workload import EstimateModel, TraceJob


def simulate(trace: list[TraceJob], nodes, policies: list[SimPolicy], *, estimates: EstimateModel,
             make_rng, seed: int = 0, ckpt_save_s: float = 30.0, ckpt_restore_s: float = 30.0, progress=None) -> dict:
    """{'policies': {name: metrics}, 'results': {name: SimResult}, ...}. `make_rng(seed)` gives a
    seeded random.Random; every policy gets a fresh one, so all see the same estimate errors.
    `progress(name, i, n)`, if given, hears of each policy done (the i-th of n)."""
    out = {"policies": {}, "results": {}, "estimates": estimates.label(), "seed": seed,
           "gpus": sum(len(g) for _, g in nodes), "nodes": len(nodes), "jobs": len(trace)}
    cannot = never_fits(nodes)
    for p in policies:
        est = estimates_for(p, estimates)
        engine = Engine(trace, nodes, p.config_at(), name=p.name, estimates=est, rng=make_rng(seed),
                        ckpt_save_s=ckpt_save_s, ckpt_restore_s=ckpt_restore_s)
        result = engine.run()
        m = metrics.compute(result, ckpt_save_s=ckpt_save_s, ckpt_restore_s=ckpt_restore_s, never_fits=cannot)
        m["estimates"] = est.label()
        m["oracle"] = p.oracle
        out["policies"][p.name] = m
        out["results"][p.name] = result
        if progress is not None:
            progress(p.name, len(out["policies"]), len(policies))
    base = out["policies"].get("fifo")
    if base and base["avg_jct_s"]:
        for m in out["policies"].values():
            m["jct_vs_fifo"] = None if m["avg_jct_s"] is None else round(m["avg_jct_s"] / base["avg_jct_s"], 3)
    return out


COLUMNS = [("avg_jct_s", "avg JCT s"), ("jct_vs_fifo", "vs fifo"), ("p50_jct_s", "p50 JCT"),
           ("p99_jct_s", "p99 JCT"), ("avg_wait_s", "avg wait"), ("p99_wait_s", "p99 wait"),
           ("p99_wait_8plus_gpus_s", "p99 wait 8+"), ("makespan_s", "makespan"), ("utilization", "util"),
           ("fragmentation", "frag"), ("jain_fairness", "Jain"), ("preemptions", "preempt"),
           ("gpu_hours_lost", "GPU-h lost")]


def table(out: dict) -> str:
    header = ["policy"] + [c for _, c in COLUMNS]
    rows = []
    for name, m in out["policies"].items():
        label = name + (" (oracle)" if m["oracle"] else "") + (" (stalled)" if m.get("stalled_at_s") else "")
        rows.append([label] + [_fmt(m.get(k)) for k, _ in COLUMNS])
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    lines = ["  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in enumerate(zip(r, widths)))
             for r in [header] + rows]
    lines.insert(1, "-" * len(lines[0]))
    lines.append("")
    lines.append(f"{out['jobs']} jobs on {out['gpus']} GPUs ({out['nodes']} nodes); estimates {out['estimates']}; "
                 f"seed {out['seed']}. Wait = JCT - true duration.")
    for name, m in out["policies"].items():
        if m.get("stalled_at_s"):
            lines.append(stalled_note(name, m))
        elif m["finished"] < m["jobs"]:
            lines.append(unfinished_note(name, m))
    classes = {}
    for name, m in out["policies"].items():
        for c, s in m["per_class"].items():
            classes.setdefault(c, []).append(f"{name} {_fmt(s['avg_wait_s'])}/{_fmt(s['p99_wait_s'])}")
    if len(classes) > 1:
        lines.append("queueing delay by class, avg/p99 s:")
        lines += [f"  {c}: " + "; ".join(v) for c, v in classes.items()]
    return "\n".join(lines)


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 10 else f"{v:,.0f}"
    return str(v)


def unfinished_note(name: str, m: dict) -> str:
    """A line on a run that ended with jobs that never finished: those no node of the cluster could ever
    hold (more GPUs than a node or the cluster has, a GPU type it lacks), and those that fit but the
    policy never ran to an end (held back: a reserve, a quota; or nothing freed room)."""
    n, never = m["jobs"] - m["finished"], m["never_fit"]
    said = [f"{name}: {n:,} of {m['jobs']:,} jobs never finished (left out of its JCT and waits)"]
    if never:
        said.append(f"{'' if never == n else f'{never:,} of them, '}e.g. {', '.join(m['never_fit_examples'])}: no "
                    f"node of this cluster could ever hold them; check --gpus/--nodes and the trace's GPU types")
    if n - never:
        said.append(f"{'' if never == 0 else f'{n - never:,} of them, '}e.g. {', '.join(m['held_examples'])}: they "
                    f"fit the cluster but the policy never ran them to an end (held back, e.g. by a reserve or a "
                    f"quota, or no room was freed)")
    return said[0] + ", " + "; ".join(said[1:])


def stalled_note(name: str, m: dict) -> str:
    """A line on a run that stopped stalled: its figures are of the jobs that finished."""
    return (f"{name} stalled on day {m['stalled_at_s'] / 86400:.1f}: a simulated day with no job finished while "
            f"jobs kept being preempted; stopped there with {m['jobs'] - m['finished']:,} of {m['jobs']:,} jobs "
            f"unfinished (left out of its JCT and waits)")
