"""schedule(snapshot, now_ms, config) -> Plan: the one entry point of the policy.

One cycle starts every pending job that fits, best first:

1. Jobs no live node could ever hold get NO_FIT_EVER and are set aside (drained nodes take no new
   job: the cycle sees only the others, and a verdict names the drained nodes that could hold a job).
2. Starving jobs (waiting past their class's starvation bound, half its wait
   target) go first, oldest first: each starts if it fits, else it gets a
   reservation. With `reserve_longest_wait`, the jobs longest overdue against
   their class's target then take the reservations.
3. The rest wait in one queue per user, best static score first (priority
   class, LAS tier, remaining time, aging). Dominant Resource Fairness picks the
   next job: among the heads of the user queues, the best
   `static + fairness(user)`, where the fairness term falls as the user's
   dominant share rises with every placement. With the default weights a class
   step weighs half a LAS tier (`class_step`), so a fresh low job goes ahead of
   a normal one that has had its first GPU-hour.
4. Team limits and guarantees are checked; then the job goes to the node whose
   free GPUs fit it most tightly (type and memory are hard constraints, all GPUs
   of a job on one node; sharing jobs pack onto GPUs within their declared memory).
5. A blocked job may preempt running jobs that stand lower (rank x class_step -
   LAS tier; or, to reclaim a team's guarantee, borrowers): the cheapest victims on one node
   (preemption.py), at most `preemptors_per_cycle` preemptors a cycle. It then
   holds a reservation on the GPUs they free.
6. The first `config.reservations` other blocked GPU jobs get a reservation on the
   node whose GPUs, CPUs and memory free up first (by estimates); a later job may
   use reserved GPUs only if its estimate says it ends before the reservation
   starts (EASY backfill), or if it is high or critical work and the
   reservation a lower class's. Everything not started gets a Verdict with numbers.

Pure: no Redis, clock, OS or randomness; ties break on submit time, then id,
then node name, so the same snapshot always gives the same plan.
"""

from __future__ import annotations

import heapq

from ..core.elastic import smallest
from ..core.model import PRIORITIES
from ..core.plan import Code, PendingJob, Plan, Snapshot, Verdict
from .backlog import Backlog, bucket_key, id_key, shape_of
from .config import PolicyConfig
from .cycle import Cycle
from .nodes import JUMPS
from .score import weighted
from .verdicts import NeverFit, rest_reason


def schedule(snapshot: Snapshot, *, now_ms: int, config: PolicyConfig | None = None) -> Plan:
    """snapshot.pending is a Backlog kept across cycles (the live scheduler's and the simulator's), or
    any iterable of PendingJob (ordered here, for this call)."""
    return plan_cycle(snapshot, now_ms, config)[0]


def plan_cycle(snapshot: Snapshot, now_ms: int, config: PolicyConfig | None = None) -> tuple[Plan, Cycle]:
    """schedule(), and the state the cycle ended in, for place_arrivals."""
    config = config or PolicyConfig()
    backlog = snapshot.pending
    if isinstance(backlog, Backlog):
        backlog.configure(config)
    else:
        backlog = Backlog(config, backlog)
    c = Cycle(snapshot, now_ms, config, backlog)
    order = backlog.order(now_ms)
    try:
        _walk(c, backlog, order)
    finally:
        order.close()
    return c.plan(), c


def place_arrivals(c: Cycle, jobs, now_ms: int) -> Plan:
    """Jobs that arrived since the cycle `c` (plan_cycle) ended, met against what it left: each starts,
    waits or preempts exactly as it would have as the last job of that cycle. Nothing else changed
    since (the caller checks: no job ended, moved or failed a commit; no node changed), and every job
    of that cycle that could do anything did it, so the arrivals are all a full cycle would place.
    Returns only what the arrivals did; `c` goes on from there."""
    c.now = now_ms
    c.begin_more()
    never = NeverFit(c.views, c.config.gang_across_nodes, c.fit, c.drained)
    for p in sorted(jobs, key=lambda p: (-weighted(c.static(p.spec), c.w), p.spec.submit_ms, id_key(p.spec.id))):
        spec = p.spec
        c.teams.waiting(spec)
        if never.check(smallest(spec)):
            c.verdicts.append(Verdict(spec.id, *never.verdict(spec)))
            continue
        c.place(spec, c.terms(spec), f"rank {c.rank + 1}: arrived, and "
                "the jobs before it could not use the room")
    return c.plan()


def rest_verdict(plan: Plan, p: PendingJob, config: PolicyConfig) -> tuple[Code, str]:
    """Why a job the cycle did not reach (plan.rest) waits: as the first job of its group, or for want
    of room anywhere."""
    like = plan.rest_like.get(bucket_key(p, config))
    if like is not None:
        return like.code, like.reason
    return Code.NO_FIT_NOW, plan.rest_reason


def _walk(c: Cycle, backlog: Backlog, order) -> None:
    """One cycle's order: jobs that never fit set aside, the oldest starving jobs, with
    reserve_longest_wait the longest overdue, then the rest by Dominant Resource Fairness."""
    c.teams.demand.update(backlog.team_gpus)
    for team, types, mem_gb in backlog.team_requests if c.config.teams else ():
        c.teams.wants[team].add((types, mem_gb))
    excluded, n_never = _set_aside(c, backlog)
    _starving_first(c, backlog, order, excluded)
    if c.config.reserve_longest_wait is not None and c.config.reservations:
        _longest_wait(c, backlog, order, excluded, n_never)
    _by_fair_share(c, order, excluded)
    c.rest = order.left() - n_never
    if c.rest:
        c.rest_reason = rest_reason(c.index.max_free, c.rank, max((n.cpus for n in c.index.nodes), default=0))


def _capped_array(c: Cycle, order, bucket, verdict: Verdict) -> None:
    """An array at its cap (--array 0-99%8): every element of the bucket left gets the cap's verdict,
    not the cycle's rest reason ("no node has room"), which would send its user looking for GPUs.
    One verdict per element, once per cycle, for arrays at their cap only."""
    for p in order.waiting_in(bucket):
        order.skip.add(p.spec.id)
        c.verdicts.append(Verdict(p.spec.id, verdict.code, verdict.reason))


def _set_aside(c: Cycle, backlog: Backlog) -> tuple[set, int]:
    """NO_FIT_EVER for every job no live node could ever hold (their team's demand drops); returns
    their shapes and how many jobs they are."""
    never = NeverFit(c.views, c.config.gang_across_nodes, c.fit, c.drained)
    excluded, n_never = set(), 0
    for shape, ids in backlog.shapes.items():
        spec = backlog.jobs[next(iter(ids))].spec
        if never.check(smallest(spec)):
            excluded.add(shape)
            code, reason = never.verdict(spec)
            for job_id in ids:
                c.verdicts.append(Verdict(job_id, code, reason))
                c.teams.demand[backlog.jobs[job_id].spec.team] -= spec.gpus
            n_never += len(ids)
    c.verdicts.sort(key=lambda v: id_key(v.job_id))
    return excluded, n_never


def _starving_first(c: Cycle, backlog: Backlog, order, excluded: set) -> None:
    """The oldest starving jobs go first, ahead of every class: each starts, or holds a reservation;
    the other starving jobs keep their place by score (so a long backlog does not turn into FIFO)."""
    n = c.config.starvation_reservations
    for p in backlog.oldest_starving(c.now, n, lambda p: shape_of(p.spec) in excluded):
        spec = p.spec
        order.skip.add(spec.id)
        terms = c.terms(spec)
        c.place(spec, terms, f"rank {c.rank + 1}: starving, {c.starving(spec)}")


def _longest_wait(c: Cycle, backlog: Backlog, order, excluded: set, n_never: int) -> None:
    """With reserve_longest_wait, the jobs longest overdue against their class's target (past that
    share of it), until the reservations are taken (fifo-easy's reservation for its oldest job)."""
    config = c.config
    tries = 0
    for p in backlog.longest_waiting(c.now, 4 * config.reservations + n_never + len(order.skip),
                                     config.reserve_longest_wait):
        if c.resv_tries >= config.reservations or tries >= 4 * config.reservations:
            break
        if p.spec.id in order.skip or shape_of(p.spec) in excluded:
            continue
        tries += 1
        jumpers = PRIORITIES[max(JUMPS, p.spec.rank + 1):]
        if any(backlog.by_class[k] for k in jumpers) and c.best_node(p.spec) is not None:
            continue  # it fits, but high or critical work waits: it starts in score order, after that
        order.skip.add(p.spec.id)
        terms = c.terms(p.spec)
        c.place(p.spec, terms, f"rank {c.rank + 1}: the longest wait against its class's target")


def _by_fair_share(c: Cycle, order, excluded: set) -> None:
    """Dominant Resource Fairness: the user whose best job has the best static + fairness score picks
    next; buckets of jobs that could do nothing more this cycle are skipped whole."""
    config = c.config
    blocked: set = set()
    w_total = sum(config.weights.values()) or 1.0
    w_fair = config.weights.get("fairness", 0.0) / w_total

    def worth(bucket) -> bool:
        return bucket.shape not in excluded and bucket.key not in blocked \
            and c.worth_trying(bucket.shape, bucket.strength)

    def user_key(u: str):
        got = order.head(u, worth)
        if got is None:
            return None
        key, _ = got
        return (key[0] - w_fair * c.fair(u), key[1], key[2], u)

    users = [k for u in list(order.users) if (k := user_key(u)) is not None]
    heapq.heapify(users)
    blocked_by = None  # head-of-line blocking: the first job that could not start
    while users:
        picked = heapq.heappop(users)
        user = picked[3]
        now_key = user_key(user)  # what is worth trying only shrinks, and fairness only falls: re-check
        if now_key != picked:
            if now_key is not None:
                heapq.heappush(users, now_key)
            continue
        _, bucket = order.head(user, worth)
        spec = order.take(user).spec
        terms = c.terms(spec)
        if blocked_by is not None:
            c.rank += 1
            c.verdicts.append(Verdict(spec.id, Code.LOWER_SCORE, f"strict order: waits behind job {blocked_by}",
                                      round(weighted(terms, c.w), 3), c.rank, terms))
        else:
            tries = (c.preemptors, c.resv_tries)
            if not c.place(spec, terms, f"rank {c.rank + 1}: the best score among the jobs left"):
                if config.head_of_line:
                    blocked_by = spec.id
                elif c.exhausted(spec, tries, bucket):
                    blocked.add(bucket.key)
                    c.rest_like[bucket.key] = c.verdicts[-1]
                    if bucket.key[-1] and c.verdicts[-1].code == Code.OVER_LIMIT:
                        _capped_array(c, order, bucket, c.verdicts[-1])
        again = user_key(user)
        if again is not None:
            heapq.heappush(users, again)
