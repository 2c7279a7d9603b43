"""GPU processes that are no job's: reported as blocking their GPU, and killed with --kill-zombies."""

from __future__ import annotations

import logging
import os
import signal
from dataclasses import replace

from . import procs as proclist

log = logging.getLogger("dispatch.agent")


class Zombies:
    def __init__(self, supervisor, node: str, kill: bool):
        self.supervisor, self.node, self.kill = supervisor, node, kill
        self._suspects: set[int] = set()  # GPU processes owned by no job at the last look
        self._seen: set[int] = set()  # those already reported

    def mark(self, gpus: list, probe) -> list:
        """A GPU held by a process that no job of this agent owns is a zombie's: it is reported as
        blocked (the scheduler hands it to nobody) and, with kill_zombies, the process is killed."""
        try:
            on_gpus = probe.processes()
        except Exception as e:  # the list is advisory; a probe error must not stop heartbeats
            log.warning("cannot list GPU processes: %s", e)
            return gpus
        foreign = self.foreign(on_gpus)
        out = []
        for g in gpus:
            pids = foreign.get(g.index)
            if not pids:
                out.append(g)
                continue
            who = ", ".join(f"pid {p} ({proclist.command(p)})" for p in pids[:3])
            if self.kill:
                for p in pids:
                    try:
                        os.kill(p, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
            new = set(pids) - self._seen
            if new:
                log.warning("GPU %d of node %s is held by %s, which no job owns; not handed out%s", g.index,
                            self.node, who, "; killed" if self.kill else " (--kill-zombies kills them)")
                self._seen |= new
            out.append(replace(g, blocked=f"zombie: {who} holds it, owned by no job"
                                          + ("; killed" if self.kill else "")))
        return out

    def foreign(self, procs: dict[int, list[int]]) -> dict[int, list[int]]:
        """Of the GPU processes (GPU -> PIDs), those that are no job's at two looks in a row (a job's
        process is in its session, its cgroup, or carries its marks; a job being started is
        registered before its first process can show on a GPU)."""
        with self.supervisor.lock:
            runs = list(self.supervisor.running.values())
        sessions = {r.proc.pid for r in runs}
        attempts = {(r.job_id.encode(), str(r.epoch).encode()) for r in runs}
        out, suspects = {}, set()
        for gpu, pids in procs.items():
            bad = []
            for pid in pids:
                if self._owned(pid, sessions, attempts):
                    continue
                suspects.add(pid)
                if pid in self._suspects:
                    bad.append(pid)
            if bad:
                out[gpu] = bad
        self._suspects = suspects
        return out

    def _owned(self, pid: int, sessions: set[int], attempts: set[tuple[bytes, bytes]]) -> bool:
        try:
            if os.getsid(pid) in sessions:
                return True
        except (ProcessLookupError, PermissionError):
            return True  # gone: nothing to report
        if self.supervisor.cgroups is not None:
            try:
                with open(f"/proc/{pid}/cgroup") as f:
                    if f"/{self.supervisor.cgroups.name}/" in f.read():
                        return True
            except OSError:
                pass
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(e.partition(b"=")[::2] for e in f.read().split(b"\0"))
        except OSError:
            return False
        return (env.get(b"DISPATCH_JOB_ID"), env.get(b"DISPATCH_EPOCH")) in attempts
