"""The GPU count an elastic job (min_gpus below gpus) starts or waits with this cycle: the one whose
expected completion is soonest (core.elastic: its counts and the run time on each). Pure.
"""

from __future__ import annotations

from dataclasses import replace

from ..core.elastic import counts, run_time
from ..core.model import JobSpec
from .promises import short_span
from .reservations import reserve


def elastic_count(c, spec: JobSpec) -> tuple[JobSpec, str]:
    """The count (elastic.counts) whose expected completion is soonest in Cycle `c`: now on the best
    node with room, or when a reservation for that many could start (reservations.reserve's
    estimate), plus the run time on that many (elastic.run_time). Ties go to more GPUs; with none, the
    most one node holds. Returns the job as it will be placed or held (that count, its run time as the
    estimate) and why."""
    best, notes, options = None, [], counts(spec)
    cap = c.teams.limit(spec.team)  # a count past its team's limit never starts: not one to wait for
    if cap is not None and any(g <= cap for g in options):
        options = [g for g in options if g <= cap]
    for g in options:
        trial = replace(spec, gpus=g, min_gpus=None, est_s=run_time(spec, g))
        run_s = trial.est_s if trial.est_s is not None else c.config.unknown_remaining_s
        if c.teams.check(trial, c.index.free_total) is None and c.best_node(trial) is not None:
            start = c.now
        else:
            resv = reserve(trial, c.index.fitting(trial), c.now)
            if resv is None:
                continue
            start = resv.start_ms
        done = start + int(run_s * 1000)
        wait = "now" if start <= c.now else f"in ~{short_span((start - c.now) / 1000)}"
        notes.append(f"{g} starts {wait}, runs ~{short_span(run_s)}")
        if best is None or (done, -g) < best[0]:  # a tie (no estimates): the most GPUs
            best = ((done, -g), trial)
    if best is None:  # waits with the most GPUs one node holds (not as a gang of its most: --nodes asks for that)
        one_node = [g for g in options if g <= c.index.largest_node]
        g = max(one_node) if one_node else options[0]
        return replace(spec, gpus=g, min_gpus=None, est_s=run_time(spec, g)), \
            "elastic: no count could start before others end"
    chosen = best[1]
    return chosen, f"elastic: {chosen.gpus} GPUs finish soonest ({'; '.join(notes)})"
