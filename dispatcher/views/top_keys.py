"""`dispatch top`'s keys: the bytes a terminal sends, decoded to key names, and the view state they
drive. Both are pure (no terminal, no clock): `decode(bytes) -> [key]` and `press(state, key) ->
state`. top_term.py reads the terminal and draws; top.py and top_panes.py turn a state into a frame.

Key names: a printable character stands for itself ("q", "/", "a"); the others are "up", "down",
"left", "right", "pgup", "pgdn", "home", "end", "tab", "backtab", "enter", "esc", "backspace",
"ctrl-c", "ctrl-u", "f1", "f3", "f4", "f6", "f10". Unknown escape sequences and control bytes are
dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

#: The panes, in Tab order.
PANES = ("jobs", "gpus", "users")
#: Each pane's sorts, in the order `s` cycles them; the first is the default.
SORTS = {"jobs": ("wait", "gpus", "user", "class"),
         "gpus": ("node", "util", "memory", "user"),
         "users": ("share", "gpus", "pending", "user")}
#: The class filter, in the order `c` cycles it ("" = every class).
CLASSES = ("", "critical", "high", "normal", "low")

#: Every binding, as the help pane and docs/dashboard.md list them.
HELP = (
    ("q  F10  Ctrl-C", "quit"),
    ("?  h  F1", "this help (any key closes it)"),
    ("Tab  Right", "next pane: jobs, GPUs, users (Shift-Tab, Left: back; 1 2 3: that pane)"),
    ("s  F6", "next sort: jobs by wait, GPUs, user, class; GPUs by node, util, memory, user; "
              "users by share, GPUs, pending, user"),
    ("r", "reverse the sort"),
    ("/  F3  F4", "filter: type a user, name, job id, node or team; Enter applies, Esc clears"),
    ("c", "next class filter: all, critical, high, normal, low (jobs, and the GPUs their jobs hold)"),
    ("Esc", "clear the filter and the class filter"),
    ("Up  Down  k  j", "scroll a row"),
    ("PgUp  PgDn  Space", "scroll a page"),
    ("Home  End  g  G", "the first rows, the last rows"),
)

_SEQUENCES = {
    b"[A": "up", b"[B": "down", b"[C": "right", b"[D": "left", b"OA": "up", b"OB": "down", b"OC": "right",
    b"OD": "left", b"[5~": "pgup", b"[6~": "pgdn", b"[H": "home", b"[F": "end", b"OH": "home", b"OF": "end",
    b"[1~": "home", b"[4~": "end", b"[7~": "home", b"[8~": "end", b"[Z": "backtab", b"OP": "f1", b"[11~": "f1",
    b"OR": "f3", b"[13~": "f3", b"OS": "f4", b"[14~": "f4", b"[17~": "f6", b"[21~": "f10",
}
_CONTROL = {0x09: "tab", 0x0d: "enter", 0x0a: "enter", 0x7f: "backspace", 0x08: "backspace", 0x03: "ctrl-c",
            0x15: "ctrl-u"}


def decode(data: bytes) -> list[str]:
    """The keys in one read from the terminal. An ESC that ends the read, or that no `[` or `O`
    follows, is the Esc key; a CSI or SS3 sequence is one key (or none, if unknown)."""
    keys, i = [], 0
    while i < len(data):
        b = data[i]
        if b == 0x1b:
            if i + 1 >= len(data) or data[i + 1] not in b"[O":
                keys.append("esc")
                i += 1
                continue
            if data[i + 1] == ord("O"):
                end = i + 3
            else:
                end = i + 2
                while end < len(data) and not 0x40 <= data[end] <= 0x7e:
                    end += 1
                end += 1
            name = _SEQUENCES.get(bytes(data[i + 1:end]))
            if name:
                keys.append(name)
            i = end
        elif b < 0x20 or b == 0x7f:
            if b in _CONTROL:
                keys.append(_CONTROL[b])
            i += 1
        else:
            size = 1 if b < 0x80 else 2 if b >> 5 == 0b110 else 3 if b >> 4 == 0b1110 else 4
            char = data[i:i + size].decode("utf-8", errors="ignore")
            if char.isprintable():
                keys.append(char)
            i += size
    return keys


@dataclass(frozen=True)
class ViewState:
    """What `dispatch top` shows. `rows` (list rows that fit) and `total` (rows the pane holds after
    its filters) are the last frame's, set by fit(); the scroll keys move within them."""

    pane: str = "jobs"
    sorts: tuple[str, ...] = tuple(SORTS[p][0] for p in PANES)  #: one per pane, in PANES order
    reverse: tuple[bool, ...] = (False,) * len(PANES)
    offsets: tuple[int, ...] = (0,) * len(PANES)  #: the first row shown, per pane
    filter: str = ""  #: the applied text filter ("" = none)
    draft: str | None = None  #: the filter being typed; None when not typing
    klass: str = ""  #: the class filter ("" = every class)
    help: bool = False
    quit: bool = False
    rows: int = 1
    total: int = 0

    @property
    def sort(self) -> str:
        return self.sorts[PANES.index(self.pane)]

    @property
    def reversed(self) -> bool:
        return self.reverse[PANES.index(self.pane)]

    @property
    def offset(self) -> int:
        return self.offsets[PANES.index(self.pane)]


def _set(values: tuple, pane: str, value) -> tuple:
    i = PANES.index(pane)
    return values[:i] + (value,) + values[i + 1:]


def _scroll(state: ViewState, to: int) -> ViewState:
    last = max(0, state.total - state.rows)
    return replace(state, offsets=_set(state.offsets, state.pane, max(0, min(to, last))))


def fit(state: ViewState, total: int, rows: int) -> ViewState:
    """The state as a frame of `rows` list rows, showing a pane of `total` rows, leaves it: the
    offset kept within the rows (the last page at most)."""
    return _scroll(replace(state, total=max(0, total), rows=max(1, rows)), state.offset)


def _filtered(state: ViewState, **changes) -> ViewState:
    """A new filter: every pane back at its first row."""
    return replace(state, offsets=(0,) * len(PANES), **changes)


def _typing(state: ViewState, key: str) -> ViewState:
    if key == "enter":
        return _filtered(state, filter=state.draft.strip(), draft=None)
    if key == "esc":
        return _filtered(state, filter="", draft=None)
    if key == "ctrl-c":
        return replace(state, quit=True)
    if key == "backspace":
        return replace(state, draft=state.draft[:-1])
    if key == "ctrl-u":
        return replace(state, draft="")
    if len(key) == 1:
        return replace(state, draft=state.draft + key)
    return state


def press(state: ViewState, key: str) -> ViewState:
    """The state after one key. Pure; unknown keys leave it as it was."""
    if state.draft is not None:
        return _typing(state, key)
    if key in ("q", "f10", "ctrl-c"):
        return replace(state, quit=True, help=False)
    if state.help:
        return replace(state, help=False)
    pane = PANES.index(state.pane)
    if key in ("?", "h", "f1"):
        return replace(state, help=True)
    if key in ("tab", "right", "backtab", "left"):
        step = 1 if key in ("tab", "right") else -1
        return replace(state, pane=PANES[(pane + step) % len(PANES)])
    if key in ("1", "2", "3"):
        return replace(state, pane=PANES[int(key) - 1])
    if key in ("s", "f6"):
        order = SORTS[state.pane]
        nxt = order[(order.index(state.sort) + 1) % len(order)]
        return replace(state, sorts=_set(state.sorts, state.pane, nxt), offsets=_set(state.offsets, state.pane, 0))
    if key == "r":
        return replace(state, reverse=_set(state.reverse, state.pane, not state.reversed),
                       offsets=_set(state.offsets, state.pane, 0))
    if key in ("/", "f3", "f4"):
        return replace(state, draft=state.filter)
    if key == "c":
        return _filtered(state, klass=CLASSES[(CLASSES.index(state.klass) + 1) % len(CLASSES)])
    if key == "esc":
        return _filtered(state, filter="", klass="")
    moves = {"up": -1, "k": -1, "down": 1, "j": 1, "pgup": -state.rows, "pgdn": state.rows, " ": state.rows}
    if key in moves:
        return _scroll(state, state.offset + moves[key])
    if key in ("home", "g"):
        return _scroll(state, 0)
    if key in ("end", "G"):
        return _scroll(state, state.total)
    return state
