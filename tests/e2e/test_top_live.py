"""`dispatch top` as an operator runs it: on a real PTY (its controlling terminal, so that a resize
and Ctrl-C reach it as signals), against a live scheduler and fake-GPU agents. The test types keys
(filter by a user, sort, scroll, switch panes, resize, q) and reads the screen: the latest whole
frame `top` drew (each starts at the top left, ESC [ H, and has as many lines as the terminal)."""

from __future__ import annotations

import fcntl
import os
import re
import signal
import struct
import subprocess
import sys
import termios

import pytest

from dispatcher.api import Client
from tests.conftest import Cli

from .test_shell_live import Term

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]")
END, HOME, DOWN = "\x1b[F", "\x1b[H", "\x1b[B"


def _controlling_terminal() -> None:
    """In the child, after setsid: stdin (the PTY) becomes its terminal, and Ctrl-C gets its default
    action back (a suite started in a shell's background runs with SIGINT ignored, which its children
    inherit, and then Python never raises KeyboardInterrupt), as in a user's terminal."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Top(Term):
    """`dispatch top ARGS` on a PTY of its own. The test keeps the PTY's other end open, so that it
    can read the terminal's modes after `top` is gone."""

    def __init__(self, cli, *args, rows: int = 24, cols: int = 80):
        self.master, self.slave = os.openpty()
        self.rows, self.cols = rows, cols
        self.resize(rows, cols)
        env = cli.env(TERM="xterm-256color")
        for k in ("COLUMNS", "LINES"):
            env.pop(k, None)
        self.proc = subprocess.Popen([sys.executable, "-m", "dispatcher", "top", *args], stdin=self.slave,
                                     stdout=self.slave, stderr=self.slave, env=env, start_new_session=True,
                                     preexec_fn=_controlling_terminal)
        cli.procs.append(self.proc)
        self.seen, self.pos = b"", 0

    def resize(self, rows: int, cols: int) -> None:
        self.rows, self.cols = rows, cols
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def frame(self) -> list[str]:
        """The latest frame drawn whole at the current size (lines without their escape codes)."""
        for part in reversed(self.seen.decode(errors="replace").split("\x1b[H")[1:]):
            lines = ANSI.sub("", part).replace("\r\n", "\n").split("\n")
            if len(lines) == self.rows:
                return lines
        return []

    def screen(self, predicate, what: str, timeout: float = 20.0) -> list[str]:
        """The first frame (from now on) of which predicate(text) holds."""
        import time

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lines = self.frame()
            if lines and predicate("\n".join(lines)):
                return lines
            self._more(0.2)
        raise AssertionError(f"the screen never showed {what}; it shows:\n" + "\n".join(self.frame()))

    def modes(self) -> list:
        return termios.tcgetattr(self.slave)

    def exit_code(self, timeout: float = 15.0) -> int:
        """As Term's; the terminal's modes as `top` left them are kept in self.left."""
        try:
            self.proc.wait(timeout)
        finally:
            self.left = self.modes()
        return super().exit_code(timeout=1)

    def close(self) -> None:
        os.close(self.slave)


def rows_of(lines: list[str]) -> list[str]:
    """The list's rows: between its header line (starting ID or NODE) and the "more" line or the end."""
    start = next(i for i, line in enumerate(lines) if re.match(r"(ID|NODE)\s", line)) + 1
    rows = []
    for line in lines[start:-1]:
        if not line.strip() or re.match(r"\s+\d+ (more|above)", line):
            break
        rows.append(line)
    return rows


def fits(t: Top, lines: list[str]) -> None:
    assert len(lines) == t.rows, (len(lines), lines)
    wide = [line for line in lines if len(line) > t.cols]
    assert not wide, wide


@pytest.fixture
def cluster(cli):
    """Two nodes of two fake GPUs, all four held by alice's and bob's jobs; 22 jobs waiting (carol,
    dave, and erin's one of 2 GPUs): (running ids, erin's id)."""
    for name, gpus in (("gpu-01", "2xA100-80GB"), ("gpu-02", "2xA100-40GB")):
        cli.start("worker", "--node", name, "--fake-gpus", gpus, "--work-dir", str(cli.home / name))
    cli.start("scheduler")
    running = [cli.submit("--name", f"run-{u}", "--user", u, "--gpus", str(g), "--", "sleep", "300")
               for u, g in (("alice", 2), ("bob", 1), ("alice", 1))]
    cli.wait_for(lambda: all(cli.show(j)["state"] == "running" for j in running), timeout=30,
                 what="alice's and bob's jobs to run")
    client = Client(cli.url, cli.ns)
    client.submit_many([{"command": ["true"], "gpus": 1, "user": ("carol", "dave")[i % 2], "name": f"wait-{i}"}
                        for i in range(21)])
    (erin,) = client.submit_many([{"command": ["true"], "gpus": 2, "user": "erin", "name": "wide"}])
    return running, erin


def test_top_in_a_terminal_fits_filters_sorts_scrolls_and_switches_panes(cli, cluster):
    running, erin = cluster
    t = Top(cli, "--interval", "0.5s", rows=24, cols=80)
    try:
        lines = t.screen(lambda s: "Jobs" in s and "25 rows" in s and running[0] in s, "the jobs list")
        fits(t, lines)
        text = "\n".join(lines)
        assert re.search(r"\d+ more below \(rows 1-\d+ of 25\)", text), text
        assert "gpu-01" in text and "gpu-02" in text and "util [" in text, text  # a bar per node

        t.type("/carol\r")
        lines = t.screen(lambda s: "filter 'carol'" in s, "the filter applied")
        rows = rows_of(lines)
        assert len(rows) == 11 and all(" carol " in r for r in rows), rows
        assert not re.search(r"\b(dave|alice|bob|erin)\b", "\n".join(rows)), rows

        t.type("\x1b")
        lines = t.screen(lambda s: "filter '" not in s and "25 rows" in s, "the filter cleared")
        t.type("s")
        lines = t.screen(lambda s: "sort gpus" in s, "the jobs sorted by GPUs")
        assert rows_of(lines)[0].startswith(erin), rows_of(lines)  # 2 GPUs, pending: first
        gpus = [int(r.split()[4]) for r in rows_of(lines)]
        assert gpus == sorted(gpus, reverse=True), gpus

        t.type(END)
        lines = t.screen(lambda s: "of 25)" in s and "above" in s, "the last rows")
        fits(t, lines)
        assert "below" not in "\n".join(lines)
        t.type(HOME + DOWN)
        t.screen(lambda s: "(rows 2-" in s, "the list scrolled one row down")

        t.type("\t")
        lines = t.screen(lambda s: "UTIL" in s and "MEMORY" in s, "the GPUs pane")
        gpu_rows = rows_of(lines)
        assert len(gpu_rows) == 4, gpu_rows
        assert any(r.startswith("gpu-01") and running[0] in r and "alice" in r and "held" in r for r in gpu_rows), \
            gpu_rows
        assert all(re.search(r"\[[| ]*\d+%\]", r) and re.search(r"\d+/80G|\d+/40G", r) for r in gpu_rows), gpu_rows

        t.resize(30, 100)
        lines = t.screen(lambda s: len(s.splitlines()) == 30, "the frame redrawn at 30x100", timeout=5)
        fits(t, lines)
        assert any(len(line) > 80 for line in lines), lines

        t.type("q")
        assert t.exit_code() == 0
        assert t.seen.rstrip().endswith(b"\x1b[?1049l"), t.seen[-200:]  # back from the alternate screen
        lflag = t.left[3]
        assert lflag & termios.ECHO and lflag & termios.ICANON, "the terminal was not restored"
    finally:
        t.close()


@pytest.mark.parametrize("stop", ["ctrl-c", "sigterm"])
def test_top_gives_the_terminal_back_on_ctrl_c_and_sigterm(cli, stop):
    t = Top(cli, rows=24, cols=80)
    try:
        t.screen(lambda s: " Jobs " in s and "0 rows" in s, "the first frame")
        assert not t.modes()[3] & termios.ECHO, "top reads keys without echo"
        if stop == "ctrl-c":
            t.type("\x03")
        else:
            t.proc.send_signal(signal.SIGTERM)
        assert t.exit_code() == (0 if stop == "ctrl-c" else 128 + signal.SIGTERM)
        assert b"\x1b[?1049l" in t.seen and b"Traceback" not in t.seen, t.seen[-500:]
        lflag = t.left[3]
        assert lflag & termios.ECHO and lflag & termios.ICANON, "the terminal was not restored"
    finally:
        t.close()


def test_top_says_in_its_frame_that_the_server_is_gone_and_carries_on(own_server, ns, tmp_path):
    cli = Cli(own_server.url, ns, tmp_path)
    t = Top(cli, "--interval", "0.5s", rows=24, cols=80)
    try:
        t.screen(lambda s: " Jobs " in s and "0 rows" in s, "the first frame")
        own_server.stop()
        lines = t.screen(lambda s: "cannot read the cluster" in s, "the lost server")
        fits(t, lines)
        t.type("q")
        assert t.exit_code() == 0 and b"Traceback" not in t.seen, t.seen[-500:]
    finally:
        t.close()
        cli.stop_all()
