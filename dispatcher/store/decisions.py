"""The decision log (each start with its score breakdown and why it won) and the published policy."""

from __future__ import annotations

import msgpack

from . import keys
from .connect import text

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


def read_decisions(client, ns: str, *, job_id: str | None = None, limit: int = 50) -> list[dict]:
    """Newest first. Entries that do not decode are skipped."""
    out = []
    for raw in client.lrange(keys.decisions(ns), 0, DECISIONS_KEPT - 1):
        try:
            d = msgpack.unpackb(raw, raw=False)
        except Exception:
            continue
        if not isinstance(d, dict) or (job_id is not None and job_id not in (d.get("job"), d.get("for_job"))):
            continue
        d.setdefault("kind", "start")
        d["time"] = d.pop("t_ms", 0) / 1000.0
        d.pop("v", None)
        out.append(d)
        if len(out) >= limit:
            break
    return out


def write_policy(client, ns: str, text_: str, source: str, profile: str, loaded_ms: int, *, digest: str = "",
                 number: int = 0) -> None:
    """The policy in force and its profile now; `digest` and `number` name its entry in the policy
    history (store/policies.py)."""
    client.hset(keys.policy(ns), mapping={"text": text_, "source": source, "profile": profile,
                                          "loaded_ms": loaded_ms, "digest": digest, "number": number})


def read_policy(client, ns: str) -> dict:
    raw = client.hgetall(keys.policy(ns))
    return {k.decode(): text(v) for k, v in raw.items()}


