"""Generated lab weeks: the kinds of work the mission names, mixed in different proportions.

A week is a list of TraceJob (t = 0 is a Monday, 00:00) and the cluster it runs on. Each
kind of work is a generator of jobs over the week:

- training: long checkpointable training, normal, 1-8 GPUs, hours to days, at any time;
- interactive: development by day (09:00-19:00 on weekdays), high, 1 GPU, ~20 min;
- critical: online inference and urgent fixes, critical, 1-2 GPUs, ~30 min, any hour;
- sweeps: offline batch sweeps, low, 100-300 one-GPU jobs of ~8 min at once, in the evening;
- pretraining: background pretraining, low, 8 GPUs (some 16), one to three days;
- rush: one team's deadline rush, normal, bursts of 4-8 GPU ablations over two days;
- evalbot: an evaluation bot, normal, a 1-GPU job of ~10 min every hour.

Training fills the week up to the mix's offered load (GPU-seconds asked for over GPU-seconds the
cluster has), whatever the other kinds asked for. Pure: the caller passes a seeded
random.Random; the same seed gives the same week.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .workload import TraceJob

DAY, HOUR, WEEK = 86400.0, 3600.0, 7 * 86400.0


@dataclass(frozen=True)
class Mix:
    name: str
    about: str
    nodes: str  # a `--nodes` spec (sim/engine.make_nodes)
    load: float  # offered load, GPU-seconds asked / GPU-seconds in the week
    kinds: tuple[tuple[str, float], ...]  # (kind, how much of it: 1.0 is the kind's usual amount)
    typed: float = 0.3  # share of training jobs that ask for one GPU type


#: The family the suite runs: every kind of work, loads from 70% to 120%, every cluster of mixed types.
MIXES = (
    Mix("lab", "the mission's lab: training, interactive by day, nightly sweeps, critical fixes",
        "2x8xA100-80GB,2x8xV100-32GB", 0.95, (("training", 1), ("interactive", 1), ("sweeps", 1),
                                             ("critical", 1))),
    Mix("rush", "a deadline rush over background pretraining, an hourly eval bot and interactive work",
        "2x8xA100-80GB,2x8xH100-80GB", 1.10, (("rush", 1), ("pretraining", 1), ("evalbot", 1),
                                              ("interactive", 0.5), ("training", 0.3))),
    Mix("sweeps", "batch-heavy: big nightly sweeps over a little training",
        "2x8xA100-40GB,2x8xV100-16GB", 0.80, (("sweeps", 2.5), ("training", 1), ("critical", 0.5))),
    Mix("pretrain", "long 8- and 16-GPU pretraining beside training and online inference",
        "3x8xH100-80GB,1x8xA100-80GB", 1.00, (("pretraining", 2), ("training", 1), ("critical", 2),
                                              ("interactive", 0.3))),
    Mix("daytime", "a light week of mostly interactive work and short training",
        "2x8xA100-80GB,1x8xV100-32GB", 0.70, (("interactive", 3), ("training", 1), ("evalbot", 1),
                                              ("critical", 0.5))),
    Mix("overload", "every kind at once, 120% offered load",
        "2x8xA100-80GB,1x8xH100-80GB,1x8xV100-32GB", 1.20,
        (("training", 1), ("interactive", 1), ("sweeps", 1), ("critical", 1), ("pretraining", 1),
         ("rush", 0.5), ("evalbot", 1)), typed=0.4),
    Mix("typed", "type-bound training (half ask for H100 or A100) on three GPU families",
        "1x8xH100-80GB,2x8xA100-40GB,2x8xV100-32GB", 0.90,
        (("training", 1.5), ("interactive", 1), ("sweeps", 0.7), ("critical", 1)), typed=0.6),
)


def _lognormal(rng, median_s: float, sigma: float, lo: float, hi: float) -> float:
    return round(max(lo, min(hi, rng.lognormvariate(math.log(median_s), sigma))), 1)


def _weekday(t: float) -> int:
    return int(t // DAY) % 7


def _types(rng, families: list[str], share: float) -> tuple[str, ...]:
    if families and rng.random() < share:
        return (rng.choice(families),)
    return ()


class _Week:
    def __init__(self, rng, families: list[str], typed: float):
        self.rng, self.families, self.typed = rng, families, typed
        self.jobs: list[TraceJob] = []

    def add(self, kind: str, t: float, user: str, gpus: int, duration_s: float, priority: str,
            types: tuple[str, ...] = ()) -> None:
        if 0 <= t < WEEK:
            self.jobs.append(TraceJob(f"{kind[:2]}{len(self.jobs):05d}", round(t, 1), user, gpus, duration_s,
                                      types, priority))

    def training(self, budget_gpu_s: float) -> None:
        """Training jobs at uniform times over the week until they ask for `budget_gpu_s` GPU-seconds
        (so a heavy-tailed week still meets its offered load)."""
        rng, asked = self.rng, 0.0
        while asked < budget_gpu_s:
            gpus = rng.choices((1, 2, 4, 8), weights=(40, 25, 20, 15))[0]
            dur = _lognormal(rng, 3 * HOUR, 1.0, 600, 3 * DAY)
            self.add("training", rng.uniform(0, WEEK), f"train{rng.randrange(8)}", gpus, dur, "normal",
                     _types(rng, self.families, self.typed))
            asked += gpus * dur

    def interactive(self, amount: float) -> None:
        rng = self.rng
        for day in range(5):  # weekdays
            t = day * DAY + 9 * HOUR
            while True:
                t += rng.expovariate(60 * amount / (10 * HOUR))
                if t >= day * DAY + 19 * HOUR:
                    break
                self.add("interactive", t, f"dev{rng.randrange(10)}", 1, _lognormal(rng, 20 * 60, 0.6, 60, 3 * HOUR),
                         "high", _types(rng, self.families, 0.2))

    def critical(self, amount: float) -> None:
        rng, t = self.rng, 0.0
        while True:
            t += rng.expovariate(2 * amount / DAY)
            if t >= WEEK:
                break
            self.add("critical", t, f"ops{rng.randrange(2)}", rng.choice((1, 1, 2)),
                     _lognormal(rng, 30 * 60, 0.7, 120, 6 * HOUR), "critical")

    def sweeps(self, amount: float) -> None:
        rng = self.rng
        for day in range(7):
            for user in range(3):
                if rng.random() > min(1.0, 0.8 * amount):
                    continue
                start = day * DAY + rng.uniform(18, 23) * HOUR
                n = int(rng.randint(100, 300) * max(1.0, amount / 1.5))
                med = rng.choice((5, 8, 12)) * 60
                types = _types(rng, self.families, 0.3)
                for i in range(n):
                    self.add("sweep", start + i * 0.5, f"sweep{user}", 1, _lognormal(rng, med, 0.4, 30, 2 * HOUR),
                             "low", types)

    def pretraining(self, amount: float) -> None:
        rng = self.rng
        for i in range(max(1, round(4 * amount))):
            gpus = 16 if rng.random() < 0.25 else 8
            self.add("pretrain", rng.uniform(0, 5 * DAY), f"pre{i % 2}", gpus,
                     _lognormal(rng, 1.5 * DAY, 0.4, 12 * HOUR, 3 * DAY), "low")

    def rush(self, amount: float) -> None:
        rng = self.rng
        start = rng.uniform(1, 3) * DAY
        for user in range(4):
            t = start + rng.uniform(0, 4 * HOUR)
            while t < start + 2 * DAY:
                for _ in range(rng.randint(3, 8)):  # a burst of ablations
                    self.add("rush", t + rng.uniform(0, 120), f"rush{user}", rng.choice((4, 8)),
                             _lognormal(rng, 2 * HOUR, 0.6, 600, 12 * HOUR), "normal",
                             _types(rng, self.families, 0.3))
                t += rng.expovariate(1 / (6 * HOUR / max(amount, 0.1)))

    def evalbot(self, amount: float) -> None:
        rng = self.rng
        step = HOUR / max(amount, 0.1)
        t = rng.uniform(0, step)
        while t < WEEK:
            self.add("evalbot", t, "evalbot", 1, _lognormal(self.rng, 10 * 60, 0.3, 60, HOUR), "normal")
            t += step


def gpu_count(nodes_spec: str) -> int:
    return sum(int(p.split("x")[0]) * int(p.split("x")[1]) for p in nodes_spec.split(","))


def families(nodes_spec: str) -> list[str]:
    """The GPU families of a `--nodes` spec: '2x8xA100-80GB,2x8xV100-32GB' -> ['A100', 'V100']."""
    out = []
    for part in nodes_spec.split(","):
        fam = part.split("x", 2)[2].split("-")[0].split(":")[0]
        if fam not in out:
            out.append(fam)
    return out


def offered_load(jobs: list[TraceJob], gpus: int) -> float:
    return sum(j.gpus * j.duration_s for j in jobs) / (gpus * WEEK)


def generate(mix: Mix, rng) -> list[TraceJob]:
    """One week of `mix`, its training scaled to the mix's offered load (other kinds as they come)."""
    fams, gpus = families(mix.nodes), gpu_count(mix.nodes)
    week = _Week(rng, fams, mix.typed)
    amounts = dict(mix.kinds)
    for kind, amount in mix.kinds:
        if kind != "training":
            getattr(week, kind)(amount)
    if "training" in amounts:
        week.training(max(0.0, mix.load - offered_load(week.jobs, gpus)) * gpus * WEEK)
    jobs = sorted(week.jobs, key=lambda j: (j.submit_s, j.job_id))
    return [TraceJob(f"g{i:05d}", j.submit_s, j.user, j.gpus, j.duration_s, j.gpu_types, j.priority)
            for i, j in enumerate(jobs)]


def mix_named(name: str) -> Mix:
    from ..core.errors import InvalidRequestError

    for m in MIXES:
        if m.name == name:
            return m
    raise InvalidRequestError(f"no generated week named {name!r}; known: {', '.join(m.name for m in MIXES)}",
                              field="--workload")
