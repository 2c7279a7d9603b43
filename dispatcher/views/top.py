"""`dispatch top`: the dashboard's essentials in a terminal, from the same Board, as nvtop and htop
show a machine. On a terminal it is interactive (top_term.py reads the keys, top_keys.py is their
state machine, top_screen.py its frame, top_panes.py the lists); `--once`, piped or redirected, it
prints one report in plain text (top_report.py) and imports no terminal library."""

from __future__ import annotations

import shutil
import sys

from .top_report import report


def run(board, *, interval_s: float = 2.0, once: bool = False, out=None) -> None:
    """Interactive on a terminal (until q, Ctrl-C or SIGTERM: top_term.live); with `once`, or when
    `out` (standard output by default) is not a terminal (piped, redirected), one report, as wide as
    the terminal ($COLUMNS, else 80)."""
    out = out if out is not None else sys.stdout
    isatty = getattr(out, "isatty", None)
    if once or not (isatty and isatty()):
        width = shutil.get_terminal_size((80, 24)).columns
        out.write(report(board.overview(), board.queue_page("pending", "", 0, 12), width))
        out.flush()
        return
    from rich.console import Console

    from .top_term import live

    live(board, Console(file=out), interval_s=interval_s)
