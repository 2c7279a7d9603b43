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

import msgpack

from ..core.model import GpuInfo, JobSpec
from ..core.plan import RunningJob
from . import keys
from .connect import text
from .nodes import Drain, NodeRecord
from .quarantine import tolerant

#: The least time between two publications (a full cycle runs every tick, 1 s by default).
PUBLISH_EVERY_MS = 1000
#: The ends kept for the outcomes panel, newest first.
RECENT_ENDS = 1000
#: The part of a reason kept with an end.
REASON_CHARS = 160

_FORMAT = 1
_SPEC = JobSpec(id="0", command=())  # the shape every running job's partial spec is filled into


def publish(pipe, ns: str, at_ms: int, nodes, running) -> None:
    """Queue the publication of the nodes (NodeRecords) and the running jobs (RunningJob pieces)."""
    rows_n = [[n.name, n.seen_ms, n.cpus, n.mem_gb,
               None if n.drain is None else [n.drain.reason, n.drain.by, n.drain.at_ms],
               [[g.index, g.name, g.mem_total_gb, g.mem_used_gb, g.util_pct, g.blocked] for g in n.gpus]]
              for n in nodes]
    rows_r = [[r.spec.id, r.node, list(r.gpus), r.started_ms, r.spec.user, r.spec.team, r.spec.priority,
               r.spec.cpus, r.spec.mem_gb, r.spec.share, r.spec.name, r.spec.gpus, r.stopping, r.rank]
              for r in running]
    pipe.set(keys.scheduler_cluster(ns), msgpack.packb([_FORMAT, at_ms, rows_n, rows_r], use_bin_type=True))


class Published:
    """The cluster as the leader published it: `at_ms`, `nodes` (NodeRecords, by name), `running`
    (RunningJobs) and `idle` ({job id: (warning, since_ms)} of the running jobs)."""

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
        nodes = [NodeRecord(name, tuple(GpuInfo(i, model, total, "", used, util, blocked)
                                        for i, model, total, used, util, blocked in gpus),
                            cpus, mem_gb, seen, {}, Drain(*drain) if drain else None)
                 for name, seen, cpus, mem_gb, drain, gpus in rows_n]
        running = [RunningJob(_SPEC.filled(id=jid, user=user, team=team, priority=cls, cpus=cpus, mem_gb=mem,
                                           share=share, name=name, gpus=asked),
                              node, tuple(gpus), started, stopping=stopping, rank=rank)
                   for jid, node, gpus, started, user, team, cls, cpus, mem, share, name, asked, stopping, rank
                   in rows_r]
    except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
        return None
    return Published(int(at_ms), sorted(nodes, key=lambda n: n.name), running,
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
