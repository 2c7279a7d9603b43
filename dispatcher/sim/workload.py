"""Traces: reading the CSV format, writing it, seeded synthetic workloads, and users' estimates.

Trace format (one header line, then one job a line):

    job_id,submit_time_s,user,num_gpus,duration_s,gpu_type,priority

`gpu_type` lists acceptable GPU types separated by `|` (empty: any), `priority`
is a class name (empty: normal), `user` may be empty. `dispatch history --csv` adds the
columns of EXTRA (how the job ended, its exit code, its team), which a replay ignores.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass

from ..core.errors import InvalidRequestError
from ..core.model import PRIORITIES, PRIORITY_ALIASES

HEADER = ("job_id", "submit_time_s", "user", "num_gpus", "duration_s", "gpu_type", "priority")
#: The columns `dispatch history --csv` writes after HEADER.
EXTRA = ("state", "exit_code", "team")


@dataclass(frozen=True)
class TraceJob:
    job_id: str
    submit_s: float
    user: str
    gpus: int
    duration_s: float
    gpu_types: tuple[str, ...] = ()
    priority: str = "normal"


def parse_trace(text: str, *, name: str = "trace") -> list[TraceJob]:
    """Parse trace CSV text; InvalidRequestError names the line and column of the first bad value."""
    rows = csv.reader(io.StringIO(text))
    header = next(rows, None)
    columns = tuple(h.strip() for h in header or ())
    if columns not in (HEADER, HEADER + EXTRA):
        raise InvalidRequestError(f"{name}: the first line must be {','.join(HEADER)}", field="TRACE")
    jobs = []
    for n, row in enumerate(rows, start=2):
        if not row or not "".join(row).strip():
            continue
        if len(row) != len(columns):
            raise InvalidRequestError(f"{name}:{n}: {len(row)} columns, expected {len(columns)}", field="TRACE")
        job_id, submit, user, gpus, duration, gpu_type, priority = (c.strip() for c in row[:len(HEADER)])
        try:
            submit_s, dur = float(submit), float(duration)
            n_gpus = int(gpus)
        except ValueError:
            raise InvalidRequestError(f"{name}:{n}: submit_time_s, num_gpus and duration_s must be numbers",
                                      field="TRACE") from None
        if not job_id or submit_s < 0 or n_gpus < 0 or not dur > 0 or math.isinf(dur) or math.isinf(submit_s):
            raise InvalidRequestError(f"{name}:{n}: needs a job_id, submit_time_s >= 0, num_gpus >= 0 and "
                                      f"duration_s > 0", field="TRACE")
        prio = PRIORITY_ALIASES.get(priority.lower(), priority.lower()) or "normal"
        if prio not in PRIORITIES:
            raise InvalidRequestError(f"{name}:{n}: unknown priority {priority!r}", field="TRACE")
        types = tuple(t.strip() for t in gpu_type.split("|") if t.strip())
        jobs.append(TraceJob(job_id, submit_s, user, n_gpus, dur, types, prio))
    ids = [j.job_id for j in jobs]
    if len(set(ids)) != len(ids):
        raise InvalidRequestError(f"{name}: job_id values repeat", field="TRACE")
    return sorted(jobs, key=lambda j: (j.submit_s, j.job_id))


def format_trace(jobs, extra=None) -> str:
    """The trace CSV of `jobs`; with `extra` (one row of EXTRA's values per job), those columns too."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(HEADER + (EXTRA if extra is not None else ()))
    for j, more in zip(jobs, extra if extra is not None else [()] * len(jobs)):
        w.writerow([j.job_id, f"{j.submit_s:.12g}", j.user, j.gpus, f"{j.duration_s:.12g}", "|".join(j.gpu_types),
                    j.priority, *more])
    return out.getvalue()


def synthetic(n: int, rng, *, users: int = 20, load_gpus: float = 200.0) -> list[TraceJob]:
    """A Philly-like workload (rng: a seeded random.Random): mostly 1-GPU jobs, a heavy tail of long multi-GPU ones, arrivals
    paced so that `load_gpus` GPUs are busy on average."""
    sizes = [(1, 0.85), (2, 0.04), (4, 0.06), (8, 0.04), (16, 0.01)]
    jobs, t = [], 0.0
    mean_gpu_s = sum(s * p for s, p in sizes) * math.exp(6.0 + 2.2 ** 2 / 2)
    rate = load_gpus / mean_gpu_s
    for i in range(n):
        t += rng.expovariate(rate)
        r, acc, g = rng.random(), 0.0, 1
        for size, p in sizes:
            acc += p
            if r <= acc:
                g = size
                break
        dur = max(10.0, min(30 * 86400.0, rng.lognormvariate(6.0, 2.2)))
        prio = rng.choices(PRIORITIES, weights=(2, 6, 1.5, 0.5))[0]
        jobs.append(TraceJob(f"s{i:06d}", round(t, 1), f"u{rng.randrange(users):02d}", g, round(dur, 1), (), prio))
    return jobs


@dataclass(frozen=True)
class EstimateModel:
    """What the policy is told a job will take. kind: 'oracle' (the truth), 'none' (no estimates),
    'lognormal' (truth x exp(N(0, sigma))), 'history' (median of the same user's and size's
    finished jobs, else the user's, else everyone's)."""

    kind: str = "lognormal"
    sigma: float = 1.0

    @staticmethod
    def parse(text: str) -> "EstimateModel":
        t = (text or "").strip().lower()
        if t in ("oracle", "none", "history"):
            return EstimateModel(t)
        if t.startswith("lognormal"):
            _, _, sigma = t.partition(":")
            try:
                return EstimateModel("lognormal", float(sigma or 1.0))
            except ValueError:
                pass
        raise InvalidRequestError(f"--est-error: {text!r}; use lognormal:SIGMA, history, oracle or none",
                                  field="--est-error")

    def label(self) -> str:
        return f"lognormal:{self.sigma:g}" if self.kind == "lognormal" else self.kind
