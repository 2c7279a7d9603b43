"""`dispatch tune`: search the policy's knobs on replayed workloads, against the policy in force.

Pure: the caller reads the traces, the cluster and the policy in force, and passes a
seeded random.Random for the search and `make_rng` for the simulator (as
`compare.simulate` takes it). Every candidate and the policy in force run on every
workload over SEEDS seeds, with log-normal (sigma 1) estimate errors and
30 s + 30 s checkpoint costs, the conditions the default policy is chosen under.

A candidate is a set of knobs (`weights` by term, the aging horizon, the remaining-time
reference, the starvation bound per class, reservations, preempt_by, class_step,
reserve_longest_wait) laid over every
profile of the policy in force; its teams and time-of-day schedule are kept. The search
tries a few classic policies first (the built-in default, Smith's rule, least attained
service, shortest remaining time), then random points of KNOBS, then perturbations of the
best so far. `objective` judges them (lower is better; None rejects). A candidate with no gain on
the first seed is not run on the others (the search's time goes to the promising ones).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field, fields, replace

from ..core.model import PRIORITIES
from ..policy.config import PolicyConfig
from ..policy.profiles import PREEMPT_BY, PolicySet
from ..policy.promises import short_span
from . import compare
from .policies import BASELINES, SimPolicy
from .workload import EstimateModel, TraceJob

#: The classes that jump the queue: their average and p99 wait may get worse than under the policy in
#: force by at most this share ...
WAIT_SLACK = 0.10
#: ... or by this many seconds, whichever is more (a class that waits 0 s now would reject any change).
WAIT_FLOOR_S = 30.0
GUARDED = ("critical", "high")
#: The p99 wait of 8+ GPU jobs may grow by this share beyond the larger of the policy in force's and
#: fifo-easy's (the suite's promise: no worse than fifo-easy).
BIG_SLACK = 0.10
#: A candidate must cut the average JCT by this share to be proposed: less is within the seeds' noise.
MIN_GAIN = 0.01
#: Seeds each policy is simulated with (estimate errors differ per seed).
SEEDS = 2
ESTIMATES = EstimateModel("lognormal", 1.0)
CKPT_SAVE_S = CKPT_RESTORE_S = 30.0

H, D = 3600.0, 86400.0
#: The search space: weight ranges by term, then the other knobs' ranges (durations in seconds).
WEIGHTS = {"priority": (0.05, 1.0), "remaining": (0.0, 0.6), "attained": (0.0, 0.6), "fairness": (0.0, 0.1),
           "wait": (0.0, 0.3)}
DURATIONS = {"remaining_ref_s": (60.0, 4 * H), "aging_horizon_s": (600.0, 2 * D)}
STARVATION = {"critical": (600.0, H), "high": (1800.0, 8 * H), "normal": (6 * H, 5 * D), "low": (12 * H, 7 * D)}
RESERVATIONS = (0, 1, 2)
#: How many LAS tiers one class step is worth (class+attained), and the share of a class's target past which
#: the reservations go to the longest overdue jobs (None: off).
CLASS_STEP = (0.25, 4.0)
LONGEST_WAIT = (None, 0.1, 0.2, 0.3, 0.5)
#: Classic policies tried first: knobs over the policy in force (the built-in default is added to them).
CLASSICS = {
    "smith": {"weights": {"priority": 0.3, "remaining": 0.4, "attained": 0.1, "wait": 0.02}, "remaining_ref_s": 1800.0},
    "las": {"weights": {"priority": 0.4, "attained": 0.5, "remaining": 0.05}, "preempt_by": "class+attained"},
    "srtf": {"weights": {"priority": 0.4, "remaining": 0.6, "attained": 0.0}, "preempt_by": "remaining"},
}


@dataclass(frozen=True)
class Workload:
    name: str
    trace: list[TraceJob]


@dataclass
class Trial:
    label: str
    knobs: dict
    policy: PolicySet
    figures: dict = field(default_factory=dict)
    score: float | None = None
    rejected: str = ""  # why `objective` refused it


@dataclass
class TuneResult:
    current: Trial
    trials: list[Trial]
    best: Trial | None  # None: no candidate beats the policy in force


def searched(config: PolicyConfig) -> dict:
    """The knobs of `config` the search moves."""
    return {"weights": {t: config.weights.get(t, 0.0) for t in WEIGHTS},
            **{k: getattr(config, k) for k in DURATIONS},
            "starvation_s": {c: config.starvation_s.get(c, math.inf) for c in STARVATION},
            "reservations": config.reservations, "preempt_by": config.preempt_by,
            "class_step": config.class_step, "reserve_longest_wait": config.reserve_longest_wait}


def with_knobs(pset: PolicySet, knobs: dict) -> PolicySet:
    """`pset` with `knobs` laid over every profile (tables merged into the profile's own)."""
    names = {f.name for f in fields(PolicyConfig)}
    profiles = {}
    for name, cfg in pset.profiles.items():
        changes = {k: ({**getattr(cfg, k), **v} if isinstance(v, dict) else v) for k, v in knobs.items() if k in names}
        profiles[name] = replace(cfg, **changes)
    return replace(pset, profiles=profiles)


def _draw(rng, lo: float, hi: float) -> float:
    if lo > 0:
        return round(math.exp(rng.uniform(math.log(lo), math.log(hi))), 4)
    return 0.0 if rng.random() < 0.25 else round(rng.uniform(lo, hi), 4)


def _random_knobs(rng) -> dict:
    return {"weights": {t: _draw(rng, lo, hi) for t, (lo, hi) in WEIGHTS.items()},
            **{k: round(_draw(rng, lo, hi)) for k, (lo, hi) in DURATIONS.items()},
            "starvation_s": {c: round(_draw(rng, lo, hi)) for c, (lo, hi) in STARVATION.items()},
            "reservations": rng.choice(RESERVATIONS), "preempt_by": rng.choice(PREEMPT_BY),
            "class_step": _draw(rng, *CLASS_STEP), "reserve_longest_wait": rng.choice(LONGEST_WAIT)}


def _nudge(rng, value: float, lo: float, hi: float, *, whole: bool = False) -> float:
    if value == 0 and lo == 0:
        value = 0.0 if rng.random() < 0.7 else rng.uniform(lo, hi) * 0.3
    else:
        value = min(hi, max(lo if lo > 0 else 0.0, value * math.exp(rng.gauss(0.0, 0.4))))
    return round(value) if whole else round(value, 4)


def _perturbed(rng, knobs: dict) -> dict:
    w = knobs["weights"]
    return {"weights": {t: _nudge(rng, w[t], lo, hi) for t, (lo, hi) in WEIGHTS.items()},
            **{k: _nudge(rng, knobs[k], lo, hi, whole=True) for k, (lo, hi) in DURATIONS.items()},
            "starvation_s": {c: _nudge(rng, min(knobs["starvation_s"][c], hi), lo, hi, whole=True)
                             for c, (lo, hi) in STARVATION.items()},
            "reservations": rng.choice(RESERVATIONS) if rng.random() < 0.2 else knobs["reservations"],
            "preempt_by": rng.choice(PREEMPT_BY) if rng.random() < 0.2 else knobs["preempt_by"],
            "class_step": _nudge(rng, min(knobs["class_step"], CLASS_STEP[1]), *CLASS_STEP),
            "reserve_longest_wait": rng.choice(LONGEST_WAIT) if rng.random() < 0.2 else knobs["reserve_longest_wait"]}


def _for_classes(knobs: dict, current: PolicyConfig, present: set[str]) -> dict:
    """`knobs` with starvation bounds only for the classes the replay has jobs of (nothing there tells a
    bound of another class; theirs stay as in force), each kept in the classes' order: a class never
    starves later than a less urgent one (low work ahead of every class sooner than normal work)."""
    bounds = {c: current.starvation_s.get(c, math.inf) for c in STARVATION}  # (most urgent first)
    order = list(STARVATION)
    for i, c in enumerate(order):
        if c in present:
            lo = max((bounds[d] for d in order[:i]), default=0.0)
            hi = min((bounds[d] for d in order[i + 1:] if d not in present), default=math.inf)
            bounds[c] = min(max(knobs["starvation_s"][c], lo), hi)
    return {**knobs, "starvation_s": {c: bounds[c] for c in order if c in present}}


def _mean(pairs) -> float:
    """The mean of (value, weight) pairs; 0 for no weight."""
    pairs = [(v, n) for v, n in pairs if n]
    total = sum(n for _, n in pairs)
    return sum(v * n for v, n in pairs) / total if total else 0.0


def combine(runs: list[dict]) -> dict:
    """One figure per metric over several simulated runs (workloads x seeds): means weighted by each
    run's finished jobs (per class, by the class's jobs), p99s included. A run that finished no job
    weighs nothing; one that finished no job of 8+ GPUs counts their p99 wait as 0 (none waited)."""
    out = {"jobs": round(statistics.fmean(m["finished"] for m in runs)) if runs else 0}
    for k in ("avg_jct_s", "avg_wait_s", "p99_wait_s", "p99_wait_8plus_gpus_s"):
        out[k] = round(_mean((m[k] or 0.0, m["finished"]) for m in runs), 1)
    for k in ("jain_fairness", "utilization"):
        out[k] = round(_mean((m[k] or 0.0, m["finished"]) for m in runs), 4)
    out["preemptions"] = round(statistics.fmean(m["preemptions"] for m in runs), 1) if runs else 0
    out["per_class"] = {}
    for c in reversed(PRIORITIES):
        rows = [(m["per_class"][c], m["per_class"][c]["jobs"]) for m in runs if c in m["per_class"]]
        if rows:
            out["per_class"][c] = {k: round(_mean((r[k], n) for r, n in rows), 1) for k in ("avg_wait_s", "p99_wait_s")}
    return out


def objective(cand: dict, current: dict, targets: dict | None = None, easy: dict | None = None
              ) -> tuple[float | None, str]:
    """(score, why rejected): the average JCT, lower is better; None with the reason when

    - it finishes fewer jobs than the policy in force (its average would leave the others out);
    - critical or high work waits longer than under the policy in force, on average or at p99, by
      more than WAIT_SLACK (or WAIT_FLOOR_S): they must jump the queue whatever else changes;
    - a class whose p99 wait is within its wait target (`targets`: class -> seconds, the policy's
      `targets_s`) would be pushed past it (normal and low work may otherwise trade waits: a short
      sweep job passing a long training job is the point);
    - the p99 wait of 8+ GPU jobs grows by more than BIG_SLACK beyond both the policy in force's and
      fifo-easy's (`easy`: fifo-easy's figures on the same runs, when measured)."""
    if cand.get("jobs", 0) < current.get("jobs", 0):  # its average JCT leaves out the jobs it did not finish
        return None, f"finishes {cand['jobs']:,} jobs, the policy in force {current['jobs']:,}"
    for c, target in (targets or {}).items():
        now, got = current["per_class"].get(c), cand["per_class"].get(c)
        if now and got and now["p99_wait_s"] <= target < got["p99_wait_s"]:
            return None, f"{c} p99 wait {got['p99_wait_s']:,.0f}s breaks its {target:,.0f}s target"
    for c in GUARDED:
        now, got = current["per_class"].get(c), cand["per_class"].get(c, {})
        for k, what in (("avg_wait_s", "average"), ("p99_wait_s", "p99")):
            if now is None:
                continue
            allowed = max(now[k] * (1 + WAIT_SLACK), now[k] + WAIT_FLOOR_S)
            if got.get(k, 0.0) > allowed:
                return None, f"{c} {what} wait {got[k]:,.0f}s > {allowed:,.0f}s allowed"
    big = max(current["p99_wait_8plus_gpus_s"], easy["p99_wait_8plus_gpus_s"] if easy else 0.0)
    if cand["p99_wait_8plus_gpus_s"] > big * (1 + BIG_SLACK) + 1.0:
        return None, (f"p99 wait of 8+ GPU jobs {cand['p99_wait_8plus_gpus_s']:,.0f}s > {big:,.0f}s "
                      f"(the larger of the policy in force's and fifo-easy's) + {BIG_SLACK:.0%}")
    return cand["avg_jct_s"], ""


def _runs(pset: PolicySet, workloads: list[Workload], nodes, *, make_rng, seed: int) -> list[dict]:
    """`pset` simulated on every workload with one seed: each run's metrics."""
    config = pset.profiles[pset.default_profile]
    policy = SimPolicy("candidate", config, "tune", profiles=pset if pset.schedule else None)
    return [compare.simulate(w.trace, nodes, [policy], estimates=ESTIMATES, make_rng=make_rng, seed=seed,
                             ckpt_save_s=CKPT_SAVE_S, ckpt_restore_s=CKPT_RESTORE_S)["policies"]["candidate"]
            for w in workloads]


def _proposals(rng, budget: int, best):
    """Labelled knobs, one at a time; `best()` gives the best accepted trial so far (or None)."""
    yield "built-in default", searched(PolicyConfig())
    for name, knobs in CLASSICS.items():
        yield name, knobs
    for i in range(budget):
        top = best()
        if top is not None and i % 2:
            yield f"near {top.label}", _perturbed(rng, {**searched(top.policy.profiles[top.policy.default_profile])})
        else:
            yield "random", _random_knobs(rng)


def tune(workloads: list[Workload], nodes, current: PolicySet, *, budget: int, rng, make_rng,
         seed: int = 0) -> TuneResult:
    """Try `budget` candidates (the classics count towards it) against `current`; the best accepted
    one that cuts the average JCT by MIN_GAIN or more, or None."""
    def runs(pset: PolicySet, seeds: range) -> list[dict]:
        return [r for s in seeds for r in _runs(pset, workloads, nodes, make_rng=make_rng, seed=s)]

    first, others = range(seed, seed + 1), range(seed + 1, seed + SEEDS)
    base_first = runs(current, first)
    base = Trial("policy in force", {}, current, combine(base_first + runs(current, others)))
    bar = combine(base_first)["avg_jct_s"] * (1 - MIN_GAIN / 2)
    targets = getattr(current.profiles[current.default_profile], "targets_s", None)
    easy_policy = PolicySet({"default": BASELINES["fifo-easy"].config}, "default")
    easy = combine(runs(easy_policy, range(seed, seed + SEEDS)))
    base.score, _ = objective(base.figures, base.figures, targets, easy)
    trials: list[Trial] = []
    seen = {repr(searched(current.profiles[current.default_profile]))}
    present = {j.priority for w in workloads for j in w.trace}

    def best():
        ok = [t for t in trials if t.score is not None]
        return min(ok, key=lambda t: t.score) if ok else None

    for label, knobs in _proposals(rng, budget, best):
        if len(trials) >= budget:
            break
        if "starvation_s" in knobs:
            knobs = _for_classes(knobs, current.profiles[current.default_profile], present)
        pset = with_knobs(current, knobs)
        key = repr(searched(pset.profiles[pset.default_profile]))
        if key in seen:
            continue  # the policy in force, or a candidate already tried
        seen.add(key)
        done = runs(pset, first)
        t = Trial(label, knobs, pset, combine(done))
        trials.append(t)
        if t.figures["avg_jct_s"] > bar:  # no gain on the first seed: the others would have to make up twice
            t.rejected = f"average JCT {t.figures['avg_jct_s']:,.0f}s on seed {seed}: no gain"
            continue
        t.figures = combine(done + runs(pset, others))
        t.score, t.rejected = objective(t.figures, base.figures, targets, easy)
    top = best()
    # nothing finished under the policy in force (no job fits the cluster): no candidate can show a gain
    if top is None or not base.score or top.score > base.score * (1 - MIN_GAIN):
        top = None
    return TuneResult(base, trials, top)


def _change(now: float, then: float, *, ratio: bool = True) -> str:
    if ratio:
        return "-" if not now else f"{(then - now) / now * 100:+.0f}%"
    return f"{then - now:+.3f}"


def changes_table(current: dict, cand: dict) -> list[list[str]]:
    """[metric, policy in force, candidate, change] rows: the predicted effect of a candidate."""
    rows = [["average JCT", short_span(current["avg_jct_s"]), short_span(cand["avg_jct_s"]),
             _change(current["avg_jct_s"], cand["avg_jct_s"])]]
    for c, now in current["per_class"].items():
        got = cand["per_class"].get(c, {"avg_wait_s": 0.0, "p99_wait_s": 0.0})
        for k, what in (("avg_wait_s", "avg"), ("p99_wait_s", "p99")):
            rows.append([f"{c} wait {what}", short_span(now[k]), short_span(got[k]), _change(now[k], got[k])])
    rows.append(["p99 wait 8+ GPUs", short_span(current["p99_wait_8plus_gpus_s"]), short_span(cand["p99_wait_8plus_gpus_s"]),
                 _change(current["p99_wait_8plus_gpus_s"], cand["p99_wait_8plus_gpus_s"])])
    for k, what in (("jain_fairness", "Jain fairness"), ("utilization", "utilization")):
        rows.append([what, f"{current[k]:.3f}", f"{cand[k]:.3f}", _change(current[k], cand[k], ratio=False)])
    return rows
