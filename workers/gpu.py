"""Reading a node's GPUs: NVML on a real GPU host, or a fake set for CPU machines.

Both probes return the same GpuInfo list, so nothing else knows which is in use.
"""

from __future__ import annotations

from dispatcher.core.errors import NoGpuError
from dispatcher.core.gpuspec import parse_fake_gpus
from dispatcher.core.model import GpuInfo

from .procs import environs

#: With --fake-gpus, a job's environment variable that says how many GB it "uses" on each GPU.
FAKE_MEM_VAR = "DISPATCH_FAKE_GPU_MEM_GB"
#: With --fake-gpus, a job's environment variable that says how busy (utilization, percent) its GPUs are.
FAKE_UTIL_VAR = "DISPATCH_FAKE_GPU_UTIL"


def _env_number(env, name: str, lo: float, hi: float) -> float:
    """The number a process's environment gives `name`, if it is one in [lo, hi]; else 0."""
    prefix = name.encode() + b"="
    raw = next((var[len(prefix):] for var in env if var.startswith(prefix)), b"")
    try:
        value = float(raw) if raw else 0.0
    except ValueError:
        return 0.0
    return value if lo <= value <= hi else 0.0


class FakeProbe:
    """GPUs that exist only on paper; utilization and used memory are 0 unless a job's environment
    says otherwise (FAKE_UTIL_VAR, FAKE_MEM_VAR).

    A process "uses" fake GPU i of node N when its environment has DISPATCH_NODE=N and i in
    CUDA_VISIBLE_DEVICES, as every job the agent starts does; so a leftover job process, or one
    started by hand that way, shows up in processes() as a real CUDA process does under NVML. A job
    of another namespace (DISPATCH_NAMESPACE), or started by another agent (its DISPATCH_JOB_SOCKET is
    not `channel`, this agent's), is another fake cluster's, even on a node of the same name: two fake
    clusters on one machine (two `dispatch up`s, each with its state directory) do not see each
    other's jobs as zombies. A process with neither mark (started by hand) is this node's."""

    def __init__(self, spec: str, node: str = "", ns: str = "", channel: str = ""):
        self._gpus = parse_fake_gpus(spec)
        self.node, self.ns = node, ns
        self.channel = f"DISPATCH_JOB_SOCKET={channel}".encode() if channel else b""

    def gpus(self) -> list[GpuInfo]:
        """The fake GPUs; one used by a process whose environment sets FAKE_UTIL_VAR (e.g. a job
        submitted with --env DISPATCH_FAKE_GPU_UTIL=90) reports that utilization (the most of them)."""
        from dataclasses import replace

        util: dict[int, float] = {}
        for _, env, gpus in self._on_gpus():
            busy = _env_number(env, FAKE_UTIL_VAR, 0.0, 100.0)
            for g in gpus:
                util[g] = max(util.get(g, 0.0), busy)
        return [replace(g, util_pct=util[g.index]) if util.get(g.index) else g for g in self._gpus]

    def _on_gpus(self):
        """(pid, its environment, the fake GPUs it uses) for each process on this node's fake GPUs."""
        mark, own_ns = f"DISPATCH_NODE={self.node}".encode(), f"DISPATCH_NAMESPACE={self.ns}".encode()
        for pid, env in environs():
            if mark not in env:
                continue
            if self.ns and own_ns not in env and any(v.startswith(b"DISPATCH_NAMESPACE=") for v in env):
                continue
            if self.channel and self.channel not in env and any(v.startswith(b"DISPATCH_JOB_SOCKET=") for v in env):
                continue
            for var in env:
                if var.startswith(b"CUDA_VISIBLE_DEVICES="):
                    gpus = [int(g) for g in var.split(b"=", 1)[1].split(b",") if g.strip().isdigit()]
                    if gpus:
                        yield pid, env, gpus

    def processes(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for pid, _, gpus in self._on_gpus():
            for g in gpus:
                out.setdefault(g, []).append(pid)
        return out

    def memory(self) -> dict[int, dict[int, float]]:
        """GPU index -> {pid: GB}, as NvmlProbe.memory. A fake process uses what its environment says
        in FAKE_MEM_VAR (GB on each of its GPUs), counted for the leader of its session only (a job's
        first process), so a job that sets it with --env shows that peak; others use 0."""
        import os

        out: dict[int, dict[int, float]] = {}
        for pid, env, gpus in self._on_gpus():
            try:
                leader = os.getsid(pid) == pid
            except OSError:
                leader = False
            used = _env_number(env, FAKE_MEM_VAR, 0.0, 1e6) if leader else 0.0
            for g in gpus:
                out.setdefault(g, {})[pid] = used
        return out

    def close(self) -> None:
        pass


class NvmlProbe:
    """GPUs read through NVML (package nvidia-ml-py, imported as pynvml)."""

    def __init__(self):
        try:
            import pynvml
        except ImportError as e:  # pragma: no cover - it is a dependency
            raise NoGpuError(f"pynvml is not installed ({e})") from None
        self._nvml = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            raise NoGpuError(str(e) or type(e).__name__) from None

    def gpus(self) -> list[GpuInfo]:
        nv = self._nvml
        out = []
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            name = nv.nvmlDeviceGetName(h)
            uuid = nv.nvmlDeviceGetUUID(h)
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            try:
                util = float(nv.nvmlDeviceGetUtilizationRates(h).gpu)
            except nv.NVMLError:
                util = 0.0
            out.append(GpuInfo(index=i, name=name.decode() if isinstance(name, bytes) else name,
                               mem_total_gb=round(mem.total / 1e9, 1),
                               uuid=uuid.decode() if isinstance(uuid, bytes) else uuid,
                               mem_used_gb=round(mem.used / 1e9, 2), util_pct=util))
        return out

    def processes(self) -> dict[int, list[int]]:
        """GPU index -> PIDs of the compute and graphics processes NVML sees on it."""
        nv = self._nvml
        out: dict[int, list[int]] = {}
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            pids = set()
            for get in (nv.nvmlDeviceGetComputeRunningProcesses, nv.nvmlDeviceGetGraphicsRunningProcesses):
                try:
                    pids.update(p.pid for p in get(h))
                except nv.NVMLError:
                    pass
            if pids:
                out[i] = sorted(pids)
        return out

    def memory(self) -> dict[int, dict[int, float]]:
        """GPU index -> {pid: GB of that GPU's memory the process uses}, from NVML's process lists
        (a process NVML reports no figure for, e.g. without the rights to see it, is left out)."""
        nv = self._nvml
        out: dict[int, dict[int, float]] = {}
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            for get in (nv.nvmlDeviceGetComputeRunningProcesses, nv.nvmlDeviceGetGraphicsRunningProcesses):
                try:
                    procs = get(h)
                except nv.NVMLError:
                    continue
                for p in procs:
                    used = getattr(p, "usedGpuMemory", None)
                    if isinstance(used, int) and used >= 0:  # NVML_VALUE_NOT_AVAILABLE comes back as None
                        on_gpu = out.setdefault(i, {})
                        on_gpu[p.pid] = max(on_gpu.get(p.pid, 0.0), used / 1e9)  # in both lists: once
        return out

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError:
            pass


def open_probe(fake_gpus: str | None, node: str = "", ns: str = "", channel: str = ""):
    return FakeProbe(fake_gpus, node, ns, channel) if fake_gpus else NvmlProbe()
