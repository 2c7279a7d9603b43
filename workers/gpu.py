"""Reading a node's GPUs: NVML on a real GPU host, or a fake set for CPU machines.

Both probes return the same GpuInfo list, so nothing else knows which is in use.
"""

from __future__ import annotations

from dispatcher.errors import NoGpuError
from dispatcher.gpuspec import parse_fake_gpus
from dispatcher.model import GpuInfo

from .procs import environs

class FakeProbe:
    """GPUs that exist only on paper; utilization and used memory stay 0.

    A process "uses" fake GPU i of node N when its environment has DISPATCH_NODE=N and i in
    CUDA_VISIBLE_DEVICES, as every job the agent starts does; so a leftover job process, or one
    started by hand that way, shows up in processes() as a real CUDA process does under NVML."""

    def __init__(self, spec: str, node: str = ""):
        self._gpus = parse_fake_gpus(spec)
        self.node = node

    def gpus(self) -> list[GpuInfo]:
        return list(self._gpus)

    def processes(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        mark = f"DISPATCH_NODE={self.node}".encode()
        for pid, env in environs():
            if mark not in env:
                continue
            for var in env:
                if var.startswith(b"CUDA_VISIBLE_DEVICES="):
                    for g in var.split(b"=", 1)[1].split(b","):
                        if g.strip().isdigit():
                            out.setdefault(int(g), []).append(pid)
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

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError:
            pass


def open_probe(fake_gpus: str | None, node: str = ""):
    return FakeProbe(fake_gpus, node) if fake_gpus else NvmlProbe()
