"""`dispatch top`, pure: the bytes a terminal sends decoded to keys, the keys' state machine, and the
frame a state draws from a board's read, sized to the terminal (no terminal, no Redis)."""

from __future__ import annotations

import pytest

from dispatcher.views.top_screen import screen
from dispatcher.views.top_keys import HELP, ViewState, decode, fit, press
from dispatcher.views.top_panes import pane_rows


def keys(state: ViewState, *names: str) -> ViewState:
    for k in names:
        state = press(state, k)
    return state


def typed(text: str) -> list[str]:
    return list(text)


# -- decoding ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("data, want", [
    (b"q", ["q"]),
    (b"\x1b[A\x1b[B\x1b[5~\x1b[6~", ["up", "down", "pgup", "pgdn"]),
    (b"\x1b[H\x1b[F\x1bOH\x1bOF\x1b[1~\x1b[4~", ["home", "end", "home", "end", "home", "end"]),
    (b"\t\x1b[Z\r\n", ["tab", "backtab", "enter", "enter"]),
    (b"\x1b", ["esc"]),
    (b"\x1bq", ["esc", "q"]),
    (b"/al\x7fice\r", ["/", "a", "l", "backspace", "i", "c", "e", "enter"]),
    (b"\x1b[17~\x1bOP\x1b[21~", ["f6", "f1", "f10"]),
    (b"\x1b[99;5~x", ["x"]),  # an unknown sequence is dropped, not read as keys
    (b"\x03\x15\x01", ["ctrl-c", "ctrl-u"]),
    ("é".encode(), ["é"]),
], ids=["char", "arrows-pages", "home-end", "tab-enter", "lone-esc", "esc-then-key", "typing", "f-keys",
        "unknown-sequence", "controls", "utf8"])
def test_terminal_bytes_decode_to_key_names(data, want):
    assert decode(data) == want


# -- the state machine -------------------------------------------------------------------------------
def test_a_filter_is_typed_applied_with_enter_and_cleared_with_esc():
    s = keys(ViewState(), "/", *typed("alicx"), "backspace", "e")
    assert (s.draft, s.filter) == ("alice", ""), s
    s = press(s, "q")  # while typing, q is a letter
    assert not s.quit and s.draft == "aliceq"
    s = keys(s, "backspace", "enter")
    assert (s.draft, s.filter) == (None, "alice")
    s = keys(s, "/", "ctrl-u", *typed("bob"), "esc")
    assert (s.draft, s.filter) == (None, ""), s
    s = keys(s, "/", *typed("  node-1 "), "enter")
    assert s.filter == "node-1"
    assert press(s, "esc").filter == ""


def test_s_cycles_each_panes_sort_and_r_reverses_it():
    s = ViewState()
    assert [keys(s, *["s"] * n).sort for n in range(5)] == ["wait", "gpus", "user", "class", "wait"]
    s = keys(s, "s", "tab")
    assert (s.pane, s.sort) == ("gpus", "node")
    s = keys(s, "f6", "f6")
    assert s.sort == "memory" and keys(s, "backtab").sort == "gpus"  # the jobs pane kept its own
    assert keys(s, "r").reversed and not keys(s, "r", "r").reversed
    s = keys(ViewState(), "tab", "tab")
    assert (s.pane, [keys(s, *["s"] * n).sort for n in range(4)]) == ("users", ["share", "gpus", "pending", "user"])


def test_tab_and_the_digits_switch_panes():
    assert [keys(ViewState(), *["tab"] * n).pane for n in range(4)] == ["jobs", "gpus", "users", "jobs"]
    assert keys(ViewState(), "backtab").pane == "users"
    assert keys(ViewState(), "left").pane == "users" and keys(ViewState(), "right").pane == "gpus"
    assert keys(ViewState(), "3").pane == "users" and keys(ViewState(), "3", "1").pane == "jobs"


def test_c_cycles_the_class_filter_and_esc_clears_both_filters():
    s = ViewState()
    assert [keys(s, *["c"] * n).klass for n in range(6)] == ["", "critical", "high", "normal", "low", ""]
    s = keys(s, "c", "/", "x", "enter", "esc")
    assert (s.klass, s.filter) == ("", "")


def test_scrolling_stays_within_the_rows_and_a_new_filter_starts_at_the_top():
    s = fit(ViewState(), total=50, rows=10)
    assert keys(s, "up").offset == 0
    assert keys(s, "down", "down", "j").offset == 3 and keys(s, "down", "k").offset == 0
    assert keys(s, "pgdn").offset == 10 and keys(s, "pgdn", "pgdn", "pgup").offset == 10
    assert keys(s, "end").offset == 40 and keys(s, "end", "down", "pgdn").offset == 40  # the last page
    assert keys(s, "end", "home").offset == 0 and keys(s, "G", "g").offset == 0
    assert fit(keys(s, "end"), total=45, rows=10).offset == 35  # fewer rows now: the last page still
    assert fit(keys(s, "end"), total=5, rows=10).offset == 0
    assert keys(s, "end", "/", "a", "enter").offset == 0 and keys(s, "end", "c").offset == 0
    assert keys(s, "pgdn", "tab").offset == 0 and keys(s, "pgdn", "tab", "tab", "tab").offset == 10  # per pane


def test_q_quits_help_opens_and_any_key_closes_it():
    assert press(ViewState(), "q").quit and press(ViewState(), "f10").quit and press(ViewState(), "ctrl-c").quit
    s = press(ViewState(), "?")
    assert s.help and not press(s, "x").help and not press(s, "x").quit
    assert press(s, "q").quit
    assert press(ViewState(), "Z") == ViewState()  # an unbound key changes nothing


# -- frames from a board's read ----------------------------------------------------------------------
def job(i: int, user: str, state: str, cls: str, gpus: int, secs: float, node: str | None = None) -> dict:
    return {"id": f"j{i:03d}", "name": f"train-{i}", "state": state, "user": user, "team": "vision",
            "priority": cls, "gpus_requested": gpus, "node": node, "gpus": [0] if node else [],
            "reason": "needs 4 GPUs; best node n1 has 2 free", "wait_s": secs, "run_s": secs}


def board_read(n_pending: int = 30, n_nodes: int = 3, alerts: int = 3) -> dict:
    users = ("alice", "bob", "carol")
    classes = ("critical", "high", "normal", "low")
    pending = [job(i, users[i % 3], "pending", classes[i % 4], 1 + i % 4, 100.0 * i) for i in range(n_pending)]
    running = [job(100 + i, users[i % 3], "running", classes[i % 4], 1, 60.0 * i, node=f"gpu-{i % n_nodes:02d}")
               for i in range(n_nodes)]
    nodes = [{"name": f"gpu-{n:02d}", "alive": n != 1, "seen_s_ago": 1.0, "cpus": 32, "mem_gb": 256, "drain": None,
              "gpus": [{"index": g, "name": "A100-80GB", "util_pct": 30.0 * g, "mem_used_gb": 20.0 * g,
                        "mem_total_gb": 80.0, "job": f"j{100 + n}" if g == 0 else None,
                        "users": [users[n % 3]] if g == 0 else [],
                        "state": "dead" if n == 1 else "held" if g == 0 else "blocked" if g == 3 else "free"}
                       for g in range(4)]} for n in range(n_nodes)]
    overview = {
        "namespace": "lab", "totals": {"nodes": n_nodes, "nodes_dead": 1, "gpus": 4 * n_nodes, "held": n_nodes,
                                       "util_pct": 45.0, "frag": 0.25, "pending": n_pending, "running": n_nodes},
        "scheduler": {"holder": "host-1", "age_s": 1.5, "cycle_ms": 2.0},
        "classes": [{"class": c, "pending": 3, "running": 1} for c in classes],
        "alerts": [{"kind": "dead_node", "message": f"node gpu-{i:02d} silent for 2m"} for i in range(alerts)],
        "nodes": nodes,
        "usage": {"users": [{"user": u, "team": "vision", "gpus": i, "cpus": 4 * i, "running": i, "pending": 2,
                             "share": 0.1 * i, "fair_share": 1 / 3} for i, u in enumerate(users)]},
    }
    return {"overview": overview, "klass": "",
            "pending": {"total": 10_000, "listed": n_pending, "jobs": pending},
            "running": {"total": n_nodes, "listed": n_nodes, "jobs": running}}


def plain(lines) -> list[str]:
    return [line.plain for line in lines]


@pytest.mark.parametrize("width, height", [(80, 24), (40, 10), (200, 60), (20, 5), (80, 3), (120, 40), (1, 1),
                                           (9, 2), (12, 6)])
def test_the_frame_fits_the_terminal_in_every_pane_and_in_help(width, height):
    data = board_read()
    for state in (ViewState(), keys(ViewState(), "tab"), keys(ViewState(), "tab", "tab"), press(ViewState(), "?"),
                  keys(ViewState(), "/", "ali")):
        lines, fitted = screen(data, state, width, height)
        assert len(lines) == height, (state.pane, len(lines), plain(lines))
        wide = [line for line in lines if line.cell_len != width]
        assert not wide, plain(wide)


def test_a_list_longer_than_the_screen_says_how_many_more_and_scrolls():
    data = board_read(n_pending=30)
    lines, state = screen(data, ViewState(), 100, 24)
    text = "\n".join(plain(lines))
    assert state.total == 33 and state.rows < 33, state
    assert f"{33 - state.rows} more below (rows 1-{state.rows} of 33)" in text, text
    assert "the 30 oldest of 10,000 pending" in text
    lines, state = screen(data, press(state, "end"), 100, 24)
    text = "\n".join(plain(lines))
    assert f"{33 - state.rows} above (rows {34 - state.rows}-33 of 33)" in text and "below" not in text, text
    assert "j102" in text  # the last row: the youngest running job


def test_the_filter_sort_and_class_choose_the_rows():
    data = board_read()
    rows = pane_rows(data, keys(ViewState(), "/", *typed("BOB"), "enter"))
    assert rows and {r["user"] for r in rows} == {"bob"}
    rows = pane_rows(data, keys(ViewState(), "s"))  # by GPUs asked
    assert [r["gpus"] for r in rows] == sorted((r["gpus"] for r in rows), reverse=True)
    rows = pane_rows(data, keys(ViewState(), "s", "s", "s"))  # by class
    assert rows[0]["class"] == "critical" and rows[-1]["class"] == "low"
    rows = pane_rows(data, ViewState())  # by wait: pending longest first, then running
    assert rows[0]["id"] == "j029" and rows[-1]["state"] == "running"
    gpus = pane_rows(data, keys(ViewState(), "tab", "s"))  # by utilization
    assert [g["util"] for g in gpus][:3] == [90.0, 90.0, 90.0]
    gpus = pane_rows(data, keys(ViewState(), "tab", "/", *typed("zombie"), "enter"))
    assert {(g["node"], g["index"]) for g in gpus} == {("gpu-00", 3), ("gpu-02", 3)}
    users = pane_rows(data, keys(ViewState(), "tab", "tab"))
    assert [u["user"] for u in users] == ["carol", "bob", "alice"]


def test_the_gpus_pane_shows_utilization_memory_job_and_user_per_gpu():
    lines, _ = screen(board_read(), keys(ViewState(), "tab"), 120, 30)
    text = "\n".join(plain(lines))
    assert "UTIL" in text and "MEMORY" in text and "60/80G" in text and "90%" in text, text
    row = next(line for line in plain(lines) if line.startswith("gpu-00") and " 0 " in line)
    assert "j100" in row and "alice" in row and "held" in row, row
    assert "zombie" in text and "dead" in text


def test_help_lists_every_binding():
    lines, _ = screen(board_read(), press(ViewState(), "?"), 140, 40)
    text = "\n".join(plain(lines))
    for k, what in HELP:
        assert k in text and what[:30] in text, k
