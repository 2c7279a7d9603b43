"""The live scheduler: snapshot -> policy.schedule -> RedisPlanner.commit, on events and on a tick.

It wakes on any message on keys.events (submit, finish, node change, cancel) and at
least every tick; a burst of events is coalesced into one cycle. It keeps no state
that a restart would lose: a Mirror (scheduler/mirror.py) holds its copy of the queue,
read whole once, then only what changed (the change feed, store/feed.py), whether it
leads or stands by.
Several may run: one leads, through a lease with a fencing token that every write
it commits carries (store/leader.py); the others stand by and take over when the
lease lapses. The leader requeues the jobs of dead nodes (liveness.py). The
policy comes from a PolicySource (a TOML file, reloaded when it changes, or one
applied through Redis); the one in force is published to Redis for `dispatch why`
and `dispatch policy show`, and the last ones it ran are kept for `dispatch policy
rollback`.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from itertools import islice

from ..clock import now_ms
from ..config import Timing
from .liveness import HeartbeatWatch, lost_jobs, requeue_lost
from ..core.plan import Plan
from ..notify import Notifier
from ..auth.identity import seal_attempt
from .policy_source import PolicySource
from ..policy import place_arrivals, plan_cycle
from ..store import cluster, counters, keys
from ..store import stats as published
from ..store.decisions import write_decisions
from ..store.policies import write_policy
from ..store.exits import read_exits
from ..store.policies import digest, record_policy
from ..store.leader import Lease
from ..store.scripts import Scripts
from ..store.repeating import Repeating
from .counting import count_seen
from .mirror import Mirror
from ..store.quarantine import any_wrong, check_types, quarantine
from ..store.connect import redis_reason, wrong_type
from ..store.repair import free_stale_gpus, repair_types, set_aside_all
from ..store.samples import record_sample, sample_due
from .planner import RedisPlanner
from .summary import queue_summary

log = logging.getLogger("dispatch.scheduler")

#: How often the leader checks the type of each node's keys (store/quarantine.PER_NODE), in seconds.
NODE_TYPES_S = 15.0


@dataclass
class CycleStats:
    cycles: int = 0
    placed: int = 0
    preempted: int = 0
    requeued_lost: int = 0
    last_cycle_ms: float = 0.0

    def publish(self, client, ns: str, now_ms: int, holder: str, pending: int, running: int, *,
                profile: str, live_nodes: int, plan: Plan | None = None, queue: dict | None = None) -> None:
        """The leader's figures for `dispatch why`, `top`, the dashboard and /metrics (store/stats.py); after
        a full cycle (`plan`) why the jobs it did not reach wait, and the reservations it made."""
        fields = {"cycles": self.cycles, "placed": self.placed, "preempted": self.preempted,
                  "requeued_lost": self.requeued_lost, "cycle_ms": round(self.last_cycle_ms, 3), "at_ms": now_ms,
                  "holder": holder, "pending": pending, "running": running, "profile": profile,
                  "live_nodes": live_nodes, "rest_reason": plan.rest_reason if plan is not None else None}
        ranked = None if plan is None else \
            list(islice((v.job_id for v in plan.verdicts if v.rank), published.RANKED_KEPT))
        published.publish(client, ns, fields, plan.reservations if plan is not None else None, queue, ranked)


def _kinds(message) -> set:
    """The event kinds in one pubsub message (keys.events), as a set; empty for none."""
    if message is None:
        return set()
    data = message.get("data")
    return {data if isinstance(data, bytes) else b"?"}


class Scheduler:
    def __init__(self, client, ns: str = keys.DEFAULT_NS, *, policy: PolicySource | None = None,
                 timing: Timing | None = None, holder: str | None = None, verifier=None):
        self.client, self.ns = client, ns
        self.policy = policy or PolicySource(None)
        self.policy.attach(client, ns)  # `dispatch policy apply` and `rollback` reach it through Redis
        self._entry: dict = {}  # the policy history's entry for the policy in force
        self.timing = timing or Timing()
        self.scripts = Scripts(client, ns)
        self.lease = Lease(client, ns, self.scripts, self.timing.lease_s, holder)
        self.watch: HeartbeatWatch | None = None  # while leading
        self.requests = None
        if verifier is not None:  # identity on: users' signed requests come through the leader
            from ..store.requests import RequestServer

            self.requests = RequestServer(client, ns, verifier, self.scripts)
        self.planner = RedisPlanner(client, ns, self.scripts, seal=None if verifier is None else (
            lambda job_id, epoch, node: seal_attempt(verifier.secret, job_id, epoch, node)))
        self.mirror = Mirror(client, ns)
        self.notifier = Notifier(client, ns)  # --notify URLs of jobs that ended with no agent (dispatcher/notify.py)
        self.stats = CycleStats()
        self._live_nodes = 0
        self._seen = None  # the last full cycle's nodes and running jobs, published for the board (store/cluster.py)
        self._cluster_at = -10**18
        self._published: tuple | None = None
        self._state = None  # (the last full cycle's policy state, when it ran) while quick cycles may use it
        self.quick_ran = False  # the last cycle took the quick path (run: it does not put the next full one off)
        self._token = 0  # the fencing token this scheduler leads with (0: standing by)
        self._types_at = (-1e18, -1e18)  # when the keys' types, and the nodes' keys', were last checked

    def _publish_policy(self, profile: str, now: int) -> None:
        """Publish the policy in force (keys.policy) when it or its profile changed, and keep each new
        policy in the history (store/policies.py) that `dispatch policy rollback` returns through."""
        state = (self.policy.version, profile)
        if state != self._published:
            if self._published is None or self._published[0] != self.policy.version:
                self._entry = self._record_policy(now)
            write_policy(self.client, self.ns, self.policy.text, self.policy.source, profile, now,
                         digest=self._entry["digest"], number=self._entry["number"])
            if self._published is not None:
                log.info("policy profile in force: %s", profile)
            self._published = state

    def _record_policy(self, now: int) -> dict:
        import redis

        try:
            return record_policy(self.client, self.ns, self.policy.text, self.policy.source, now)
        except redis.exceptions.ResponseError as e:  # a history key of the wrong type costs the history only
            log.error("cannot keep the policy in its history (%s); scheduling goes on", e)
            return {"digest": digest(self.policy.text), "number": 0}

    @property
    def leading(self) -> bool:
        return self.watch is not None

    def _lead(self) -> bool:
        """Acquire or renew the lease; False while another scheduler leads. Whenever the token changes
        hands (even back to this scheduler after a lapse), the mirror forgets what it expected of its
        commits and reads the nodes whole; its jobs it keeps, current from the change feed (Mirror.lead)."""
        token = self.lease.hold()
        if not token:
            if self.watch is not None:
                log.warning("lost the scheduler lease; standing by")
            self.watch, self._token = None, 0
            return False
        if token != self._token:
            self.watch = None
        if self.watch is None:
            self._token = token
            self._state = None
            log.info("leading the scheduling of namespace %s (fencing token %d)", self.ns, token)
            self.watch = HeartbeatWatch(self.timing.node_timeout_s)
            self.mirror.lead()
            self._published = None
            if self.requests is not None:
                self.requests.publish_mode()
        return True

    def cycle(self, quick: bool = False) -> Plan:
        """One scheduling cycle; returns the plan (placements refused at commit are replanned next cycle).
        A standby (another scheduler holds the lease) follows the change feed and returns an empty plan.
        A key of the wrong type met anywhere in it (WRONGTYPE) makes it set aside every such key of the
        namespace, rebuild the indexes behind them (store/repair.py) and run once more.

        `quick`: the caller saw only submits since the last cycle. If the mirror agrees (only new
        pending jobs changed, every commit since the last full cycle took, and that cycle is less
        than a tick old), the arrivals are met against the state that cycle left
        (policy.place_arrivals): what a full cycle would do with them, at the cost of the arrivals."""
        import redis

        try:
            return self._cycle(quick)
        except redis.exceptions.ResponseError as e:
            if not wrong_type(e):
                raise
            self._repair(e)
        return self._cycle(False)  # (a key of the wrong type that is none of ours fails it again: the loop logs it)

    def _repair(self, error) -> None:
        """Set aside the keys of the wrong type and read everything again next.
        (A changed set of the wrong type is gone already: the read that met it also deleted it.)"""
        log.error("%s; setting keys of the wrong type aside", redis_reason(error))
        repair_types(self.client, self.ns, now_ms())
        self.mirror.invalidate()
        self.lease.recheck()
        self._state = None

    def _follow(self) -> None:
        """Standing by: keep the mirror current from the change feed (store/feed.py), so that a takeover
        costs what changed since, not a read of the whole queue. A key of the wrong type is the leader's
        to set aside: here it only means reading everything again later."""
        import redis

        self.policy.refresh()
        _, config = self.policy.current(now_ms() / 1000.0)
        try:
            self.mirror.follow(config)
        except redis.exceptions.ResponseError as e:
            log.warning("standing by, cannot follow the change feed (%s); will read every job again", e)
            self.mirror.invalidate()

    def _cycle(self, quick: bool) -> Plan:
        self.quick_ran = False
        if not self._lead():
            self._follow()
            return Plan()
        t0 = time.perf_counter()
        if self.requests is not None:
            self.requests.serve()
        now = now_ms()
        self.policy.refresh()
        profile, config = self.policy.current(now / 1000.0)
        self._publish_policy(profile, now)
        state, self._state = self._state, None
        if quick and state is not None and state[0].config is config \
                and time.monotonic() - state[1] < self.timing.tick_s:
            arrivals = self.mirror.refresh(now_ms=now)
            if arrivals is not None and not (self.mirror.bad or self.mirror.stray or self.mirror.aside):
                plan = place_arrivals(state[0], arrivals, now)
                self._commit(plan, self.mirror.epochs, now, profile, config, state, t0, full=False)
                self.quick_ran = True
                return plan
        state = None  # the last cycle's state holds the backlog it saw: not alive through a re-read
        read = self.mirror.sync(now, self.timing.node_timeout_s, config,  # a sample needs fresh utilization
                                all_nodes=sample_due(self.client, self.ns, now))
        self._live_nodes = len(read.snapshot.nodes)  # published with the cycle's figures
        self._seen = (read.nodes, read.snapshot.running)  # not the read: its backlog is not kept past a re-read
        self.planner.quarantine(read.bad_jobs, now)
        count_seen(self.client, self.ns, self.mirror)  # ends and requeues (scheduler/counting.py)
        if read.stray or read.aside:  # bad index entries, keys of the wrong type (store/quarantine.py)
            quarantine(self.client, self.ns, read.stray, now)
            set_aside_all(self.client, self.ns, read.aside, now)
        self._fail_doomed(now)
        self.notifier.drain()
        self.watch.observe({n.name: n.seen_ms for n in read.nodes}, {n.name: n.timeout_s for n in read.nodes})
        record_sample(self.client, self.ns, now, read, self.timing.node_timeout_s,  # the dashboard's history
                      idle_pct=config.idle_util_pct)
        lost = lost_jobs(read.snapshot.running, self.watch)
        if lost:  # their GPUs are gone with the node; plan again once they are back in the queue
            exits = read_exits(self.client, self.ns, [r.spec.id for r, _ in lost])
            self.stats.requeued_lost += requeue_lost(self.scripts, lost, read.epochs, now, self.lease.fence, exits)
            self.client.publish(keys.events(self.ns), b"lost")
            return Plan()
        plan, cycle_state = plan_cycle(read.snapshot, now, config)
        self._commit(plan, read.epochs, now, profile, config, (cycle_state, time.monotonic()), t0, full=True)
        return plan

    def _count_commit(self, pipe, started, preempted, now: int, full: bool) -> None:
        """The persistent counters (store/counters.py) of one commit: each start's wait from submit and
        its class, each preemption, and the cycle's time."""
        for p in started:
            job = self.mirror.backlog.jobs.get(p.job_id)
            if job is not None:
                cls = {"class": job.spec.priority}
                counters.observe(pipe, self.ns, "queue_wait", max(0.0, (now - job.spec.submit_ms) / 1000.0), **cls)
                counters.count(pipe, self.ns, "jobs_started", **cls)
        for pr in preempted:
            victim = self.mirror.running.get(pr.job_id)
            counters.count(pipe, self.ns, "preemptions", mode=pr.mode,
                           **{"class": victim.spec.priority if victim else "unknown"})
        counters.observe(pipe, self.ns, "cycle", self.stats.last_cycle_ms / 1000.0, kind="full" if full else "quick")

    def _fail_doomed(self, now: int) -> None:
        """Held jobs whose --after dependency failed or was cancelled fail with that reason (and their
        own dependents after them, as the mirror sees them change)."""
        if not self.mirror.doomed:
            return
        pipe = self.client.pipeline(transaction=False)
        for job_id, why in sorted(self.mirror.doomed.items()):
            self.scripts.cancel(job_id, now, why, state="failed", client=pipe)
            log.info("job %s fails: %s", job_id, why)
        pipe.execute(raise_on_error=False)
        self.mirror.doomed.clear()

    def _commit(self, plan: Plan, epochs: dict, now: int, profile: str, config, state, t0: float, *,
                full: bool) -> None:
        """Commit `plan`, log and record what took; keep `state` for the next quick cycle if all of it took."""
        taken, preempted = self.planner.commit(plan, epochs, now, config.keep_wait_on_requeue, fence=self.lease.fence,
                                               held=self.mirror.held_why, waiting=self.mirror.backlog, full=full)
        if self.planner.held_gpus:  # a GPU the job records call free is held: by a job that holds it?
            free_stale_gpus(self.client, self.ns, self.planner.held_gpus, now)
        ok = dict(taken)
        started = [p for p in plan.placements if p.job_id in ok]
        for p in started:
            self.mirror.expect(p.job_id, p.node, p.gpus, False, ok[p.job_id])
            log.info("start job %s on %s GPUs %s, score %.1f: %s", p.job_id, p.node, list(p.gpus), p.score, p.reason)
        for pr in preempted:
            was = self.mirror.running[pr.job_id]
            self.mirror.expect(pr.job_id, was.node, was.gpus, True, epochs[pr.job_id])
            log.info("preempt job %s on %s (%s) for job %s: %s", pr.job_id, pr.node, pr.mode, pr.for_job, pr.reason)
        if len(started) == len(plan.placements) and len(preempted) == len(plan.preemptions) \
                and not any(p.extra for p in plan.placements):
            self._state = state
        self.stats.cycles += 1
        self.stats.placed += len(taken)
        self.stats.preempted += len(preempted)
        self.stats.last_cycle_ms = (time.perf_counter() - t0) * 1000
        pipe = self.client.pipeline(transaction=False)
        write_decisions(pipe, self.ns, started, now, profile, preempted)
        self._count_commit(pipe, started, preempted, now, full)
        self.stats.publish(pipe, self.ns, now, self.lease.holder, len(self.mirror.backlog), len(self.mirror.running),
                           profile=profile, live_nodes=self._live_nodes, plan=plan if full else None,
                           queue=queue_summary(self.mirror.backlog, self.mirror.held, self.mirror.on_hold,
                                               self.planner.reasons, plan.rest_reason) if full else None)
        if full and self._seen is not None and now - self._cluster_at >= cluster.PUBLISH_EVERY_MS:
            cluster.publish(pipe, self.ns, now, *self._seen)
            self._cluster_at = now
        # once a tick, in this same round trip: is every key read whole of its type? (a pending index of
        # the wrong type is met by no read while nothing changes, and submits fail on it meanwhile); and
        # every NODE_TYPES_S the nodes' keys (a control stream of the wrong type stalls its agent)
        t = time.monotonic()
        nodes = [n.name for n in self.mirror.nodes()] if t - self._types_at[1] >= NODE_TYPES_S else None
        types = check_types(pipe, self.ns, nodes or ()) if t - self._types_at[0] >= self.timing.tick_s else []
        replies = pipe.execute()
        if self.planner.failed is not None:  # what took is recorded; now the error (a key of the wrong type?)
            raise self.planner.failed
        if types:
            self._types_at = (t, t if nodes is not None else self._types_at[1])
            if any_wrong(types, replies[-len(types):]):
                self._repair("a key of the wrong type")

    def run(self, stop: threading.Event | None = None) -> None:
        """Run cycles until `stop` is set. Redis errors are logged and retried with back-off."""
        import redis

        stop = stop or threading.Event()
        pubsub = None
        quick = False
        backoff, failing = 0.5, Repeating(log, "the scheduler loop")  # (not a line a retry while Redis is away)
        self.lease.keep()  # renewed from a side thread while leading: a long read cannot starve it
        full_at = time.monotonic()
        while not stop.is_set():
            self.lease.progress()
            try:
                if pubsub is None:
                    pubsub = self.client.pubsub(ignore_subscribe_messages=True)
                    pubsub.subscribe(keys.events(self.ns))
                self.cycle(quick)
                backoff = 0.5
                failing.success()
                if not self.quick_ran:
                    full_at = time.monotonic()
                # the next full cycle is due a tick after the last one ended, however many quick ones ran
                # since: else a steady stream of submits puts it off until one of them finds the state a
                # tick old and waits for a full cycle of its own
                deadline = full_at + self.timing.tick_s
                kinds: set = set()
                while not kinds and not stop.is_set():
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    kinds = _kinds(pubsub.get_message(timeout=min(left, 0.2)))
                while (more := _kinds(pubsub.get_message(timeout=0))):  # coalesce a burst
                    kinds |= more
                # only submits (and our own commits' wake-ups): the arrivals may take the quick path;
                # a tick with no event, or any other event, makes a full cycle
                quick = bool(kinds) and kinds <= {b"submit", b"placed"}
            except redis.exceptions.RedisError as e:
                failing.failure(e, "a Redis error; retrying, with back-off up to 5 s")
                self.mirror.invalidate()  # a restarted server may have lost the changed set
                if self.watch is not None:
                    self.watch.restart()  # nodes could not heartbeat either: none is judged on this gap
                pubsub = None
                stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
        if pubsub is not None:
            pubsub.close()
        try:
            self.lease.release()  # a standby takes over at once, not after the TTL
        except redis.exceptions.RedisError:
            pass
