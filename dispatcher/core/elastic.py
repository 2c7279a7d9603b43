"""Elastic requests: `--gpus 1-8 --scaling linear|amdahl:P|TABLE`, how long a job runs on g GPUs.

A job asks for a range of GPU counts (JobSpec.min_gpus .. JobSpec.gpus) and says how
its run time scales. `--est` is its run time on the most GPUs it asks for (the
upper bound); a TABLE gives the time for each count it lists, and only those
counts are used:

- linear:       t(g) = est * max / g
- amdahl:P:     t(g) = t1 * ((1 - P) + P / g), P the parallel fraction, t1 from est
- 1:10h,2:5.5h: t(g) read from the table

The policy (policy/elastic_count.py) picks the count whose expected
completion (wait + run) is soonest; preemption shrinks an elastic job down to
min_gpus (preemption.py) as before. Pure: no I/O, no clock.
"""

from __future__ import annotations

import functools
import re
from dataclasses import replace

from .model import JobSpec

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(d|h|m|s)?")
_UNIT_S = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, None: 1.0}


class ScalingError(ValueError):
    """A --scaling text that does not parse; the message says what is expected."""


@functools.lru_cache(maxsize=1024)
def parse_scaling(text: str) -> tuple:
    """("linear",) | ("amdahl", P) | ("table", ((g, seconds), ...)) from a --scaling text."""
    t = text.strip().lower()
    if t in ("", "linear"):
        return ("linear",)
    if t.startswith("amdahl:"):
        try:
            p = float(t.split(":", 1)[1])
        except ValueError:
            p = -1.0
        if not 0.0 <= p <= 1.0:
            raise ScalingError(f"{text!r}: amdahl:P needs a parallel fraction P from 0 to 1, e.g. amdahl:0.9")
        return ("amdahl", p)
    rows = []
    for part in t.split(","):
        count, sep, duration = part.strip().partition(":")
        m = _DURATION.fullmatch(duration.strip())
        if not sep or not count.strip().isdigit() or int(count) < 1 or m is None or float(m[1]) <= 0:
            raise ScalingError(f"{text!r}: expected linear, amdahl:P or a table like 1:10h,2:5.5h,4:3h")
        rows.append((int(count), float(m[1]) * _UNIT_S[m[2]]))
    if len({g for g, _ in rows}) != len(rows):
        raise ScalingError(f"{text!r}: a GPU count is listed twice")
    return ("table", tuple(sorted(rows)))


def is_elastic(spec: JobSpec) -> bool:
    """Does the policy choose how many GPUs it starts with? (`--gpus MIN-MAX`, which always has a
    scaling; `--min-gpus` alone only lets preemption shrink a checkpointable job.)"""
    return bool(spec.gpus and spec.scaling) and spec.min_gpus is not None and spec.min_gpus < spec.gpus \
        and not spec.share


def smallest(spec: JobSpec) -> JobSpec:
    """The least an elastic job asks for (itself if it is not elastic): whether it fits at all."""
    return replace(spec, gpus=spec.min_gpus, est_s=run_time(spec, spec.min_gpus)) if is_elastic(spec) else spec


def counts(spec: JobSpec) -> list[int]:
    """The GPU counts worth trying, fewest first: a TABLE's counts within the range, else every count
    from the least to the most (at most a handful: powers of two and the bounds)."""
    low, high = spec.min_gpus or spec.gpus, spec.gpus
    model = parse_scaling(spec.scaling)
    if model[0] == "table":
        return [g for g, _ in model[1] if low <= g <= high] or [high]
    out = {low, high} | {g for g in (1, 2, 4, 8, 16, 32, 64) if low <= g <= high}
    return sorted(out)


def run_time(spec: JobSpec, gpus: int) -> float | None:
    """How long `spec` likely runs on `gpus` GPUs (None without an estimate or a table row)."""
    model = parse_scaling(spec.scaling)
    if model[0] == "table":
        table = dict(model[1])
        if gpus in table:
            return table[gpus]
        if spec.est_s is None:
            return None
        return spec.est_s * spec.gpus / gpus  # a count the table lacks: linear from the estimate
    if spec.est_s is None or gpus <= 0:
        return spec.est_s
    if model[0] == "amdahl":
        p = model[1]
        t1 = spec.est_s / ((1 - p) + p / spec.gpus)
        return t1 * ((1 - p) + p / gpus)
    return spec.est_s * spec.gpus / gpus
