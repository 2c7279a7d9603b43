"""`dispatch top`'s interactive frame: what one screen holds at the terminal's size, from what the
board read (gather) and the view state (top_keys.py). Pure but for gather's reads."""

from __future__ import annotations

from rich.text import Text

from ..core.units import age
from .top_keys import HELP, PANES, fit
from .top_panes import CLASS_STYLE, GPU_STYLE, meter, pane_rows, table
from .top_report import node_word, stale_words

#: Pending and running jobs `top` reads for its jobs list (each, the oldest; Board.queue_page's most).
LOADED = 200


def gather(board, klass: str = "") -> dict:
    """What one screen shows: the overview, and the oldest pending and running jobs (of `klass`)."""
    return {"overview": board.overview(), "klass": klass, "pending": board.queue_page("pending", klass, 0, LOADED),
            "running": board.queue_page("running", klass, 0, LOADED)}


def _header(b: dict) -> list[Text]:
    t, s = b["totals"], b["scheduler"]
    pct = round(100 * t["held"] / t["gpus"]) if t["gpus"] else 0
    first = Text.assemble(
        (f"{b['namespace']}  ", "bold"),
        f"nodes {t['nodes'] - t['nodes_dead']}/{t['nodes']} up  GPUs {t['held']}/{t['gpus']} held ({pct}%)  "
        f"util {t['util_pct']:.0f}%  frag {100 * t['frag']:.0f}%  ",
        ("no scheduler has run", "grey50") if s["age_s"] is None else (stale_words(s), "bold red") if s.get("stale")
        else (f"scheduler {age(s['age_s'])} ago", "grey50"))
    second = Text(f"pending {t['pending']:,}  running {t['running']:,}  by class:")
    for c in b["classes"]:
        second.append(f" {c['class']} ", CLASS_STYLE[c["class"]])
        second.append(f"{c['pending']:,}/{c['running']} ")
    return [first, second]


def _node_line(n: dict, width: int) -> Text:
    """A node in one line: its GPUs as cells (# held, . free, - drained, Z zombie, x dead), mean utilization
    and memory as bars."""
    gpus = n["gpus"]
    line = Text(f"{n['name'][:14]:<14} ", "bold" if n["alive"] else "bold red")
    word = node_word(n)
    line.append(f"{word:<9}", {"up": "green", "DEAD": "bold red"}.get(word, "bold yellow"))
    for g in gpus:
        line.append({"held": "#", "free": ".", "drained": "-", "blocked": "Z", "dead": "x"}[g["state"]],
                    GPU_STYLE[g["state"]])
    util = sum(g.get("util_pct") or 0 for g in gpus) / len(gpus) if gpus else 0.0
    used, total = (sum(g.get(k) or 0.0 for g in gpus) for k in ("mem_used_gb", "mem_total_gb"))
    bar = max(8, min(24, (width - line.cell_len - 14) // 2))
    line.append(" util ")
    line.append_text(meter(util / 100, bar, f"{util:.0f}%"))
    line.append(" mem ")
    line.append_text(meter(used / total if total else 0.0, bar, f"{used:.0f}/{total:.0f}G"))
    return line


def _tabs(state, data: dict, total: int) -> Text:
    line = Text()
    for p in PANES:
        line.append(f" {'GPUs' if p == 'gpus' else p.capitalize()} ", "reverse bold" if p == state.pane else "")
    line.append(f" {total:,} rows  sort {state.sort}{' (reversed)' if state.reversed else ''}")
    if state.filter:
        line.append(f"  filter '{state.filter}'", "bold yellow")
    if state.klass:
        line.append(f"  class {state.klass}", CLASS_STYLE[state.klass])
    p = data["pending"]
    if state.pane == "jobs" and p["total"] > p["listed"]:
        line.append(f"  (the {p['listed']:,} oldest of {p['total']:,} pending)", "grey50")
    return line


def _footer(state) -> Text:
    if state.draft is not None:
        return Text.assemble(("filter: ", "bold"), (state.draft + "_", "bold yellow"),
                             "   Enter apply  Esc clear")
    keys = (("q", "quit"), ("?", "help"), ("Tab", "pane"), ("s", "sort"), ("/", "filter"), ("c", "class"),
            ("Esc", "clear"), ("PgDn", "scroll"), ("r", "reverse"))
    line = Text()
    for k, what in keys:
        line.append(k, "reverse bold")
        line.append(f" {what} ")
    return line


def screen(data: dict, state, width: int, height: int) -> tuple[list[Text], object]:
    """The interactive frame: exactly `height` lines, each exactly `width` cells (padded, or cut: a
    small terminal loses the lower parts first, the keys line last); and the state, fitted to the rows
    the list got. Top to bottom: totals, data["error"] if any, alerts, a line per node (not in the GPUs
    pane), the pane's tabs, its list with an "N more" line when it does not fit, the keys."""
    b = data["overview"]
    width, height = max(1, width), max(1, height)
    head = _header(b)
    rows = pane_rows(data, state)
    room = height - len(head) - 3  # tabs, the list's header, the keys
    alerts = [Text(f"{a['kind']}: {a['message']}", "red") for a in b["alerts"]]
    if len(alerts) > 2:
        alerts = alerts[:1] + [Text(f"{len(b['alerts']) - 1} more alerts", "red")]
    if data.get("error"):
        alerts.insert(0, Text(data["error"], "bold red"))
    alerts = alerts[:max(0, min(len(alerts), room // 4))]
    room -= len(alerts)
    nodes = []
    if state.pane != "gpus":
        nodes = [_node_line(n, width) for n in b["nodes"]]
        keep = max(0, room // 3)
        if len(nodes) > keep:
            more = f"{len(b['nodes']) - keep + 1:,} {'more ' if keep > 1 else ''}nodes: Tab to the GPUs pane"
            nodes = nodes[:max(0, keep - 1)] + ([Text(more, "grey50")] if keep else [])
    room -= len(nodes)
    visible = room if len(rows) <= room else max(1, room - 1)
    state = fit(state, len(rows), visible)
    if state.help:
        body = [Text.assemble((f" {k:<18}", "bold"), what) for k, what in HELP]
        colhead, listed = Text(" keys", "reverse bold"), body[:max(0, room)]
    else:
        colhead, listed = table(state.pane, rows[state.offset:state.offset + visible], width)
        if len(rows) > visible:
            above, below = state.offset, len(rows) - state.offset - visible
            more = ", ".join(([f"{below:,} more below"] if below else []) + ([f"{above:,} above"] if above else []))
            listed.append(Text(f"  {more} (rows {state.offset + 1:,}-{state.offset + len(listed):,} of "
                               f"{len(rows):,})", "grey50"))
    colhead.pad_right(width - colhead.cell_len)
    lines = head + alerts + nodes + [_tabs(state, data, len(rows)), colhead] + listed
    lines = lines[:height - 1]
    lines += [Text("")] * (height - 1 - len(lines)) + [_footer(state)]
    for line in lines:  # each as wide as the screen: it overwrites the last frame's line whole
        line.truncate(width, pad=True)
    return lines[-height:] if len(lines) > height else lines, state
