"""The scheduler's leader lease: one leads, the others stand by.

`Lease.hold()` acquires or renews a Redis key with a TTL (lease.lua) and returns
the fencing token, a number that grows with every new leader. The token travels
with every write the leader makes (commit_placement, mark_preempting, the
requeue of a dead node's jobs), and those scripts refuse it once another holder
took the lease: a leader paused past its lease (a GC stall, SIGSTOP, a cut
network) cannot act on its stale plan when it wakes.
"""

from __future__ import annotations

import os
import socket
import time
import uuid

from . import keys
from .connect import text


def holder_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Lease:
    def __init__(self, client, ns: str, scripts, ttl_s: float, holder: str | None = None):
        self.client, self.ns, self.scripts = client, ns, scripts
        self.ttl_ms = max(1, int(ttl_s * 1000))
        self.holder = holder or holder_id()
        self.token = 0
        self._renewed = 0.0

    def hold(self) -> int:
        """Acquire or renew; the fencing token while this holder leads, else 0. A lease renewed less
        than a quarter of its TTL ago is not renewed again (the scripts check the fence anyway)."""
        if self.token and time.monotonic() - self._renewed < self.ttl_ms / 4000.0:
            return self.token
        t = time.monotonic()
        self.token = int(self.scripts.lease(self.holder, self.ttl_ms, "hold"))
        self._renewed = t
        return self.token

    def release(self) -> None:
        """Let go at once, so that a standby need not wait out the TTL."""
        if self.token:
            self.scripts.lease(self.holder, self.ttl_ms, "release")
            self.token = 0
            self._renewed = 0.0

    @property
    def fence(self) -> str:
        """What the leader key holds while this holder leads (the scripts compare it)."""
        return f"{self.token} {self.holder}"


def current_leader(client, ns: str) -> tuple[int, str] | None:
    """(token, holder) of the scheduler leading now, or None."""
    raw = client.get(keys.scheduler_leader(ns))
    if raw is None:
        return None
    token, _, holder = text(raw).partition(" ")
    return int(token), holder
