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


def reported_outcome(report: tuple[int, int, int] | None, epoch: int) -> tuple[str, int, int, str] | None:
    """(state, exit code, ms, reason) an attempt at `epoch` ended with on its own, by its keeper's
    report; None without one (or for a kill: that attempt was lost, not ended)."""
    if report is None or report[0] != epoch or report[1] < 0:
        return None
    code = report[1]
    return ("succeeded", 0, report[2], "") if code == 0 else ("failed", code, report[2], f"exit code {code}")
