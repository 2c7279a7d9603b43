"""`dispatch top`'s lists: the rows of the jobs, GPUs and users panes from what the board read,
filtered and sorted as the view state says, and drawn as lines of a given width. Pure: no I/O.

`data` is what top.gather() read: {"overview": Board.overview(), "pending": and "running":
Board.queue_page(...) of the state's class}.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text

from ..core.units import age
from .top_report import GPU_WORD

CLASS_STYLE = {"critical": "bold red", "high": "bold dark_orange", "normal": "bold blue", "low": "bold grey50"}
CLASS_RANK = {"critical": 0, "high": 1, "normal": 2, "low": 3}
GPU_STYLE = {"free": "green", "held": "bold cyan", "blocked": "bold yellow", "drained": "grey50", "dead": "red"}


@dataclass(frozen=True)
class Column:
    title: str
    right: bool = False
    cap: int = 24  #: the widest it grows (its cells are cut with an ellipsis)
    flex: bool = False  #: takes the width the others leave (the last column)


def meter(fraction: float, width: int, label: str) -> Text:
    """An htop bar: `[|||||     45%]`, `width` cells in all, the bar green, yellow past half, red past 80%."""
    inner = max(1, width - 2)
    fraction = max(0.0, min(1.0, fraction))
    bars = "|" * round(fraction * inner)
    label = label[:inner]
    body = (bars + " " * inner)[:inner - len(label)]
    style = "green" if fraction < 0.5 else "yellow" if fraction < 0.8 else "red"
    return Text.assemble("[", (body, style), (label, "bold"), "]")


def _num(x) -> float:
    return float(x) if isinstance(x, (int, float)) else 0.0


# -- jobs ------------------------------------------------------------------------------------------
JOB_COLUMNS = (Column("ID", cap=12), Column("STATE", cap=10), Column("CLASS", cap=8), Column("USER", cap=12),
               Column("GPUS", right=True, cap=4), Column("TIME", right=True, cap=8), Column("NAME", cap=20),
               Column("NODE:GPUS / WHY", flex=True))
#: Each ends with (pending first, the longest wait or run first, the order the board listed them).
JOB_SORTS = {
    "wait": lambda r: (r["state"] != "pending", -r["secs"], r["seq"]),
    "gpus": lambda r: (-r["gpus"], r["state"] != "pending", -r["secs"], r["seq"]),
    "user": lambda r: (r["user"], r["state"] != "pending", -r["secs"], r["seq"]),
    "class": lambda r: (CLASS_RANK.get(r["class"], 9), r["state"] != "pending", -r["secs"], r["seq"]),
}


def job_rows(data: dict) -> list[dict]:
    """The pending jobs loaded (wait: since submitted) and the running ones (time: since started)."""
    rows = []
    for kind, secs in (("pending", "wait_s"), ("running", "run_s")):
        for j in data[kind]["jobs"]:
            where = (f"{j['node']}:{','.join(map(str, j['gpus']))}" if j.get("node") else "-") \
                if kind == "running" else (j.get("reason") or "no reason recorded yet")
            rows.append({"seq": len(rows), "id": j["id"], "state": j["state"], "class": j["priority"],
                         "user": j["user"], "team": j.get("team") or "", "name": j["name"] or "-", "gpus": j["gpus_requested"],
                         "secs": _num(j.get(secs)), "where": where, "node": j.get("node") or "",
                         "search": " ".join((j["id"], j["user"], j.get("team") or "", j["name"] or "",
                                             j.get("node") or "")).lower()})
    return rows


def _job_cells(r: dict) -> list:
    return [r["id"], r["state"], Text(r["class"], CLASS_STYLE.get(r["class"], "")), r["user"], str(r["gpus"]),
            age(r["secs"]), r["name"], r["where"]]


# -- GPUs ------------------------------------------------------------------------------------------
GPU_COLUMNS = (Column("NODE", cap=14), Column("GPU", right=True, cap=3), Column("MODEL", cap=12),
               Column("UTIL", cap=14), Column("MEMORY", cap=16), Column("STATE", cap=6), Column("JOB", cap=16),
               Column("USER", flex=True))
GPU_SORTS = {
    "node": lambda r: (r["node"], r["index"]),
    "util": lambda r: (-r["util"], r["node"], r["index"]),
    "memory": lambda r: (-r["mem_used"], r["node"], r["index"]),
    "user": lambda r: (r["user"] == "", r["user"], r["node"], r["index"]),
}


def gpu_rows(data: dict, klass: str = "") -> list[dict]:
    """A row per GPU of every node. With a class filter, the GPUs held by the running jobs of that class
    (the running page was read for it)."""
    of_class = {j["id"] for j in data["running"]["jobs"]}
    rows = []
    for n in data["overview"]["nodes"]:
        for g in n["gpus"]:
            jobs = (g.get("job") or "").split(",") if g.get("job") else []
            if klass and not of_class.intersection(jobs):
                continue
            user = ",".join(g.get("users") or [])
            rows.append({"node": n["name"], "index": g["index"], "model": g.get("name") or "",
                         "util": _num(g.get("util_pct")), "mem_used": _num(g.get("mem_used_gb")),
                         "mem_total": _num(g.get("mem_total_gb")), "state": g["state"], "job": g.get("job") or "",
                         "user": user, "search": " ".join((n["name"], g.get("name") or "", g.get("job") or "",
                                                           user, GPU_WORD.get(g["state"], ""))).lower()})
    return rows


def _gpu_cells(r: dict) -> list:
    mem = f"{r['mem_used']:.0f}/{r['mem_total']:.0f}G"
    return [r["node"], str(r["index"]), r["model"], meter(r["util"] / 100, 14, f"{r['util']:.0f}%"),
            meter(r["mem_used"] / r["mem_total"] if r["mem_total"] else 0.0, 16, mem),
            Text(GPU_WORD.get(r["state"], r["state"]), GPU_STYLE.get(r["state"], "")), r["job"] or "-",
            r["user"] or "-"]


# -- users -----------------------------------------------------------------------------------------
USER_COLUMNS = (Column("USER", cap=14), Column("TEAM", cap=12), Column("GPUS", right=True, cap=5),
                Column("CPUS", right=True, cap=5), Column("RUN", right=True, cap=5),
                Column("PEND", right=True, cap=7), Column("FAIR", right=True, cap=6),
                Column("DOMINANT SHARE", flex=True))
USER_SORTS = {
    "share": lambda r: (-r["share"], r["user"]),
    "gpus": lambda r: (-r["gpus"], r["user"]),
    "pending": lambda r: (-r["pending"], r["user"]),
    "user": lambda r: (r["user"],),
}


def user_rows(data: dict) -> list[dict]:
    return [{**u, "search": f"{u['user']} {u.get('team') or ''}".lower()} for u in data["overview"]["usage"]["users"]]


def _user_cells(r: dict) -> list:
    return [r["user"], r.get("team") or "-", str(r["gpus"]), str(r.get("cpus", 0)), str(r["running"]),
            f"{r['pending']:,}", f"{100 * r['fair_share']:.0f}%", f"{100 * r['share']:.1f}%"]


PANE = {"jobs": (job_rows, JOB_SORTS, JOB_COLUMNS, _job_cells),
        "gpus": (gpu_rows, GPU_SORTS, GPU_COLUMNS, _gpu_cells),
        "users": (user_rows, USER_SORTS, USER_COLUMNS, _user_cells)}


def pane_rows(data: dict, state) -> list[dict]:
    """The current pane's rows: filtered (text, and class where it applies) and sorted as `state` says."""
    build, sorts = PANE[state.pane][:2]
    rows = build(data, state.klass) if state.pane == "gpus" else build(data)
    needle = state.filter.lower()
    if needle:
        rows = [r for r in rows if needle in r["search"]]
    return sorted(rows, key=sorts[state.sort], reverse=state.reversed)


def _fit(cell, width: int, right: bool) -> Text:
    t = cell.copy() if isinstance(cell, Text) else Text(str(cell))
    t.truncate(width, overflow="ellipsis")
    return Text(" " * (width - t.cell_len)) + t if right else t + Text(" " * (width - t.cell_len))


def table(pane: str, rows: list[dict], width: int) -> tuple[Text, list[Text]]:
    """The pane's header line and a line per row, `width` cells at most. Column widths come from the
    rows given (at most each column's cap); the flexible last column takes what is left; a share
    column that is left flexible is drawn as a bar."""
    columns, cells_of = PANE[pane][2], PANE[pane][3]
    cells = [cells_of(r) for r in rows]
    widths = [max([len(c.title)] + [Text(x).cell_len if isinstance(x, str) else x.cell_len for x in col])
              if not c.flex else 0 for c, col in zip(columns, zip(*cells) if cells else [[]] * len(columns))]
    widths = [min(w, c.cap) for w, c in zip(widths, columns)]
    flex = max(0, width - sum(widths) - (len(columns) - 1))
    widths = [flex if c.flex else w for w, c in zip(widths, columns)]
    head = Text(" ").join(_fit(c.title, w, c.right) for c, w in zip(columns, widths))
    head.stylize("reverse")
    lines = []
    for r, row in zip(rows, cells):
        if pane == "users" and flex >= 8:
            row = row[:-1] + [meter(r["share"], flex, row[-1])]
        lines.append(Text(" ").join(_fit(x, w, c.right) for x, w, c in zip(row, widths, columns)))
    for line in [head] + lines:
        line.truncate(width)
    return head, lines
