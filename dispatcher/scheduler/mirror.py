"""Mirror: the leading scheduler's copy of the queue, kept current from what changed.

Every write that changes a job's state (submit, and each job script in lua/) adds the
job's id to keys.jobs_changed in the same atomic step. Each cycle the leader's mirror takes
that set into the change feed (store/feed.py: one atomic script) and rereads the jobs of
every feed entry past its cursor, so a cycle costs what changed, not what waits. A change
made after the take is in the set again for the next cycle, so the mirror never misses
one; reading a job twice is harmless.

A standby's mirror follows the same feed from its own cursor without taking the set
(`follow`), so when its scheduler takes the lead the mirror is current but for the last
take: a takeover rereads what changed, not the queue. The mirror reads everything again
when it starts, when the feed no longer holds the entries past its cursor (a gap), and
after any Redis error (a restarted server may have lost the set).
Specs are immutable and stay decoded; pending jobs live in a policy Backlog, which
keeps their order across cycles.
"""

from __future__ import annotations

import contextlib
import gc
import heapq
import logging
from dataclasses import replace

from .. import clock
from ..begin import waits_for
from ..core.plan import PendingJob, RunningJob, Snapshot
from ..core.errors import MalformedRecord
from ..core.memo import gc_paused
from ..policy.backlog import Backlog
from ..store import feed, keys
from ..store.codec import decode_node_info, node_timeout_s
from ..store.nodes import NodeRecord, read_changed_infos, read_drains, read_infos
from ..store.dependencies import HELD, READY, judge_all
from ..store.quarantine import ACTIVE, NAME, Entry, job_entry
from ..store.snapshot import BATCH, OnHold, ReadResult, Strays, ViewsMemo, pending_only, read_jobs
from ..store.spec_cache import SpecCache

log = logging.getLogger("dispatch.store")

#: A standby reads in steps this small (one script call of this many jobs each): the server answers
#: other clients between two, and the leader's lease renewals must not wait behind a standby's read of
#: the whole queue (with 100,000 jobs and a 1 s lease they did, and the lease lapsed).
FOLLOW_BATCH = 1_000


class Mirror:
    def __init__(self, client, ns: str):
        self.client, self.ns = client, ns
        self.backlog = Backlog()
        self.running: dict = {}  # job id -> RunningJob
        self.epochs: dict[str, int] = {}
        self.cache = SpecCache()
        self.fresh = False
        self.cursor: tuple[str, int] | None = None  # the last change-feed entry read (store/feed.py)
        self.nodes_fresh = False  # node records read whole since the last invalidate()
        self._nodes: dict[str, tuple[bytes, NodeRecord]] = {}  # name -> (raw info, decoded)
        self._views = ViewsMemo()  # the snapshot's running pieces and node views, kept while they hold
        self.changed = 0  # jobs reread by the last refresh
        self.bad: dict[str, str] = {}  # unusable records met since the last sync
        self.stray: list[Entry] = []  # bad index entries met since the last sync (quarantine.py)
        self.aside: list[tuple[str, str]] = []  # keys of the wrong type met since the last sync, with their type
        self._unreadable: dict[str, object] = {}  # node -> the unreadable info last logged
        self.expected: dict[str, tuple] = {}  # job id -> how our own commit left it (see expect)
        self.held: dict[str, PendingJob] = {}  # pending jobs whose dependencies are not met yet
        self.held_why: dict[str, str] = {}  # held job id -> what it waits for
        self.on_hold: dict[str, PendingJob] = {}  # pending jobs held by `dispatch hold` (counted, not scheduled)
        self.doomed: dict[str, str] = {}  # held job id -> the dependency that failed (the scheduler fails it)
        self.ended: list[tuple[str, str]] = []  # (job id, class) of jobs seen to end since the leader took them
        # for the leader's counters (scheduler/counting.py), taken at each full cycle:
        self.requeued: list[tuple[str, str]] = []  # (job id, class) of jobs back in the queue
        self._waiting_on: dict[str, set[str]] = {}  # dependency id -> held jobs waiting on it
        self._begins: list[tuple[int, str]] = []  # (--begin, job id) of held jobs waiting for their start time
        self.now = 0  # the time of the last refresh (ms): a job whose --begin is later waits

    def nodes(self) -> list[NodeRecord]:
        """The nodes whose records the last sync read (live or not)."""
        return [rec for _, rec in self._nodes.values()]

    def invalidate(self) -> None:
        """Read everything again at the next sync."""
        self.fresh = self.nodes_fresh = False

    def follow(self, config) -> None:
        """A standby's turn: reread what the feed says changed (everything, the first time), so that
        taking the lead costs the last changes only. What the leader counts and quarantines of them is
        the leader's to do: not kept here."""
        self.backlog.configure(config)
        self.refresh(leader=False)
        for seen in (self.ended, self.requeued, self.stray, self.aside):
            seen.clear()

    def lead(self) -> None:
        """Its scheduler takes the lead: the mirror is kept (it followed the feed; the next refresh takes
        the changes since, or reads all if it never followed, or the feed lost its place), but not what
        it expected of commits made under another token, and the nodes are read whole."""
        self.expected = {}
        self.nodes_fresh = False

    def sync(self, now_ms: int, node_timeout_s: float, config, *, all_nodes: bool = False) -> ReadResult:
        """Take what changed, read the nodes (`all_nodes`: every record, e.g. for a sample of their
        utilization, which a heartbeat changes without marking the node changed), and give the policy
        its snapshot."""
        self.backlog.configure(config)
        self.refresh(now_ms=now_ms)
        nodes = self._read_nodes(all_nodes)
        live = [n for n in nodes if n.alive(now_ms, node_timeout_s)]
        running, views = self._views.get(live, self.running.values())  # a gang as one entry per node
        snap = Snapshot(self.backlog, running, views)
        bad, self.bad = self.bad, {}
        stray, self.stray = tuple(self.stray), []
        aside, self.aside = tuple(self.aside), []
        return ReadResult(snap, self.epochs, nodes, pending_only(bad, self._pending_ids(bad)), stray=stray,
                          aside=aside)

    def refresh(self, *, leader: bool = True, now_ms: int | None = None) -> list[PendingJob] | None:
        """Reread the jobs that changed (`leader`: taking the changed set into the feed; a standby only
        reads the feed). Returns the jobs that arrived (new to the mirror, pending), or None if anything
        else changed too (a job ended, was requeued, was placed or stopped other than by our own commit
        (expect), ...) or all was read again. A job that started running where it was placed is no
        change."""
        ids = self._changed_ids(leader) if self.fresh else None
        whole = ids is None
        if whole:
            ids, active = self._read_whole(leader)
            arrivals = None
        else:
            active, arrivals = set(), []
        self.now = clock.now_ms() if now_ms is None else now_ms
        rejudge = self._begun()  # held jobs to judge again: those whose --begin came, new ones, and those
        # waiting on a job that changed
        # a whole read makes a few objects per job and no cycles among them: each collection their
        # allocations trigger walks them all again (a quarter of a cold cycle at 100k)
        with gc_paused() if whole else contextlib.nullcontext():
            for job_id, got in read_jobs(self.client, self.ns, ids, self.cache,
                                         batch=BATCH if leader else FOLLOW_BATCH):
                rejudge |= self._waiting_on.get(job_id, set())
                arrivals = self._take(job_id, got, job_id in active, arrivals, rejudge)
        if self._restamp() and arrivals is not None:
            arrivals = None  # older twins took a newer one's estimate: their order changed
        self.changed = len(ids)
        if whole:
            gc.collect()  # once: what the read left with cycles (a malformed record's error) is not frozen
            gc.freeze()  # the records just read live long: the collector need not walk them every cycle
        released = self._judge(rejudge)
        if released and arrivals is not None:
            arrivals += released
        return arrivals

    def _restamp(self) -> bool:
        """Pending jobs whose cached spec took a newer twin's estimate (store/spec_cache.py) go back into the
        backlog with it; whether any did."""
        moved = False
        for job_id in self.cache.take_restamped():
            job, spec = self.backlog.jobs.get(job_id), self.cache.specs.get(job_id)
            if spec is None:
                continue
            if job is not None:
                self.backlog.add(replace(job, spec=spec))
                moved = True
            elif job_id in self.held:  # (waiting on its dependencies: it enters the backlog with it)
                self.held[job_id] = replace(self.held[job_id], spec=spec)
        return moved

    def _changed_ids(self, leader: bool) -> list[str] | None:
        """The ids of the feed's entries past the cursor (the leader first takes the changed set into it),
        or None when entries past the cursor are gone (read everything again). Their specs are read
        again: a pending job's may have been updated (store/pending.py); a few hundred bytes a job."""
        got = feed.parse(feed.take(self.client, self.ns, self.cursor, leader=leader))
        if got.gap:
            log.warning("the change feed no longer holds what followed entry %s; reading every job again",
                        self.cursor[0])
            return None
        self.cursor = got.cursor
        ids = sorted(set(self._ids(got.ids, keys.jobs_changed(self.ns), "gone", "set")))
        for job_id in ids:
            self.cache.forget(job_id)
        return ids

    def _read_whole(self, leader: bool) -> tuple[list[str], set[str]]:
        """Start again from nothing: every pending and active id, and the active ones apart (an id of
        the active index that is no active job is stray); the feed's cursor where it stands (the
        leader takes the changed set into it: the read covers those jobs)."""
        pipe = self.client.pipeline(transaction=True)
        feed.take(pipe, self.ns, None, leader=leader)
        pipe.zrange(keys.jobs_pending(self.ns), 0, -1)
        pipe.zrange(keys.jobs_active(self.ns), 0, -1)
        taken, pending, active = pipe.execute()
        self.cursor = feed.parse(taken).cursor
        active = self._ids(active, keys.jobs_active(self.ns))
        self.backlog = Backlog(self.backlog.config)
        self.running, self.epochs, self.cache, self.expected = {}, {}, SpecCache(), {}
        self.held, self.held_why, self.doomed, self._waiting_on, self.on_hold = {}, {}, {}, {}, {}
        self._begins = []
        self.fresh = True
        return self._ids(pending, keys.jobs_pending(self.ns)) + active, set(active)

    def _take(self, job_id: str, got, in_active: bool, arrivals, rejudge: set):
        """Take one job as read_jobs gave it; returns `arrivals`, or None once the change is more than
        arrivals."""
        known, was = job_id in self.epochs, self._running_as(job_id)
        prior = self.on_hold.get(job_id) if not known else \
            self.running.get(job_id) or self.backlog.jobs.get(job_id) or self.held.get(job_id)
        self._forget(job_id)
        if isinstance(got, Strays):
            self.stray += got
            if in_active:  # (a ghost in both indexes)
                self.stray.append(job_entry(self.ns, keys.jobs_active(self.ns), job_id, "not an active job",
                                            expect=ACTIVE))
            return None
        if isinstance(got, Exception):
            self.bad[job_id] = str(got)
            return None
        if isinstance(got, OnHold):  # out of the backlog, so a change (a release reads as an arrival)
            self.on_hold[job_id] = got.job
            return None
        if got is None:
            if prior is not None and not in_active:  # it ended: for the leader's counters (store/counters.py)
                self.ended.append((job_id, prior.spec.priority))
                self._note(job_id, None, prior)
            self.cache.forget(job_id)
            if in_active:  # ended between the two reads, or stray: quarantine.lua tells
                self.stray.append(job_entry(self.ns, keys.jobs_active(self.ns), job_id, "not an active job",
                                            expect=ACTIVE))
            return None if known else arrivals
        job, self.epochs[job_id] = got
        self._note(job_id, job, prior)
        if isinstance(job, PendingJob) and (job.spec.after or job.spec.after_any or job.spec.begin_ms > self.now):
            self._hold(job)
            rejudge.add(job_id)
        elif isinstance(job, PendingJob):
            self.backlog.add(job)
            if arrivals is None or known:
                return None
            arrivals.append(job)
        else:
            self.running[job_id] = job
            now_as = (job.node, job.gpus, job.stopping, self.epochs[job_id], job.ended)
            if now_as != was and now_as != self.expected.pop(job_id, None):
                return None
        return arrivals

    def _note(self, job_id: str, job, prior) -> None:
        """For the leader's counters (scheduler/counting.py): a job (not None: not ended) back in the queue
        after holding resources, or after our own placement (it went back before this mirror saw it run).
        (Its start, and how long it took, its agent's mark_running.lua counts.)"""
        if job is None or isinstance(job, PendingJob):
            placed = self.expected.pop(job_id, None) is not None and isinstance(prior, PendingJob)
            if job is not None and (placed or isinstance(prior, RunningJob)):
                self.requeued.append((job_id, job.spec.priority))

    def _ids(self, raw, index: str, check: str = "member", kind: str = "zset") -> list[str]:
        """The members of an index that are job ids; the others are stray."""
        ids, ok = [], NAME.fullmatch  # (a read of 100,000 ids: no call per id but the match)
        for i in raw:
            if ok(i):
                ids.append(i.decode())
            else:
                self.stray.append(Entry(index, i, "not a job id", check, kind=kind))
        return ids

    def _hold(self, job: PendingJob) -> None:
        self.held[job.spec.id] = job
        if job.spec.begin_ms > self.now:
            heapq.heappush(self._begins, (job.spec.begin_ms, job.spec.id))
        for dep in (*job.spec.after, *job.spec.after_any):
            self._waiting_on.setdefault(dep, set()).add(job.spec.id)

    def _judge(self, ids) -> list[PendingJob]:
        """Judge held jobs against their dependencies' states: the ready ones go to the backlog (and
        are returned), the doomed ones wait in `doomed` for the scheduler to fail them."""
        jobs = [self.held[i] for i in ids if i in self.held]
        for p in [p for p in jobs if p.spec.begin_ms > self.now]:  # (its dependencies are judged once it may start)
            self.held_why[p.spec.id] = waits_for(p.spec.begin_ms)
        jobs = [p for p in jobs if p.spec.begin_ms <= self.now]
        if not jobs:
            return []
        waiting = [p.spec for p in jobs if p.spec.after or p.spec.after_any]
        verdicts = judge_all(self.client, self.ns, waiting, self.cache.specs) if waiting else {}
        released = []
        for p in jobs:
            verdict, why = verdicts.get(p.spec.id, (READY, ""))
            if verdict == READY:
                self._unhold(p.spec.id)
                self.backlog.add(p)
                released.append(p)
            elif verdict == HELD:
                self.held_why[p.spec.id] = why
            else:
                self.doomed[p.spec.id] = why
        return released

    def _begun(self) -> set[str]:
        """The held jobs whose --begin time came (their dependencies are judged next)."""
        due = set()
        while self._begins and self._begins[0][0] <= self.now:
            begin, job_id = heapq.heappop(self._begins)
            if job_id in self.held and self.held[job_id].spec.begin_ms == begin:
                due.add(job_id)
        return due

    def _pending_ids(self, bad) -> set[str]:
        """Of the unusable records, those still in the pending index (to quarantine)."""
        if not bad:
            return set()
        pipe = self.client.pipeline(transaction=False)
        for job_id in bad:
            pipe.zscore(keys.jobs_pending(self.ns), job_id)
        return {j for j, score in zip(bad, pipe.execute()) if score is not None}

    def expect(self, job_id: str, node: str, gpus: tuple, stopping: bool, epoch: int) -> None:
        """Our own commit made this job run (or stop) so: refresh() does not count it as a change."""
        self.expected[job_id] = (node, tuple(gpus), stopping, epoch, frozenset())

    def _running_as(self, job_id: str):
        r = self.running.get(job_id)
        return None if r is None else (r.node, r.gpus, r.stopping, self.epochs[job_id], r.ended)

    def _unhold(self, job_id: str) -> None:
        job = self.held.pop(job_id, None)
        if job is not None:
            for dep in (*job.spec.after, *job.spec.after_any):
                waiting = self._waiting_on.get(dep)
                if waiting is not None:
                    waiting.discard(job_id)
                    if not waiting:
                        del self._waiting_on[dep]
            self.held_why.pop(job_id, None)
            self.doomed.pop(job_id, None)

    def _forget(self, job_id: str) -> None:
        self._unhold(job_id)
        self.on_hold.pop(job_id, None)
        self.backlog.discard(job_id)
        self.running.pop(job_id, None)
        self.epochs.pop(job_id, None)

    def _read_nodes(self, full: bool = False) -> list[NodeRecord]:
        """Every node with a heartbeat, and its drain mark (read every time: a small hash). Only the records
        of nodes that changed (keys.nodes_changed) or are new to the mirror are read and decoded, unless
        `full` or the mirror was invalidated: then all."""
        if full or not self.nodes_fresh:
            self.client.delete(keys.nodes_changed(self.ns))  # first: a change made during the read is kept
            infos, bad = read_infos(self.client, self.ns)
            drains = read_drains(self.client, self.ns)
            self.nodes_fresh = True
        else:
            beats, raws, bad, drains = read_changed_infos(self.client, self.ns, self._nodes)
            infos = [(name, at, raws[name] if name in raws else self._nodes[name][0]) for name, at in beats]
        self.stray += bad
        out, seen = [], {}
        for name, at, raw in infos:
            if raw is None:  # a heartbeat with no node record behind it
                self.stray.append(Entry(keys.nodes_heartbeat(self.ns), name, "no node record", "field", "info",
                                        keys.node(self.ns, name)))
                continue
            if isinstance(raw, Exception):  # a node record of the wrong type: its agent writes it again
                self.aside.append((keys.node(self.ns, name), "hash"))
                continue
            cached = self._nodes.get(name)
            try:
                if cached is None or cached[0] != raw:
                    gpus, cpus, mem_gb = decode_node_info(raw, key=keys.node(self.ns, name))
                    cached = (raw, NodeRecord(name, gpus, cpus, mem_gb, 0, {}, None, node_timeout_s(raw)))
                rec = cached[1]
                out.append(NodeRecord(rec.name, rec.gpus, rec.cpus, rec.mem_gb, int(at), {}, drains.get(name),
                                      rec.timeout_s))
            except (MalformedRecord, ValueError, OverflowError) as e:  # it costs that node, not the cycle
                if self._unreadable.get(name) != raw:  # logged once, not every cycle
                    self._unreadable[name] = raw
                    log.error("node %s has an unreadable record (%s); skipped", name, e)
                continue
            self._unreadable.pop(name, None)
            seen[name] = cached
        self._nodes = seen
        return out
