"""Reading a cluster snapshot for the policy (the scheduler commits the plan it returns with
dispatcher/scheduler/planner.py).

read_snapshot costs a fixed handful of pipelined round trips per cycle. Specs are
immutable, so a SpecCache (store/spec_cache.py) keeps them decoded across cycles.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

from ..begin import waits_for
from ..core.errors import MalformedRecord
from ..core.plan import NodeView, PendingJob, RunningJob, Snapshot, pieces
from ..core.model import ACTIVE_STATES
from . import job_record, keys, scripts
from .connect import text, tolerant, wrong_type
from .job_record import gang_ranks
from ..core.elastic import is_elastic, run_time
from .dependencies import READY, judge_all
from .nodes import NodeRecord, read_nodes
from .quarantine import ACTIVE, MAX_MS, job_entry, valid_name
from .spec_cache import SpecCache

log = logging.getLogger("dispatch.store")


@dataclass(frozen=True)
class ReadResult:
    snapshot: Snapshot
    epochs: dict[str, int]  # pending and active job id -> epoch the plan is based on
    nodes: list[NodeRecord]
    bad_jobs: dict[str, str]  # job id -> why its record is unusable
    held: dict[str, str] = field(default_factory=dict)  # pending job id -> what it waits for (--after, --begin)
    stray: tuple = ()  # bad index entries met (quarantine.Entry), for the leader to quarantine
    aside: tuple = ()  # (key, type it should have) of keys of the wrong type met, for the leader to set aside

    def unusable(self, job_id: str) -> str | None:
        """Why this job's record or index entry cannot be scheduled as it stands, or None."""
        if job_id in self.bad_jobs:
            return self.bad_jobs[job_id]
        why = next((e.reason for e in self.stray if text(e.member) == job_id), None)
        return None if why is None else f"its index entry is bad ({why}); the scheduler quarantines it"




class Strays(tuple):
    """Index entries to quarantine (quarantine.Entry), which read_jobs yields in place of a job."""


@dataclass(frozen=True)
class OnHold:
    """A pending job its owner or an operator held out of scheduling (`dispatch hold`, store/pending.py),
    which read_jobs yields in place of a job: never scheduled, but counted with the queue."""
    job: PendingJob


#: Past this many jobs, read_jobs reads them in batches of this size, the next batch read from Redis
#: (by a helper thread, waiting on the socket) while this one is decoded: a new leader's read of
#: 100,000 jobs overlaps the server's work with ours instead of waiting for all of it first.
BATCH = 10_000


def read_jobs(client, ns: str, ids, cache: SpecCache, scores: str | None = None, batch: int = BATCH):
    """Queue-side view of the given jobs, in one round trip (one a BATCH past it): yields (job id,
    what) where what is a PendingJob, a RunningJob (with its epoch: (job, epoch)), OnHold (a pending
    job held by `dispatch hold`), None (neither: ended, or moved between two reads), an Exception (an
    unusable record), or Strays: entries of the pending index (a score that is not a time, no record, a
    job not pending) or of either index (a record of the wrong type) to quarantine. `scores`: another
    zset to take pending jobs' wait scores from (and then the pending index is not judged), for a view
    that cannot read the pending index.
    `batch`: the most jobs one round trip reads (smaller: the server answers other clients sooner)."""
    ids = list(ids)
    index = None if scores else keys.jobs_pending(ns)
    batches = [ids[i:i + batch] for i in range(0, len(ids), batch)]
    if len(batches) <= 1:
        yield from _decoded(ns, ids, _fetch(client, ns, ids, _wanted(ids, cache), scores), cache, index)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1, thread_name_prefix="dispatch-read") as pool:
        ahead = pool.submit(_fetch, client, ns, batches[0], _wanted(batches[0], cache), scores)
        for k, part in enumerate(batches):
            replies = ahead.result()
            if k + 1 < len(batches):
                ahead = pool.submit(_fetch, client, ns, batches[k + 1], _wanted(batches[k + 1], cache), scores)
            yield from _decoded(ns, part, replies, cache, index)


def _wanted(ids: list[str], cache: SpecCache) -> list[str]:
    """Each job's spec, or only its state where its spec is decoded already."""
    specs = cache.specs
    return ["spec" if j not in specs else "state" for j in ids]


def _fetch(client, ns: str, ids: list[str], extra: list[str], scores: str | None) -> list:
    """The read_jobs.lua replies for `ids`, in one round trip."""
    pipe = client.pipeline(transaction=False)
    for chunk in scripts.chunks(len(ids)):
        scripts.read_jobs(pipe, ns, ids[chunk], extra[chunk], job_record.SCHEDULER, scores=scores)
    replies = []
    for got in pipe.execute(raise_on_error=False):
        if isinstance(got, Exception):  # the call failed as a whole: Redis's trouble, not a record's
            raise got
        replies += got
    return replies


def _decoded(ns: str, ids: list[str], replies: list, cache: SpecCache, index: str | None):
    pending = keys.jobs_pending(ns)
    for job_id, reply in zip(ids, replies):
        if isinstance(reply, Exception):  # a key of the wrong type is one bad record, not a failed cycle
            yield job_id, Strays((job_entry(ns, pending, job_id, "not a pending job", expect="pending"),
                                  job_entry(ns, keys.jobs_active(ns), job_id, "not an active job", expect=ACTIVE)))
            continue
        try:
            yield job_id, _job_from(job_id, *reply, cache, ns, index)
        except (MalformedRecord, ValueError) as e:
            yield job_id, e


def _job_from(job_id: str, reply, since, cache: SpecCache, ns: str, index: str | None):
    state, epoch, attempt, node, gpus, assigned_ms, started_ms, ckpt_ms, preempted_ms, plan_est, gang, ended, hold, \
        fp, by, raw = reply
    state = text(state)
    if state == "pending":
        if since is None:
            return None  # moved on between the two reads (it is in the changed set again)
        at = float(since)  # (a score comes as text from read_jobs.lua)
        if hold:
            return _on_hold(job_id, raw, plan_est, fp, int(at) if -MAX_MS <= at <= MAX_MS else None, cache)
        if not -MAX_MS <= at <= MAX_MS:  # not a time (is_time, inline: this runs for every job read)
            if index is None:
                return None
            return Strays((job_entry(ns, index, job_id, "its score is not a time", "score", text(since),
                                     restore="submit_ms"),))
        epoch = 0 if epoch is None else int(epoch)  # absent is 0; present must be a number
        return PendingJob(cache.get(job_id, raw, plan_est, fp), 0 if attempt is None else int(attempt), int(at)), epoch
    if state in ACTIVE_STATES:
        epoch = 0 if epoch is None else int(epoch)
        spec = cache.get(job_id, raw, plan_est, fp)
        held = tuple(int(g) for g in text(gpus).split(",") if g)
        if is_elastic(spec) and len(held) != spec.gpus:  # its estimate is for the most it asked for
            spec = replace(spec, est_s=run_time(spec, len(held)))
        ranks = gang_ranks(text(gang)) if gang else ()
        return RunningJob(spec, text(node), held,
                          int(started_ms or assigned_ms or 0), int(ckpt_ms or 0), int(preempted_ms or 0),
                          state == "preempting", extra=ranks[1:], preempted_for=_preemptor(state, by),
                          ended=frozenset(int(r) for r in text(ended).split(",") if r.isdigit()) if ended
                          else frozenset()), epoch
    if since is not None and index is not None:  # no record, or one that is not pending, in the pending index
        return Strays((job_entry(ns, index, job_id, "not a pending job", expect="pending"),))
    return None


def _preemptor(state: str, by) -> str:
    """The pending job a preempting job's GPUs go to ("job 12", as the scheduler's commit wrote it), else ""."""
    who = text(by) if state == "preempting" and by else ""
    return who[4:] if who.startswith("job ") else ""


def _on_hold(job_id: str, raw, plan_est, fp, since_ms: int | None, cache: SpecCache) -> OnHold | None:
    """A held job, counted but never scheduled; None if its spec does not read (as before it was held, a
    held record is no one's to quarantine: its release reads it again)."""
    try:
        spec = cache.get(job_id, raw, plan_est, fp)
    except (MalformedRecord, ValueError):
        return None
    return OnHold(PendingJob(spec, 0, since_ms))


def node_views(live: list[NodeRecord], running) -> tuple[NodeView, ...]:
    """What each live node has free, from the job records (not from the alloc hashes: a job that
    ended between two reads must not leave its GPUs looking held; the commit script still checks
    the alloc hash, so a GPU taken meanwhile only costs a replan)."""
    used: dict[str, list[float]] = {}
    held: dict[str, set[int]] = {}
    shared: dict[str, dict[int, float]] = {}
    for r in running:
        u = used.setdefault(r.node, [0, 0.0])
        u[0] += r.spec.cpus
        u[1] += r.spec.mem_gb
        if r.spec.share:
            on_node = shared.setdefault(r.node, {})
            for g in r.gpus:
                on_node[g] = on_node.get(g, 0.0) + r.spec.gpu_mem_gb
        else:
            held.setdefault(r.node, set()).update(r.gpus)
    views = []
    for n in live:
        cpus_used, mem_used = used.get(n.name, (0, 0.0))
        busy, sharing = held.get(n.name, ()), shared.get(n.name, {})
        views.append(NodeView(
            name=n.name, gpus=n.gpus, cpus=n.cpus, mem_gb=n.mem_gb,
            free_gpus=tuple(g.index for g in n.gpus if not g.blocked and g.index not in busy
                            and g.index not in sharing),
            free_cpus=max(0, n.cpus - int(cpus_used)), free_mem_gb=max(0.0, n.mem_gb - mem_used),
            shared=tuple(sorted((g, m) for g, m in sharing.items() if g not in busy)),
            drained=None if n.drain is None else n.drain.reason))
    return tuple(views)


class ViewsMemo:
    """The last cycle's running pieces and node views, given again while nothing they come from changed:
    the same live nodes (name, hardware as decoded, drain mark) and the same running entries, the very
    objects (frozen; the memo holds them, so no new object can take one's id). A steady cycle at 1,000
    nodes then skips ~6 ms of views nobody's heartbeat or job changed."""

    def __init__(self):
        self._nodes: tuple = ()
        self._entries: tuple = ()
        self._got: tuple | None = None

    def get(self, live: list[NodeRecord], entries) -> tuple[tuple, tuple[NodeView, ...]]:
        """(pieces(entries), node_views(live, those pieces)), from the last call's when they are the same."""
        nodes = tuple((n.name, n.gpus, n.cpus, n.mem_gb, n.drain) for n in live)
        entries = tuple(entries)
        same = self._got is not None and nodes == self._nodes and len(entries) == len(self._entries) \
            and all(a is b for a, b in zip(entries, self._entries))
        if not same:
            running = pieces(entries)
            self._nodes, self._entries, self._got = nodes, entries, (running, node_views(live, running))
        return self._got


#: Jobs of the all-jobs index (the newest) a view reads when an index is of the wrong type.
STAND_IN = 100_000


def read_snapshot(client, ns: str, now_ms: int, node_timeout_s: float, cache: SpecCache, *,
                  with_pending: bool = True, only_pending=None) -> ReadResult:
    """Everything at once, for `dispatch why --fresh` (the scheduler keeps a Mirror instead); without
    the pending jobs (`with_pending` False: the nodes and the running jobs) for the board; with only
    the pending jobs `only_pending` names (those of them still pending) for `dispatch eta` on a long
    queue. Read-only: bad index entries are left out (in ReadResult.stray), and an index of the wrong
    type is stood in for by the newest STAND_IN jobs of the all-jobs index."""
    nodes, _ = read_nodes(client, ns)
    live = [n for n in nodes if n.alive(now_ms, node_timeout_s)]
    whole = with_pending and only_pending is None
    index = client.pipeline(transaction=True)  # one consistent view of both indexes
    if whole:
        index.zrange(keys.jobs_pending(ns), 0, -1)
    index.zrange(keys.jobs_active(ns), 0, -1)
    replies = index.execute(raise_on_error=False)
    pending, active = replies if whole else (list(only_pending or ()), replies[0])
    scores = None
    if isinstance(pending, Exception) or isinstance(active, Exception):
        for e in (pending, active):
            if isinstance(e, Exception) and not wrong_type(e):
                raise e
        latest = tolerant(lambda: client.zrange(keys.jobs_all(ns), -STAND_IN, -1), [])
        if isinstance(pending, Exception):
            pending, scores = [], keys.jobs_all(ns)
        active = ([] if isinstance(active, Exception) else active) + latest
    pending = [text(i) for i in pending if valid_name(i)]
    ids = list(dict.fromkeys(pending + [text(i) for i in active if valid_name(i)]))
    pending_jobs, running, epochs, bad, stray = [], [], {}, {}, []
    for job_id, got in read_jobs(client, ns, ids, cache, scores):
        if isinstance(got, Strays):
            stray += got
        elif isinstance(got, Exception):
            bad[job_id] = str(got)
        elif got is not None and not isinstance(got, OnHold):
            job, epochs[job_id] = got
            (pending_jobs if isinstance(job, PendingJob) else running).append(job)
    cache.keep_only(ids)
    pending_jobs = restamped(pending_jobs, cache)
    held = held_back(client, ns, pending_jobs, now_ms, cache.specs)
    pending_jobs = [p for p in pending_jobs if p.spec.id not in held]
    running = pieces(running)  # a gang as one entry per node
    return ReadResult(Snapshot(tuple(pending_jobs), running, node_views(live, running)), epochs, nodes,
                      pending_only(bad, set(pending)), held, tuple(stray))


def restamped(pending: list[PendingJob], cache: SpecCache) -> list[PendingJob]:
    """The pending jobs, those whose cached spec took a newer twin's estimate (spec_cache.py) with it."""
    ids = cache.take_restamped()
    if not ids:
        return pending
    return [replace(p, spec=cache.specs[p.spec.id]) if p.spec.id in ids and p.spec.id in cache.specs else p
            for p in pending]


def held_back(client, ns: str, pending, now_ms: int, known) -> dict[str, str]:
    """Of these pending jobs, those whose --begin time has not come, and those whose dependencies are not met
    (or failed), with why (as the scheduler's mirror holds them). `known`: job id -> spec of the jobs read."""
    early = {p.spec.id: waits_for(p.spec.begin_ms) for p in pending if p.spec.begin_ms > now_ms}
    waiting = [p.spec for p in pending if (p.spec.after or p.spec.after_any) and p.spec.id not in early]
    if not waiting:
        return early
    return {**early, **{job_id: why for job_id, (verdict, why) in judge_all(client, ns, waiting, known).items()
                        if verdict != READY}}


def pending_only(bad: dict[str, str], pending_ids) -> dict[str, str]:
    """Unusable records to quarantine: pending ones. An active one only costs its own view (its agent
    still runs it, and finishes it)."""
    for job_id in bad.keys() - set(pending_ids):
        log.error("active job %s has an unreadable record (%s); skipped", job_id, bad[job_id])
    return {j: why for j, why in bad.items() if j in pending_ids}
