"""Idle GPUs on this node: warn on the jobs whose GPUs all stay near 0% utilization, and requeue
them when the policy says so. The rule and its texts are dispatcher/policy/idle.py.

Each heartbeat the agent hands its fresh GPU sample to IdleWatch.sample(). Spells are timed on
the agent's monotonic clock, per attempt (job id, epoch). The thresholds are the policy the
leading scheduler published (keys.policy; reread every POLICY_EVERY_S while jobs run): one
policy file for the whole cluster, and the built-in defaults (warn after 30 minutes, never
requeue) when no scheduler has published one.

Writes happen on change only: the warning (`warning`, `idle_since_ms` on the job hash) when a
spell passes idle_warn_s, its removal when the job is busy again; both through
idle_warning.lua, refused unless the job still runs at the agent's epoch. A spell that passes
idle_requeue_s is a graceful preemption, as the scheduler's own: control.preempt marks the job at
the attempt's epoch and queues the command on this node's control stream in one step
(preempt.lua), carried out by Supervisor.handle (checkpoint signal, grace, SIGKILL, back to the
queue). The mark (and the command with it) is refused once the job is no longer running at that
epoch, so an idle spell requeues a job at most once, however many agents or retries there are.

Why the agent and not the scheduler: the agent has the samples, and a spell measured on one
clock needs no comparison of two hosts' clocks and no write per heartbeat; the scheduler would
need both, or a new set to poll, to learn what the agent already knows.
"""

from __future__ import annotations

import logging
import time

from dispatcher.store import control
from dispatcher.store.scripts import Outcome
from dispatcher.policy.config import PolicyConfig
from dispatcher.policy.idle import REQUEUE, WARN, IdleClock, idle_action, job_idle, requeue_reason, warning_text

log = logging.getLogger("dispatch.agent")

#: Seconds between two reads of the published policy (while jobs run here).
POLICY_EVERY_S = 10.0


class IdleWatch:
    def __init__(self, client, ns: str, node: str, supervisor, scripts, *, heartbeat_s: float = 1.0,
                 monotonic=time.monotonic, wall=time.time):
        self.client, self.ns, self.node, self.supervisor, self.scripts = client, ns, node, supervisor, scripts
        self.clock = IdleClock(max_gap_s=max(5 * heartbeat_s, 10.0))
        self.monotonic, self.wall = monotonic, wall
        self.written: dict[tuple[str, int], tuple[int, str]] = {}  # attempt -> (idle_since_ms, text) on record
        self.requeued: set[tuple[str, int]] = set()
        self._config: PolicyConfig | None = None
        self._config_at = float("-inf")
        self._policy_warned = False

    def config(self) -> PolicyConfig:
        """The policy in force as the leader published it, reread at most every POLICY_EVERY_S; the
        last one read (or the defaults) when it cannot be read."""
        from dispatcher.scheduler.policy_source import policy_in_force

        now = self.monotonic()
        if now - self._config_at >= POLICY_EVERY_S:
            self._config_at = now
            try:
                self._config = policy_in_force(self.client, self.ns)[1]
                self._policy_warned = False
            except Exception as e:  # advisory: keep the last thresholds
                if not self._policy_warned:
                    log.warning("cannot read the published policy (%s); idle thresholds unchanged", e)
                    self._policy_warned = True
        return self._config or PolicyConfig()

    def sample(self, gpus) -> dict[str, str]:
        """Judge each running job on this sample of the node's GPUs (GpuInfo list). Returns what was
        done, job id -> "warn", "clear" or "requeue" (nothing when nothing changed). A Redis error
        is logged and costs this sample only (what was not written is written at a later one)."""
        import redis

        try:
            return self._sample(gpus)
        except redis.exceptions.RedisError as e:
            log.warning("idle watch: %s", e)
            return {}

    def _sample(self, gpus) -> dict[str, str]:
        with self.supervisor.lock:
            runs = [r for r in self.supervisor.running.values() if not r.stopping and r.gpus]
        live = {(r.job_id, r.epoch) for r in runs}
        self.clock.keep_only(live)
        self.written = {k: v for k, v in self.written.items() if k in live}
        self.requeued &= live
        if not runs:
            return {}
        config = self.config()
        util = {g.index: g.util_pct for g in gpus}
        now_s, wall_ms = self.monotonic(), int(self.wall() * 1000)
        done = {}
        for r in runs:
            key = (r.job_id, r.epoch)
            idle_s = self.clock.observe(key, job_idle(util, r.gpus, config.idle_util_pct), now_s)
            action = idle_action(idle_s, config)
            if action in (WARN, REQUEUE):
                text = warning_text(config)
                since_ms = self.written[key][0] if key in self.written else wall_ms - int(idle_s * 1000)
                if self.written.get(key) != (since_ms, text):
                    self.scripts.idle_warning(r.job_id, r.epoch, since_ms, text)
                    self.written[key] = (since_ms, text)
                    done[r.job_id] = "warn"
                    log.warning("job %s: GPUs %s idle for %.0fs: %s", r.job_id, list(r.gpus), idle_s, text)
            elif key in self.written:
                self.scripts.idle_warning(r.job_id, r.epoch, None, "")
                del self.written[key]
                done[r.job_id] = "clear"
                log.info("job %s: GPUs busy again; idle warning cleared", r.job_id)
            if action == REQUEUE and key not in self.requeued:  # a Redis error: tried again next sample
                if self._requeue(r, config, wall_ms):
                    done[r.job_id] = "requeue"
                self.requeued.add(key)
        return done

    def _requeue(self, run, config: PolicyConfig, now_ms: int) -> bool:
        """Mark the attempt preempting and send its preemption to this node, in one step."""
        reason = requeue_reason(config)
        marked = control.preempt(self.scripts, self.node, run.job_id, run.epoch, now_ms, by=f"node {self.node}",
                                 mode="graceful", reason=reason, keep_wait=config.keep_wait_on_requeue)
        if marked == Outcome.DONE:
            log.warning("job %s: requeued (%s)", run.job_id, reason)
        else:
            log.info("job %s: idle requeue refused (no longer running at epoch %d)", run.job_id, run.epoch)
        return marked == Outcome.DONE
