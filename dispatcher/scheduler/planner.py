"""The scheduler's commit of a plan: placements, preemptions and the RQ launches, in one MULTI/EXEC.

store/snapshot.py (or the Mirror) reads what the policy plans from; RedisPlanner writes what it
planned, through the fenced scripts of store/scripts.py, so a plan that went stale, or a scheduler
that no longer leads, changes nothing.
"""

from __future__ import annotations

import logging

from ..core.plan import Plan, Preemption
from ..store import control, counters, job_record, keys
from ..store.scripts import Outcome

log = logging.getLogger("dispatch.scheduler")


class RedisPlanner:
    """Commits a Plan: every placement and its RQ enqueue in one MULTI/EXEC.

    Each placement runs commit_placement.lua (a gang: commit_gang.lua, every rank's GPUs or none),
    which refuses it if the job is no longer pending at the epoch the plan saw or a GPU is held. The RQ job is
    enqueued in the same transaction either way; a refused placement's RQ job
    finds a moved epoch when it runs and does nothing (workers/launching.py).
    """

    def __init__(self, client, ns: str, scripts, seal=None):
        """`seal(job_id, epoch, node)`: under identity, the seal each launch carries (identity.seal_attempt)."""
        from rq import Queue
        from rq.serializers import JSONSerializer

        self.client, self.ns, self.scripts, self.seal = client, ns, scripts, seal
        self._queue_cls, self._serializer = Queue, JSONSerializer
        self._queues: dict = {}
        self._reasons: dict[str, tuple] = {}  # job id -> what was written of its verdict
        self.held_gpus: list = []  # placements refused because a GPU was held (GPU_HELD)
        self.failed: Exception | None = None  # the first error a command of the last commit met

    @property
    def reasons(self) -> dict[str, tuple]:
        """Job id -> (reason, ...) as last written, for the jobs the scheduler gave a reason."""
        return self._reasons

    def _queue(self, node: str):
        q = self._queues.get(node)
        if q is None:
            q = self._queues[node] = self._queue_cls(keys.rq_queue_name(self.ns, node), connection=self.client,
                                                     serializer=self._serializer)
        return q

    def commit(self, plan: Plan, epochs: dict[str, int], now_ms: int, keep_wait: bool = True,
               fence: str = "", held: dict[str, str] | None = None,
               waiting=(), full: bool = True) -> tuple[list[tuple[str, int]], list[Preemption]]:
        """Returns (job id, new epoch) for placements that took, and the preemptions that took.

        Each preemption marks the victim `preempting` and queues its command on its node's control
        stream in one step (control.preempt), refused if it is no longer running at the epoch the
        plan saw; an agent ignores a command whose epoch is stale. A stream of the wrong type fails
        that preemption whole (in `failed`; the scheduler sets the stream aside and replans).
        `held`: jobs waiting for their dependencies, with what they wait for (written as reasons);
        `waiting`: the pending jobs the policy saw (a job that left them keeps the reason it ended with);
        `full`: the plan judged the whole queue (a quick cycle's judges only its arrivals).
        `fence` is the leader's lease value: once another scheduler leads, both scripts refuse (NOT_LEADER).
        """
        pipe = self.client.pipeline(transaction=True)
        for pr in plan.preemptions:
            control.preempt(self.scripts, pr.node, pr.job_id, epochs[pr.job_id], now_ms, by=f"job {pr.for_job}",
                            mode=pr.mode, reason=pr.reason, keep=pr.keep_gpus, keep_wait=keep_wait, fence=fence,
                            client=pipe)
        by_node: dict[str, list] = {}
        for p in plan.placements:
            epoch = epochs[p.job_id]
            if p.extra:  # a gang: every rank's GPUs in one step, and a launch on each rank's node
                self.scripts.commit_gang(p.job_id, ((p.node, p.gpus), *p.extra), epoch, now_ms, fence=fence,
                                         client=pipe)
            else:
                self.scripts.commit_placement(p.job_id, p.node, p.gpus, epoch, now_ms, share=p.share, fence=fence,
                                              client=pipe)
            for node in (p.node, *(node for node, _ in p.extra)):
                by_node.setdefault(node, []).append(self._launch(p.job_id, epoch + 1, node))
        self._write_reasons(pipe, plan, held or {}, waiting, now_ms, full)
        for node, datas in by_node.items():
            self._queue(node).enqueue_many(datas, pipeline=pipe)
        if plan.placements or plan.preemptions:
            pipe.publish(keys.events(self.ns), b"placed")
        replies = pipe.execute(raise_on_error=False) if len(pipe) else []
        n = len(plan.preemptions)
        preempted = [pr for pr, code in zip(plan.preemptions, replies[:n]) if code == Outcome.DONE]
        self.failed = next((r for r in replies if isinstance(r, Exception)), None)
        # what took, took; the caller meets the error (and sets wrong types aside)
        return self._placed(plan, replies[n:]), preempted

    def _launch(self, job_id: str, epoch: int, node: str):
        """The RQ launch of attempt `epoch` of a job on `node` (a gang's ranks each get one on their own
        node; the agent finds its rank in the job's `gang`). result_ttl=0: a launch's result is only
        "started" (the job's outcome is dispatch's record), so RQ keeps nothing once it ran; a failed
        launch stays a day for an operator to read."""
        return self._queue_cls.prepare_data(
            "workers.jobs.launch", args=[job_id, epoch] + ([self.seal(job_id, epoch, node)] if self.seal else []),
            timeout=-1, result_ttl=0, failure_ttl=86400, description=f"dispatch job {job_id} attempt epoch {epoch}")

    def _placed(self, plan: Plan, replies) -> list[tuple[str, int]]:
        """(job id, new epoch) of the placements that took, from their commit_placement replies; those
        refused because a GPU was held go to held_gpus."""
        done, self.held_gpus = [], []
        for p, code in zip(plan.placements, replies):
            if isinstance(code, int) and code > 0:
                done.append((p.job_id, code))
                self._reasons.pop(p.job_id, None)
            else:
                if code == Outcome.GPU_HELD:  # a GPU the job records call free is held: the scheduler checks who
                    self.held_gpus.append(p)
                log.info("placement of job %s on %s refused (%s); will replan", p.job_id, p.node,
                         Outcome.name_of(code))
        return done

    def _write_reasons(self, pipe, plan: Plan, held: dict[str, str], waiting, now_ms: int, full: bool) -> None:
        """Each judged job's reason and the numbers behind it (its verdict: code, score, and its rank in the
        cycle that gave it), when they changed; after a full cycle, a job it did not reach (plan.rest)
        loses the reason an earlier cycle gave it (`dispatch why` then shows the scheduler's rest
        reason). Costs what changed, not what waits."""
        judged = {job_id: (why, None) for job_id, why in held.items()}
        judged.update((v.job_id, (v.reason, v)) for v in plan.verdicts)
        for job_id, (reason, v) in judged.items():
            # the rank is written with a verdict that changed, not on its own: one job ending moves the
            # rank of every job judged after it, and rewriting them all would cost each cycle that much
            said = (reason, v.code.value, round(v.score, 1)) if v is not None else (reason, "held")
            if self._reasons.get(job_id) != said:
                self._reasons[job_id] = said
                verdict = {"code": said[1], "at_ms": now_ms} if v is None else {
                    "code": said[1], "score": said[2], "rank": v.rank, "at_ms": now_ms,
                    "terms": {k: round(t, 2) for k, t in v.terms.items()}}
                job_record.set_reason(self.scripts, pipe, self.ns, job_id, reason, verdict)
        if not full:
            return
        for job_id in [j for j in self._reasons if j not in judged]:
            del self._reasons[job_id]
            if job_id in waiting:  # still waiting, now among the jobs the cycle did not reach
                job_record.set_reason(self.scripts, pipe, self.ns, job_id, None)

    def quarantine(self, bad: dict[str, str], now_ms: int) -> None:
        """Malformed job records leave the queue as failed, with the reason; nothing else is touched."""
        if not bad:
            return
        pipe = self.client.pipeline(transaction=True)
        for job_id, why in bad.items():
            pipe.zrem(keys.jobs_pending(self.ns), job_id)
            pipe.sadd(keys.jobs_changed(self.ns), job_id)
            job_record.set_failed(pipe, self.ns, job_id, f"quarantined: {why}", now_ms)
            counters.count(pipe, self.ns, "jobs_ended", state="failed", **{"class": "unknown"})  # (its spec: unread)
            log.error("quarantined job %s: %s", job_id, why)
        pipe.execute(raise_on_error=False)  # a key of the wrong type still leaves the pending index
