"""The leader's published figures (keys.scheduler_stats): what the leading scheduler wrote at its last
cycle, for `dispatch why`, `top`, the dashboard and /metrics to show without a read of the queue.

The one writer is the leading scheduler (`publish`, once a cycle, in the commit's round trip); every
reader takes `read`, which types each field and never fails on a bad one (a field that does not parse
reads as absent).
"""

from __future__ import annotations

import msgpack

from . import keys
from .connect import text, tolerant

#: The most reservations kept in the published figures (a cycle makes a few: one per EASY
#: reservation, starving job and preemptor).
RESERVATIONS_KEPT = 64
#: The head of a full cycle's ranking kept (the ids it judged, in rank order): what `dispatch eta`
#: forecasts a long queue's jobs from.
RANKED_KEPT = 2000

_INTS = ("cycles", "placed", "preempted", "requeued_lost", "at_ms", "pending", "running", "live_nodes",
         "full_at_ms")
_FLOATS = ("cycle_ms",)
_TEXTS = ("holder", "rest_reason", "profile")


def publish(pipe, ns: str, fields: dict, reservations=None, queue: dict | None = None,
            ranked: list[str] | None = None) -> None:
    """The leader's figures of one cycle. `reservations` (a full cycle's plan.reservations) replace the
    published ones, with the cycle's time as `full_at_ms`; a quick cycle leaves them as they are.
    `queue`: scheduler/summary.queue_summary, and `ranked` the ids a full cycle judged in rank order (the
    first RANKED_KEPT), after a full cycle."""
    out = {k: v for k, v in fields.items() if v is not None}
    if queue is not None:
        out["queue"] = msgpack.packb(queue, use_bin_type=True)
    if ranked is not None:
        out["ranked"] = msgpack.packb(list(ranked)[:RANKED_KEPT], use_bin_type=True)
    if reservations is not None:
        out["reservations"] = msgpack.packb([[r.job_id, r.node, list(r.gpus), int(r.start_ms)]
                                             for r in list(reservations)[:RESERVATIONS_KEPT]], use_bin_type=True)
        out["full_at_ms"] = fields["at_ms"]
    pipe.hset(keys.scheduler_stats(ns), mapping=out)


#: The scheduler's figures older than this are stale (its last cycle: is it running?): the page greys
#: out, `top` and `why` say STALE; or older than STALE_TICKS of its ticks, where a tick is that long.
STALE_S = 10.0
STALE_TICKS = 3


def is_stale(age_s: float | None, tick_s: float) -> bool:
    """Whether the scheduler's figures of this age (s; None: none yet) are stale, its tick `tick_s`."""
    return age_s is None or age_s > max(STALE_S, STALE_TICKS * tick_s)


def stale_lines(client, ns: str) -> list[str]:
    """`dispatch queue`'s word on the pending jobs' reasons when the scheduler that wrote them has not run a
    cycle for longer than is_stale allows (why, top and the page said STALE; queue said nothing)."""
    import time

    from ..clock import now_ms
    from ..config import Timing

    at = text(tolerant(lambda: client.hget(keys.scheduler_stats(ns), "at_ms"), None) or b"")
    if not (at.isascii() and at.isdigit()):
        return []  # (none yet: a cluster starting, or one with no scheduler on purpose)
    age_s = (now_ms() - int(at)) / 1000.0
    if not is_stale(age_s, Timing.from_env().tick_s):
        return []
    when = time.strftime("%H:%M:%S", time.localtime(int(at) / 1000))
    return [f"dispatch: the reasons are from the scheduler's cycle at {when}, {age_s:.0f}s ago: is it running? "
            "(dispatch top)"]


def fill_rest_reason(client, ns: str, jobs: list[dict]) -> None:
    """A pending job the last cycle did not reach has no reason of its own: the cycle's one for all such
    jobs (rest_reason), in these job views, as `queue` showed it (its --json and `show` had none)."""
    if any(j["state"] == "pending" and not j["reason"] for j in jobs):
        rest = text(tolerant(lambda: client.hget(keys.scheduler_stats(ns), "rest_reason"), None) or b"")
        for j in jobs:
            if j["state"] == "pending" and not j["reason"]:
                j["reason"] = rest


def read(client, ns: str) -> dict:
    """{field: value} of what the leader published ({} if nothing yet); `reservations` a list of
    {job, node, gpus, start_ms}."""
    raw = tolerant(lambda: client.hgetall(keys.scheduler_stats(ns)), {}) or {}
    got = {text(k): v for k, v in raw.items()}
    out: dict = {}
    for kind, names in ((int, _INTS), (float, _FLOATS)):
        for k in names:
            try:
                out[k] = kind(float(text(got[k]))) if k in got else None
            except (TypeError, ValueError, OverflowError):
                out[k] = None
    for k in _TEXTS:
        out[k] = text(got[k]) if k in got else None
    out["reservations"] = _reservations(got.get("reservations"))
    out["queue"] = _queue(got.get("queue"))
    out["ranked"] = _ranked(got.get("ranked"))
    return out


def _ranked(raw) -> list[str]:
    try:
        ids = msgpack.unpackb(raw, raw=False) if raw else []
    except Exception:
        return []
    return [i for i in ids if isinstance(i, str)] if isinstance(ids, list) else []


def _queue(raw) -> dict:
    """The published queue summary (scheduler/summary.py), its parts that do not have their shape left
    out: {"classes": {class: {...}}, "users": [[user, team, pending, gpus]], "requests": ((gpus, types, mem), ...)}."""
    try:
        q = msgpack.unpackb(raw, raw=False) if raw else {}
    except Exception:
        q = {}
    q = q if isinstance(q, dict) else {}
    classes = {}
    for c, v in (q.get("classes") or {}).items() if isinstance(q.get("classes"), dict) else ():
        if not isinstance(c, str) or not isinstance(v, dict):
            continue
        try:
            classes[c] = {"pending": int(v["pending"]), "held": int(v["held"]), "gpus_pending": int(v["gpus_pending"]),
                          "oldest": [(int(o[0]), str(o[1])) for o in v["oldest"]],
                          "held_oldest": [(int(o[0]), str(o[1])) for o in v.get("held_oldest") or ()],
                          # (the ones that ran before: a requeued job's pending spell starts at its last end)
                          "reran": [str(o[1]) for o in v["oldest"] if len(o) > 2 and int(o[2]) > 0],
                          "reasons": [(str(r), int(n)) for r, n in v["reasons"]]}
        except (KeyError, TypeError, ValueError):
            continue
    users = [tuple(u) for u in q.get("users") or () if isinstance(u, list) and len(u) == 4
             and isinstance(u[0], str) and isinstance(u[1], str) and all(isinstance(x, int) for x in u[2:])] \
        if isinstance(q.get("users"), list) else []
    requests = tuple((int(r[0]), tuple(str(t) for t in r[1]), float(r[2])) for r in q.get("requests") or ()
                     if isinstance(r, list) and len(r) == 3 and isinstance(r[0], int) and isinstance(r[1], list)
                     and isinstance(r[2], (int, float)) and not isinstance(r[2], bool)) \
        if isinstance(q.get("requests"), list) else ()
    return {"classes": classes, "users": users, "requests": requests, "published": bool(q)}


def _reservations(raw) -> list[dict]:
    try:
        rows = msgpack.unpackb(raw, raw=False) if raw else []
    except Exception:
        return []
    out = []
    for r in rows if isinstance(rows, list) else []:
        if isinstance(r, list) and len(r) == 4 and isinstance(r[0], str) and isinstance(r[1], str) \
                and isinstance(r[2], list) and all(isinstance(g, int) for g in r[2]) and isinstance(r[3], int):
            out.append({"job": r[0], "node": r[1], "gpus": r[2], "start_ms": r[3]})
    return out
