"""One attempt this node runs (Running), and why it is being stopped (Stopping).

`Running.stopping` says why an attempt is on its way down, and so what its end is recorded as
(workers/outcomes.py). It changes only through Running.stop_as, by the one table NEXT: a running
attempt may be stopped for any reason; a cancel (the user's word) wins over any reason but stale;
a copy cut off from Redis is fenced unless it is already stale; a copy whose epoch moved is stale,
whatever it was stopping for, and nothing leaves stale (its outcome is never reported). Writers:
workers/jobs.py, launching.py, outcomes.py, commands.py.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from dispatcher.core.model import JobSpec

from . import proctrack

#: The most output of one attempt kept for its log stream while Redis does not take it (its newest).
UNSENT_MAX = 16 << 20

#: A job touches this file in its DISPATCH_CHECKPOINT_DIR to report a checkpoint
#: (the same as running `dispatch checkpointed`).
CHECKPOINT_FILE = "CHECKPOINTED"


class Stopping(str, Enum):
    """Why an attempt is being stopped; NO, the only falsy one, while nobody stops it."""

    NO = ""
    CANCEL = "cancel"  # cancelled by a user (commands.py), or as it started (launching.py)
    STALE = "stale"  # its epoch moved on: a stale copy, killed, its outcome not reported
    REQUEUE = "requeue"  # the agent is stopping: back to the queue
    PREEMPT = "preempt"  # preempted by the scheduler (commands.py)
    SHRINK = "shrink"  # an elastic job giving GPUs back: restarted on those it keeps
    FENCED = "fenced"  # the node was cut off from Redis too long: killed, the attempt lost
    GANG = "gang"  # another rank of its gang ended or was stopped: this rank stops with it
    HUNG = "hung"  # no progress reported within its --hang-timeout: the attempt is lost
    TIMEOUT = "timeout"  # its --time ran out (jobs.py): checkpoint signal, SIGKILL at the limit; the job fails
    IDLE_SESSION = "idle-session"  # an interactive session had no keystroke for its --idle-timeout (tty.py)

    def __bool__(self) -> bool:
        return self is not Stopping.NO


_BUT_STALE = frozenset({Stopping.CANCEL, Stopping.FENCED, Stopping.STALE})
#: The reasons that void the copy itself, which apply to one that already ended too.
_VOID = frozenset({Stopping.FENCED, Stopping.STALE})

#: From each reason, the reasons it may become.
NEXT: dict[Stopping, frozenset[Stopping]] = {
    Stopping.NO: frozenset(Stopping) - {Stopping.NO},
    Stopping.CANCEL: _BUT_STALE,  # a later cancel brings its own command (its reason)
    Stopping.REQUEUE: _BUT_STALE,
    Stopping.PREEMPT: _BUT_STALE,
    Stopping.SHRINK: _BUT_STALE,
    Stopping.GANG: _BUT_STALE,
    Stopping.HUNG: _BUT_STALE,
    Stopping.TIMEOUT: _BUT_STALE,
    Stopping.IDLE_SESSION: _BUT_STALE,
    Stopping.FENCED: frozenset({Stopping.CANCEL, Stopping.STALE}),
    Stopping.STALE: frozenset(),
}


@dataclass
class Running:
    job_id: str
    epoch: int
    proc: subprocess.Popen
    spec: JobSpec
    ckpt_dir: Path
    command: dict = field(default_factory=dict)  # the control command being carried out
    acks: list = field(default_factory=list)  # control stream ids to ack once the job is down
    ckpt_seen: float = 0.0
    thread: threading.Thread | None = field(default=None, repr=False)
    gpus: tuple[int, ...] = ()  # the GPUs it was given (CUDA_VISIBLE_DEVICES)
    attempt: proctrack.Attempt | None = None  # what finds all of its processes
    unsent: bytearray = field(default_factory=bytearray, repr=False)  # output Redis did not take yet (keep_unsent)
    unsent_cut: int = 0  # bytes of it cut while Redis was away: said in the stream where they were
    rank: int | None = None  # a gang's rank on this node (None: a one-node job)
    progress_file: Path | None = None  # $DISPATCH_PROGRESS_FILE: a line per step the job reports
    progress_at: float = 0.0  # when progress was last seen (a rank's file, or any rank's via Redis), time.time()
    started: float = field(default_factory=time.monotonic)  # its process's start, as --time counts it
    time_limit: threading.Timer | None = field(default=None, repr=False)  # what stops it at its --time (jobs.py)
    ended_ms: int = 0  # when its main process ended (jobs.py watch): the outcome's time
    end_sent: bool = False  # its outcome went to finish (Redis, or the outbox): outcomes.record_end
    tty: object = field(default=None, repr=False)  # an interactive job's PTY and its relay (workers/tty.Terminal)
    owner: tuple[int, int] | None = None  # (uid, gid) its files are created as (jobenv.owner_of); None: the agent's
    stamp: int = 0  # its job's submit time (ms): which job a kept end is of (keeper.keep_exit)
    _stopping: Stopping = field(default=Stopping.NO, init=False)
    stopping_since: float = field(default=0.0, init=False)  # when it was first asked to stop, time.monotonic

    def keep_unsent(self, data: bytes) -> None:
        """Output for the log stream that Redis has not taken yet: up to UNSENT_MAX bytes, the newest; what
        is cut is counted (a heavy writer through a server's restart lost a block of its output from the
        middle of `dispatch logs`, silently, where 1 MiB was kept)."""
        self.unsent += data
        over = len(self.unsent) - UNSENT_MAX
        if over > 0:
            del self.unsent[:over]
            self.unsent_cut += over

    def unsent_bytes(self) -> bytes:
        """What goes to the stream next: a line saying what was cut, where it was, then the output kept."""
        if not self.unsent_cut:
            return bytes(self.unsent)
        note = (f"\n[dispatch: {self.unsent_cut:,} bytes of output were cut here: Redis was away while the job "
                f"wrote them; the job's log file on its node keeps them all]\n")
        return note.encode() + bytes(self.unsent)

    def sent(self) -> None:
        """The stream took unsent_bytes()."""
        self.unsent.clear()
        self.unsent_cut = 0

    def ended(self) -> bool:
        """Whether its main process has ended (and been reaped)."""
        return self.proc is not None and self.proc.returncode is not None

    @property
    def checkpoint_signal(self) -> signal.Signals:
        """The signal that asks this job to checkpoint (its --checkpoint-signal)."""
        return getattr(signal, f"SIG{self.spec.checkpoint_signal}", signal.SIGTERM)

    @property
    def stopping(self) -> Stopping:
        """Why it is being stopped (falsy while it is not)."""
        return self._stopping

    def stop_as(self, why: Stopping, command: dict | None = None) -> bool:
        """Stop it for `why` (and carry out `command`) if NEXT allows that change; False, and nothing
        changed, if it does not, or if its process has ended on its own: that end is its outcome (a job
        that exited 0 just before its agent stopped is not requeued to run again). Only what says the copy
        itself is void (stale, fenced) still applies then."""
        if why not in NEXT[self._stopping] or (self.ended() and why not in _VOID):
            return False
        if not self._stopping:
            self.stopping_since = time.monotonic()
        self._stopping = why
        if command is not None:
            self.command = command
        return True
