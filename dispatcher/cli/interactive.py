"""`dispatch shell` and `dispatch attach`: a terminal on a GPU node, as Slurm's `srun --pty bash` / `salloc`.

`shell` submits a job like `dispatch submit` (the same flags, checks and path: core/spec.py, store/requests.py)
marked interactive; the node agent runs its process on a PTY (workers/tty.py) and the two ends talk through
two Redis streams (store/tty.py), so the client needs nothing but the Redis it already reaches. While it
waits the terminal is left as it is (Ctrl-C cancels the job); once the session starts the terminal is raw,
every keystroke goes to the node (Ctrl-C interrupts the program there), and so does each resize. The client
exits with the shell's exit status. `attach` takes up a session whose client went away: the last screenful
of its output, then as above.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import threading
import time

import click

from . import common
from .flags import resources, session_request
from ..clock import now_ms
from ..core.errors import InvalidRequestError, InvalidStateError, JobNotFound, exit_status
from ..auth.identity import caller_dir, current_user
from ..store.tty import PIPED_INPUT

#: The job's grace between SIGHUP (--time, --idle-timeout) or SIGTERM (cancel) and SIGKILL: a shell
#: ignores SIGTERM, and holds no checkpoint to write.
GRACE = "2s"
#: How long a session may wait before `shell` says it is waiting, and how often the job's state is read.
WAIT_NOTE_S, STATE_EVERY_S = 1.0, 2.0
#: How often a session whose standard input ended (a pipe, a file) is sent ^D until it ends.
EOF_EVERY_S = 0.5
#: What `attach` shows first: at least this much of the newest output.
SCREENFUL = 4096


@click.command(context_settings={"ignore_unknown_options": False, "allow_interspersed_args": False})
@resources(priority="high", session=True)
@click.option("--idle-timeout", default="1h", metavar="DURATION", show_default=True,
              help="End the session after this long with no keystroke and no output (0: never); as --time: 90s, 15m, 30 "
                   "(a bare number is minutes), 1:00:00.")
@click.argument("command", nargs=-1, required=False, type=click.UNPROCESSED)
@common
def shell(ctx, command, idle_timeout, **flags):
    """An interactive shell on a GPU node (as srun --pty bash): dispatch shell --gpus 1 [-- COMMAND...].
    Exits with the shell's exit status; `dispatch attach JOB` takes the session up again."""
    from ..core.spec import spec_from_request
    from ..store.requests import identity_on, submit_specs
    from .submit import warn_if_no_node_could_hold

    if "-" in str(flags["gpus"]).strip().lstrip("-"):
        raise InvalidRequestError("--gpus: an interactive session takes one number of GPUs, not a range",
                                  field="--gpus")
    idle = _idle_seconds(idle_timeout)
    me, mode = current_user(), "command" if command else "shell"
    piped = not os.isatty(sys.stdin.fileno())  # `dispatch shell < steps.sh`: the output alone comes back, as
    # `ssh host < file` gives it: no echo, and a shell session's $SHELL runs the input as a script (no prompts)
    shell = [os.environ.get("SHELL") or "/bin/bash"] + (["/dev/stdin"] if piped else [])
    request = session_request(flags, command=list(command) or shell, checkpoint_signal="HUP", grace=GRACE,
                              retries=0, env=[f"TERM={os.environ.get('TERM') or 'xterm-256color'}"]
                              + ([f"{PIPED_INPUT}=pipe"] if piped else []))
    spec = spec_from_request(request, user=me, submit_ms=now_ms(), cwd=caller_dir())
    spec = spec.filled(interactive=mode, idle_timeout_s=idle)
    hold_stops()
    (job_id,) = submit_specs(ctx.client, ctx.ns, [spec], me)
    warn_if_no_node_could_hold(ctx, [spec], [job_id])
    session = Session(ctx, job_id, _signer(ctx, me, job_id) if identity_on(ctx.client, ctx.ns) else None)
    sys.exit(session.run([], "0-0", say_wait=True))


@click.command()
@click.argument("job_id")
@common
def attach(ctx, job_id):
    """Take up an interactive session (dispatch shell) again after its client went away: its last screenful
    of output, then the terminal as before. Two clients may be attached at once: both see the output, and
    both type."""
    from ..store import job_record, tty as streams
    from ..store.codec import decode_spec
    from ..store.requests import identity_on
    from ..store.naming import record_id

    job_id = record_id(ctx.client, ctx.ns, job_id)  # 12_5: element 5 of array 12, as show and logs take it
    rec = job_record.read_fields(ctx.client, ctx.ns, job_id, ("spec", *job_record.OUTCOME))
    if not rec["state"]:
        raise JobNotFound(job_id)
    if not decode_spec(rec["spec"], key=f"job {job_id}").interactive:
        raise InvalidRequestError(f"job {job_id} is no interactive session (dispatch shell); follow its output with "
                                  f"dispatch logs -f {job_id}", field="JOB")
    if rec["state"] in ("succeeded", "failed", "cancelled"):
        ended = rec["state"] + (f" ({rec['reason']})" if rec["reason"] else "")
        raise InvalidStateError(job_id, ended, "attach to", hint=f"its output: dispatch logs {job_id}")
    first, after = streams.tail(ctx.client, ctx.ns, job_id, SCREENFUL)
    me = current_user()
    session = Session(ctx, job_id, _signer(ctx, me, job_id) if identity_on(ctx.client, ctx.ns) else None)
    sys.exit(session.run(first, after, say_wait=False))


def _idle_seconds(text: str) -> float | None:
    """--idle-timeout in --time's forms (a bare number is minutes, as Slurm's; 1h, 30:00), 0 for never."""
    from ..core.spec import idle_timeout_s

    return idle_timeout_s(text)


def _signer(ctx, me: str, job_id: str):
    from ..auth.identity import client_token
    from ..store.tty import Signer

    return Signer(me, client_token() or "", job_id)


#: What cancels a session's job while its client waits for it to start: Ctrl-C, the terminal closing, a kill.
STOPS = (signal.SIGINT, signal.SIGHUP, signal.SIGTERM)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def hold_stops() -> None:
    """Before a session's job is submitted: a Ctrl-C (a hangup, a kill) waits until the job has an id, and
    hangups_interrupt takes it then as a cancel of that job (one as the server answered left the job
    running, with no client and no id said)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)


@contextlib.contextmanager
def hangups_interrupt():
    """While a client waits for its session (shell, notebook) to start, its terminal closing (SIGHUP) or
    a kill (SIGTERM) is a Ctrl-C: the caller cancels the job, as srun does, so that nothing starts
    later holding GPUs for nobody. Ctrl-C (SIGINT) too, even where the client was started with SIGINT
    ignored (from a non-interactive shell's background job, which Python then leaves ignored); one held
    since before the submission (hold_stops) arrives here."""
    kept = {s: signal.getsignal(s) for s in STOPS}
    for s in kept:
        signal.signal(s, _interrupt)
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)
        yield
    finally:
        for s, h in kept.items():
            signal.signal(s, h)


class Session:
    """One client of an interactive job: the output read on a thread, the keyboard on the main one."""

    def __init__(self, ctx, job_id: str, signer):
        self.ctx, self.job_id, self.signer = ctx, job_id, signer
        self.started = threading.Event()
        self.result: int | None = None  # the exit status, once the session or the job ended
        self.note = ""  # what is said on stderr once the terminal is back
        self.wake_r, self.wake_w = os.pipe()
        self.fd = sys.stdin.fileno()
        self.is_tty = os.isatty(self.fd)

    def run(self, first: list, after: str, *, say_wait: bool) -> int:
        """Until the session ends: returns the exit status for the client."""
        self._send_size()
        for _, e in first:
            self._entry(e)
        reader = threading.Thread(target=self._read_output, args=(after,), name="tty-out", daemon=True)
        reader.start()
        saved = None  # the terminal's settings before it went raw
        try:
            with hangups_interrupt():  # until the terminal is raw, a Ctrl-C (a signal) cancels the job, even one
                self._wait_for_start(say_wait)  # pressed as it started: nobody saw its prompt yet
                if self.result is None:
                    saved = self._raw()  # from here a Ctrl-C is a byte, for the program on the node
        except KeyboardInterrupt:
            self._restore(saved)
            return self._cancel()
        if self.result is None:
            self._interact(saved)
        else:
            self._restore(saved)
        reader.join(1.0)
        if self.note:
            try:
                click.echo(f"dispatch: {self.note}", err=True)
            except OSError:  # (no terminal left to say it on)
                pass
        return self.result if self.result is not None else 1

    # -- before the session starts -----------------------------------------------------------------
    def _wait_for_start(self, say_wait: bool) -> None:
        """Until the session starts or ends; through a restart of the server (`dispatch up` stopped and
        started again), as `wait` does: a client that quit then left its session to start for nobody."""
        from ..store import tty as streams
        from ..store.connect import ride_out
        from .jobs import server_away

        deadline, said = time.monotonic() + WAIT_NOTE_S, 0.0
        while self.result is None and not self.started.wait(0.05):
            if time.monotonic() - said > streams.WAIT_EVERY_S:  # still here: its node starts it for someone
                said = time.monotonic()
                ride_out(lambda: streams.send_input(self.ctx.client, self.ctx.ns, self.job_id, "wait",
                                                    signer=self.signer), on_wait=server_away)
            if say_wait and time.monotonic() > deadline:
                say_wait = False
                if ride_out(self._state, on_wait=server_away) == "pending":  # (not one placed, starting or failing to)
                    click.echo(f"waiting for a GPU: job {self.job_id} (dispatch why {self.job_id})", err=True)

    def _state(self) -> str:
        from ..store import job_record

        return job_record.read_fields(self.ctx.client, self.ctx.ns, self.job_id, job_record.OUTCOME)["state"]

    def _cancel(self) -> int:
        from ..store.connect import clone
        from ..store.jobs import cancel_job
        from ..store.requests import act_signed, identity_on
        from ..store.scripts import Scripts

        ns = self.ctx.ns
        # on a pool of its own: the Ctrl-C may have landed in a call of the main thread's on the shared
        # one (the output reader's thread uses it too), between a lock's take and its release
        client = clone(self.ctx.client)
        if identity_on(client, ns):
            act_signed(client, ns, "cancel", current_user(), self.job_id)
        else:
            cancel_job(Scripts(client, ns), client, ns, self.job_id, now_ms())
        try:
            click.echo(f"dispatch: job {self.job_id} cancelled", err=True)
        except OSError:  # (no terminal left to say it on)
            pass
        return 130

    # -- the output ------------------------------------------------------------------------------
    def _read_output(self, after: str) -> None:
        from ..store import tty as streams
        from ..store.connect import ride_out

        checked = time.monotonic()
        try:
            while self.result is None:  # (a server restarting, as `dispatch up` does it, is waited for: a minute)
                entries = ride_out(lambda: streams.read_output(self.ctx.client, self.ctx.ns, self.job_id, after, 1000))
                for entry_id, e in entries:
                    after = entry_id
                    self._entry(e)
                if self.result is None and time.monotonic() - checked > STATE_EVERY_S:
                    checked = time.monotonic()
                    ride_out(lambda: self._check_job(after))
        except Exception as e:  # the server went away for good: say so, and give the terminal back
            self._end(1, f"lost the session's stream ({type(e).__name__}: {e}); "
                         f"take it up again with dispatch attach {self.job_id}")

    def _entry(self, e: dict) -> None:
        kind = e.get("k")
        if kind == "out":
            self.started.set()
            _write_all(sys.stdout.fileno(), e.get("d", b""))
        elif kind == "start":
            self.started.set()
        elif kind == "end":
            code, reason = int(e.get("code") or 0), e.get("reason", "")
            self._end(exit_status(code), "" if reason in ("", f"exit code {code}") else
                      f"job {self.job_id} {e.get('state', 'ended')}: {reason}")

    def _check_job(self, after: str) -> None:
        """A job that ended with no end on the stream (it never started, or its node could not say)."""
        from ..store import job_record, tty as streams

        rec = job_record.read_fields(self.ctx.client, self.ctx.ns, self.job_id, job_record.OUTCOME)
        if rec["state"] in ("succeeded", "failed", "cancelled"):
            for _, e in streams.read_output(self.ctx.client, self.ctx.ns, self.job_id, after, None):
                self._entry(e)
            code = rec["exit_code"] if isinstance(rec["exit_code"], int) else 1
            self._end(exit_status(code), f"job {self.job_id} {rec['state']}: {rec['reason'] or 'ended'}")

    def _end(self, status: int, note: str) -> None:
        if self.result is None:
            self.result, self.note = status, note
            os.write(self.wake_w, b"x")

    # -- the keyboard ------------------------------------------------------------------------------
    def _raw(self) -> list | None:
        """The terminal raw (its settings before, to restore); None when stdin is no terminal."""
        import termios
        import tty

        if not self.is_tty:
            return None
        saved = termios.tcgetattr(self.fd)
        tty.setraw(self.fd, termios.TCSADRAIN)  # (not TCSAFLUSH: what was typed ahead goes too)
        return saved

    def _restore(self, saved: list | None) -> None:
        import termios

        if saved is not None:
            try:
                termios.tcsetattr(self.fd, termios.TCSADRAIN, saved)
            except termios.error:  # the terminal is gone
                pass

    def _interact(self, saved: list | None) -> None:
        """Keystrokes and resizes to the node (on a raw terminal: `saved`, its settings before) until the
        session ends. The terminal is put back however this ends (the session's end, an error, SIGTERM,
        SIGHUP or SIGQUIT sent to the client)."""
        winch_r, winch_w = os.pipe()
        handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGWINCH)}

        def leave(signum, frame):  # the client goes; the session runs on (as after a closed laptop lid)
            self._end(128 + signum, f"{signal.Signals(signum).name}: this client stops; the session runs on: "
                                    f"dispatch attach {self.job_id}")
        for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
            signal.signal(s, leave)
        signal.signal(signal.SIGWINCH, lambda *_: os.write(winch_w, b"w"))
        try:
            self._pump(winch_r)
        finally:
            self._restore(saved)
            for s, h in handlers.items():
                signal.signal(s, h)

    def _pump(self, winch_r: int) -> None:
        from ..store import tty as streams
        from ..store.connect import ride_out

        ctx, watched, ended_at = self.ctx, [self.fd, winch_r, self.wake_r], None
        while self.result is None:
            ready = select.select(watched, [], [], EOF_EVERY_S if ended_at is not None else 1.0)[0]
            if ended_at is not None and time.monotonic() - ended_at >= EOF_EVERY_S:  # standard input ended (not
                # a terminal: `echo ls | dispatch shell`): the terminal's EOF, ^D, until the session ends, as
                # `ssh host < file` ends. Again and again: one that reaches the node's PTY while the shell is
                # between reads is lost, and one after a line that did not end only ends that line.
                ended_at = time.monotonic()
                streams.send_input(ctx.client, ctx.ns, self.job_id, "in", b"\x04", signer=self.signer)
            if winch_r in ready:
                os.read(winch_r, 64)
                self._send_size()
            if self.fd in ready:
                try:
                    data = os.read(self.fd, 4096)
                except OSError:  # EIO: as good as the end of the input
                    data = b""
                if not data and self.is_tty:  # the terminal hung up: the session runs on without us
                    self._end(129, f"the terminal went away; the session runs on: dispatch attach {self.job_id}")
                    break
                if not data:  # standard input ended (not a terminal): ^D from now on (above)
                    watched.remove(self.fd)
                    ended_at = time.monotonic() - EOF_EVERY_S
                    continue
                ride_out(lambda: streams.send_input(ctx.client, ctx.ns, self.job_id, "in", data, signer=self.signer))

    def _send_size(self) -> None:
        from ..store import tty as streams

        if self.is_tty:
            size = os.get_terminal_size(self.fd)
            streams.send_input(self.ctx.client, self.ctx.ns, self.job_id, "size", rows=size.lines,
                               cols=size.columns, signer=self.signer)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
