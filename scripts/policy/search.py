"""Choose the default policy on the workload suite, and report it leave-one-out.

Each candidate is a JSON object of PolicyConfig fields that override the defaults (one a line
in --candidates FILE, or as arguments). Every candidate runs on every workload of the suite
(`dispatch simulate --suite`'s workloads); results are kept in --cache (JSON), so a rerun
simulates only what is new. The report:

- per candidate, how far it misses the JCT promises and the wait promises (sim/suite.shortfall,
  summed), the promises it breaks (sim/suite.promises) and its geometric-mean JCT against las
  and fifo-easy;
- leave-one-out: for each workload, the candidate chosen on all the other workloads (by `score`:
  the JCT misses first, then the wait misses), and that candidate's figures on the workload
  left out. With --seeds, every week runs once per seed and a kind of week is left out with all
  its seeds.

    python scripts/policy/search.py --candidates scripts/policy/candidates.jsonl --seeds 0,1,2 --loo
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from dispatcher.sim.suite import BASELINES, promises, row, shortfall  # noqa: E402
from dispatcher.lab.suite_run import load_workloads, run  # noqa: E402


JCT_PROMISES = ("finishes", "jct<las", "jct<fifo-easy")  # a run that stalled (sim/engine.py) misses "finishes" by inf


def score(results: dict, cand: str, workloads: list[str]) -> tuple[float, float, int, float]:
    """(how far the JCT promises are missed, how far the wait promises are missed, promises broken,
    geometric mean of JCT / min(las, fifo-easy)) over `workloads`; lower is better, in that order.
    A miss is sim/suite.shortfall (ln of value over limit), summed. Average JCT comes first: a
    reservation for the longest-waiting job keeps the largest jobs' p99 wait near fifo-easy's but
    costs up to 1.7x las's JCT (the Philly week), and that is the trade this order refuses."""
    jct, wait, broken, logs = 0.0, 0.0, 0, []
    for w in workloads:
        bases = {b: results[(w, b)] for b in BASELINES}
        r = row(results[(w, cand)], bases)
        for k, v in shortfall(r, bases).items():
            if k in JCT_PROMISES:
                jct += v
            else:
                wait += v
        broken += sum(not ok for ok in promises(r, bases).values())
        logs.append(math.log(r["avg_jct_s"] / min(bases["las"]["avg_jct_s"], bases["fifo-easy"]["avg_jct_s"])))
    return round(jct, 3), round(wait, 3), broken, math.exp(sum(logs) / len(logs))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("variants", nargs="*")
    ap.add_argument("--candidates", default=None)
    ap.add_argument("--cache", default="/tmp/dispatch-search.json")
    ap.add_argument("--workloads", default=None)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seeds", default=None, help="several seeds, e.g. 0,1,2: each week once per seed (NAME@SEED); "
                    "leave-one-out then leaves out a kind of week, all its seeds together")
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--loo", action="store_true", help="also the leave-one-out report")
    args = ap.parse_args()
    cands = list(args.variants)
    if args.candidates:
        cands += [ln.strip() for ln in Path(args.candidates).read_text().splitlines()
                  if ln.strip() and not ln.startswith("#")]
    cands = [json.dumps(json.loads(c), sort_keys=True) if c.startswith("{") else c for c in cands]
    names = args.workloads.split(",") if args.workloads else None
    seeds = [int(x) for x in args.seeds.split(",")] if args.seeds else [args.seed]
    cache = Path(args.cache)
    known = {}
    if cache.exists():
        known = {tuple(k.split("\t")): v for k, v in json.loads(cache.read_text()).items()}
    results, wn = {}, []
    for seed in seeds:
        ws = load_workloads(None, seed, names)
        if args.seeds:  # a week's name carries its seed: the generated weeks differ by it, the traces' estimates too
            ws = [replace(w, name=f"{w.name}@{seed}") for w in ws]
        results.update(run(ws, cands, known=known, processes=args.jobs, seed=seed))
        cache.write_text(json.dumps({"\t".join(k): v for k, v in results.items()}))
        wn += [w.name for w in ws]
    for c in cands:
        broken = {}
        for w in wn:
            bases = {b: results[(w, b)] for b in BASELINES}
            r = row(results[(w, c)], bases)
            bad = [k for k, ok in promises(r, bases).items() if not ok]
            if bad:
                broken[w] = bad
        jct, wait, n, g = score(results, c, wn)
        print(f"JCT miss={jct:.3f} wait miss={wait:.3f} broken={n:2d} gm(jct/best(las,easy))={g:.3f}  {c}")
        for w in wn:
            r = row(results[(w, c)], {b: results[(w, b)] for b in BASELINES})
            cls = " ".join(f"{k[0]}={v['avg_wait_s']:.0f}/{v['p99_wait_s']:.0f}" for k, v in r["classes"].items())
            print(f"    {w:9s} las={r.get('vs_las'):.3f} easy={r.get('vs_fifo-easy'):.3f} fifo={r.get('vs_fifo'):.3f} "
                  f"8+={r['p99_wait_8plus_gpus_s'] or 0:.0f}/{results[(w, 'fifo-easy')]['p99_wait_8plus_gpus_s'] or 0:.0f} "
                  f"{cls}  {','.join(broken.get(w, []))}")
    if args.loo and len(cands) > 1:
        print("\nleave-one-out:")
        kinds = list(dict.fromkeys(w.partition("@")[0] for w in wn))
        for kind in kinds:
            out = [x for x in wn if x.partition("@")[0] == kind]
            best = min(cands, key=lambda c: score(results, c, [x for x in wn if x not in out]))
            print(f"  {kind:9s} chosen on the rest: {best}")
            for w in out:
                jct, wait, n, g = score(results, best, [w])
                r = row(results[(w, best)], {b: results[(w, b)] for b in BASELINES})
                print(f"            on {w}: JCT miss={jct:.3f} wait miss={wait:.3f} broken={n} vs las {r['vs_las']:.3f}, "
                      f"vs fifo-easy {r['vs_fifo-easy']:.3f}, vs fifo {r['vs_fifo']:.3f}")


if __name__ == "__main__":
    main()
