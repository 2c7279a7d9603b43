"""Idle GPUs: the one rule for "an allocated GPU whose utilization stays near zero".

A job is idle at a sample when every GPU it holds reports utilization below
PolicyConfig.idle_util_pct; a job holding no GPU, or one whose GPU is missing from
the sample, is never idle (nothing is judged on data we do not have). An idle
spell is the run of consecutive idle samples; one busy sample ends it, and so
does a gap in the samples longer than `max_gap_s` (the spell starts again).

The node agent applies it every heartbeat on its monotonic clock
(workers/idle.py): past idle_warn_s it writes the warning on the job (which
`dispatch show`, the dashboard's job page and its idle_gpu alert show), and
past idle_requeue_s, if the policy sets one, it requeues the job. Pure: the
caller passes the samples and the time.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.units import span
from .config import PolicyConfig

#: What idle_action() returns.
BUSY, IDLE, WARN, REQUEUE = "busy", "idle", "warn", "requeue"


def job_idle(util_by_gpu: dict[int, float], gpus, threshold_pct: float) -> bool:
    """Whether a job holding `gpus` is idle in this sample (GPU index -> utilization, percent)."""
    utils = [util_by_gpu.get(g) for g in gpus]
    return bool(utils) and all(u is not None and u < threshold_pct for u in utils)


def idle_action(idle_s: float | None, config: PolicyConfig) -> str:
    """BUSY (no spell: `idle_s` None), IDLE (a spell shorter than idle_warn_s), WARN, or REQUEUE (the
    spell reached idle_requeue_s, when the policy sets one)."""
    if idle_s is None:
        return BUSY
    if config.idle_requeue_s is not None and idle_s >= config.idle_requeue_s:
        return REQUEUE
    return WARN if idle_s >= config.idle_warn_s else IDLE


def warning_text(config: PolicyConfig) -> str:
    """The warning written on an idle job (it says what happens next)."""
    text = f"GPUs idle: all below {config.idle_util_pct:g}% utilization for {span(config.idle_warn_s)}"
    if config.idle_requeue_s is not None:
        text += f"; the policy requeues the job after {span(config.idle_requeue_s)} idle"
    return text


def requeue_reason(config: PolicyConfig) -> str:
    """The preemption reason of an idle job's requeue, e.g. 'idle: GPUs below 5% for 2h'."""
    return f"idle: GPUs below {config.idle_util_pct:g}% for {span(config.idle_requeue_s or 0)}"


@dataclass
class _Spell:
    since_s: float
    seen_s: float


class IdleClock:
    """Idle spells per key (a job's attempt), on the caller's monotonic clock, in seconds."""

    def __init__(self, max_gap_s: float):
        #: Samples further apart than this do not make one spell (the watcher was stopped, or the
        #: samples failed): the spell starts again at the later one.
        self.max_gap_s = max_gap_s
        self._spells: dict = {}

    def observe(self, key, idle: bool, now_s: float) -> float | None:
        """Record one sample; returns how long the spell has lasted (0.0 at its first sample), or
        None when the job is busy (no spell)."""
        if not idle:
            self._spells.pop(key, None)
            return None
        s = self._spells.get(key)
        if s is None or now_s - s.seen_s > self.max_gap_s or now_s < s.seen_s:
            s = self._spells[key] = _Spell(now_s, now_s)
        s.seen_s = now_s
        return now_s - s.since_s

    def keep_only(self, keys) -> None:
        """Forget the spells of keys not given (attempts that ended)."""
        keep = set(keys)
        for k in [k for k in self._spells if k not in keep]:
            del self._spells[k]
