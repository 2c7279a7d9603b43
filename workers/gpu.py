"""Reading a node's GPUs: NVML on a real GPU host, or a fake set for CPU machines.

Both probes return the same GpuInfo list, so nothing else knows which is in use.
"""

from __future__ import annotations

from dispatcher.errors import NoGpuError
from dispatcher.gpuspec import parse_fake_gpus
from dispatcher.model import GpuInfo

class FakeProbe:
    """GPUs that exist only on paper; utilization and used memory stay 0."""

    def __init__(self, spec: str):
        self._gpus = parse_fake_gpus(spec)

    def gpus(self) -> list[GpuInfo]:
        return list(self._gpus)

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

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError:
            pass


def open_probe(fake_gpus: str | None):
    return FakeProbe(fake_gpus) if fake_gpus else NvmlProbe()
