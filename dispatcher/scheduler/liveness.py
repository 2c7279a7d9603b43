"""Which nodes are dead, as the leading scheduler sees them, and what happens to their jobs.

A node is dead when the scheduler has itself watched for `node_timeout_s`, on its
own monotonic clock, without seeing the node's heartbeat value change. Watching
starts when the scheduler starts leading, so a scheduler (or Redis) restart gives
every node a full timeout to beat again, and no clock skew between hosts can make
a live node look dead. The jobs a dead node held are requeued through finish.lua
as lost attempts (epoch + 1, which fences any copy still running there; the retry
budget of each job bounds the reruns); a gang's rank on a dead node ends as that rank, and the gang's
other ranks are stopped by their agents (lua/finish.lua). On the node, the agent's keeper
(workers/keeper.py) kills its jobs once `Timing.fence_s` has passed since the last
heartbeat Redis took was sent, `Timing.margin_s` before this timeout can run out:
a node cut off by a partition, or whose agent is stopped, has stopped its copies
before they run elsewhere (docs/guarantees.md).
"""

from __future__ import annotations

import logging
import time

from ..core.plan import RunningJob, is_gang_piece
from ..store.exits import reported_outcome
from ..store.scripts import Outcome, lost_attempt

log = logging.getLogger("dispatch.scheduler")


class HeartbeatWatch:
    def __init__(self, timeout_s: float, clock=time.monotonic):
        self.timeout_s, self.clock = timeout_s, clock
        self._seen: dict[str, tuple[int | None, float]] = {}  # node -> (heartbeat value, when it last changed)
        self._longer: dict[str, float] = {}  # node -> its agent's node timeout, where longer than this one's

    def observe(self, beats: dict[str, int], timeouts: dict[str, float] | None = None) -> None:
        """The heartbeat values read this cycle (node -> seen_ms, as the agent wrote it), and the node
        timeouts the agents said (their keepers fence within theirs: a node is never taken for dead
        sooner, or its job would run twice at once)."""
        for name, t in (timeouts or {}).items():
            if t > self.timeout_s and self._longer.get(name) != t:
                log.warning("node %s: its agent's node timeout is %gs, longer than this scheduler's %gs: it is "
                            "taken for dead only after %gs (give every process the same DISPATCH_NODE_TIMEOUT_S)",
                            name, t, self.timeout_s, t)
            if t > self.timeout_s:
                self._longer[name] = t
            else:
                self._longer.pop(name, None)
        now = self.clock()
        for name, seen in beats.items():
            last = self._seen.get(name)
            if last is None or last[0] != seen:
                self._seen[name] = (seen, now)

    def restart(self) -> None:
        """Redis was away or refused writes: no node could heartbeat, so every node gets a full
        timeout again, counted from the next read (and its agent the time to write what it kept)."""
        self._seen.clear()

    def silent_s(self, name: str) -> float:
        """How long this scheduler has watched the node without a new heartbeat."""
        now = self.clock()
        if name not in self._seen:  # a node with no heartbeat record: the watch starts now
            self._seen[name] = (None, now)
        return now - self._seen[name][1]

    def dead(self, name: str) -> bool:
        return self.silent_s(name) > max(self.timeout_s, self._longer.get(name, 0.0))


def lost_jobs(running: list[RunningJob], watch: HeartbeatWatch) -> list[tuple[RunningJob, float]]:
    """Jobs held by dead nodes, with how long their node has been silent."""
    out = []
    for r in running:
        if watch.dead(r.node):
            out.append((r, watch.silent_s(r.node)))
    return out


def requeue_lost(scripts, lost: list[tuple[RunningJob, float]], epochs: dict[str, int], now_ms: int,
                 fence: str, exits: dict[str, tuple[int, int, int]] | None = None) -> int:
    """Put the dead nodes' jobs back in the queue (or fail those out of retries); returns how many.
    `fence` is the leader's lease value: a scheduler that lost the lease requeues nothing. `exits`
    (store/exits.py): attempts their node's keeper saw end on their own; they get that outcome."""
    done = 0
    for r, silent in lost:
        epoch = epochs[r.spec.id]
        ended = None if r.stopping else reported_outcome((exits or {}).get(r.spec.id), epoch,  # not a preemption's
                                                         stopping=is_gang_piece(r))  # (a rank killed: the gang's lost)
        if ended is not None:
            state, code, at, reason = ended
            ok = scripts.finish(r.spec.id, r.node, epoch, state, code, at, reason, fence=fence, rank=_rank(r))
            if ok == Outcome.DONE:
                done += 1
                log.warning("job %s: node %s lost, but its keeper saw it end (exit %d); recorded, not rerun",
                            r.spec.id, r.node, code)
            continue
        reason = f"node {r.node} lost: no heartbeat for {silent:.0f}s"
        if is_gang_piece(r):
            reason = f"rank {r.rank}'s {reason}"
        ok = scripts.finish(r.spec.id, r.node, epoch, "pending", None, now_ms, reason,
                            fence=fence, rank=_rank(r), **lost_attempt(r.spec))
        if ok == Outcome.DONE:
            done += 1
            log.warning("job %s: %s; requeued (retry budget %d)", r.spec.id, reason, r.spec.retries)
    return done


def _rank(r: RunningJob) -> int | None:
    """The rank finish.lua is told of: a gang's piece ends as its rank (the others are stopped)."""
    return r.rank if is_gang_piece(r) else None
