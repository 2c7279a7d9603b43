"""What a node agent could not write to Redis yet, kept on disk until it can.

Each entry is one file in <work dir>/outbox, written to a temporary name, fsynced and renamed (and
the directory fsynced), so it survives the agent's kill -9 and the host's power loss. Entries are
msgpack, oldest first by a sequence number in the name:

- ("log", job id, epoch, bytes, rank): output the job (a gang: that rank) wrote while Redis was away;
- ("running", job id, epoch, started ms, pid): the start of an attempt;
- ("finish", job id, epoch, state, exit code, reason, keywords): an attempt's outcome.

The next agent of the node replays them before it looks for lost attempts (workers/agent.py
recover), so a job that finished while Redis was down is recorded as finished, never rerun; while the
agent holding them is stopped, its keeper reports the outcomes of attempts that ended on their own
(own_ends), as it reports unreaped exits. Every
write is fenced by the attempt's epoch in its Lua script: a replay of a copy that was meanwhile
rerun elsewhere is refused.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from pathlib import Path

import msgpack

log = logging.getLogger("dispatch.agent")


def own_ends(work_dir: Path) -> list[tuple[str, int, int, int]]:
    """(job id, epoch, exit code, ms) of the outcomes waiting in `work_dir`'s outbox of attempts that
    ended on their own (succeeded, or failed with an exit code), read without taking them: the node's
    keeper reports these while the agent that holds them is stopped (workers/keeper.py)."""
    out = []
    folder = Path(work_dir) / "outbox"
    for path in sorted(folder.glob("*.entry")) if folder.is_dir() else []:
        try:
            entry = msgpack.unpackb(path.read_bytes(), raw=False)
            kind, job_id, epoch, state, code, _reason, kw = entry
        except (OSError, ValueError, TypeError, msgpack.UnpackException):
            continue  # not an outcome, or being replaced: the agent's own replay deals with it
        if kind == "finish" and state in ("succeeded", "failed") and isinstance(code, int) and code >= 0 \
                and isinstance(epoch, int) and isinstance(kw, dict) and isinstance(kw.get("at_ms"), int):
            out.append((str(job_id), epoch, code, kw["at_ms"]))
    return out


class Outbox:
    def __init__(self, work_dir: Path):
        self.dir = Path(work_dir) / "outbox"
        self.lock = threading.Lock()
        self._seq = itertools.count(int(time.time() * 1e6))
        self._entries: list[tuple[Path, tuple]] = []
        self._load()

    def _load(self) -> None:
        if not self.dir.is_dir():
            return
        for path in sorted(self.dir.glob("*.entry")):
            try:
                entry = tuple(msgpack.unpackb(path.read_bytes(), raw=False))
            except (OSError, ValueError, msgpack.UnpackException):
                path.rename(path.with_suffix(".unreadable"))  # kept for a person to look at
                continue
            self._entries.append((path, entry))

    def add(self, *entry) -> None:
        """Keep `entry` (a tuple of plain values and bytes) on disk, fsynced, and in memory. A disk that
        refuses it (full, read-only) costs the copy on disk only: the entry is kept in memory all the
        same, replayed once Redis takes it (lost only if this agent stops first)."""
        path = self.dir / f"{next(self._seq):020d}.entry"
        tmp = path.with_suffix(".tmp")
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(msgpack.packb(list(entry), use_bin_type=True))
                f.flush()
                os.fsync(f.fileno())
            tmp.replace(path)
            fd = os.open(self.dir, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as e:
            try:
                tmp.unlink(missing_ok=True)  # (what was written of it)
            except OSError:
                pass
            log.warning("job %s: its %s is kept in memory only, the disk refuses %s (%s); it is written to "
                        "Redis once Redis takes it", entry[1] if len(entry) > 1 else "?", entry[0], self.dir,
                        e.strerror or e)
        with self.lock:
            self._entries.append((path, entry))

    def first(self) -> tuple[Path, tuple] | None:
        with self.lock:
            return self._entries[0] if self._entries else None

    def done(self, path: Path) -> None:
        with self.lock:
            self._entries = [(p, e) for p, e in self._entries if p != path]
        try:
            path.unlink(missing_ok=True)
        except OSError:  # (kept in memory only; or a disk gone read-only: a replay again is fenced, harmless)
            pass

    def attempts(self) -> set[tuple[str, int]]:
        """(job id, epoch) of every attempt with an entry waiting."""
        with self.lock:
            return {(str(e[1]), int(e[2])) for _, e in self._entries}

    def holds(self, job_id: str, epoch: int) -> bool:
        return (job_id, epoch) in self.attempts()

    def __len__(self) -> int:
        with self.lock:
            return len(self._entries)
