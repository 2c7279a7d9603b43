"""An interactive job's terminal on the node (`dispatch shell`): a PTY made by the agent, relayed through Redis.

Launching (launching.py) opens the PTY (Terminal) at the size the client last sent, and starts the job's
process on its slave side as the leader of its own session with the PTY as its controlling terminal, so
Ctrl-C typed on the user's laptop reaches the program in the foreground here, as on any terminal. The rest
of the attempt is a batch job's: its cgroup and session (proctrack.py), fencing, cancel, preemption,
--time, its log stream and file. Two threads per session: `copy_output` (the watcher's reader, in place
of the pipe's) reads the master side, coalescing what comes within COALESCE_S (a program that prints fast
costs one XADD per batch, not per byte), and writes each batch to the job's log file, its log stream and
the out-stream in one round trip; the input relay XREAD-BLOCKs on the in-stream and writes keystrokes to
the PTY and resizes to it (TIOCSWINSZ, which sends the foreground program SIGWINCH). With no keystroke and
no output for the job's --idle-timeout (`dispatch shell -- python train.py` printing its progress is at
work, not idle) the relay ends the session (SIGHUP, as a hung-up terminal; SIGKILL after the grace).
The stream protocol: dispatcher/store/tty.py.
"""

from __future__ import annotations

import fcntl
import logging
import os
import select
import shutil
import signal
import struct
import termios
import threading
import time

from dispatcher.store import job_record, tty as streams
from dispatcher.store.jobs import append_log

from . import outputs
from .running import Running, Stopping

log = logging.getLogger("dispatch.agent")

#: Output that arrives within this long of the first byte goes in the same entry.
COALESCE_S = 0.004
#: The most output in one entry.
CHUNK = 65536
#: How long the input relay blocks on the in-stream before it looks at the idle clock again.
BLOCK_MS = 500
#: A "shell" session's program where the client's $SHELL does not exist on this node, in order.
FALLBACK_SHELLS = ("/bin/bash", "/bin/sh")


def set_size(fd: int, rows: int, cols: int) -> None:
    if 0 < rows < 10000 and 0 < cols < 10000:
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def command(spec) -> list[str]:
    """The program of the session: a "shell" session's is the client's $SHELL, else the first of
    FALLBACK_SHELLS this node has; a "command" session's is its command as given."""
    argv = list(spec.command)
    if spec.interactive != "shell" or shutil.which(argv[0]):
        return argv
    return [next((s for s in FALLBACK_SHELLS if os.access(s, os.X_OK)), argv[0]), *argv[1:]]



def plain(fd: int) -> None:
    """No echo, no CR before each newline: a terminal for a program fed from a file (store/tty.py PIPED_INPUT)."""
    attrs = termios.tcgetattr(fd)
    attrs[1] &= ~termios.ONLCR
    attrs[3] &= ~(termios.ECHO | termios.ECHOE | termios.ECHOK | termios.ECHONL | termios.ECHOCTL)
    termios.tcsetattr(fd, termios.TCSANOW, attrs)


class Terminal:
    """One attempt's PTY: the master side (the agent's), the slave side (the job's, closed here once it runs)."""

    def __init__(self, sup, job_id: str, epoch: int, spec):
        self.sup, self.job_id, self.epoch = sup, job_id, epoch
        self.master, self.slave = os.openpty()
        if dict(spec.env).get(streams.PIPED_INPUT) == "pipe":
            plain(self.slave)
        try:
            set_size(self.master, *(streams.last_size(sup.client, sup.ns, job_id) or (24, 80)))
        except Exception as e:  # Redis away: the default size; the next resize puts it right
            log.warning("job %s: terminal size unknown (%s)", job_id, e)
        self.last_activity = time.monotonic()
        self.done = threading.Event()
        self.seen: dict = {}  # under identity: each client's last entry number (store.tty.input_ok)

    def popen_io(self, dying: dict, owner) -> dict:
        """Popen's arguments for the job's process: the PTY as its stdin, stdout and stderr and, in the child
        after its new session, its controlling terminal (and what spawn_args asked for). `owner`: the
        job's user's (uid, gid), who gets the PTY, or None."""
        if owner is not None:
            os.fchown(self.slave, *owner)
        then = dying.get("preexec_fn")

        def child():
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
            if then is not None:
                then()
        return {"stdin": self.slave, "stdout": self.slave, "stderr": self.slave, "preexec_fn": child}

    def spawned(self) -> None:
        """The job holds its side now: the master reads EIO once every holder of the slave is gone."""
        os.close(self.slave)
        self.slave = -1

    def close(self) -> None:
        for fd in (self.master, self.slave):
            if fd >= 0:
                os.close(fd)
        self.master = self.slave = -1

    # -- output -------------------------------------------------------------------------------------
    def copy_output(self, run: Running, log_path) -> None:
        """The watcher's reader for a PTY: the session's start, the input relay, then the output in batches."""
        sup = self.sup
        try:
            streams.started(sup.client, sup.ns, self.job_id, self.epoch)
        except Exception as e:
            log.warning("job %s: could not record its session's start (%s)", self.job_id, e)
        threading.Thread(target=self._relay_input, args=(run,), name=f"tty-in-{self.job_id}", daemon=True).start()
        with open(log_path, "ab", buffering=0) as f:
            node_log = f  # (None once the disk refuses it: the session goes on)
            screen = bytearray()  # output the terminal stream has not taken yet (a server restarting)
            while (data := self._batch()):
                self.last_activity = time.monotonic()  # output is activity too: a session at work is not idle
                if node_log is not None:
                    node_log = outputs.write(sup, run, node_log, data, f"its log file {log_path}")
                run.keep_unsent(data)
                screen += data
                del screen[:-(1 << 20)]
                try:
                    pipe = sup.client.pipeline(transaction=False)
                    append_log(sup.client, sup.ns, self.job_id, run.unsent_bytes(), pipe=pipe)
                    streams.add_output(pipe, sup.ns, self.job_id, bytes(screen))
                    pipe.execute()
                    run.sent()
                    screen.clear()
                except Exception as e:  # the log and the screen keep it for the next batch (the log: or the outbox)
                    log.warning("job %s: terminal output write failed: %s", self.job_id, e)

    def _batch(self) -> bytes:
        """What the PTY gives within COALESCE_S of its first byte (b"" once every holder of its slave is gone)."""
        data = self._read()
        deadline = time.monotonic() + COALESCE_S
        while data and len(data) < CHUNK and (left := deadline - time.monotonic()) > 0:
            if not select.select([self.master], [], [], left)[0] or not (more := self._read()):
                break
            data += more
        return data

    def _read(self) -> bytes:
        try:
            return os.read(self.master, CHUNK)
        except OSError:  # EIO: the last process holding the slave side is gone
            return b""

    # -- input --------------------------------------------------------------------------------------
    def _relay_input(self, run: Running) -> None:
        sup, after = self.sup, "0-0"
        idle = run.spec.idle_timeout_s
        while not self.done.is_set():
            try:
                entries = streams.read_input(sup.client, sup.ns, self.job_id, after, BLOCK_MS)
            except Exception as e:
                log.warning("job %s: cannot read its terminal input (%s)", self.job_id, e)
                entries = []
                self.done.wait(1.0)
            for entry_id, f in entries:
                after = entry_id
                if sup.verifier is None or streams.input_ok(sup.verifier, run.spec.user, self.job_id, f, self.seen):
                    self._apply(f)
            if idle and time.monotonic() - self.last_activity > idle and run.proc.poll() is None \
                    and run.stop_as(Stopping.IDLE_SESSION):
                log.warning("job %s: no keystroke or output for %.0fs (--idle-timeout); ending the session",
                            self.job_id, idle)
                sup.stop_run(run, run.spec.grace_s, signal.SIGHUP)

    def _apply(self, f: dict) -> None:
        try:
            if f.get(b"k") == b"in":
                data = memoryview(f.get(b"d", b""))
                while data and not self.done.is_set():
                    data = data[os.write(self.master, data):]
                self.last_activity = time.monotonic()
            elif f.get(b"k") == b"size":
                set_size(self.master, int(f[b"rows"]), int(f[b"cols"]))
        except (OSError, KeyError, ValueError) as e:
            log.info("job %s: terminal input dropped (%s)", self.job_id, e)

    # -- the end ------------------------------------------------------------------------------------
    def ended(self, code: int) -> None:
        """After the attempt's outcome is recorded: the end on the out-stream (with the job's state and reason),
        the relay stopped, the PTY closed."""
        self.done.set()
        sup = self.sup
        try:
            rec = job_record.read_fields(sup.client, sup.ns, self.job_id, job_record.OUTCOME)
            streams.ended(sup.client, sup.ns, self.job_id, code, rec["state"] or "", rec["reason"] or "")
        finally:
            self.close()
