"""Did a change to the policy's code change any decision? A fingerprint of every decision, to diff.

Prints one line per case, `case digest count`, and with --dump DIR also writes each case's
decisions as text, so two runs (before and after a change, e.g. from two checkouts) can be
compared line for line (`diff -r`):

- every workload of the suite (`dispatch simulate --suite`: the Philly and Alibaba weeks and the
  generated ones), replayed with each policy given: every start, job for job (time, job, node,
  GPUs, rank in its cycle);
- realistic queues (realqueue.py) at each --sizes: one cycle's whole plan (placements with their
  scores, every verdict with its code and reason, reservations, preemptions), a first cycle and
  then a second one on the same Backlog.

    python scripts/bench/decisions.py [--policies dispatch,las] [--workloads philly,lab]
                                      [--sizes 1000x100,5000x400] [--dump DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from realqueue import Realistic  # noqa: E402
from dispatcher.core.plan import Snapshot  # noqa: E402
from dispatcher.policy import Backlog, plan_cycle  # noqa: E402
from dispatcher.lab.suite_run import load_workloads, policy_named  # noqa: E402


def plan_lines(plan) -> list[str]:
    out = [f"place {p.job_id} {p.node} {list(p.gpus)} {p.score} {p.rank} {p.reason}" for p in plan.placements]
    out += [f"verdict {v.job_id} {v.code.name} {v.score} {v.rank} {v.reason}" for v in plan.verdicts]
    out += [f"reserve {r.job_id} {r.node} {list(r.gpus)} {r.start_ms}" for r in plan.reservations]
    out += [f"preempt {p.job_id} {p.mode} {list(p.gpus)}" for p in plan.preemptions]
    out.append(f"rest {plan.rest} {plan.rest_reason}")
    return out


def suite_cases(policies, workloads, seed):
    from dispatcher.sim.compare import simulate
    from dispatcher.sim.nodes import make_nodes
    from dispatcher.sim.workload import EstimateModel

    for w in load_workloads(None, seed, workloads):
        for name in policies:
            p = policy_named(name)
            out = simulate(list(w.jobs), make_nodes(w.nodes, None), [p], estimates=EstimateModel.parse("lognormal:1"),
                           make_rng=random.Random, seed=seed)
            result = out["results"][p.name]
            yield f"suite:{w.name}:{name}", [f"{t:.3f} {j} {n} {list(g)} {r}" for t, j, n, g, r in result.starts]


def realistic_cases(policies, sizes):
    for size in sizes:
        pending, n_nodes = (int(x) for x in size.split("x"))
        gen = Realistic(size, n_nodes)
        nodes, running = gen.cluster()
        jobs = gen.queue(pending)
        for name in policies:
            cfg = policy_named(name).config
            snap = Snapshot(Backlog(cfg, jobs), tuple(running), tuple(nodes))
            first = plan_cycle(snap, gen.now_ms, cfg)[0]
            second = plan_cycle(snap, gen.now_ms + 1000, cfg)[0]
            yield f"realistic:{size}:{name}", plan_lines(first) + ["-- second cycle"] + plan_lines(second)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--policies", default="dispatch")
    ap.add_argument("--workloads", default=None, help="comma list; default every suite workload")
    ap.add_argument("--sizes", default="1000x100,5000x400")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dump", default=None)
    args = ap.parse_args()
    policies = args.policies.split(",")
    names = args.workloads.split(",") if args.workloads else None
    dump = Path(args.dump) if args.dump else None
    if dump:
        dump.mkdir(parents=True, exist_ok=True)
    cases = list(suite_cases(policies, names, args.seed)) if args.workloads != "" else []
    cases += list(realistic_cases(policies, [s for s in args.sizes.split(",") if s]))
    for case, lines in cases:
        text = "\n".join(lines) + "\n"
        print(f"{case:40} {hashlib.sha256(text.encode()).hexdigest()[:16]} {len(lines)}", flush=True)
        if dump:
            (dump / (case.replace(":", "_").replace("/", "_") + ".txt")).write_text(text)


if __name__ == "__main__":
    main()
