"""Quarantine: index entries no record backs, and keys of the wrong type, set aside with the reason.

What Redis holds may be hostile: hand-edited, written by an older or buggy client, or by anyone
with write access. An index entry may have a score that is not a time (+inf), a member that is no
job id or node name, an id with no job record or one of the wrong Redis type; an index may be of
the wrong type altogether. The readers check what they read as they read it (no extra round trip
while nothing is wrong); the leading scheduler then
- moves each bad entry out of its index into the quarantine stream (keys.quarantine) with the
  reason, atomically and only if it is still the entry that was read (lua/quarantine.lua). A
  pending job whose score is not a time gets its submit time back instead, so it still runs;
- renames a key of the wrong type aside, to keys.quarantined(...) (lua/set_aside.lua, checked
  and renamed in one step); the job indexes are then rebuilt from the job records
  (store/repair.py).
Each is logged once, when it is moved. Read-only views (queue, why, top, eta) skip what they
cannot read, write nothing, and `dispatch queue` says how many entries are in quarantine.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from . import keys, scripts
from .connect import text, tolerant, wrong_type

log = logging.getLogger("dispatch.store")

#: Records the quarantine stream keeps (approximate trim).
QUARANTINE_KEPT = 10_000
#: The most a time in milliseconds may be (2**53: beyond it a float score is no longer exact).
MAX_MS = 2 ** 53
#: Job ids (dispatcher/core/spec.py) and node names (the agent's --node): nothing else is a member of an index.
NAME = re.compile(rb"[A-Za-z0-9_.-]{1,64}")
ACTIVE = "assigned,running,preempting"

#: The keys of one namespace that code reads whole, with the type each must have. Left out on purpose:
#: keys.job_seq (a restarted sequence would hand out ids that exist) and keys.policy_applied (read
#: defensively by policy_source; renaming it would drop the policy an operator applied).
FIXED = (
    (keys.quarantine, "stream"), (keys.jobs_pending, "zset"), (keys.jobs_active, "zset"), (keys.jobs_all, "zset"),
    (keys.jobs_changed, "set"), (keys.jobs_feed, "stream"), (keys.nodes_changed, "set"), (keys.nodes_heartbeat, "zset"),
    (keys.nodes_drain, "hash"),
    (keys.decisions, "list"), (keys.policy, "hash"), (keys.policy_history, "list"), (keys.scheduler_stats, "hash"),
    (keys.samples, "stream"), (keys.metrics, "hash"), (keys.auth, "hash"), (keys.requests, "stream"), (keys.requests_done, "string"),
    (keys.scheduler_leader, "string"), (keys.scheduler_token, "string"),
)
#: Each node's keys (the node agent writes the record again at its next heartbeat).
PER_NODE = ((keys.node, "hash"), (keys.node_alloc, "hash"), (keys.node_control, "stream"))


def valid_name(raw) -> bool:
    """Is `raw` (bytes or str) a job id or node name?"""
    return bool(NAME.fullmatch(raw if isinstance(raw, bytes) else str(raw).encode(errors="replace")))


def is_time(score) -> bool:
    """A score that can be a time in milliseconds: finite, within +-MAX_MS (NaN is not)."""
    return -MAX_MS <= score <= MAX_MS


@dataclass(frozen=True)
class Entry:
    """One bad index entry, and how quarantine.lua checks that it is still the one that was read."""
    index: str  # the index key
    member: bytes | str
    reason: str
    check: str  # score | state | field | member | value | gone (lua/quarantine.lua)
    expect: str | bytes = ""
    record: str = ""  # the record the check reads ("" for none)
    restore: str = ""
    kind: str = "zset"  # the index's type

    def __str__(self) -> str:
        return f"{self.index} {text(self.member)!r}: {self.reason}"


def job_entry(ns: str, index: str, job_id, reason: str, check: str = "state", expect: str = "", **kw) -> Entry:
    """An entry of a job index whose check reads the job's record."""
    rec = keys.job(ns, job_id) if valid_name(job_id) else ""
    return Entry(index, job_id, reason, check, expect, rec, **kw)


def quarantine(client, ns: str, entries, now_ms: int) -> list[Entry]:
    """Move the entries that are still as read into quarantine (one script call per index, one round
    trip); returns those moved, each logged once."""
    by_index: dict[tuple[str, str], list[Entry]] = {}
    for e in entries:
        by_index.setdefault((e.index, e.kind), []).append(e)
    if not by_index:
        return []
    changed = {keys.jobs_pending(ns): keys.jobs_changed(ns), keys.jobs_active(ns): keys.jobs_changed(ns),
               keys.nodes_heartbeat(ns): keys.nodes_changed(ns)}
    pipe = client.pipeline(transaction=False)
    groups = []
    for (index, kind), group in by_index.items():
        for part in scripts.chunks(len(group)):
            chunk = group[part]
            args: list = [now_ms, QUARANTINE_KEPT, kind]
            for e in chunk:
                args += (e.member, e.check, e.expect, e.reason, e.restore)
            pipe.eval(scripts.source("quarantine"), 3 + len(chunk), keys.quarantine(ns), index,
                      changed.get(index, index), *[e.record or index for e in chunk], *args)
            groups.append(chunk)
    moved, unrecorded = [], []
    for chunk, got in zip(groups, pipe.execute(raise_on_error=False)):
        if isinstance(got, Exception):
            log.error("cannot quarantine %d entries of %s (%s)", len(chunk), chunk[0].index, got)
            continue
        for i in got:
            e = chunk[abs(int(i)) - 1]
            moved.append(e)
            log.error("quarantined %s", e)
            if int(i) < 0:
                unrecorded.append(e)
    if unrecorded and set_aside(client, ns, keys.quarantine(ns), "stream", now_ms):  # then record them anew
        pipe = client.pipeline(transaction=False)
        for e in unrecorded:
            record(pipe, ns, e.index, e.member, e.reason, now_ms)
        pipe.execute(raise_on_error=False)
    return moved


def set_aside(client, ns: str, key: str, want: str, now_ms: int, reason: str = "wrong type") -> str | None:
    """Rename `key` aside into quarantine if it is not a `want` (and not absent); returns where it went."""
    dest = keys.quarantined(ns, key, now_ms)
    had = client.eval(scripts.source("set_aside"), 3, key, dest, keys.quarantine(ns), want, now_ms,
                      QUARANTINE_KEPT, reason)
    if not had:
        return None
    log.error("set aside %s: a %s, not a %s; moved to %s", key, text(had), want, dest)
    return dest


def sweep(client, ns: str, now_ms: int) -> list[tuple[str, str]]:
    """Set aside every key of the namespace that code reads whole and that has the wrong type (FIXED,
    and PER_NODE for each node with a heartbeat); returns (key, its type) for those moved. Two round
    trips and one per key moved: for after a WRONGTYPE error, not for every cycle."""
    want = [(f(ns), t) for f, t in FIXED]
    moved = _aside(client, ns, want, now_ms)
    names = tolerant(lambda: client.zrange(keys.nodes_heartbeat(ns), 0, -1), [])
    per_node = [(f(ns, text(n)), t) for n in names if valid_name(n) for f, t in PER_NODE]
    return moved + _aside(client, ns, per_node, now_ms)


def check_types(pipe, ns: str, nodes=()) -> list[tuple[str, str]]:
    """Queue TYPE of each FIXED key, and of the PER_NODE keys of `nodes`, on `pipe` (a pipeline the
    caller sends anyway: no round trip of its own); give what it returns and the replies to any_wrong."""
    want = [(f(ns), t) for f, t in FIXED] + [(f(ns, n), t) for n in nodes for f, t in PER_NODE]
    for key, _ in want:
        pipe.type(key)
    return want


def any_wrong(want: list[tuple[str, str]], replies) -> bool:
    return any(text(got) not in ("none", t) for (_, t), got in zip(want, replies))


def _aside(client, ns: str, want: list[tuple[str, str]], now_ms: int) -> list[tuple[str, str]]:
    if not want:
        return []
    pipe = client.pipeline(transaction=False)
    for key, _ in want:
        pipe.type(key)
    moved = []
    for (key, t), got in zip(want, pipe.execute()):
        if text(got) not in ("none", t) and set_aside(client, ns, key, t, now_ms):
            moved.append((key, text(got)))
    return moved


def record(client_or_pipe, ns: str, key: str, member, reason: str, now_ms: int) -> None:
    """Record what already left its key (a control command acked, a changed-set member taken)."""
    client_or_pipe.xadd(keys.quarantine(ns), {"key": key, "member": member, "score": "", "reason": reason,
                                              "at_ms": now_ms}, maxlen=QUARANTINE_KEPT, approximate=True)


def count(client, ns: str) -> int:
    """Records in quarantine (0 when the stream is absent or not a stream)."""
    return tolerant(lambda: client.xlen(keys.quarantine(ns)), 0)


def report(client, ns: str) -> list[str]:
    """Lines for `dispatch queue`'s footer, in one round trip: how many records are in quarantine, and
    a job index of the wrong type (not yet set aside: no scheduler has met it)."""
    pipe = client.pipeline(transaction=False)
    pipe.xlen(keys.quarantine(ns))
    for index in (keys.jobs_pending(ns), keys.jobs_active(ns)):
        pipe.type(index)
    n, *types = pipe.execute(raise_on_error=False)
    lines = []
    if isinstance(n, int) and n:
        lines.append(f"{n} entr{'y' if n == 1 else 'ies'} quarantined (`dispatch quarantine` lists them, "
                     f"--clear once read)")
    for index, t in zip((keys.jobs_pending(ns), keys.jobs_active(ns)), types):
        if text(t) not in ("zset", "none"):
            lines.append(f"{index} is a {text(t)}, not a zset: listed from {keys.jobs_all(ns)} until the "
                         "scheduler sets it aside")
    return lines


def read_quarantine(client, ns: str, limit: int = 100) -> list[dict]:
    """The newest records, newest first: key, member, score, reason, at_ms, and moved_to or restored."""
    got = tolerant(lambda: client.xrevrange(keys.quarantine(ns), count=limit), [])
    return [{text(k): text(v) for k, v in fields.items()} for _, fields in got]
