"""The live scheduler: snapshot -> policy.schedule -> RedisPlanner.commit, on events and on a tick.

It wakes on any message on keys.events (submit, finish, node change, cancel) and at
least every tick; a burst of events is coalesced into one cycle. It keeps no state
that a restart would lose: everything it needs is read from Redis each cycle.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from .config import Timing
from .model import Plan
from .policy import PolicyConfig, schedule
from .store import keys
from .store.scripts import Scripts
from .store.snapshot import RedisPlanner, SpecCache, read_snapshot

log = logging.getLogger("dispatch.scheduler")


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class CycleStats:
    cycles: int = 0
    placed: int = 0
    last_cycle_ms: float = 0.0


class Scheduler:
    def __init__(self, client, ns: str = keys.DEFAULT_NS, *, policy: PolicyConfig | None = None,
                 timing: Timing | None = None):
        self.client, self.ns = client, ns
        self.policy = policy or PolicyConfig()
        self.timing = timing or Timing()
        self.scripts = Scripts(client, ns)
        self.planner = RedisPlanner(client, ns, self.scripts)
        self.cache = SpecCache()
        self.stats = CycleStats()

    def cycle(self) -> Plan:
        """One scheduling cycle; returns the plan (placements refused at commit are replanned next cycle)."""
        t0 = time.perf_counter()
        now = now_ms()
        read = read_snapshot(self.client, self.ns, now, self.timing.node_timeout_s, self.cache)
        self.planner.quarantine(read.bad_jobs, now)
        plan = schedule(read.snapshot, now_ms=now, config=self.policy)
        done = self.planner.commit(plan, read.epochs, now)
        for p in plan.placements:
            if any(j == p.job_id for j, _ in done):
                log.info("start job %s on %s GPUs %s score %.1f %s", p.job_id, p.node, list(p.gpus),
                         p.score, p.terms)
        self.stats.cycles += 1
        self.stats.placed += len(done)
        self.stats.last_cycle_ms = (time.perf_counter() - t0) * 1000
        return plan

    def run(self, stop: threading.Event | None = None) -> None:
        """Run cycles until `stop` is set. Redis errors are logged and retried with back-off."""
        import redis

        stop = stop or threading.Event()
        pubsub = None
        backoff = 0.5
        while not stop.is_set():
            try:
                if pubsub is None:
                    pubsub = self.client.pubsub(ignore_subscribe_messages=True)
                    pubsub.subscribe(keys.events(self.ns))
                self.cycle()
                backoff = 0.5
                deadline = time.monotonic() + self.timing.tick_s
                woke = False
                while not woke and not stop.is_set():
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    woke = pubsub.get_message(timeout=min(left, 0.2)) is not None
                while pubsub.get_message(timeout=0) is not None:  # coalesce a burst
                    pass
            except redis.exceptions.RedisError as e:
                log.warning("Redis error in the scheduler loop (%s); retrying in %.1fs", e, backoff)
                pubsub = None
                stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
        if pubsub is not None:
            pubsub.close()
