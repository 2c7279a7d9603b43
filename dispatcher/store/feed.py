"""The change feed (keys.jobs_feed): how every scheduler, leading or standing by, follows the queue.

Every write that changes a job adds its id to keys.jobs_changed (scheduler/mirror.py). The leader
takes that set each cycle with take_changed.lua, which moves it into the feed as one entry ({n, ids}:
n counts the entries) in the same atomic step, and returns the ids of every entry past the caller's
cursor: its own take, and any a scheduler that led meanwhile made. A standby reads the same feed from
its own cursor without taking the set, so its mirror stays current, and when it takes the lead it has
only the last changes to read, not the whole queue.

A cursor is (entry id, n). An entry past it that is not n + 1 (the feed was trimmed past the cursor:
FEED_KEPT entries, or lost with a server) is a gap: the reader reads everything again.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import keys
from .connect import text
from .scripts import source

#: Entries the feed keeps (one per cycle that saw a change): a standby further behind reads all again.
FEED_KEPT = 10_000


@dataclass(frozen=True)
class Taken:
    cursor: tuple[str, int]  # the feed's last entry (id, n) when read: ("0-0", 0) while it is empty
    gap: bool  # entries past the caller's cursor are gone: read everything again
    ids: list  # the job ids (bytes, as the set held them) of the entries past the caller's cursor


def take(pipe, ns: str, cursor: tuple[str, int] | None, *, leader: bool):
    """Queue take_changed.lua on `pipe`, or run it on a client and return its reply (parse() reads
    either): with `leader`, the changed set moves into the feed first. `cursor` None: only where the
    feed stands (for a whole read)."""
    last, n = cursor if cursor is not None else ("", 0)
    return pipe.eval(source("take_changed"), 2, keys.jobs_changed(ns), keys.jobs_feed(ns), "1" if leader else "0",
                     last, n, FEED_KEPT)


def parse(reply) -> Taken:
    """take()'s reply."""
    last, n, gap, *ids = reply
    return Taken((text(last), int(n)), bool(int(gap)), list(ids))
