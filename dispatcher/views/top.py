"""`dispatch top`: the dashboard's essentials in a terminal, from the same Board, as nvtop and htop
show a machine. On a terminal it is interactive (top_term.py reads the keys, top_keys.py is their
state machine, top_screen.py its frame, top_panes.py the lists); `--once`, piped or redirected, it
prints one report (frame below)."""

from __future__ import annotations

import time

from rich import box
from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..core.units import age
from .top_panes import CLASS_STYLE, GPU_STYLE, GPU_WORD

#: GPU rows in the one-frame report (`--once`, or piped), before an "N more" line.
REPORT_GPUS = 48


def _table(title: str, *columns: str) -> Table:
    t = Table(title=title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD, expand=True,
              pad_edge=False)
    for c in columns:
        t.add_column(c.lstrip("#"), justify="right" if c.startswith("#") else "left",
                     overflow="fold" if c in ("why", "reason") else "ellipsis")
    return t


def frame(board, rows: int = 12) -> Group:
    """One screen: totals, alerts, the queue by class and its head, GPUs per node, the latest
    decisions and usage by user."""
    b = board.overview()
    t, s = b["totals"], b["scheduler"]
    pct = round(100 * t["held"] / t["gpus"]) if t["gpus"] else 0
    head = Text.assemble(
        ("dispatch top ", "bold"), (f"namespace {b['namespace']}  ", "grey50"),
        f"nodes {t['nodes'] - t['nodes_dead']}/{t['nodes']} up  GPUs {t['held']}/{t['gpus']} held ({pct}%)  "
        f"util {t['util_pct']:.0f}%  frag {100 * t['frag']:.0f}%  "
        f"pending {t['pending']:,}  running {t['running']:,}  ",
        ("scheduler: none has run" if s["age_s"] is None else
         f"scheduler {s['holder']}: cycle {s['cycle_ms']:.1f} ms, {age(s['age_s'])} ago", "grey50"))
    parts = [head]
    if b["alerts"]:
        parts.append(Panel(Text("\n".join(f"{a['kind']}: {a['message']}" for a in b["alerts"][:rows]),
                                style="red"), title="alerts", title_align="left", border_style="red"))
    classes = _table("Queue by class", "class", "#pending", "#running", "#GPUs asked", "#oldest wait", "why")
    for c in b["classes"]:
        classes.add_row(Text(c["class"], CLASS_STYLE[c["class"]]), f"{c['pending']:,}", str(c["running"]),
                        f"{c['gpus_pending']:,}",
                        f"{age(c['oldest_wait_s'])} (job {c['oldest_job']})" if c["pending"] else "-",
                        "; ".join(f"{r['count']:,} x {r['reason']}" for r in c["reasons"][:2]))
    parts.append(classes)
    queue = board.queue_page("pending", "", 0, rows)
    jobs = _table(f"Pending, highest class and longest wait first ({queue['total']:,})",
                  "#id", "name", "user", "class", "#GPUs", "#wait", "why")
    for j in queue["jobs"]:
        jobs.add_row(j["id"], j["name"] or "-", j["user"], Text(j["priority"], CLASS_STYLE.get(j["priority"], "")),
                     str(j["gpus_requested"]), age(j["wait_s"]), j["reason"] or "no reason recorded yet")
    parts.append(jobs)
    parts.append(_node_lines(b["nodes"]))
    parts.append(_gpu_table(b["nodes"]))
    decisions = _table("Latest decisions", "time", "#job", "where", "#score", "why")
    for d in b["decisions"][:rows // 2]:
        why = d["why"] if d["kind"] == "start" else f"preempted ({d.get('mode')}) for job {d.get('for_job')}"
        decisions.add_row(time.strftime("%H:%M:%S", time.localtime(d["time"])), d["job"],
                          f"{d['node']}:{','.join(map(str, d['gpus']))}",
                          f"{d['score']:.1f}" if d["kind"] == "start" else "-", why)
    parts.append(decisions)
    users = _table("Users (dominant share / DRF fair share)", "user", "team", "#GPUs", "#running", "#pending",
                   "#share", "#fair")
    for u in b["usage"]["users"][:rows]:
        users.add_row(u["user"], u["team"] or "-", str(u["gpus"]), str(u["running"]), f"{u['pending']:,}",
                      f"{100 * u['share']:.1f}%", f"{100 * u['fair_share']:.1f}%")
    parts.append(users)
    o = b["outcomes"]
    parts.append(Text(f"newest {o['window']} finished: " + ", ".join(f"{n} {s}" for s, n in o["counts"].items())
                      + "".join(f"\n  {r['count']} {r['state']}: {r['reason']}" for r in o["reasons"][:3])))
    return Group(*parts)


def _node_lines(nodes: list[dict]) -> Text:
    """A line per node, its GPUs as index:job: one Text, not a table (a table of a thousand rows costs
    rich over a second to lay out), each line cut at the console's width."""
    width = max((len(n["name"]) for n in nodes), default=4)
    out = Text("Nodes and GPUs (index:job)\n", style="bold", no_wrap=True, overflow="ellipsis")
    out.append(f"{'node':<{width}}  state  {'seen':>6}  GPUs\n", "bold")
    for n in nodes:
        out.append(f"{n['name']:<{width}}  ")
        out.append(f"{'up' if n['alive'] else 'DEAD':<5}", "green" if n["alive"] else "bold red")
        out.append(f"  {age(n['seen_s_ago']):>6}  ")
        for g in n["gpus"]:
            label = g["job"] or {"free": "free", "blocked": "zombie", "dead": "dead"}.get(g["state"], "")
            out.append(f"{g['index']}:{label} ", GPU_STYLE[g["state"]])
        out.append("\n")
    return out


def _gpu_table(nodes: list[dict]) -> Table:
    """A row per GPU, as nvtop lists them: utilization, memory, and the job and user holding it."""
    gpus = _table("GPUs", "node", "#GPU", "model", "#util", "#memory", "state", "job", "user")
    shown = 0
    for n in nodes:
        for g in n["gpus"]:
            shown += 1
            if shown > REPORT_GPUS:
                continue
            used, total = g.get("mem_used_gb") or 0.0, g.get("mem_total_gb") or 0.0
            gpus.add_row(n["name"], str(g["index"]), g.get("name") or "", f"{g.get('util_pct') or 0:.0f}%",
                         f"{used:.1f}/{total:.1f} GB", Text(GPU_WORD[g["state"]], GPU_STYLE[g["state"]]),
                         g.get("job") or "-", ",".join(g.get("users") or []) or "-")
    if shown > REPORT_GPUS:
        gpus.add_row(f"{shown - REPORT_GPUS:,} more", "", "", "", "", "", "", "")
    return gpus


def run(board, *, interval_s: float = 2.0, once: bool = False, console=None) -> None:
    """Interactive on a terminal (until q, Ctrl-C or SIGTERM: top_term.live); with `once`, or when the
    console is not a terminal (piped, redirected), one report, plain text."""
    from rich.console import Console

    console = console or Console()
    isatty = getattr(console.file, "isatty", None)
    if once or not (console.is_terminal and isatty and isatty()):
        console.print(frame(board))
        return
    from .top_term import live

    live(board, console, interval_s=interval_s)
