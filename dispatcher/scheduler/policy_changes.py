"""Changing the live policy: apply a file, roll back through the history, compare two policies.

The CLI's `dispatch policy diff/apply/rollback/history` call these. Nothing here talks to the
scheduler directly: an apply is written to Redis (store/policies.py write_applied) and the leading
scheduler's PolicySource takes it on its next cycle; the scheduler records what it ran in the
history, and `policy show` reads what it published.
"""

from __future__ import annotations

from ..core.errors import ConfigError, NotFoundError
from ..policy.profiles import PolicySet, parse_policy
from ..policy.render import diff_policies
from ..store import keys
from ..store.policies import digest, read_policy, read_policy_history, write_applied

#: The names `dispatch policy diff` (and `tune --current`) take besides a file.
LIVE, DEFAULT = "live", "default"


def live_policy(client, ns: str) -> tuple[PolicySet, str, str]:
    """(the policy the scheduler published, its text, its source); the built-in defaults if none did."""
    published = read_policy(client, ns)
    if not published.get("text"):
        return PolicySet(), "", published.get("source") or "(built-in defaults; no scheduler has run)"
    try:
        return parse_policy(published["text"]), published["text"], published.get("source", "")
    except ConfigError as e:
        raise ConfigError(f"live: the published policy does not parse ({e}); apply a good one with "
                          f"`dispatch policy apply FILE`", key=e.key) from None


def named_policy(name: str, client_of) -> tuple[PolicySet, str]:
    """`live`, `default` or a policy file -> (PolicySet, its text). `client_of()` gives a Redis client
    (called only for `live`). A bad file raises ConfigError naming the file and the key."""
    from .policy_source import load_policy_file

    if name == DEFAULT:
        return PolicySet(), ""
    if name == LIVE:
        client, ns = client_of()
        pset, text, _ = live_policy(client, ns)
        return pset, text
    return load_policy_file(name)


def in_force_digest(client, ns: str) -> str | None:
    published = read_policy(client, ns)
    if not published:
        return None
    return published.get("digest") or digest(published.get("text", ""))


def history(client, ns: str) -> list[dict]:
    """The kept policies, newest first, each with `in_force` (the first entry matching the published
    policy's digest) and `back` (how many entries before the one in force: 1 is the previous)."""
    entries = read_policy_history(client, ns)
    current = in_force_digest(client, ns)
    at = next((i for i, e in enumerate(entries) if e["digest"] == current), None)
    for i, e in enumerate(entries):
        e["in_force"] = i == at
        e["back"] = i - at if at is not None and i >= at else None
    return entries


def apply(client, ns: str, text: str, source: str, now_ms: int) -> dict:
    """Write a validated policy text for the scheduler to take. Returns {changes: [(setting, live,
    new)], version, digest, scheduler: whether one holds the lease now}; an equal policy writes nothing
    (version None)."""
    new = parse_policy(text)
    live, _, _ = live_policy(client, ns)
    changes = diff_policies(live, new)
    out = {"changes": changes, "digest": digest(text), "version": None,
           "scheduler": bool(client.exists(keys.scheduler_leader(ns))), "warnings": _beyond_cluster(client, ns, new)}
    if changes:
        out["version"] = write_applied(client, ns, text, source, now_ms)
    return out


def _beyond_cluster(client, ns: str, pset) -> list[str]:
    """policy.teams.beyond against the GPUs of the live nodes (none yet: nothing to say)."""
    from ..clock import now_ms
    from ..config import Timing
    from ..policy.teams import beyond
    from ..store.nodes import read_nodes

    now, timeout_s = now_ms(), Timing.from_env().node_timeout_s
    gpus = sum(1 for n in read_nodes(client, ns)[0] if n.alive(now, timeout_s) for g in n.gpus if not g.blocked)
    return beyond(pset.profiles, gpus) if gpus else []


def rollback(client, ns: str, back: int, now_ms: int) -> dict:
    """Apply the policy `back` entries before the one in force in the history (1: the previous one).
    NotFoundError if the history holds no such entry."""
    entries = history(client, ns)
    at = next((i for i, e in enumerate(entries) if e["in_force"]), 0)
    if at + back >= len(entries):
        have = len(entries) - at - 1
        err = NotFoundError(f"no policy {back} back in the history: it holds {max(0, have)} before the one "
                            f"in force")
        err.hint = ("see `dispatch policy history`; the scheduler records each policy it runs"
                    if entries else "no scheduler has recorded a policy yet")
        raise err
    target = entries[at + back]
    out = apply(client, ns, target["text"], f"rollback to #{target['number']} ({target['source']})", now_ms)
    out["target"] = {k: target[k] for k in ("number", "source", "digest", "loaded_ms")}
    return out
