"""Peak GPU memory per job, measured from the node's GPU process lists (NVML, or the fake probe).

Each heartbeat the agent asks the probe which processes use how much memory on which GPU,
finds each process's job by its session (every job leads its own session, as zombie detection
does), and records in the job hash `peak_gpu_mem_gb`, the most memory the job held on one of its
GPUs (the figure to compare with --gpu-mem), whenever it grows. finish.lua copies it into the
job's run history when the job succeeds (dispatcher/store/history.py).
"""

from __future__ import annotations

import logging
import os

from dispatcher.store import job_record

from .running import Stopping

log = logging.getLogger("dispatch.agent")


class PeakMemory:
    def __init__(self, client, ns: str, probe, supervisor):
        self.client, self.ns, self.probe, self.supervisor = client, ns, probe, supervisor
        self.peaks: dict[tuple[str, int], float] = {}  # (job id, epoch) -> the peak recorded
        self._warned = False

    def sample(self) -> dict[str, float]:
        """Read the GPUs' process memory once and record the peaks that grew; returns them (job -> GB).
        A probe error is logged once and costs this sample only."""
        try:
            by_gpu = self.probe.memory()
        except Exception as e:  # advisory: never stop the heartbeat
            if not self._warned:
                log.warning("cannot read GPU process memory: %s", e)
                self._warned = True
            return {}
        with self.supervisor.lock:
            jobs = {r.proc.pid: (r.job_id, r.epoch) for r in self.supervisor.running.values()
                    if r.stopping is not Stopping.STALE}
        now: dict[tuple[str, int], float] = {}
        for pids in by_gpu.values():
            on_gpu: dict[tuple[str, int], float] = {}
            for pid, gb in pids.items():
                try:
                    job = jobs.get(os.getsid(pid))
                except OSError:  # gone since the probe saw it
                    continue
                if job is not None:
                    on_gpu[job] = on_gpu.get(job, 0.0) + gb
            for job, gb in on_gpu.items():
                now[job] = max(now.get(job, 0.0), gb)
        grew = {job: round(gb, 2) for job, gb in now.items() if round(gb, 2) > self.peaks.get(job, 0.0)}
        if grew:
            pipe = self.client.pipeline(transaction=False)
            for (job_id, _), gb in grew.items():
                job_record.set_peak_memory(pipe, self.ns, job_id, gb)
            pipe.execute()
            self.peaks.update(grew)
        self.peaks = {job: gb for job, gb in self.peaks.items() if job in set(jobs.values())}
        return {job_id: gb for (job_id, _), gb in grew.items()}
