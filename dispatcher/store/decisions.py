"""The decision log (each start with its score breakdown and why it won) and the published policy."""

from __future__ import annotations

import msgpack

from . import keys
from .quarantine import is_time
from .connect import tolerant

#: How many decisions the log keeps.
DECISIONS_KEPT = 2000


def write_decisions(pipe, ns: str, placements, now_ms: int, profile: str, preemptions=()) -> None:
    """Queue LPUSH + LTRIM of one entry per start and per preemption on `pipe`."""
    entries = [msgpack.packb({"v": 1, "kind": "start", "t_ms": now_ms, "job": p.job_id, "node": p.node,
                              "gpus": list(p.gpus), "score": p.score, "terms": p.terms, "rank": p.rank,
                              "why": p.reason, "profile": profile})
               for p in placements]
    entries += [msgpack.packb({"v": 1, "kind": "preempt", "t_ms": now_ms, "job": pr.job_id, "node": pr.node,
                               "gpus": list(pr.gpus), "mode": pr.mode, "for_job": pr.for_job,
                               "lost_gpu_s": pr.lost_gpu_s, "why": pr.reason, "profile": profile,
                               "score": 0.0, "terms": {}})
                for pr in preemptions]
    if not entries:
        return
    pipe.lpush(keys.decisions(ns), *entries)
    pipe.ltrim(keys.decisions(ns), 0, DECISIONS_KEPT - 1)


def read_decisions(client, ns: str, *, job_id: str | None = None, node: str | None = None,
                   limit: int = 50) -> list[dict]:
    """Newest first (of one job, or on one node, when given). Entries that do not decode, or not into a
    decision, are skipped (and a log of the wrong type reads as empty)."""
    out = []
    for raw in tolerant(lambda: client.lrange(keys.decisions(ns), 0, DECISIONS_KEPT - 1), []):
        try:
            d = msgpack.unpackb(raw, raw=False)
        except Exception:
            continue
        if not _decision(d) or (job_id is not None and job_id not in (d.get("job"), d.get("for_job"))) \
                or (node is not None and d["node"] != node):
            continue
        d.setdefault("kind", "start")
        d["time"] = d.pop("t_ms", 0) / 1000.0
        d.pop("v", None)
        out.append(d)
        if len(out) >= limit:
            break
    return out


def _decision(d) -> bool:
    """Is `d` shaped as write_decisions writes one (what the views format)?"""
    def num(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool) and is_time(v)

    return (isinstance(d, dict) and d.get("kind", "start") in ("start", "preempt") and num(d.get("t_ms", 0))
            and isinstance(d.get("job"), str) and isinstance(d.get("node"), str) and num(d.get("score", 0.0))
            and isinstance(d.get("gpus"), list) and all(isinstance(g, int) for g in d["gpus"])
            and isinstance(d.get("terms", {}), dict) and all(isinstance(k, str) and num(v) for k, v in d.get(
                "terms", {}).items())
            and all(isinstance(d.get(k, ""), str) for k in ("why", "profile", "mode", "for_job")))


def placed_on(d: dict) -> str:
    """Where a decision put its job, in a cell: "n1:0,1", or "n1 (no GPUs)" for a job of none."""
    return f"{d['node']}:{','.join(map(str, d['gpus']))}" if d["gpus"] else f"{d['node']} (no GPUs)"
