"""A warning that would repeat every beat while Redis is away or refuses writes (a full disk, no
replicas): said at its first failure, then at most every EVERY_S with how many failed in a row, and
once when it works again. An outage of ten minutes is a few lines, not thousands."""

from __future__ import annotations

import time

from .connect import redis_reason

#: How often a failure that goes on is said again.
EVERY_S = 30.0


class Repeating:
    def __init__(self, log, what: str, every_s: float = EVERY_S, clock=time.monotonic):
        self.log, self.what, self.every_s, self.clock = log, what, every_s, clock
        self.failed, self.said_at = 0, 0.0

    def failure(self, e: Exception, note: str = "") -> None:
        """`what` failed (`note`: more on this failure, e.g. for how long)."""
        self.failed += 1
        if self.failed == 1 or self.clock() - self.said_at >= self.every_s:
            detail = ", ".join(x for x in (note, f"{self.failed} failures in a row" if self.failed > 1 else "") if x)
            self.log.warning("%s failed%s: %s", self.what, f" ({detail})" if detail else "", redis_reason(e))
            self.said_at = self.clock()

    def success(self) -> None:
        if self.failed:
            self.log.warning("%s works again after %d failures in a row", self.what, self.failed)
            self.failed = 0
