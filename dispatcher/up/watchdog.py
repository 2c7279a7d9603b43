"""`up` restarts a scheduler that runs but no longer leads: stopped (SIGSTOP, a debugger), or hung.

A process that exits is restarted by the supervisor's child watch; one that stays alive without
doing its work is not seen there. The scheduler's lease says it: its side thread renews the lease
only while the main loop makes progress (store/leader.py), so a hung or stopped scheduler lets it
lapse. When no scheduler has held the lease for STUCK_LEASES leases, while ours has run at least that long,
ours is killed (SIGKILL) and the child watch restarts it. Another scheduler leading (a standby
elsewhere, with `up --redis-url`) is as good as ours: nothing is done.
"""

from __future__ import annotations

import logging
import time

log = logging.getLogger("dispatch.up")

#: No leader for this many leases (DISPATCH_LEASE_S: 60 s by default), with ours running at least as
#: long: ours is killed and restarted. Well above a scheduler's reconnect back-off after the server returns.
STUCK_LEASES = 12
#: How often the lease is looked at.
CHECK_S = 2.0


class SchedulerWatch:
    def __init__(self, url: str, ns: str, lease_s: float, clock=time.monotonic):
        self.url, self.ns, self.stuck_s, self.clock = url, ns, STUCK_LEASES * lease_s, clock
        self.client = None
        self.leaderless_since: float | None = None
        self.checked = 0.0

    def check(self, child) -> bool:
        """Look at the lease (every CHECK_S); kill `child` (a supervisor Child) if it has run for
        stuck_s while nobody led for as long. True if it was killed."""
        now = self.clock()
        if now - self.checked < CHECK_S or child.proc is None or child.proc.poll() is not None:
            return False
        self.checked = now
        import redis

        from ..core.errors import DispatcherError
        from ..store.connect import connect
        from ..store.leader import current_leader

        try:
            if self.client is None:
                self.client = connect(self.url)
            leading = current_leader(self.client, self.ns) is not None
        except (redis.exceptions.RedisError, DispatcherError, OSError, ValueError):
            return False  # the server away (the supervisor's server watch deals with that): look again later
        if leading:
            self.leaderless_since = None
            return False
        if self.leaderless_since is None:
            self.leaderless_since = now
        if now - self.leaderless_since < self.stuck_s or now - child.started < self.stuck_s:
            return False
        log.warning("the %s (pid %d) has not led for %.0fs (stopped or hung); killing it so that it restarts",
                    child.name, child.pid, now - self.leaderless_since)
        child.proc.kill()
        self.leaderless_since = None
        return True
