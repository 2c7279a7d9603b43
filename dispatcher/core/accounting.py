"""Accounting: who used how many GPU-hours, how their jobs ended and how long they waited (`dispatch report`).

Pure: the jobs come in as the views store/ended.py reads (job_view's fields plus `attempts`, times in epoch
seconds), the window as two numbers, the idle samples as the scheduler recorded them. Per group:
- gpu_s: the GPU-seconds every attempt held (started, or placed when it never started, to its end) times
  its GPUs (every rank's, for a gang), clipped to the window: preempted and lost attempts count, as they
  held their GPUs all the same;
- jobs by outcome (succeeded, failed, cancelled) and how many were preempted at least once;
- the queue wait, submit to the first attempt's start, of the jobs that started (average and p95);
- lost_gpu_s: the job record's gpu_s_lost, work lost to preemption and lost nodes (from the last
  checkpoint on for a checkpointable job);
- idle_gpu_s: of the allocated GPU time, what the scheduler's samples saw below IDLE_UTIL_PCT utilization
  (one sample stands for `sample_s`); None where no sample covers the window (the samples are kept 12 h).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

from .errors import InvalidRequestError

#: What --by groups by, and the job view's field each reads (gpu-type is worked out: group_key).
GROUP_BY = {"user": "user", "team": "team", "class": "priority", "gpu-type": None}
OUTCOMES = ("succeeded", "failed", "cancelled")
TOTAL = "TOTAL"


def check_by(by: str) -> str:
    if by not in GROUP_BY:
        raise InvalidRequestError(f"--by: {by!r} is not one of {', '.join(GROUP_BY)}", field="--by")
    return by


@dataclass
class Group:
    key: str
    gpu_s: float = 0.0
    jobs: int = 0
    outcomes: dict = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    preempted: int = 0
    waits: list = field(default_factory=list)
    lost_gpu_s: float = 0.0
    idle_gpu_s: float | None = None

    def add(self, other: "Group") -> None:
        self.gpu_s += other.gpu_s
        self.jobs += other.jobs
        for k, v in other.outcomes.items():
            self.outcomes[k] = self.outcomes.get(k, 0) + v
        self.preempted += other.preempted
        self.waits += other.waits
        self.lost_gpu_s += other.lost_gpu_s
        if other.idle_gpu_s is not None:
            self.idle_gpu_s = (self.idle_gpu_s or 0.0) + other.idle_gpu_s

    def row(self) -> dict:
        """The group as plain numbers: hours, seconds, counts (what --json and --csv print)."""
        wait = self.waits
        return {"group": self.key, "gpu_hours": round(self.gpu_s / 3600, 6), "jobs": self.jobs, **self.outcomes,
                "preempted": self.preempted,
                "wait_avg_s": round(sum(wait) / len(wait), 1) if wait else None,
                "wait_p95_s": round(p95(wait), 1) if wait else None,
                "lost_gpu_hours": round(self.lost_gpu_s / 3600, 6),
                "idle_gpu_hours": None if self.idle_gpu_s is None else round(self.idle_gpu_s / 3600, 6)}


@dataclass(frozen=True)
class Report:
    by: str
    since: float
    until: float
    groups: tuple[Group, ...]
    total: Group
    skipped: int = 0  # records that could not be read
    idle_from: float | None = None  # the first time idle figures cover; None: not sampled


def p95(values) -> float:
    """The 95th percentile by the nearest rank: the smallest value at or above 95% of them."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def attempt_spans(job: dict) -> list[tuple[float, float, tuple[tuple[str, int], ...]]]:
    """(start, end, ((node, gpu), ...)) of each attempt that held GPUs: from its attempt records, else
    (a job ended with none recorded) from the job's own start and finish."""
    spans = []
    for a in job.get("attempts") or ():
        start, end = a.get("started_at"), a.get("ended_at")
        if start is not None and end is not None and end > start:
            ranks = a.get("ranks") or ([[a.get("node") or "", a.get("gpus") or []]])
            spans.append((start, end, tuple((n, g) for n, gpus in ranks for g in gpus)))
    if not spans and job.get("started_at") is not None and job.get("finished_at") is not None:
        ranks = job.get("ranks") or [[job.get("node") or "", job.get("gpus") or []]]
        spans.append((job["started_at"], job["finished_at"], tuple((n, g) for n, gpus in ranks for g in gpus)))
    return spans


def work_s(job: dict) -> float:
    """How long the job ran to do its work: its attempts' runs added up for a checkpointable job (each
    went on from its checkpoint), the last attempt's for another (each started over); 0 if none ran."""
    spans = attempt_spans(job)
    if not spans:
        return 0.0
    if job.get("checkpointable"):
        return sum(end - start for start, end, _ in spans)
    start, end, _ = max(spans)
    return end - start


def first_start(job: dict) -> float | None:
    """When it first ran: its own start, or a preempted (or shrunk) attempt's, which surely ran (a job
    preempted and then cancelled in the queue has no start of its own); None if neither. (An attempt record's
    start is its assignment where the command could not start: not a run.)"""
    ran = [a["started_at"] for a in job.get("attempts") or ()
           if a.get("outcome") in ("preempted", "shrunk") and a.get("started_at") is not None]
    if job.get("started_at") is not None:
        ran.append(job["started_at"])
    return min(ran) if ran else None


def queue_wait(job: dict) -> float | None:
    """Submit to the first attempt's start; None for a job that never started."""
    starts = [a["started_at"] for a in job.get("attempts") or () if a.get("started_at") is not None]
    first = min(starts) if starts else job.get("started_at")
    if first is None or job.get("submitted_at") is None:
        return None
    return max(0.0, first - job["submitted_at"])


def gpu_type(job: dict, types: dict) -> str:
    """The type of GPU the job's last attempt ran on (`types`: (node, index) -> name, of the nodes known
    now), else the types it asked for, else "any"; "none" for a job of no GPU."""
    spans = attempt_spans(job)
    for node_gpu in (spans[-1][2] if spans else ()):
        if node_gpu in types:
            name = types[node_gpu]
            return name[len("NVIDIA "):] if name.startswith("NVIDIA ") else name
    if not job.get("gpus_requested"):
        return "none"
    return "|".join(job.get("gpu_types") or ()) or "any"


def group_key(job: dict, by: str, types: dict) -> str:
    if by == "gpu-type":
        return gpu_type(job, types)
    return str(job.get(GROUP_BY[by]) or "-")


class IdleIndex:
    """The idle samples by GPU: "node:index" -> the sorted times (seconds) it was held and idle."""

    def __init__(self, samples, sample_s: float):
        self.sample_s = sample_s
        self.first = min((s["t_ms"] / 1000 for s in samples), default=None)
        self.times: dict[str, list[float]] = {}
        for s in samples:
            for gpu in s.get("idle", ()):
                self.times.setdefault(gpu, []).append(s["t_ms"] / 1000)
        for t in self.times.values():
            t.sort()

    def idle_s(self, node: str, gpu: int, start: float, end: float) -> float:
        t = self.times.get(f"{node}:{gpu}")
        if not t:
            return 0.0
        return (bisect.bisect_left(t, end) - bisect.bisect_left(t, start)) * self.sample_s


def job_group(job: dict, key: str, since: float, until: float, idle: IdleIndex | None) -> Group:
    """One job's figures as a group of one."""
    g = Group(key, jobs=1, idle_gpu_s=0.0 if idle is not None and idle.first is not None else None)
    for start, end, gpus in attempt_spans(job):
        lo, hi = max(start, since), min(end, until)
        if hi <= lo:
            continue
        g.gpu_s += (hi - lo) * len(gpus)
        if g.idle_gpu_s is not None:  # a sample stands for sample_s, but for no more than the GPU was held
            g.idle_gpu_s += sum(min(hi - lo, idle.idle_s(n, i, lo, hi)) for n, i in gpus)
    if job.get("state") in g.outcomes:
        g.outcomes[job["state"]] += 1
    g.preempted = 1 if job.get("preemptions") else 0
    wait = queue_wait(job)
    if wait is not None:
        g.waits.append(wait)
    g.lost_gpu_s = float(job.get("gpu_s_lost") or 0.0)
    return g


def report(jobs, by: str, since: float, until: float, *, types: dict | None = None, samples=(),
           sample_s: float = 15.0, skipped: int = 0) -> Report:
    """The jobs grouped `by` (GROUP_BY), groups by GPU-hours, most first; a total over them all."""
    check_by(by)
    idle = IdleIndex(samples, sample_s)
    groups: dict[str, Group] = {}
    total = Group(TOTAL)
    for job in jobs:
        key = group_key(job, by, types or {})
        one = job_group(job, key, since, until, idle)
        groups.setdefault(key, Group(key)).add(one)
        total.add(one)
    ordered = tuple(sorted(groups.values(), key=lambda g: (-g.gpu_s, g.key)))
    idle_from = max(since, idle.first) if idle.first is not None else None
    return Report(by, since, until, ordered, total, skipped, idle_from)


#: The table's columns: header, and the row field each shows.
COLUMNS = (("GPU-H", "gpu_hours"), ("JOBS", "jobs"), ("OK", "succeeded"), ("FAILED", "failed"),
           ("CANCELLED", "cancelled"), ("PREEMPTED", "preempted"), ("WAIT AVG", "wait_avg_s"),
           ("WAIT P95", "wait_p95_s"), ("LOST GPU-H", "lost_gpu_hours"), ("IDLE GPU-H", "idle_gpu_hours"))


def table_rows(rep: Report, duration) -> tuple[list[str], list[list[str]]]:
    """Header and rows (the total last) for an aligned table; `duration` writes seconds in words."""
    header = [rep.by.upper()] + [h for h, _ in COLUMNS]
    rows = []
    for g in rep.groups + (rep.total,):
        r = g.row()
        cells = [r["group"]]
        for _, name in COLUMNS:
            v = r[name]
            if v is None:
                cells.append("-")
            elif name.endswith("_s"):
                cells.append(duration(v))
            elif isinstance(v, float):
                cells.append(f"{v:.2f}")
            else:
                cells.append(str(v))
        rows.append(cells)
    return header, rows
