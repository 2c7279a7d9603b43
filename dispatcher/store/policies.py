"""Policies in Redis beyond the one published: the one a user applied, and the last ones the scheduler ran.

- keys.policy_applied: a hash {text, source, applied_ms, version}. `dispatch policy apply` and
  `rollback` write it in one MULTI that also bumps `version`; the leading scheduler's PolicySource
  reads `version` and `applied_ms` every cycle (one HMGET) and the rest only when they moved.
- keys.policy_history: the last HISTORY_KEPT policies the scheduler ran, newest first, each a
  msgpack map {v, number, text, source, loaded_ms, digest}; `number` comes from keys.policy_seq.
  A policy equal to the newest entry (same digest) is not pushed again, so a restart with the same
  file adds nothing.
"""

from __future__ import annotations

import hashlib

import msgpack

from . import keys
from .connect import text, tolerant

#: How many policies the history keeps.
HISTORY_KEPT = 10


def digest(text_: str) -> str:
    """A short, stable name for a policy text: the first 12 hex digits of its SHA-256."""
    return hashlib.sha256(text_.encode()).hexdigest()[:12]


def write_applied(client, ns: str, text_: str, source: str, now_ms: int) -> int:
    """Ask the scheduler to switch to `text_` (already validated by the caller); returns the new version.
    A wake-up on keys.events makes the leader cycle at once."""
    pipe = client.pipeline(transaction=True)
    pipe.hset(keys.policy_applied(ns), mapping={"text": text_, "source": source, "applied_ms": now_ms})
    pipe.hincrby(keys.policy_applied(ns), "version", 1)
    pipe.publish(keys.events(ns), b"policy")
    return int(pipe.execute()[1])


def read_applied_version(client, ns: str) -> tuple | None:
    """What changes with every apply (version and applied_ms, as stored: compare them, do not parse them;
    the pair, since a deleted hash starts its version again), in one HMGET; None if none was applied."""
    version, applied_ms = client.hmget(keys.policy_applied(ns), ["version", "applied_ms"])
    return None if version is None else (version, applied_ms)


def read_applied(client, ns: str) -> dict:
    """{text, source, applied_ms (int, 0 if unreadable), changed (read_applied_version's pair)}; {} if none
    was applied."""
    raw = client.hgetall(keys.policy_applied(ns))
    if not raw:
        return {}
    out = {k.decode(errors="replace"): v for k, v in raw.items()}
    try:
        applied_ms = int(out.get("applied_ms", 0))
    except ValueError:
        applied_ms = 0
    return {"text": text(out.get("text")), "source": text(out.get("source")), "applied_ms": applied_ms,
            "changed": (out.get("version"), out.get("applied_ms"))}


def _decode(raw) -> dict | None:
    try:
        e = msgpack.unpackb(raw, raw=False)
    except Exception:
        return None
    if not isinstance(e, dict) or not isinstance(e.get("text"), str):
        return None
    return {"number": e.get("number", 0), "text": e["text"], "source": str(e.get("source", "")),
            "loaded_ms": e.get("loaded_ms", 0), "digest": str(e.get("digest") or digest(e["text"]))}


def record_policy(client, ns: str, text_: str, source: str, now_ms: int) -> dict:
    """Push the policy the scheduler now runs onto the history, unless it is already the newest entry;
    returns that entry. Only the leading scheduler calls this."""
    d = digest(text_)
    head = client.lindex(keys.policy_history(ns), 0)
    entry = _decode(head) if head is not None else None
    if entry is not None and entry["digest"] == d:
        return entry
    entry = {"number": int(client.incr(keys.policy_seq(ns))), "text": text_, "source": source,
             "loaded_ms": now_ms, "digest": d}
    pipe = client.pipeline(transaction=True)
    pipe.lpush(keys.policy_history(ns), msgpack.packb({"v": 1, **entry}))
    pipe.ltrim(keys.policy_history(ns), 0, HISTORY_KEPT - 1)
    pipe.execute()
    return entry


def read_policy_history(client, ns: str) -> list[dict]:
    """The kept policies, newest first; entries that do not decode are skipped."""
    return [e for e in map(_decode, client.lrange(keys.policy_history(ns), 0, HISTORY_KEPT - 1)) if e]


def write_policy(client, ns: str, text_: str, source: str, profile: str, loaded_ms: int, *, digest: str = "",
                 number: int = 0) -> None:
    """The policy in force and its profile now; `digest` and `number` name its entry in the policy
    history (below)."""
    client.hset(keys.policy(ns), mapping={"text": text_, "source": source, "profile": profile,
                                          "loaded_ms": loaded_ms, "digest": digest, "number": number})


def read_policy(client, ns: str) -> dict:
    raw = tolerant(lambda: client.hgetall(keys.policy(ns)), {})
    return {k.decode(): text(v) for k, v in raw.items()}
