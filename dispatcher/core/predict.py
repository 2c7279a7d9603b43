"""Runtime prediction from finished runs: pure (no Redis, no clock), shared by submit and the simulator.

A job's *fingerprint* is its user, its command normalised (numbers stripped, so a sweep over
``--lr`` or ``--seed`` shares one history), and its GPU count and types. When a job succeeds,
finish.lua appends one run (duration, the user's estimate, peak GPU memory) to the
fingerprint's capped history and to the user's (store/keys.py: history, user_history).

At submit, `predict` turns those histories into a Prediction, and `policy_estimate` gives the
run time the policy is told: the user's estimate corrected by how their estimates compared with
their actual run times, or the prediction where the user gave none. The simulator's `history`
estimates (sim/engine.py) call the same functions on the same kind of histories.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
from dataclasses import dataclass

from .units import rough

#: Runs kept per fingerprint and per user (finish.lua trims to these), newest first.
KEPT_PER_FINGERPRINT = 50
KEPT_PER_USER = 200
#: Runs a prediction looks at (the newest), and the fewest it needs: from the job's own
#: fingerprint, else from all the user's jobs.
RECENT = 20
MIN_RUNS_SAME = 2
MIN_RUNS_USER = 3
#: The quantile of recent durations that is predicted (0.5: the median).
QUANTILE = 0.5
#: Runs with an estimate a user needs before their estimates are corrected, and the bounds of the
#: correction factor (a user off by more than 20x is corrected by 20x).
MIN_RUNS_RATIO = 3
RATIO_BOUNDS = (0.05, 20.0)

#: A number not glued to a word before it: `--lr=0.1`, `shard_017`, `1e-4`; not `python3`, `resnet50`.
_NUMBER = re.compile(r"(?<![A-Za-z0-9.])[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_INTERPRETERS = frozenset({"python", "python3", "python2", "bash", "sh", "zsh", "torchrun", "accelerate",
                           "deepspeed", "node", "julia", "Rscript", "perl", "ruby", "env", "srun", "mpirun"})


@dataclass(frozen=True)
class Run:
    """One successful run: how long it ran (all its attempts), the user's estimate, the peak GPU memory."""

    duration_s: float
    est_s: float | None = None
    peak_gpu_mem_gb: float | None = None


@dataclass(frozen=True)
class Prediction:
    """duration_s: the QUANTILE of recent durations. confidence in [0, 1]: grows with the number of
    runs (n / (n + 2)) and shrinks with their spread (x exp(-MAD of ln duration)). `source`:
    'command' (runs of this fingerprint) or 'user' (all the user's runs). peak_gpu_mem_gb: the
    largest peak among the runs that measured one (None: none did)."""

    duration_s: float
    confidence: float
    runs: int
    source: str
    peak_gpu_mem_gb: float | None = None


def normalise_command(command) -> str:
    """The command with every number replaced by '#' (digits that end a word stay: resnet50), the
    program and an interpreter's script by their base names (one script run from two checkouts
    shares a history), each argument cut to 200 characters:
    `python /a/train.py --lr 0.1 --seed=3` -> `python train.py --lr # --seed=#`."""
    parts = []
    for i, arg in enumerate(command):
        if i == 0 or (i == 1 and _base(command[0]) in _INTERPRETERS):
            arg = _base(arg)
        parts.append(_NUMBER.sub("#", str(arg))[:200])
    return " ".join(parts)


def _base(arg) -> str:
    return str(arg).rpartition("/")[2]


@functools.lru_cache(maxsize=4096)  # a batch of one sweep repeats a few commands many times
def _fingerprint(user: str, command: tuple, gpus: int, gpu_types: tuple) -> str:
    text = "\0".join((user, normalise_command(command), str(gpus), "|".join(sorted(t.lower() for t in gpu_types))))
    return hashlib.sha1(text.encode("utf-8", "replace")).hexdigest()[:16]


def fingerprint(spec) -> str:
    """16 hex digits naming (user, normalised command, GPU count, GPU types) of a JobSpec."""
    return _fingerprint(spec.user, tuple(spec.command), int(spec.gpus), tuple(spec.gpu_types))


def quantile(values, q: float) -> float:
    """The q-quantile (0..1) by linear interpolation between order statistics; values non-empty."""
    v = sorted(values)
    pos = q * (len(v) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def _confidence(durations) -> float:
    n = len(durations)
    logs = [math.log(max(d, 1e-3)) for d in durations]
    mid = quantile(logs, 0.5)
    mad = quantile([abs(x - mid) for x in logs], 0.5)
    return round(n / (n + 2.0) * math.exp(-mad), 3)


def predict(same, user=()) -> Prediction | None:
    """From runs of the job's fingerprint (`same`) and of all its user's jobs (`user`), each newest
    first: a Prediction, or None when neither has enough runs (MIN_RUNS_SAME, MIN_RUNS_USER)."""
    for runs, need, source in ((same, MIN_RUNS_SAME, "command"), (user, MIN_RUNS_USER, "user")):
        recent = list(runs[:RECENT])
        if len(recent) >= need:
            durations = [r.duration_s for r in recent]
            peaks = [r.peak_gpu_mem_gb for r in recent if r.peak_gpu_mem_gb is not None]
            conf = _confidence(durations) * (1.0 if source == "command" else 0.5)
            return Prediction(round(quantile(durations, QUANTILE), 3), round(conf, 3), len(recent), source,
                              max(peaks) if peaks and source == "command" else None)
    return None


def estimate_ratio(user_runs) -> float | None:
    """The median of actual / estimated run time over the user's recent runs that had an estimate
    (newest first), within RATIO_BOUNDS; None with fewer than MIN_RUNS_RATIO of them."""
    ratios = [r.duration_s / r.est_s for r in user_runs[:RECENT] if r.est_s]
    if len(ratios) < MIN_RUNS_RATIO:
        return None
    lo, hi = RATIO_BOUNDS
    return round(min(hi, max(lo, quantile(ratios, 0.5))), 4)


def policy_estimate(est_s: float | None, prediction: Prediction | None, ratio: float | None) -> float | None:
    """The run time the policy is told: the user's estimate times their ratio (as given without
    one), else the prediction, else None (no estimate)."""
    if est_s is not None:
        return est_s * ratio if ratio is not None else est_s
    return prediction.duration_s if prediction is not None else None


def within_limit(est_s: float | None, time_limit_s: float | None) -> float | None:
    """The run time the policy plans with, never past the job's --time (the agent stops it there: as
    Slurm's backfill plans with the time limit); a job with a limit and no estimate plans with its limit."""
    if time_limit_s is None:
        return est_s
    return time_limit_s if est_s is None else min(est_s, time_limit_s)


def describe(prediction: dict | None, error: dict | None) -> str:
    """`dispatch show`'s line for a job's prediction (job_view's `prediction` and `prediction_error`)."""
    if not prediction:
        return "none (too few finished runs of this command or this user)"
    p = prediction
    text = (f"{rough(p['duration_s'])} (confidence {p['confidence']:.2f}, from {p['runs']} runs of "
            f"{'this command' if p['source'] == 'command' else 'this user'})")
    if p.get("peak_gpu_mem_gb") is not None:
        text += f", peak GPU memory {p['peak_gpu_mem_gb']:g} GB"
    if error:
        text += (f"; ran {rough(error['actual_s'])}: off by {rough(abs(error['error_s']))} "
                 f"({'over' if error['error_s'] > 0 else 'under'}, {error['rel_error']:.0%})")
    return text

