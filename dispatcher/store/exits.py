"""Exits a node's keeper saw while the node's agent could not report them (workers/keeper.py).

An attempt that ends while its agent is stopped (SIGSTOP, a hung host) cannot have its outcome
written: the agent has not even reaped it. Its keeper reads the exit status of the unreaped process
from /proc and records it here, as "<epoch> <exit code or -signal> <ms>". When the scheduler then
gives the node up (liveness.py), an attempt that ended on its own is recorded as the outcome it
had, not rerun; any other is a lost attempt as before.
"""

from __future__ import annotations

from . import keys
from .connect import text

#: How long a report is kept (it matters only until the node is given up, seconds later).
KEPT_S = 86400


def write_exit(client, ns: str, job_id: str, epoch: int, code: int, at_ms: int) -> None:
    client.set(keys.job_exit(ns, job_id), exit_text(epoch, code, at_ms), ex=KEPT_S)


def read_exits(client, ns: str, ids: list[str]) -> dict[str, tuple[int, int, int]]:
    """job id -> (epoch, code, ms) for the ids with a readable report."""
    if not ids:
        return {}
    out = {}
    for job_id, raw in zip(ids, client.mget([keys.job_exit(ns, i) for i in ids])):
        report = parse_exit(text(raw))
        if report is not None:
            out[job_id] = report
    return out


def exit_text(epoch: int, code: int, at_ms: int) -> str:
    """A report as it is kept: in Redis, and in the node's work dir (workers/keeper.py keep_exit)."""
    return f"{epoch} {code} {at_ms}"


def parse_exit(value: str) -> tuple[int, int, int] | None:
    """(epoch, code, ms) of a kept report; None for anything else."""
    parts = value.split()
    if len(parts) == 3 and all(p.lstrip("-").isdigit() for p in parts):
        return int(parts[0]), int(parts[1]), int(parts[2])
    return None


#: A keeper's report of an attempt killed by signal N that dispatch did not send (a crash, the OOM killer,
#: someone's kill -9: not the keeper's own fence) says -(CRASHED + N): such an attempt ended, it was not
#: lost, and fails once, as the agent would have recorded it. A plain -N (any kill an agent kept, its
#: own cancels and preemptions among them) is an attempt lost, as before.
CRASHED = 1000


def crashed(code: int) -> int:
    """The report of an attempt that signal -code killed, dispatch not having sent it (code < 0)."""
    return code - CRASHED


def reported_outcome(report: tuple[int, int, int] | None, epoch: int,
                     stopping: bool = False) -> tuple[str, int, int, str] | None:
    """(state, exit code, ms, reason) an attempt at `epoch` ended with on its own, by its keeper's
    report; None without one, or for a kill (that attempt was lost, not ended). `stopping`: dispatch was
    stopping it (a cancel, a preemption, its gang's end): a signal that killed it was maybe dispatch's own."""
    if report is None or report[0] != epoch:
        return None
    code = report[1]
    if code <= -CRASHED and not stopping:
        from ..core.errors import signal_name

        signal = -code - CRASHED
        return ("failed", -signal, report[2], f"killed by signal {signal_name(signal)} (not sent by dispatch; its "
                                              "node's keeper saw it while its agent could not report it)")
    if code < 0:
        return None
    return ("succeeded", 0, report[2], "") if code == 0 else ("failed", code, report[2], f"exit code {code}")
