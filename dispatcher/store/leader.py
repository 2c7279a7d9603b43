"""The scheduler's leader lease: one leads, the others stand by.

`Lease.hold()` acquires or renews a Redis key with a TTL (lease.lua) and returns
the fencing token, a number that grows with every new leader. The token travels
with every write the leader makes (commit_placement, preempt, the
requeue of a dead node's jobs), and those scripts refuse it once another holder
took the lease: a leader paused past its lease (a GC stall, SIGSTOP, a cut
network) cannot act on its stale plan when it wakes.

A scheduler process's loop calls `keep()`: while it leads, the lease is renewed
from a thread of its own every third of the TTL, so a long read (a new leader's
first read of 100,000 jobs takes longer than the TTL) cannot let it lapse. The
thread renews only while the loop shows progress (`progress()`) within `stall_s`:
a loop stuck for good loses the lease. A renewal that finds another holder stops
there, and the next hold() says so. A paused process (SIGSTOP, a cut network)
renews nothing.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid

from . import keys
from .connect import text

log = logging.getLogger("dispatch.scheduler")


def holder_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Lease:
    def __init__(self, client, ns: str, scripts, ttl_s: float, holder: str | None = None):
        self.client, self.ns, self.scripts = client, ns, scripts
        self.ttl_ms = max(1, int(ttl_s * 1000))
        self.holder = holder or holder_id()
        self.token = 0
        self._renewed = 0.0
        self._lock = threading.Lock()
        self._keeper: threading.Thread | None = None
        self._stop = threading.Event()
        self._progress, self.stall_s = 0.0, 0.0

    def keep(self, stall_s: float = 300.0) -> None:
        """Renew from a side thread while this holder leads and its loop calls progress() at least every
        `stall_s` (started once; it idles while not leading)."""
        self.stall_s = stall_s
        self.progress()
        if self._keeper is None or not self._keeper.is_alive():
            self._stop.clear()
            self._keeper = threading.Thread(target=self._keep, name="dispatch-lease", daemon=True)
            self._keeper.start()

    def _keep(self) -> None:
        import redis

        from .repeating import Repeating

        failing = Repeating(log, "renewing the scheduler lease")  # (every third of a lease while Redis is away)
        while not self._stop.wait(self.ttl_ms / 3000.0):
            with self._lock:
                if not self.token or time.monotonic() - self._progress > self.stall_s:
                    continue
                try:
                    got = self._renew()
                except redis.exceptions.RedisError as e:  # the main loop meets it too, and backs off
                    failing.failure(e)
                    continue
                failing.success()
                if got != self.token:  # lapsed and taken (0), or lapsed and taken again by us (a new token:
                    self.token, self._renewed = 0, 0.0  # the loop's next hold() takes it, and reads all again)

    def progress(self) -> None:
        """The loop is alive (see keep())."""
        self._progress = time.monotonic()

    def hold(self) -> int:
        """Acquire or renew; the fencing token while this holder leads, else 0. A lease renewed less
        than a quarter of its TTL ago is not renewed again (the scripts check the fence anyway)."""
        with self._lock:
            if self.token and time.monotonic() - self._renewed < self.ttl_ms / 4000.0:
                return self.token
            self.token = self._renew()
            return self.token

    def _renew(self) -> int:
        """One acquire-or-renew (lease.lua); the token it returns. The caller holds the lock."""
        t = time.monotonic()
        got = int(self.scripts.lease(self.holder, self.ttl_ms, "hold"))
        self._renewed = t
        return got

    def recheck(self) -> None:
        """Ask Redis at the next hold(), however recent the last renewal (the leader key may have been
        set aside: store/quarantine.py)."""
        with self._lock:
            self._renewed = 0.0

    def release(self) -> None:
        """Let go at once, so that a standby need not wait out the TTL."""
        self._stop.set()
        with self._lock:
            if self.token:
                self.token = 0
                self._renewed = 0.0
                self.scripts.lease(self.holder, self.ttl_ms, "release")

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
