"""What the leading scheduler publishes of the cluster for the operators' views, so that the board,
`dispatch top` and /metrics cost O(nodes) whatever the queue's length, and never read every running
job's record or every node's heartbeat themselves:

- `publish`: the nodes as the leader last read them (GPUs with their utilization and memory, CPUs,
  memory, heartbeat time, drain mark) and the running jobs (a gang one entry per node), as one msgpack
  value (keys.scheduler_cluster), after a full cycle, at most once per PUBLISH_EVERY_MS;
- `read`: that value decoded back into NodeRecords and RunningJobs, with the idle warnings the node
  agents set (keys.jobs_idle, written by idle_warning.lua);
- `record_ends` / `recent_ends`: the newest RECENT_ENDS ends the leader saw (state, class, reason,
  exit code), for the outcomes panel, instead of a scan of the newest job records.

The leader refreshes a node's utilization when it rereads the node: when what the policy reads of it
changed, and every node once per utilization sample (store/samples.py, 15 s). A reader that finds
nothing published, or something it cannot decode, gets None and reads the cluster itself.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

import msgpack

from ..core.model import priority_rank
from . import keys
from .connect import text, tolerant
from .nodes import Drain

#: The least time between two publications (a full cycle runs every tick, 1 s by default).
PUBLISH_EVERY_MS = 1000
#: The ends kept for the outcomes panel, newest first.
RECENT_ENDS = 1000
#: The part of a reason kept with an end.
REASON_CHARS = 160

_FORMAT = 1

log = logging.getLogger("dispatch.scheduler")


# What a reader gets back: read-only copies with the attributes of NodeRecord, GpuInfo, RunningJob and
# JobSpec that the views use (store/samples.figures, views/capacity, the board), made from the published
# rows as tuples: a thousand nodes' GPUs and thousands of running jobs in milliseconds.
class Gpu(NamedTuple):
    index: int
    name: str
    mem_total_gb: float
    mem_used_gb: float
    util_pct: float
    blocked: str


class Node(NamedTuple):
    name: str
    seen_ms: int
    cpus: int
    mem_gb: float
    drain: Drain | None
    gpus: tuple

    def alive(self, now_ms: int, timeout_s: float) -> bool:
        return now_ms - self.seen_ms <= timeout_s * 1000


class Spec(NamedTuple):
    id: str
    user: str
    team: str
    priority: str
    cpus: int
    mem_gb: float
    share: bool
    name: str
    gpus: int

    @property
    def rank(self) -> int:
        return priority_rank(self.priority)


class Held(NamedTuple):
    spec: Spec
    node: str
    gpus: tuple
    started_ms: int
    stopping: bool
    rank: int


def publish(pipe, ns: str, at_ms: int, nodes, running) -> None:
    """Queue the publication of the nodes (NodeRecords) and the running jobs (RunningJob pieces)."""
    rows_n = [[n.name, n.seen_ms, n.cpus, n.mem_gb,
               None if n.drain is None else [n.drain.reason, n.drain.by, n.drain.at_ms],
               [[g.index, g.name, g.mem_total_gb, g.mem_used_gb, g.util_pct, g.blocked] for g in n.gpus]]
              for n in nodes]
    rows_r = [[r.spec.id, r.node, list(r.gpus), r.started_ms, r.spec.user, r.spec.team, r.spec.priority,
               r.spec.cpus, r.spec.mem_gb, r.spec.share, r.spec.name, r.spec.gpus, r.stopping, r.rank]
              for r in running]
    try:
        value = msgpack.packb([_FORMAT, at_ms, rows_n, rows_r], use_bin_type=True)
    except (OverflowError, ValueError, TypeError):  # a record's garbage (an int past 64 bits): without its rows
        value = msgpack.packb([_FORMAT, at_ms, _packable(rows_n), _packable(rows_r)], use_bin_type=True)
    pipe.set(keys.scheduler_cluster(ns), value)


def _packable(rows: list) -> list:
    """The rows msgpack can pack; the others are left out of the publication, with a log line."""
    out = []
    for row in rows:
        try:
            msgpack.packb(row, use_bin_type=True)
        except (OverflowError, ValueError, TypeError) as e:
            log.warning("left %r out of the board's publication: %s", row[0], e)
            continue
        out.append(row)
    return out


class Published:
    """The cluster as the leader published it: `at_ms`, `nodes` (Node tuples, or NodeRecords when the
    board read them itself; by name), `running` (Held tuples, or RunningJobs) and `idle` ({job id:
    (warning, since_ms)} of the running jobs)."""

    def __init__(self, at_ms: int, nodes: list, running: list, idle: dict):
        self.at_ms, self.nodes, self.running, self.idle = at_ms, nodes, running, idle


def read(client, ns: str) -> Published | None:
    """What the leader last published, or None (nothing yet, or not of this format)."""
    raw = tolerant(lambda: client.get(keys.scheduler_cluster(ns)), None)
    if not isinstance(raw, bytes):
        return None
    try:
        form, at_ms, rows_n, rows_r = msgpack.unpackb(raw, raw=False)
        if form != _FORMAT:
            return None
        gpu = Gpu._make
        nodes = [Node(name, seen, cpus, mem_gb, Drain(*drain) if drain else None, tuple(map(gpu, gpus)))
                 for name, seen, cpus, mem_gb, drain, gpus in rows_n]
        running = [Held(Spec(r[0], *r[4:12]), r[1], tuple(r[2]), r[3], r[12], r[13]) for r in rows_r]
        at_ms = int(at_ms)
    except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
        return None
    return Published(at_ms, sorted(nodes, key=lambda n: n.name), running,
                     read_idle(client, ns, {r.spec.id for r in running}))


def read_idle(client, ns: str, running_ids: set) -> dict:
    """{job id: (warning, since_ms)} of these running jobs' idle warnings (keys.jobs_idle)."""
    got = tolerant(lambda: client.hgetall(keys.jobs_idle(ns)), {})
    out = {}
    for k, v in got.items() if isinstance(got, dict) else ():
        since, _, warning = text(v).partition(" ")
        if text(k) in running_ids and since.isdigit():
            out[text(k)] = (warning, int(since))
    return out


def forget_idle(pipe, ns: str, job_ids) -> None:
    """Drop ended jobs' idle warnings (the leader, as it sees them end)."""
    if job_ids:
        pipe.hdel(keys.jobs_idle(ns), *job_ids)


def record_ends(pipe, ns: str, ends) -> None:
    """Queue (job id, state, class, reason, exit code, finished_ms) of each end, newest last."""
    if not ends:
        return
    pipe.lpush(keys.jobs_ended_recent(ns), *(msgpack.packb([j, s, c, (r or "")[:REASON_CHARS], code, at],
                                                           use_bin_type=True) for j, s, c, r, code, at in ends))
    pipe.ltrim(keys.jobs_ended_recent(ns), 0, RECENT_ENDS - 1)


def recent_ends(client, ns: str) -> list[dict]:
    """The newest ends the leader recorded, newest first: {job, state, class, reason, exit_code, at_ms};
    an entry that does not decode is left out."""
    out = []
    for raw in tolerant(lambda: client.lrange(keys.jobs_ended_recent(ns), 0, RECENT_ENDS - 1), []) or []:
        try:
            j, s, c, r, code, at = msgpack.unpackb(raw, raw=False)
            out.append({"job": str(j), "state": str(s), "class": str(c), "reason": str(r),
                        "exit_code": code if isinstance(code, int) else None, "at_ms": int(at)})
        except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
            continue
    return out
