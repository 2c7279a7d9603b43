"""`dispatch top` on a terminal: the keys read unbuffered and unechoed (termios), the board read again
every interval, the frame drawn in the alternate screen at the terminal's size, and redrawn at once on
a key or a resize (SIGWINCH). The terminal is given back as it was on q, Ctrl-C, SIGTERM, or an error.
What a key does is top_keys.press's; what a frame holds is top_screen.screen's."""

from __future__ import annotations

import contextlib
import logging
import os
import select
import shutil
import signal
import sys
import termios
import time

import redis
from rich.text import Text

from ..core.errors import DispatcherError
from .top_keys import ViewState, decode, press
from .top_screen import gather, screen

#: The bytes read from the terminal at a time (a paste longer than this is read in several goes).
READ_BYTES = 1024
#: How long a warning logged while `top` runs stays in its frame.
WARNING_SHOWN_S = 10.0


def size(fd: int) -> tuple[int, int]:
    """(columns, lines) of the terminal on `fd`; the environment's or 80x24 when it has none."""
    try:
        s = os.get_terminal_size(fd)
        if s.columns and s.lines:
            return s.columns, s.lines
    except OSError:
        pass
    s = shutil.get_terminal_size()
    return s.columns, s.lines


@contextlib.contextmanager
def keys_mode(fd: int | None):
    """The terminal on `fd` reading key by key, without echo, flow control or Ctrl-Z (Ctrl-C still
    interrupts); as it was afterwards, however the block ends. Nothing when fd is None."""
    if fd is None:
        yield
        return
    saved = termios.tcgetattr(fd)
    mode = termios.tcgetattr(fd)
    mode[0] &= ~(termios.IXON | termios.ICRNL)
    mode[3] &= ~(termios.ICANON | termios.ECHO)
    mode[6][termios.VMIN], mode[6][termios.VTIME] = 1, 0
    mode[6][termios.VSUSP] = 0  # Ctrl-Z would stop `top` with the terminal still in this mode: off
    termios.tcsetattr(fd, termios.TCSANOW, mode)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


@contextlib.contextmanager
def _signals(wake: int):
    """SIGWINCH writes a byte to `wake` (the loop's select returns and redraws); SIGTERM leaves the
    loop as SystemExit(143), so the terminal is restored on the way out."""
    def on_resize(signum, frame):
        with contextlib.suppress(OSError):
            os.write(wake, b"r")

    def on_term(signum, frame):
        raise SystemExit(128 + signal.SIGTERM)

    before = {s: signal.signal(s, h) for s, h in ((signal.SIGWINCH, on_resize), (signal.SIGTERM, on_term))}
    try:
        yield
    finally:
        for s, h in before.items():
            signal.signal(s, h)


class _Latest(logging.Handler):
    """The latest warning logged while `top` draws (on stderr it would land in the frame): shown in it."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.message, self.at = "", -1e18

    def emit(self, record) -> None:
        self.message, self.at = record.getMessage(), time.monotonic()


@contextlib.contextmanager
def _warnings_kept():
    latest = _Latest()
    root = logging.getLogger()
    root.addHandler(latest)
    try:
        yield latest
    finally:
        root.removeHandler(latest)


def _read(board, klass: str, last: dict) -> dict:
    """gather(), or the last read with the error that stopped this one (the next interval tries again)."""
    try:
        return gather(board, klass)
    except (DispatcherError, redis.exceptions.RedisError) as e:
        return {**last, "klass": klass, "error": f"cannot read the cluster ({e}); showing the last read"}


def _draw(console, lines, out) -> None:
    """One frame, written at once from the top left: no clearing, so no flicker."""
    with console.capture() as cap:
        console.print(Text("\n").join(lines), end="", crop=True, no_wrap=True, overflow="crop")
    out.write("\x1b[H" + cap.get())
    out.flush()


def live(board, console, *, interval_s: float) -> None:
    """Redraw every interval_s, and at once on a key or a resize, until q, Ctrl-C or SIGTERM. Keys
    are read only when stdin is a terminal too (else it redraws until Ctrl-C)."""
    fd = sys.stdin.fileno() if sys.stdin.isatty() else None
    out = console.file
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    state, entered = ViewState(), False
    try:
        with _signals(wake_w), keys_mode(fd), _warnings_kept() as latest:
            data = gather(board, state.klass)  # (the first read's error is the command's)
            out.write("\x1b[?1049h\x1b[?25l\x1b[2J")  # the alternate screen, no cursor
            entered = True
            due = time.monotonic() + interval_s
            while not state.quit:
                width, height = size(out.fileno())
                console.size = (width, height)
                recent = time.monotonic() - latest.at < WARNING_SHOWN_S
                shown = data if data.get("error") or not recent else {**data, "error": latest.message}
                lines, state = screen(shown, state, width, height)
                _draw(console, lines, out)
                wait = max(0.0, due - time.monotonic())
                ready = select.select([wake_r] + ([fd] if fd is not None else []), [], [], wait)[0]
                if wake_r in ready:
                    with contextlib.suppress(BlockingIOError):
                        os.read(wake_r, READ_BYTES)
                    out.write("\x1b[2J")  # a resize: what the old size left is cleared
                if fd is not None and fd in ready:
                    got = os.read(fd, READ_BYTES)
                    for key in decode(got) if got else ["q"]:  # end of input: as q
                        state = press(state, key)
                if state.klass != data["klass"] or time.monotonic() >= due:
                    data = _read(board, state.klass, data)
                    due = time.monotonic() + interval_s
    except KeyboardInterrupt:
        pass
    finally:
        if entered:
            out.write("\x1b[?25h\x1b[?1049l")
            out.flush()
        os.close(wake_r)
        os.close(wake_w)
