"""Backlog: the pending jobs in the policy's order, kept from one cycle to the next.

A cycle must not rank every pending job again: at 100,000 pending that alone costs
longer than a cycle may take. The order of two waiting jobs does not change with
time: with linear aging (`../docs/policy.md`), score(t) = static + w_wait * wait(t)
rises at the same rate for every job until the aging cap, so the key
`static - w_wait * wait_from` (in score units) orders them for good; a job past the
cap moves once, lazily, to a second heap keyed by its capped score. The default
policy has no wait term at all.

Jobs are grouped per user in buckets of one request shape and one preemption
strength. A cycle (`Backlog.order`) walks the users' best heads, Dominant Resource
Fairness picking the user as before, and skips whole buckets that can do nothing
this cycle (too large for any free room, too weak to preempt, already blocked), so
it touches the jobs it places or judges, not the whole queue. What it pops it puts
back when it ends: the backlog changes only through add() and discard(), which the
live scheduler calls from its mirror of Redis and the simulator from its events.

Pure: no Redis, clock or I/O.
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict

from ..core.plan import PendingJob
from ..core.model import PRIORITIES, JobSpec
from .config import PolicyConfig
from ..core.elastic import smallest
from .score import attained_term, las_tier, priority_term, remaining_term


def id_key(job_id: str) -> tuple[int, str]:
    """Numeric ids in numeric order ('9' before '10'); any string works."""
    return (len(job_id), job_id)


def shape_of(spec: JobSpec) -> tuple:
    """What decides where a job fits: jobs of one shape fit (or not) on the same nodes. An elastic
    job counts as the least it asks for (it may start with that many)."""
    spec = smallest(spec)
    return (spec.gpus, spec.gpu_types, spec.gpu_mem_gb, spec.cpus, spec.mem_gb, spec.share, spec.nodes,
            spec.gpus_per_node, spec.same_type)


def strength(spec: JobSpec, attained_gpu_s: float, config: PolicyConfig) -> float:
    """How strongly a blocked job may preempt under preempt_by; higher preempts more
    (preemption.preemptible_below gives what a running job needs against it)."""
    if config.preempt_by == "remaining":
        return -(spec.est_s if spec.est_s is not None else float("inf"))
    return class_strength(spec.rank, las_tier(attained_gpu_s, config.las_thresholds_gpu_s), config)


def class_strength(rank: int, tier: int, config: PolicyConfig) -> float:
    """strength() of a job of class `rank` at LAS tier `tier`, under any preempt_by but remaining."""
    mode = config.preempt_by
    if mode == "attained":
        return -tier
    if mode == "class+attained":
        return rank * config.class_step - tier
    return rank


def bucket_key(p: PendingJob, config: PolicyConfig) -> tuple:
    """The group a job is ordered and skipped with: its user, shape, team and preemption strength, and
    its array (whose cap, once reached, holds every element of it and no other job)."""
    spec = p.spec
    return (spec.user, shape_of(spec), spec.team, strength(spec, p.attained_gpu_s, config), spec.array_of)


class _Keys:
    """The time-free parts of the score under one PolicyConfig (score.static_terms, weighted)."""

    def __init__(self, config: PolicyConfig):
        w = config.weights
        total = sum(w.values()) or 1.0
        self.wp, self.ww, self.wr, self.wa = (w.get(k, 0.0) / total for k in ("priority", "wait", "remaining",
                                                                              "attained"))
        self.prio = {p: priority_term(i) for i, p in enumerate(PRIORITIES)}
        self.ref, self.tiers = config.remaining_ref_s, config.las_thresholds_gpu_s
        horizon = config.aging_horizon_s
        cap = min(config.aging_cap, 100.0)
        # the wait term is 100 * wait / horizon until it reaches `cap`, at wait = cap_ms
        self.rate = (100.0 / (horizon * 1000.0)) if horizon > 0 else 0.0  # term units per ms
        self.cap, self.cap_ms = cap, (horizon * 1000.0 * cap / 100.0 if horizon > 0 else 0.0)
        self.instant = horizon <= 0  # the whole (capped) wait term at once
        self.signature = (tuple(sorted(w.items())), horizon, config.aging_cap, self.ref, self.tiers,
                          config.preempt_by)

    def base(self, p: PendingJob) -> float:
        spec = p.spec
        s = self.wp * self.prio[spec.priority]
        if self.wr:
            s += self.wr * remaining_term(spec.est_s, self.ref)
        if self.wa:
            s += self.wa * attained_term(p.attained_gpu_s, self.tiers)
        return s

    def aging(self) -> bool:
        return bool(self.ww) and not self.instant

    def capped(self, p: PendingJob) -> float:
        """The score of a job whose wait term is at its cap (or of any job, without aging)."""
        return self.base(p) + (self.ww * self.cap if self.ww else 0.0)


class _Bucket:
    """One user's jobs of one shape and strength: `old` is keyed by -score (capped or no aging),
    `young` by -(base - w_wait * rate * wait_from), valid while the job is under the cap."""

    __slots__ = ("key", "shape", "strength", "young", "old", "shortest_s", "top_rank")

    def __init__(self, key):
        self.key, self.shape, self.strength = key, key[1], key[3]  # (bucket_key: user, shape, team, strength)
        self.young: list = []
        self.old: list = []
        # bounds over every job ever added (a job leaving never tightens them): the shortest estimate
        # (inf: none has one) and the highest class, for what a reservation lets its jobs do
        self.shortest_s, self.top_rank = float("inf"), -1

    def note(self, spec: JobSpec) -> None:
        if spec.est_s is not None:
            self.shortest_s = min(self.shortest_s, spec.est_s)
        self.top_rank = max(self.top_rank, spec.rank)


class Backlog:
    def __init__(self, config: PolicyConfig | None = None, jobs=()):
        self.jobs: dict[str, PendingJob] = {}
        self._entry: dict[str, tuple] = {}  # job id -> (its heap entry, its bucket)
        self._buckets: dict[tuple, _Bucket] = {}
        self._by_user: dict[str, list[_Bucket]] = defaultdict(list)
        self._starve: dict[str, list] = defaultdict(list)  # class -> heap of (submit_ms, id key, id)
        self.shapes: dict[tuple, set[str]] = defaultdict(set)  # shape -> ids
        self.team_gpus: Counter = Counter()
        self.team_requests: Counter = Counter()  # (team, GPU types, GPU memory) -> pending jobs
        self.by_class: Counter = Counter()  # class -> pending jobs
        # what the operators' views show of the queue (scheduler/summary.py), kept as jobs come and go
        self.gpus_by_class: Counter = Counter()
        self.by_user: Counter = Counter()  # (user, team) -> pending jobs
        self.gpus_by_user: Counter = Counter()  # (user, team) -> GPUs they ask for
        self._dead = 0
        self._seq = 0
        self.config = config or PolicyConfig()
        self._keys = _Keys(self.config)
        for p in jobs:
            self.add(p)

    def __len__(self) -> int:
        return len(self.jobs)

    def __iter__(self):
        return iter(self.jobs.values())

    def __contains__(self, job_id: str) -> bool:
        return job_id in self.jobs

    def configure(self, config: PolicyConfig) -> None:
        """Use `config` from now on; the keys are worked out again only if its scoring changed."""
        if _Keys(config).signature != self._keys.signature:
            self._rebuild(config)
        self.config = config

    # -- changes ------------------------------------------------------------------------------
    def add(self, p: PendingJob) -> None:
        spec = p.spec
        if spec.id in self.jobs:
            self.discard(spec.id)
        k = self._keys
        self._seq += 1
        seq = self._seq  # ties never reach the PendingJob, even with a dead entry of the same id
        bkey = bucket_key(p, self.config)
        b = self._buckets.get(bkey)
        if b is None:
            b = self._buckets[bkey] = _Bucket(bkey)
            self._by_user[spec.user].append(b)
        b.note(spec)
        if k.aging():
            entry = (-(k.base(p) - k.ww * k.rate * p.wait_from_ms), spec.submit_ms, id_key(spec.id), seq, spec.id, p)
            heapq.heappush(b.young, entry)
        else:
            entry = (-k.capped(p), spec.submit_ms, id_key(spec.id), seq, spec.id, p)
            heapq.heappush(b.old, entry)
        self.jobs[spec.id] = p
        self._entry[spec.id] = (entry, b)
        heapq.heappush(self._starve[spec.priority], (spec.submit_ms, id_key(spec.id), seq, spec.id, p))
        self.shapes[b.shape].add(spec.id)
        self._count(spec, 1)

    def discard(self, job_id: str) -> None:
        p = self.jobs.pop(job_id, None)
        if p is None:
            return
        del self._entry[job_id]
        shape = shape_of(p.spec)
        ids = self.shapes[shape]
        ids.discard(job_id)
        if not ids:
            del self.shapes[shape]
        self._count(p.spec, -1)
        self._dead += 1
        if self._dead > 1024 and self._dead > 2 * len(self.jobs):
            self._rebuild(self.config)

    def _count(self, spec: JobSpec, n: int) -> None:
        self.team_gpus[spec.team] += n * spec.gpus
        request = (spec.team, spec.gpu_types, spec.gpu_mem_gb)
        self.team_requests[request] += n
        if not self.team_requests[request]:
            del self.team_requests[request]
        self.by_class[spec.priority] += n
        self.gpus_by_class[spec.priority] += n * spec.gpus
        self.by_user[(spec.user, spec.team)] += n
        self.gpus_by_user[(spec.user, spec.team)] += n * spec.gpus
        if not self.by_user[(spec.user, spec.team)]:
            del self.by_user[(spec.user, spec.team)], self.gpus_by_user[(spec.user, spec.team)]

    def _rebuild(self, config: PolicyConfig) -> None:
        """Every job added again under `config`: new keys, and no dead heap entries."""
        jobs = list(self.jobs.values())
        self.__init__(config)
        for p in jobs:
            self.add(p)

    def _alive(self, entry) -> bool:
        got = self._entry.get(entry[4])
        return got is not None and got[0] is entry

    # -- reading, for one cycle ---------------------------------------------------------------
    def oldest_starving(self, now_ms: int, n: int, skip=None) -> list[PendingJob]:
        """Up to `n` jobs waiting past their class's starvation bound, oldest first; those for which
        `skip(job)` is true left out and not counted."""
        found = []
        for prio, bound in self.config.starvation_s.items():
            found += self._oldest(prio, n, lambda item, b=bound: (now_ms - item[0]) / 1000.0 > b, skip)
        found.sort(key=lambda x: (x[0], x[1]))
        return [item[4] for item in found[:n]]

    def strength_bound(self) -> float:
        """An upper bound on the strength (strength()) of every job waiting: its class's, at LAS tier 0
        (inf under preempt_by remaining; -inf with nothing waiting)."""
        classes = [c for c, n in self.by_class.items() if n]
        if not classes or self.config.preempt_by == "remaining":
            return float("inf") if classes else float("-inf")
        return max(class_strength(PRIORITIES.index(c), 0, self.config) for c in classes)

    def oldest(self, prio: str, n: int) -> list[PendingJob]:
        """Up to `n` of the class's jobs, oldest submit first."""
        return [item[4] for item in self._oldest(prio, n, lambda item: True)]

    def longest_waiting(self, now_ms: int, n: int, share: float = 0.0) -> list[PendingJob]:
        """Up to `n` jobs that have waited at least `share` of their class's target, most overdue against
        it (wait / target) first; classes without a target never."""
        found = []
        for prio in self._starve:
            target = self.config.targets_s.get(prio)
            if not target:
                continue
            over = [((now_ms - item[0]) / 1000.0 / target, item) for item in
                    self._oldest(prio, n, lambda it, t=target: (now_ms - it[0]) / 1000.0 / t >= share)]
            found += over
        found.sort(key=lambda x: (-x[0], x[1][0], x[1][1]))
        return [item[4] for _, item in found[:n]]

    def _oldest(self, prio: str, n: int, keep, skip=None) -> list[tuple]:
        """Up to `n` of the class's oldest live entries while `keep(entry)`, but for those of jobs
        `skip(job)` leaves out; all left in their heap."""
        heap = self._starve.get(prio)
        taken, out = [], []
        while heap and len(out) < n:
            item = heap[0]
            if self.jobs.get(item[3]) is not item[4]:
                heapq.heappop(heap)  # discarded or added again since
                continue
            if not keep(item):
                break
            taken.append(heapq.heappop(heap))
            if skip is None or not skip(item[4]):
                out.append(item)
        for item in taken:
            heapq.heappush(heap, item)
        return out

    def order(self, now_ms: int) -> "Order":
        return Order(self, now_ms)


class Order:
    """One cycle's walk through the backlog: per user, the best head among the buckets still worth
    trying. Popped entries go back into their buckets on close()."""

    def __init__(self, backlog: Backlog, now_ms: int):
        self.b, self.now = backlog, now_ms
        k = backlog._keys
        self.shift = k.ww * k.rate * now_ms if k.aging() else 0.0  # young keys, in score at `now`
        self.popped: list[tuple] = []  # (bucket, which heap, entry)
        self.skip: set[str] = set()  # ids already dealt with this cycle (the oldest starving)
        self.users: dict[str, list] = {}  # user -> heap of (head key, n, bucket)
        self._n = 0
        for user, buckets in backlog._by_user.items():
            heap = []
            for bucket in buckets:
                head = self._head(bucket)
                if head is not None:
                    heap.append((head[0], self._tick(), bucket))
            if heap:
                heapq.heapify(heap)
                self.users[user] = heap

    def _tick(self) -> int:
        self._n += 1
        return self._n

    def _head(self, bucket: _Bucket):
        """((−score now, submit, id key), which heap, entry) of the bucket's best live job, or None."""
        b, k = self.b, self.b._keys
        while bucket.young:  # jobs past the aging cap move to `old` with their capped score
            e = bucket.young[0]
            if not b._alive(e) or e[4] in self.skip:
                heapq.heappop(bucket.young)
                if b._alive(e):
                    self.popped.append((bucket, bucket.young, e))
                continue
            if self.now - e[5].wait_from_ms < k.cap_ms:
                break
            heapq.heappop(bucket.young)
            moved = (-k.capped(e[5]), *e[1:])
            b._entry[e[4]] = (moved, bucket)
            heapq.heappush(bucket.old, moved)
        while bucket.old:
            e = bucket.old[0]
            if b._alive(e) and e[4] not in self.skip:
                break
            heapq.heappop(bucket.old)
            if b._alive(e):
                self.popped.append((bucket, bucket.old, e))
        best = None
        if bucket.young:
            e = bucket.young[0]
            best = ((e[0] - self.shift, e[1], e[2]), bucket.young, e)
        if bucket.old:
            e = bucket.old[0]
            if best is None or (e[0], e[1], e[2]) < best[0]:
                best = ((e[0], e[1], e[2]), bucket.old, e)
        return best

    def head(self, user: str, worth):
        """The user's best job in a bucket `worth(bucket)` still allows, as (key, bucket); buckets
        found not worth it are dropped for the rest of the cycle (what is worth trying only shrinks
        within a cycle). None when the user has nothing left worth trying."""
        heap = self.users.get(user)
        while heap:
            key, _, bucket = heap[0]
            head = self._head(bucket)
            if head is None or not worth(bucket):
                heapq.heappop(heap)
                continue
            if head[0] != key:
                heapq.heapreplace(heap, (head[0], self._tick(), bucket))
                continue
            return key, bucket
        self.users.pop(user, None)
        return None

    def take(self, user: str) -> PendingJob:
        """Pop the user's head found by head()."""
        heap = self.users[user]
        _, _, bucket = heap[0]
        _, which, e = self._head(bucket)
        heapq.heappop(which)
        self.popped.append((bucket, which, e))
        head = self._head(bucket)
        if head is None:
            heapq.heappop(heap)
        else:
            heapq.heapreplace(heap, (head[0], self._tick(), bucket))
        return e[5]

    def waiting_in(self, bucket: _Bucket) -> list[PendingJob]:
        """The bucket's jobs not yet taken (nor skipped) this cycle, in no order."""
        return [e[5] for heap in (bucket.young, bucket.old) for e in heap
                if self.b._alive(e) and e[4] not in self.skip]

    def left(self) -> int:
        """How many jobs were not popped (nor skipped) this cycle."""
        return len(self.b.jobs) - len({e[4] for _, _, e in self.popped} | self.skip)

    def close(self) -> None:
        for _, which, e in self.popped:
            heapq.heappush(which, e)
        self.popped.clear()
