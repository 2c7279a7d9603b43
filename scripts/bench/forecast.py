"""How far off are start-time forecasts (`dispatch eta`)? Measured in a replay.

Replays a trace in the simulator under a policy; every --every-s of simulated time it pauses,
forecasts the next start of up to --per-sample waiting jobs (seeded choice; new jobs, and jobs
preempted that wait to resume), from the replay's state and with the estimates the policy was told (the same
dispatcher/sim/forecast.py `dispatch eta` runs on the live snapshot), then goes on. Once the replay
ends, each forecast is compared with when the job actually (next) started in it:

    python scripts/bench/forecast.py [--trace FILE] [--gpus 256] [--days 2] [--est-error lognormal:1]
        [--every-s 3600] [--per-sample 5] [--seed 1] [--past-estimate policy,elapsed,overrun] [--json FILE]

Prints the median and p90 of |forecast - actual| in seconds, and relative to the job's actual wait
from the moment of the forecast, overall, for new and for preempted jobs, and by that wait; how many forecasts said "not within 7
days"; and how long a forecast took. `--past-estimate` compares what a forecast assumes of a running
job past its estimate (dispatcher/sim/forecast.py PAST_ESTIMATES), on the same moments and jobs. Only jobs submitted in the first --days days are replayed.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from dispatcher.sim.engine import Engine
from dispatcher.sim.nodes import make_nodes  # noqa: E402
from dispatcher.sim.forecast import PAST_ESTIMATE, PAST_ESTIMATES, forecast  # noqa: E402
from dispatcher.sim.policies import estimates_for, resolve  # noqa: E402
from dispatcher.sim.workload import EstimateModel, parse_trace  # noqa: E402

#: Buckets of the actual wait from the forecast's moment, for the breakdown.
BUCKETS = ((0, 600, "< 10 min"), (600, 3600, "10 min - 1 h"), (3600, 86400, "1 h - 1 d"), (86400, float("inf"), ">= 1 d"))


def quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def summary(rows: list[dict]) -> dict:
    abs_s = [r["abs_error_s"] for r in rows]
    rel = [r["abs_error_s"] / max(1.0, r["actual_wait_s"]) for r in rows]
    late = sum(1 for r in rows if r["error_s"] > 0)
    return {"forecasts": len(rows), "median_abs_error_s": quantile(abs_s, 0.5), "p90_abs_error_s": quantile(abs_s, 0.9),
            "median_rel_error": quantile(rel, 0.5), "p90_rel_error": quantile(rel, 0.9),
            "share_forecast_later_than_actual": round(late / len(rows), 3) if rows else None}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", default=str(ROOT.parent / "shared" / "traces" / "philly_week.csv"))
    ap.add_argument("--gpus", type=int, default=256)
    ap.add_argument("--days", type=float, default=2.0, help="Replay the jobs submitted in the first DAYS days.")
    ap.add_argument("--policy", default="dispatch")
    ap.add_argument("--est-error", default="lognormal:1")
    ap.add_argument("--every-s", type=float, default=3600.0)
    ap.add_argument("--per-sample", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--past-estimate", default=PAST_ESTIMATE, metavar="NAME,...",
                    help=f"What a running job past its estimate still runs, per variant: {', '.join(PAST_ESTIMATES)}.")
    ap.add_argument("--json", default=None, metavar="FILE")
    args = ap.parse_args()
    variants = [v.strip() for v in args.past_estimate.split(",") if v.strip()]
    if not variants or set(variants) - set(PAST_ESTIMATES):
        ap.error(f"--past-estimate: one or more of {', '.join(PAST_ESTIMATES)}")

    trace = [j for j in parse_trace(Path(args.trace).read_text(), name=args.trace) if j.submit_s < args.days * 86400]
    policy = resolve(args.policy)
    est = estimates_for(policy, EstimateModel.parse(args.est_error))
    config_at = policy.config_at()
    engine = Engine(trace, make_nodes(None, args.gpus), config_at, name=policy.name, estimates=est,
                    rng=random.Random(args.seed))
    pick = random.Random(args.seed + 1)
    made, took, began = [], [], time.perf_counter()
    t = args.every_s
    while t < args.days * 86400:
        engine.run(until_s=t)
        now_ms = int(round(t * 1000))
        snap = engine.snapshot(now_ms)
        waiting = sorted(p.spec.id for p in snap.pending)
        for job_id in pick.sample(waiting, min(args.per_sample, len(waiting))):
            for variant in variants:
                b = time.perf_counter()
                f = forecast(snap, job_id, now_ms, config_at(t), changes=False, past_estimate=variant)
                took.append(time.perf_counter() - b)
                made.append((variant, t, job_id, None if f.start.at_ms is None else f.start.at_ms / 1000.0,
                             len(snap.pending), engine.jobs[job_id].attempts > 0))
        t += args.every_s
    engine.run()
    replay_s = time.perf_counter() - began

    starts: dict[str, list[float]] = {}
    for st, job_id, *_ in engine.starts:
        starts.setdefault(job_id, []).append(st)
    rows, beyond = [], Counter()
    for variant, t, job_id, predicted, pending, resumed in made:
        actual = next((st for st in starts.get(job_id, ()) if st > t), None)  # its next start after the forecast
        if predicted is None:
            beyond[variant] += 1
            continue
        if actual is None:
            continue
        rows.append({"variant": variant, "t": t, "job": job_id, "pending": pending, "resumed": resumed, "predicted_start_s": predicted,
                     "actual_start_s": actual, "actual_wait_s": actual - t, "error_s": predicted - actual,
                     "abs_error_s": abs(predicted - actual)})
    out = {"trace": args.trace, "days": args.days, "jobs": len(trace), "gpus": args.gpus, "policy": policy.name,
           "estimates": est.label(), "seed": args.seed, "every_s": args.every_s, "per_sample": args.per_sample,
           "variants": {v: variant_summary([r for r in rows if r["variant"] == v], beyond[v]) for v in variants},
           "forecast_ms": {"median": round(1000 * statistics.median(took), 1) if took else None,
                           "p90": round(1000 * quantile(took, 0.9), 1) if took else None,
                           "max": round(1000 * max(took), 1) if took else None},
           "median_pending": statistics.median([m[4] for m in made]) if made else None,
           "wall_s": round(replay_s, 1)}
    if args.json:
        Path(args.json).write_text(json.dumps({**out, "rows": rows}, indent=1))
    if not rows:
        print(f"no job waited at the sampled moments ({len(made)} forecasts); try more --days or fewer --gpus")
        return
    print(f"{out['jobs']} jobs ({args.days:g} days) on {args.gpus} GPUs, {policy.name}, estimates {est.label()}, "
          f"seed {args.seed}: {len(made) // len(variants)} forecast moments (median {out['median_pending']} pending); "
          f"{out['wall_s']} s")
    for v, summ in out["variants"].items():
        o = summ["overall"]
        print(f"past estimate: {v}: {summ['not_within_horizon']} 'not within 7 days'")
        print(f"  |forecast - actual start|: median {o['median_abs_error_s']:.0f} s, p90 {o['p90_abs_error_s']:.0f} s; "
              f"relative to the wait: median {o['median_rel_error']:.2f}, p90 {o['p90_rel_error']:.2f}; "
              f"forecast later than actual: {o['share_forecast_later_than_actual']:.0%}")
        for label, s in [("new jobs", summ["new_jobs"]), ("preempted jobs", summ["preempted_jobs"])] + [
                (f"wait {k}", x) for k, x in summ["by_actual_wait"].items()]:
            if s["forecasts"]:
                print(f"  {label:>18}: {s['forecasts']:4d} forecasts, median {s['median_abs_error_s']:.0f} s, "
                      f"p90 {s['p90_abs_error_s']:.0f} s; relative median {s['median_rel_error']:.2f}, "
                      f"p90 {s['p90_rel_error']:.2f}")
    f = out["forecast_ms"]
    print(f"one forecast took: median {f['median']} ms, p90 {f['p90']} ms, max {f['max']} ms")


def variant_summary(rows: list[dict], beyond: int) -> dict:
    return {"overall": summary(rows), "not_within_horizon": beyond,
            "new_jobs": summary([r for r in rows if not r["resumed"]]),
            "preempted_jobs": summary([r for r in rows if r["resumed"]]),
            "by_actual_wait": {label: summary([r for r in rows if lo <= r["actual_wait_s"] < hi])
                               for lo, hi, label in BUCKETS}}


if __name__ == "__main__":
    main()
