"""Reading a node's GPUs: NVML on a real GPU host, or a fake set for CPU machines.

Both probes return the same GpuInfo list, so nothing else knows which is in use.
"""

from __future__ import annotations

import re

from dispatcher.errors import InvalidRequestError, NoGpuError
from dispatcher.model import GpuInfo

_FAKE = re.compile(r"^(?:(\d+)x)?([A-Za-z0-9][A-Za-z0-9 _.-]*?)(?:-(\d+(?:\.\d+)?)GB|:(\d+(?:\.\d+)?))?$",
                   re.IGNORECASE)


def parse_fake_gpus(spec: str) -> list[GpuInfo]:
    """'2xA100-40GB,2xV100-16GB' or '4xT4:16' -> GpuInfo list, indices in order.

    COUNTx is optional (1); memory comes from a -NNGB suffix (kept in the name, as
    NVML names carry it) or from :MEM_GB.
    """
    gpus: list[GpuInfo] = []
    for part in (p.strip() for p in spec.split(",")):
        m = _FAKE.match(part)
        if not part or not m:
            raise InvalidRequestError(
                f"--fake-gpus: {part!r} is not COUNTxTYPE-MEMGB or COUNTxTYPE:MEM_GB, e.g. 2xA100-40GB",
                field="--fake-gpus")
        count, kind, mem_suffix, mem_colon = m.groups()
        if mem_suffix is None and mem_colon is None:
            raise InvalidRequestError(f"--fake-gpus: {part!r} gives no memory; write e.g. {part}-40GB or {part}:40",
                                      field="--fake-gpus")
        mem = float(mem_suffix or mem_colon)
        name = f"{kind}-{mem_suffix}GB" if mem_suffix else kind
        n = int(count or 1)
        if not 1 <= n <= 64:
            raise InvalidRequestError(f"--fake-gpus: count {n} is out of range 1 to 64", field="--fake-gpus")
        for _ in range(n):
            i = len(gpus)
            gpus.append(GpuInfo(index=i, name=f"NVIDIA {name}", mem_total_gb=mem, uuid=f"GPU-fake-{i:04d}"))
    return gpus


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
