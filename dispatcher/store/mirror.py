"""Mirror: the leading scheduler's copy of the queue, kept current from what changed.

Every write that changes a job's state (submit, and each job script in lua/) adds the
job's id to keys.jobs_changed in the same atomic step. Each cycle the mirror takes
that set (SMEMBERS + DEL in one MULTI) and rereads only those jobs, so a cycle costs
what changed, not what waits. A change made after the take is in the set again for
the next cycle, so the mirror never misses one; reading a job twice is harmless.

The mirror reads everything again (`full`) when it starts, when its scheduler takes
the lead, and after any Redis error (a restarted server may have lost the set).
Specs are immutable and stay decoded; pending jobs live in a policy Backlog, which
keeps their order across cycles.
"""

from __future__ import annotations

import logging

from ..errors import MalformedRecord
from ..model import PendingJob, Snapshot
from ..policy.backlog import Backlog
from . import keys
from .codec import decode_node_info
from .connect import text
from .nodes import NodeRecord
from .snapshot import ReadResult, SpecCache, node_views, pending_only, read_jobs

log = logging.getLogger("dispatch.store")


class Mirror:
    def __init__(self, client, ns: str):
        self.client, self.ns = client, ns
        self.backlog = Backlog()
        self.running: dict = {}  # job id -> RunningJob
        self.epochs: dict[str, int] = {}
        self.cache = SpecCache()
        self.fresh = False
        self._nodes: dict[str, tuple[bytes, NodeRecord]] = {}  # name -> (raw info, decoded)
        self.changed = 0  # jobs reread by the last sync

    def invalidate(self) -> None:
        """Read everything again at the next sync."""
        self.fresh = False

    def sync(self, now_ms: int, node_timeout_s: float, config) -> ReadResult:
        self.backlog.configure(config)
        nodes = self._read_nodes()
        if self.fresh:
            pipe = self.client.pipeline(transaction=True)
            pipe.smembers(keys.jobs_changed(self.ns))
            pipe.delete(keys.jobs_changed(self.ns))
            ids = sorted(text(i) for i in pipe.execute()[0])
        else:
            pipe = self.client.pipeline(transaction=True)
            pipe.delete(keys.jobs_changed(self.ns))
            pipe.zrange(keys.jobs_pending(self.ns), 0, -1)
            pipe.zrange(keys.jobs_active(self.ns), 0, -1)
            _, pending, active = pipe.execute()
            ids = [text(i) for i in pending] + [text(i) for i in active]
            self.backlog = Backlog(config)
            self.running, self.epochs, self.cache = {}, {}, SpecCache()
            self.fresh = True
        bad = {}
        for job_id, got in read_jobs(self.client, self.ns, ids, self.cache):
            self._forget(job_id)
            if isinstance(got, Exception):
                bad[job_id] = str(got)
            elif got is None:
                self.cache.specs.pop(job_id, None)
            else:
                job, self.epochs[job_id] = got
                if isinstance(job, PendingJob):
                    self.backlog.add(job)
                else:
                    self.running[job_id] = job
        self.changed = len(ids)
        live = [n for n in nodes if n.alive(now_ms, node_timeout_s)]
        running = tuple(self.running.values())
        snap = Snapshot(self.backlog, running, node_views(live, running))
        return ReadResult(snap, self.epochs, nodes, pending_only(bad, self._pending_ids(bad)))

    def _pending_ids(self, bad) -> set[str]:
        """Of the unusable records, those still in the pending index (to quarantine)."""
        if not bad:
            return set()
        pipe = self.client.pipeline(transaction=False)
        for job_id in bad:
            pipe.zscore(keys.jobs_pending(self.ns), job_id)
        return {j for j, score in zip(bad, pipe.execute()) if score is not None}

    def _forget(self, job_id: str) -> None:
        self.backlog.discard(job_id)
        self.running.pop(job_id, None)
        self.epochs.pop(job_id, None)

    def _read_nodes(self) -> list[NodeRecord]:
        """Every node with a heartbeat; a node's record is decoded again only when it changed."""
        beats = self.client.zrange(keys.nodes_heartbeat(self.ns), 0, -1, withscores=True)
        pipe = self.client.pipeline(transaction=False)
        for name, _ in beats:
            pipe.hget(keys.node(self.ns, text(name)), "info")
        out, seen = [], {}
        for (name, at), raw in zip(beats, pipe.execute()):
            name = text(name)
            if raw is None:
                continue
            cached = self._nodes.get(name)
            try:
                if cached is None or cached[0] != raw:
                    gpus, cpus, mem_gb = decode_node_info(raw, key=keys.node(self.ns, name))
                    cached = (raw, NodeRecord(name, gpus, cpus, mem_gb, 0, {}))
                rec = cached[1]
                out.append(NodeRecord(rec.name, rec.gpus, rec.cpus, rec.mem_gb, int(at), {}))
            except (MalformedRecord, ValueError, OverflowError) as e:  # it costs that node, not the cycle
                log.error("node %s has an unreadable record (%s); skipped", name, e)
                continue
            seen[name] = cached
        self._nodes = seen
        return out
