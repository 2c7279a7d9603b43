"""Counters and histograms for /metrics, kept in Redis (keys.metrics) by the leading scheduler.

A histogram the dashboard computed from the decision log counted again in every dashboard process
and after every restart; these are counted once, where the event is decided, and live as long as the
namespace, whoever leads (a new leader adds to them). The leading scheduler writes them: in its
commit's round trip (queue_wait, cycle, jobs_started, preemptions), and once a full cycle for what
its mirror saw jobs do (requeues by why: scheduler/counting.py). Some are counted where their event
happens instead, once each, whatever a mirror saw and whoever leads (or none does): start_latency, from
placement to running, by the agent's mark_running.lua as it records the start; jobs_ended and job_run by
finish.lua and cancel.lua as they record the end. `read` gives them to the exporter (views/metrics.py).

Fields: "<name>|<labels>|b<i>" a histogram bucket's own count (not cumulative; i indexes BUCKETS[name],
the last is +Inf), "<name>|<labels>|sum" and "|count"; "<name>|<labels>" a plain counter. Labels are
"k=v,k=v".
"""

from __future__ import annotations

import bisect

from . import keys
from .connect import text, tolerant

#: Each histogram's upper bounds, seconds.
BUCKETS = {
    "queue_wait": (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400),
    "job_run": (60, 300, 900, 1800, 3600, 7200, 14400, 43200, 86400, 259200, 604800),
    "cycle": (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    "start_latency": (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 600),
}


def _labels(labels: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def observe(pipe, ns: str, name: str, value: float, **labels) -> None:
    """One observation of histogram `name` (a key of BUCKETS), queued on `pipe`."""
    base = f"{name}|{_labels(labels)}"
    i = bisect.bisect_left(BUCKETS[name], value)
    pipe.hincrby(keys.metrics(ns), f"{base}|b{i}", 1)
    pipe.hincrbyfloat(keys.metrics(ns), f"{base}|sum", float(value))
    pipe.hincrby(keys.metrics(ns), f"{base}|count", 1)


def script_histogram(name: str, label: str) -> tuple[str, str]:
    """What a script needs to observe histogram `name` under one label whose value it finds itself:
    the fields' prefix ("<name>|<label>=") and the bounds ("a,b,..."), as mark_running.lua takes them."""
    return f"{name}|{label}=", ",".join(repr(float(b)) for b in BUCKETS[name])


def count(pipe, ns: str, name: str, n: int = 1, **labels) -> None:
    pipe.hincrby(keys.metrics(ns), f"{name}|{_labels(labels)}", n)


def read(client, ns: str) -> dict:
    """{"histograms": {name: {labels tuple: {"buckets": [cumulative counts, +Inf last], "sum", "count"}}},
    "counters": {name: {labels tuple: n}}}; a field that does not parse is left out."""
    raw = tolerant(lambda: client.hgetall(keys.metrics(ns)), {}) or {}
    hists: dict = {}
    counters: dict = {}
    for k, v in raw.items():
        parts = text(k).split("|")
        try:
            labels = tuple(tuple(p.split("=", 1)) for p in parts[1].split(",") if p) if len(parts) > 1 else ()
            if any(len(p) != 2 for p in labels):
                continue
            if len(parts) == 2:
                counters.setdefault(parts[0], {})[labels] = int(v)
                continue
            if len(parts) != 3 or parts[0] not in BUCKETS:
                continue
            h = hists.setdefault(parts[0], {}).setdefault(labels, {"own": [0] * (len(BUCKETS[parts[0]]) + 1),
                                                                     "sum": 0.0, "count": 0})
            if parts[2] == "sum":
                h["sum"] = float(v)
            elif parts[2] == "count":
                h["count"] = int(v)
            elif parts[2].startswith("b"):
                h["own"][int(parts[2][1:])] = int(v)
        except (ValueError, IndexError):
            continue
    for per in hists.values():
        for h in per.values():
            total, cum = 0, []
            for n in h.pop("own"):
                total += n
                cum.append(total)
            h["buckets"] = cum
    return {"histograms": hists, "counters": counters}
