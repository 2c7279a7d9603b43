"""What the operators' views share between requests, and how old they may be when served.

`Fresh` holds one read of the cluster (views/board.py) for everyone who asks: served while younger than
its bound (the board's: one second, longer only after a read slower than a fifth of that), and past
it read again before anything is answered, one read for every caller who asks meanwhile; so no
answer reflects a read older than the bound, whoever asks, however rarely. (Until 2026-12 a stale
value was served while the next read ran in the background, at each of two levels: an answer showed
the request before last, 30-45 s old between Prometheus' 15 s scrapes.)

`PerRead` holds what is made from one read (/api/board's JSON, the /metrics text): made once per read,
by the first caller that asks for it, the others waiting for it.
"""

from __future__ import annotations

import threading
import time

from ..core.memo import gc_paused

#: The longest a caller waits for a read another one started; past it the caller is answered an error
#: (the dashboard's 503: "Redis failed"), and the next caller starts a read of its own.
WAIT_S = 15.0
class _Read:
    __slots__ = ("started", "took", "done", "value", "error")

    def __init__(self):
        self.started, self.took = time.monotonic(), 0.0
        self.done = threading.Event()
        self.value = self.error = None


class Fresh:
    """A value computed by `compute`, served while younger than ttl_s (counted from when its read began),
    or younger than LOAD_FACTOR times as long as computing it took when that is longer, so that a slow
    read keeps the dashboard's share of Redis and of this process bounded. Past that, get() computes it
    again, in the caller's thread, before it answers; callers who ask meanwhile wait for that one read
    (no thundering herd) and share its value, or its error: a failed read is never hidden behind the
    value before it. The value is computed with the garbage collector paused."""

    LOAD_FACTOR = 5.0

    def __init__(self, ttl_s: float, compute):
        self.ttl_s, self.compute = ttl_s, compute
        self._lock = threading.Lock()  # guards _got and _reading, never held during a read
        self._got: _Read | None = None  # the newest read that succeeded
        self._reading: _Read | None = None  # the read in flight

    def _fresh(self, got: _Read | None) -> bool:
        return got is not None and time.monotonic() - got.started < max(self.ttl_s, self.LOAD_FACTOR * got.took)

    def get(self):
        got = self._got
        if self._fresh(got):
            return got.value
        with self._lock:
            got = self._got
            if self._fresh(got):  # read by another caller meanwhile
                return got.value
            read = self._reading
            mine = read is None or time.monotonic() - read.started > WAIT_S  # none in flight, or one hung
            if mine:
                read = self._reading = _Read()
        if mine:
            return self._run(read)
        if not read.done.wait(WAIT_S):
            raise _timeout(f"reading the cluster has taken over {WAIT_S:.0f} s")
        if read.error is not None:
            raise read.error
        return read.value

    def _run(self, read: _Read):
        try:
            with gc_paused():  # a read of the cluster makes tens of thousands of objects with no cycles
                read.value = self.compute()  # among them: each collection would walk them all again
        except BaseException as e:
            read.error = e
            raise
        finally:
            read.took = time.monotonic() - read.started
            with self._lock:
                if read.error is None and (self._got is None or read.started > self._got.started):
                    self._got = read  # (a hung read that ends late does not replace a newer one)
                if self._reading is read:
                    self._reading = None
            read.done.set()
        return read.value


class PerRead:
    """make(source) for the newest source asked with (by identity), made once: callers who ask for the
    same source meanwhile wait for it (WAIT_S at most). Made with the garbage collector paused."""

    def __init__(self, make):
        self.make = make
        self._lock = threading.Lock()
        self._got: tuple = (None, None)

    def get(self, source):
        got = self._got
        if got[0] is source:
            return got[1]
        if not self._lock.acquire(timeout=WAIT_S):
            raise _timeout(f"making an answer has taken over {WAIT_S:.0f} s")
        try:
            got = self._got
            if got[0] is not source:
                with gc_paused():
                    got = self._got = (source, self.make(source))
            return got[1]
        finally:
            self._lock.release()


def _timeout(what: str) -> Exception:
    """A Redis timeout (what the dashboard answers 503 and `top` shows in red); redis-py is imported
    only here, as `top --once` imports it no sooner than it connects."""
    import redis

    return redis.exceptions.TimeoutError(what)
