"""`dispatch top --once`, or piped or redirected: one report in plain text, as `top -b` prints one.

Built from the board's overview and the head of the queue, a line at a time, each cut at the width
(the terminal's, $COLUMNS, else 80): no layout engine, so the report of 1,000 nodes costs a few
milliseconds and the process no import of rich. Pure: `report` takes what the board read.
"""

from __future__ import annotations

import time

from ..core.units import age
from ..store.decisions import placed_on
from ..store.nodes import node_state

#: GPU rows in the report, before an "N more" line.
REPORT_GPUS = 48
#: How a GPU's state reads in a list ("blocked": a process no job owns holds it).
GPU_WORD = {"free": "free", "held": "held", "blocked": "zombie", "drained": "drained", "dead": "dead"}


def table(title: str, headers: tuple[str, ...], rows: list[tuple], right: frozenset = frozenset()) -> list[str]:
    """A titled table: each column as wide as its widest cell, the last one left as long as it is
    (the width cuts it); columns named in `right` (by index) are right-aligned."""
    cells = [tuple(str(c) for c in r) for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def line(values) -> str:
        out = [v.rjust(w) if i in right else v.ljust(w) for i, (v, w) in enumerate(zip(values, widths))]
        out[-1] = out[-1].rstrip() if len(headers) - 1 not in right else out[-1]
        return "  ".join(out).rstrip()

    return [title, line(headers), line("-" * w for w in widths), *(line(r) for r in cells), ""]


def report(overview: dict, queue: dict, width: int, rows: int = 12) -> str:
    """The report: totals and the scheduler, alerts, the queue by class and its head (`queue`:
    Board.queue_page), a line per node with its GPUs, a row per GPU (the first REPORT_GPUS), the latest
    decisions, usage by user, and the newest outcomes."""
    b = overview
    t, s = b["totals"], b["scheduler"]
    pct = round(100 * t["held"] / t["gpus"]) if t["gpus"] else 0
    lines = [f"dispatch top  namespace {b['namespace']}  nodes {t['nodes'] - t['nodes_dead']}/{t['nodes']} up  "
             f"GPUs {t['held']}/{t['gpus']} held ({pct}%)  util {t['util_pct']:.0f}%  frag {100 * t['frag']:.0f}%  "
             f"pending {t['pending']:,}  running {t['running']:,}",
             "scheduler: none has run" if s["age_s"] is None else stale_words(s) if s.get("stale") else
             f"scheduler {s['holder']}: cycle {s['cycle_ms']:.1f} ms, {age(s['age_s'])} ago", ""]
    if b["alerts"]:
        lines += ["Alerts", *(f"  {a['kind']}: {a['message']}" for a in b["alerts"][:rows]), ""]
    lines += table("Queue by class (pending: held ones too)",
                   ("class", "pending", "held", "running", "GPUs asked", "oldest wait", "why"),
                   [(c["class"], f"{c['pending']:,}", f"{c['held']:,}", c["running"], f"{c['gpus_pending']:,}",
                     f"{age(c['oldest_wait_s'])} (job {c['oldest_job']})" if c["oldest_job"] else "-",
                     "; ".join(f"{r['count']:,} x {r['reason']}" for r in c["reasons"][:2]))
                    for c in b["classes"]], right=frozenset({1, 2, 3, 4}))
    lines += table(f"Pending, oldest first, as dispatch queue ({queue['total']:,}; by class: the table above)",
                   ("id", "name", "user", "class", "GPUs", "wait", "why"),
                   [(j["id"], j["name"] or "-", j["user"], j["priority"], j["gpus_requested"], age(j["wait_s"]),
                     j["reason"] or "no reason recorded yet") for j in queue["jobs"]], right=frozenset({0, 4, 5}))
    if queue["total"] > len(queue["jobs"]):  # (12 rows shown of 272: said, as queue says "N more")
        lines.append(f"... {queue['total'] - len(queue['jobs']):,} more (dispatch queue --state pending lists them)")
    lines += _node_lines(b["nodes"])
    lines += _gpu_rows(b["nodes"])
    lines += table("Latest decisions", ("time", "job", "where", "score", "why"),
                   [(time.strftime("%H:%M:%S", time.localtime(d["time"])), d["job"],
                     placed_on(d),
                     f"{d['score']:.1f}" if d["kind"] == "start" else "-",
                     d["why"] if d["kind"] == "start" else f"preempted ({d.get('mode')}) for job {d.get('for_job')}")
                    for d in b["decisions"][:rows // 2]], right=frozenset({1, 3}))
    lines += table("Users (dominant share / DRF fair share)",
                   ("user", "team", "GPUs", "running", "pending", "share", "fair"),
                   [(u["user"], u["team"] or "-", u["gpus"], u["running"], f"{u['pending']:,}",
                     f"{100 * u['share']:.1f}%", f"{100 * u['fair_share']:.1f}%") for u in b["usage"]["users"][:rows]],
                   right=frozenset({2, 3, 4, 5, 6}))
    o = b["outcomes"]
    lines.append(f"newest {o['window']} finished: " + ", ".join(f"{n} {s}" for s, n in o["counts"].items()))
    lines += [f"  {r['count']} {r['state']}: {r['reason']}" for r in o["reasons"][:3]]
    return "".join(_cut(line, width) + "\n" for line in lines)


def stale_words(s: dict) -> str:
    """The header's word on a scheduler whose figures are stale (board: stats.is_stale): what follows is
    as of then."""
    return f"STALE (scheduler's last cycle {age(s['age_s'])} ago: is it running?)"


def node_word(n: dict) -> str:
    """A node's state as `dispatch nodes` says it (up, draining, drained), or DEAD (no heartbeat)."""
    if not n["alive"]:
        return "DEAD"
    return node_state(True, n.get("drain"), any(g["job"] for g in n["gpus"]))


def _node_lines(nodes: list[dict]) -> list[str]:
    """A line per node, its GPUs as index:job (or free, zombie, dead)."""
    name_w = max((len(n["name"]) for n in nodes), default=4)
    out = ["Nodes and GPUs (index:job)", f"{'node':<{name_w}}  {'state':<8}  {'seen':>6}  GPUs"]
    for n in nodes:
        cells = " ".join(f"{g['index']}:{g['job'] or GPU_WORD[g['state']]}" for g in n["gpus"])
        out.append(f"{n['name']:<{name_w}}  {node_word(n):<8}  {age(n['seen_s_ago']):>6}  {cells}")
    return out + [""]


def _gpu_rows(nodes: list[dict]) -> list[str]:
    """A row per GPU, as nvtop lists them: utilization, memory, and the job and user holding it."""
    rows, shown = [], 0
    for n in nodes:
        for g in n["gpus"]:
            shown += 1
            if shown > REPORT_GPUS:
                continue
            used, total = g.get("mem_used_gb") or 0.0, g.get("mem_total_gb") or 0.0
            rows.append((n["name"], g["index"], g.get("name") or "", f"{g.get('util_pct') or 0:.0f}%",
                         f"{used:.1f}/{total:.1f} GB", GPU_WORD[g["state"]], g.get("job") or "-",
                         ",".join(g.get("users") or []) or "-"))
    out = table("GPUs", ("node", "GPU", "model", "util", "memory", "state", "job", "user"), rows,
                right=frozenset({1, 3, 4}))
    if shown > REPORT_GPUS:
        out.insert(-1, f"{shown - REPORT_GPUS:,} more")
    return out


def _cut(line: str, width: int) -> str:
    """The line, cut to `width` characters with an ellipsis when longer."""
    return line if len(line) <= width else line[:max(1, width - 1)] + "…"
