"""Traces: reading the CSV format, writing it, seeded synthetic workloads, and users' estimates.

Trace format (one header line, then one job a line):

    job_id,submit_time_s,user,num_gpus,duration_s,gpu_type,priority

`gpu_type` lists acceptable GPU types separated by `|` (empty: any), `priority`
is a class name (empty: normal), `user` may be empty. `dispatch history --csv` adds the
columns of EXTRA (how the job ended, its exit code, its team): a replay keeps the team (the policy's team
limits and guarantees hold there as live) and ignores the other two.
"""

from __future__ import annotations

import csv
import io
import math
from collections import defaultdict, deque
from dataclasses import dataclass

from ..core.errors import InvalidRequestError
from ..core.model import PRIORITIES, PRIORITY_ALIASES, JobSpec
from ..core.predict import KEPT_PER_FINGERPRINT, KEPT_PER_USER, RECENT, Run, fingerprint, policy_estimate, predict

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
    team: str = ""


#: The most GPUs a simulated cluster has (`--gpus`, `--nodes`), and so the most a trace's job may ask for.
MAX_CLUSTER_GPUS = 100_000
#: The latest submit time and the longest duration a trace may give: 100 years, in seconds.
MAX_TRACE_S = 100 * 365 * 86400


def parse_trace(text: str, *, name: str = "trace") -> list[TraceJob]:
    """Parse trace CSV text (a leading UTF-8 byte-order mark, as Excel writes, is skipped);
    InvalidRequestError names the line and column of the first bad value."""
    rows = csv.reader(io.StringIO(text.removeprefix("\ufeff")))
    try:
        header = next(rows, None)
        columns = tuple(h.strip() for h in header or ())
        if columns not in (HEADER, HEADER + EXTRA):
            got = ",".join(columns)
            raise InvalidRequestError(f"{name}: the first line must be {','.join(HEADER)} (these columns, in this "
                                      f"order; {','.join(EXTRA)} may follow), got "
                                      f"{(got[:120] + '...' if len(got) > 120 else got)!r}", field="TRACE")
        jobs: list[TraceJob] = []
        first_line: dict[str, int] = {}
        for row in rows:
            n = rows.line_num
            if not row or not "".join(row).strip():
                continue
            if len(row) != len(columns):
                raise InvalidRequestError(f"{name}:{n}: {len(row)} columns, expected {len(columns)}", field="TRACE")
            job_id, submit, user, gpus, duration, gpu_type, priority = (c.strip() for c in row[:len(HEADER)])
            team = row[len(HEADER) + EXTRA.index("team")].strip() if len(columns) > len(HEADER) else ""
            if not job_id:
                raise InvalidRequestError(f"{name}:{n}: job_id is empty", field="TRACE")
            if job_id in first_line:
                raise InvalidRequestError(f"{name}:{n}: job_id {job_id!r} repeats (first on line "
                                          f"{first_line[job_id]})", field="TRACE")
            first_line[job_id] = n
            submit_s = _seconds(submit, "submit_time_s", f"{name}:{n}")
            if submit_s < 0:
                raise InvalidRequestError(f"{name}:{n}: submit_time_s must be >= 0, got {submit!r}", field="TRACE")
            dur = _seconds(duration, "duration_s", f"{name}:{n}")
            if not dur > 0:
                raise InvalidRequestError(f"{name}:{n}: duration_s must be > 0, got {duration!r}", field="TRACE")
            n_gpus = _gpus(gpus, f"{name}:{n}")
            prio = PRIORITY_ALIASES.get(priority.lower(), priority.lower()) or "normal"
            if prio not in PRIORITIES:
                raise InvalidRequestError(f"{name}:{n}: unknown priority {priority!r}; use "
                                          f"{', '.join(reversed(PRIORITIES))} or leave it empty (normal)",
                                          field="TRACE")
            types = tuple(t.strip() for t in gpu_type.split("|") if t.strip())
            jobs.append(TraceJob(job_id, submit_s, user, n_gpus, dur, types, prio, team))
    except csv.Error as e:  # a NUL byte, an unclosed quote at the end, a field past the csv module's limit
        raise InvalidRequestError(f"{name}:{rows.line_num}: not CSV: {e}", field="TRACE") from None
    return sorted(jobs, key=lambda j: (j.submit_s, j.job_id))


def _seconds(text: str, column: str, where: str) -> float:
    """A time column's value: a finite number of seconds, at most MAX_TRACE_S."""
    try:
        value = float(text)
    except ValueError:
        raise InvalidRequestError(f"{where}: {column} must be a number of seconds, got {text!r}",
                                  field="TRACE") from None
    if not math.isfinite(value):
        raise InvalidRequestError(f"{where}: {column} must be a finite number of seconds, got {text!r}",
                                  field="TRACE")
    if value > MAX_TRACE_S:
        raise InvalidRequestError(f"{where}: {column} {text} is more than 100 years ({MAX_TRACE_S:,} s)",
                                  field="TRACE")
    return value


def _gpus(text: str, where: str) -> int:
    """num_gpus: a whole number (2.0 is 2) from 0 to MAX_CLUSTER_GPUS."""
    try:
        value = int(text)
    except ValueError:
        try:
            f = float(text)
        except ValueError:
            f = math.nan
        if not (math.isfinite(f) and f.is_integer()):
            raise InvalidRequestError(f"{where}: num_gpus must be a whole number, got {text!r}",
                                      field="TRACE") from None
        value = int(f)
    if value < 0:
        raise InvalidRequestError(f"{where}: num_gpus must be >= 0, got {text!r}", field="TRACE")
    if value > MAX_CLUSTER_GPUS:
        raise InvalidRequestError(f"{where}: num_gpus {text} is more than {MAX_CLUSTER_GPUS:,}, the largest "
                                  f"cluster the simulator takes", field="TRACE")
    return value


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


#: The widest log-normal error --est-error takes: at sigma 5 about one estimate in nine is off 3,000-fold or more.
MAX_SIGMA = 5.0


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
                value = float(sigma or 1.0)
            except ValueError:
                pass
            else:
                if not 0 < value <= MAX_SIGMA:  # nan and inf too
                    raise InvalidRequestError(f"--est-error: {text!r}: SIGMA must be above 0 and at most "
                                              f"{MAX_SIGMA:g} (1 is the default; oracle gives the truth)",
                                              field="--est-error")
                return EstimateModel("lognormal", value)
        raise InvalidRequestError(f"--est-error: {text!r}; use lognormal:SIGMA, history, oracle or none",
                                  field="--est-error")

    def label(self) -> str:
        return f"lognormal:{self.sigma:g}" if self.kind == "lognormal" else self.kind


class HistoryPredictor:
    """The live scheduler's runtime prediction (dispatcher/core/predict.py) over the runs finished so far:
    the same capped histories per fingerprint and per user that finish.lua keeps in Redis."""

    def __init__(self):
        self.by_fp: dict = defaultdict(lambda: deque(maxlen=KEPT_PER_FINGERPRINT))
        self.by_user: dict = defaultdict(lambda: deque(maxlen=KEPT_PER_USER))

    def observe(self, spec: JobSpec, duration_s: float) -> None:
        run = Run(duration_s)
        self.by_fp[fingerprint(spec)].appendleft(run)  # newest first, as LPUSH keeps them
        self.by_user[spec.user].appendleft(run)

    def predict(self, spec: JobSpec) -> float | None:
        same, user = self.by_fp.get(fingerprint(spec), ()), self.by_user.get(spec.user, ())
        return policy_estimate(None, predict(list(same)[:RECENT], list(user)[:RECENT]), None)
