"""`dispatch down`: stop the `dispatch up` of this state directory, as Ctrl-C in its terminal would
(registered lazily in cli/__init__.py). The `up` is found by its lock (up/lock.py): the pid it
recorded there, checked to still run `dispatch up`; `down` waits until the lock is let go, that is
until `up` and everything it started have stopped."""

from __future__ import annotations

import os
import signal
import time

import click

from ..core.errors import ConfigError, UpAlreadyRunning
from ..core.units import parse_duration


@click.command()
@click.option("--now", is_flag=True, help="Kill running jobs at once (as a second Ctrl-C), not after their "
                                          "checkpoint signal and grace; they go back to the queue all the same.")
@click.option("--timeout", default="2m", show_default=True, metavar="DURATION",
              help="Give up waiting after this long (exit 1); `up` goes on stopping.")
def down(now, timeout):
    """Stop the `dispatch up` of this state directory ($DISPATCH_HOME), as Ctrl-C in its terminal: running
    jobs go back to the queue (checkpoint signal, SIGKILL after their --grace or 10 s), then the scheduler,
    agent and server stop; nothing is lost, and the next `dispatch up` takes up where it stopped. Waits
    until it has stopped. With none running: says so, exit 0."""
    from ..config import state_dir
    from ..up.lock import UpLock, looks_like

    wait_s = parse_duration(timeout, flag="--timeout")
    lock = UpLock(state_dir())
    try:
        lock.refuse_if_held()
    except UpAlreadyRunning as running:
        pid = running.pid
    else:
        click.echo(f"no `dispatch up` runs on state dir {lock.directory}; nothing to stop", err=True)
        return
    if not isinstance(pid, int) or not looks_like(pid, "up"):
        raise ConfigError(f"a `dispatch up` holds state dir {lock.directory}, but its pid is not recorded or not "
                          "it (it is starting, or runs in another PID namespace); stop it with Ctrl-C in its "
                          "terminal", key="up")
    _signal(pid, signal.SIGTERM)
    if now:
        time.sleep(0.2)  # (two signals at once may merge into one)
        _signal(pid, signal.SIGTERM)
    click.echo(f"stopping `dispatch up` (pid {pid})...", err=True)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            lock.refuse_if_held()
        except UpAlreadyRunning:
            time.sleep(0.2)
            continue
        while not _exited(pid) and time.monotonic() < deadline:  # (its lock goes a moment before it does: a
            time.sleep(0.05)  # script's `kill -0 $UP_PID` after down found it still there)
        click.echo(f"dispatch up (pid {pid}) stopped")
        return
    raise click.exceptions.Exit(_late(pid, timeout))


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
        os.kill(pid, signal.SIGCONT)  # a stopped `up` acts on SIGTERM only once continued
    except ProcessLookupError:
        pass  # it stopped meanwhile
    except PermissionError:
        raise ConfigError(f"`dispatch up` (pid {pid}) runs as another user: it is theirs to stop (or root's)",
                          key="up") from None


def _exited(pid: int) -> bool:
    """Whether process `pid` has ended (gone, or a zombie its parent has not reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def _late(pid: int, timeout: str) -> int:
    click.echo(f"dispatch: error: `dispatch up` (pid {pid}) is still stopping after {timeout} (jobs in their "
               f"grace, or a slow server); `dispatch down --now` kills its jobs at once", err=True)
    return 1


def up_without_record(e):
    """NoServer, said better where a `dispatch up` holds this state directory but its server.json is gone
    (removed by hand: commands said "no server: start one with dispatch up", which then refused, as one
    runs); `e` itself else."""
    from ..config import state_dir
    from ..core.errors import NoServer
    from ..up.lock import UpLock

    try:
        UpLock(state_dir()).refuse_if_held()
    except UpAlreadyRunning as running:
        return NoServer(f"`dispatch up` (pid {running.pid}) runs on state dir {state_dir()}, but its record "
                        "server.json there is gone: restart it (dispatch down, then dispatch up), or pass --redis URL")
    except OSError:
        pass
    return e
