"""Alerts for operators, computed from the board (dispatcher/views/board.py) and the recorded samples,
against the thresholds of the policy file's [alerts] table (core/alerts.py), the same for every view.

Pure: no Redis, no clock; the caller passes what it read and `now_ms`. The same list is
shown on the dashboard, by `dispatch top`, and exported as the dispatch_alert metric.
"""

from __future__ import annotations

from ..core.alerts import AlertConfig
from ..core.units import age

__all__ = ["AlertConfig", "evaluate"]


def _window(samples: list[dict], now_ms: int, span_s: float) -> list[dict] | None:
    """The samples of the last span_s, or None when the record does not reach back that far."""
    start = now_ms - span_s * 1000
    inside = [s for s in samples if s["t_ms"] >= start]
    older = [s for s in samples if s["t_ms"] < start]
    if not inside or not older:
        return None
    return inside


def evaluate(view: dict, waits_s: dict[str, list[float]], samples: list[dict], cfg: AlertConfig,
             now_ms: int) -> list[dict]:
    """Alerts as {kind, severity ("critical" or "warning"), subject, message}, most severe first.

    `view` is the board's dict (classes, nodes), `waits_s` the pending jobs' waits by class,
    `samples` store.samples.read_samples() of at least the longest window."""
    out = []
    s = view.get("scheduler") or {}
    busy = view["nodes"] or any(c.get("pending") for c in view["classes"])
    if busy and s.get("at") and s.get("age_s") is not None and s["age_s"] > cfg.scheduler_stale_s:
        out.append({"kind": "scheduler", "severity": "critical", "subject": "scheduler",
                    "message": f"no scheduler cycle for {age(s['age_s'])} (the last by {s.get('holder') or '?'}): "
                               "is a scheduler running?"})
    for c in view["classes"]:
        limit = {"critical": cfg.critical_wait_s, "high": cfg.high_wait_s}.get(c["class"])
        over = sum(1 for w in waits_s.get(c["class"], ()) if w > limit) if limit is not None else 0
        if not over:
            continue
        out.append({"kind": "wait", "severity": "critical" if c["class"] == "critical" else "warning",
                    "subject": c["class"],
                    "message": f"{over} {c['class']} job{'s' * (over != 1)} waiting over {age(limit)} "
                               f"(longest: job {c['oldest_job']}, {age(c['oldest_wait_s'])})"})
    for n in view["nodes"]:
        if not n["alive"]:  # (drained first, as for maintenance: a warning, not a page)
            drained = n.get("drain")
            out.append({"kind": "dead_node", "severity": "warning" if drained else "critical", "subject": n["name"],
                        "message": f"node {n['name']}: no heartbeat for {age(n['seen_s_ago'])}"
                                   + (f" (drained: {drained.get('reason') or 'no reason given'})" if drained else "")})
            continue
        for g in n["gpus"]:
            if g["blocked"]:
                out.append({"kind": "zombie", "severity": "warning", "subject": f"{n['name']}:{g['index']}",
                            "message": f"{n['name']} GPU {g['index']}: {g['blocked']}"})
            if g.get("idle") and g["job"]:  # its job's idle warning, from its node agent (policy/idle.py)
                spell = f" (idle for {age(max(0.0, now_ms / 1000 - g['idle_since']))})" if g.get("idle_since") else ""
                out.append({"kind": "idle_gpu", "severity": "warning", "subject": f"{n['name']}:{g['index']}",
                            "message": f"{n['name']} GPU {g['index']} held by job {g['job']}: {g['idle']}{spell}"})
    low = _window(samples, now_ms, cfg.low_util_for_s)
    if low and all(s["pending"] > 0 and s["gpus"] and 100.0 * s["held"] / s["gpus"] < cfg.low_util_pct
                   for s in low):
        held = 100.0 * low[-1]["held"] / low[-1]["gpus"]
        out.append({"kind": "low_util", "severity": "warning", "subject": "cluster",
                    "message": f"GPU allocation under {cfg.low_util_pct:g}% for {age(cfg.low_util_for_s)} while "
                               f"jobs wait (now {held:.0f}%, {low[-1]['pending']} pending)"})
    return sorted(out, key=lambda a: (a["severity"] != "critical", a["kind"], a["subject"]))
