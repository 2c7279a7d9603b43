"""The Lua scripts in lua/, registered once per client, with typed wrappers.

Each script's header lists its KEYS, ARGV and return codes.
"""

from __future__ import annotations

from importlib import resources

from . import keys

_NAMES = ("commit_placement", "mark_running", "finish", "cancel")


class Scripts:
    def __init__(self, client, ns: str):
        self.ns = ns
        self._s = {n: client.register_script(resources.files(__package__).joinpath(f"lua/{n}.lua").read_text())
                   for n in _NAMES}

    def commit_placement(self, job_id, node, gpus, epoch, now_ms, *, share=False, client=None):
        ns = self.ns
        return self._s["commit_placement"](
            keys=[keys.job(ns, job_id), keys.node_alloc(ns, node), keys.jobs_pending(ns), keys.jobs_active(ns)],
            args=[job_id, node, ",".join(map(str, gpus)), epoch, now_ms, "1" if share else "0"], client=client)

    def mark_running(self, job_id, epoch, now_ms, pid, *, client=None):
        return self._s["mark_running"](keys=[keys.job(self.ns, job_id)], args=[epoch, now_ms, pid], client=client)

    def finish(self, job_id, node, epoch, state, exit_code, now_ms, reason="", *, client=None):
        ns = self.ns
        return self._s["finish"](
            keys=[keys.job(ns, job_id), keys.node_alloc(ns, node), keys.jobs_active(ns), keys.jobs_pending(ns)],
            args=[job_id, epoch, state, "" if exit_code is None else exit_code, now_ms, reason], client=client)

    def cancel(self, job_id, now_ms, reason, *, client=None):
        ns = self.ns
        return self._s["cancel"](keys=[keys.job(ns, job_id), keys.jobs_pending(ns)],
                                 args=[job_id, now_ms, reason], client=client)
