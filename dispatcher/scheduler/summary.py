"""What the leader publishes of its queue after each full cycle, for the operators' views.

The board, /metrics and `dispatch top` used to read the whole queue to count it. The leader
already holds it (the Mirror's Backlog, which keeps these counts as jobs come and go), so it
publishes the counts instead (store/stats.py), and a view costs O(nodes + page), not O(queue):

- per class: jobs pending (the held ones apart), jobs held (by their dependencies or by `dispatch
  hold`), GPUs asked for (held jobs' too), the oldest OLDEST_KEPT jobs not held (the time their wait
  counts from, id, and attempt: the longest waits, the wait alerts, the first pages of the queue), and the
  commonest reasons;
- per user and team: jobs pending and GPUs asked for, held ones included;
- the GPU requests, the fewest GPUs of each type and memory (what fragmentation is measured against).

Every pending job is in one class and one user row, so each breakdown sums to the queue.
Costs O(classes x OLDEST_KEPT + users + held jobs + the jobs the cycle judged).
"""

from __future__ import annotations

import heapq
from collections import Counter

from ..core.model import PRIORITIES
from ..store.samples import gpu_requests

#: The oldest jobs of each class the summary lists.
OLDEST_KEPT = 200
#: The commonest reasons of each class it lists.
REASONS_KEPT = 3


#: The reason a class's summary gives the jobs held by `dispatch hold` (each job's own names who held it).
ON_HOLD = "held (dispatch hold)"


def queue_summary(backlog, held: dict, on_hold: dict, reasons: dict[str, tuple], rest_reason: str | None) -> dict:
    """`backlog`: the policy's Backlog; `held`: job id -> PendingJob held by its dependencies; `on_hold`:
    job id -> PendingJob held by `dispatch hold`; `reasons`: job id -> (reason, ...) as the planner last
    wrote it; `rest_reason`: why the jobs the cycle did not reach wait."""
    held_by_class, held_gpus = Counter(), Counter()
    by_user, gpus_by_user = Counter(backlog.by_user), Counter(backlog.gpus_by_user)
    said: dict[str, Counter] = {c: Counter() for c in PRIORITIES}
    held_of: dict[str, list] = {c: [] for c in PRIORITIES}
    for p in (*held.values(), *on_hold.values()):
        spec = p.spec
        held_of.setdefault(spec.priority, []).append(p)
        held_by_class[spec.priority] += 1
        held_gpus[spec.priority] += spec.gpus
        by_user[(spec.user, spec.team)] += 1
        gpus_by_user[(spec.user, spec.team)] += spec.gpus
    for p in on_hold.values():
        said[p.spec.priority][ON_HOLD] += 1
    for job_id, written in reasons.items():
        p = backlog.jobs.get(job_id) or held.get(job_id)
        if p is not None:
            said[p.spec.priority][written[0]] += 1
    classes = {}
    for c in PRIORITIES:
        pending, n_held = backlog.by_class.get(c, 0), held_by_class.get(c, 0)
        if not pending and not n_held:
            continue
        counted = said[c]
        rest = pending + n_held - sum(counted.values())
        if rest > 0:
            counted[rest_reason or "not judged yet"] += rest
        classes[c] = {"pending": pending, "held": n_held,
                      "gpus_pending": backlog.gpus_by_class.get(c, 0) + held_gpus[c],
                      "oldest": [[p.wait_from_ms, p.spec.id, p.attempt] for p in backlog.oldest(c, OLDEST_KEPT)],
                      # (held jobs too, apart: the dashboard's page of a class lists them after the others)
                      "held_oldest": [[p.wait_from_ms, p.spec.id, p.attempt] for p in heapq.nsmallest(
                          OLDEST_KEPT, held_of.get(c, ()), key=lambda p: (p.wait_from_ms, p.spec.id))],
                      "reasons": [[r, n] for r, n in counted.most_common(REASONS_KEPT)]}
    return {"classes": classes,
            "users": [[u, t, n, gpus_by_user[(u, t)]] for (u, t), n in by_user.items()],
            "requests": [[n, list(t), m] for n, t, m in gpu_requests(backlog)]}
