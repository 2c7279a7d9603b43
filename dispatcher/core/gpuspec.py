"""GPU sets written as text: '2xA100-40GB,2xV100-16GB' (node agents' --fake-gpus, the simulator's --nodes)."""

from __future__ import annotations

import re

from .errors import InvalidRequestError
from .model import GpuInfo

_FAKE = re.compile(r"^(?:(\d+)x)?([A-Za-z0-9][A-Za-z0-9 _.-]*?)(?:-(\d+(?:\.\d+)?)GB|:(\d+(?:\.\d+)?))?$",
                   re.IGNORECASE)


def parse_fake_gpus(spec: str, *, flag: str = "--fake-gpus") -> list[GpuInfo]:
    """'2xA100-40GB,2xV100-16GB' or '4xT4:16' -> GpuInfo list, indices in order.

    COUNTx is optional (1); memory comes from a -NNGB suffix (kept in the name, as
    NVML names carry it) or from :MEM_GB.
    """
    gpus: list[GpuInfo] = []
    for part in (p.strip() for p in spec.split(",")):
        m = _FAKE.match(part)
        if not part or not m:
            raise InvalidRequestError(
                f"{flag}: {part!r} is not COUNTxTYPE-MEMGB or COUNTxTYPE:MEM_GB, e.g. 2xA100-40GB",
                field=flag)
        count, kind, mem_suffix, mem_colon = m.groups()
        if mem_suffix is None and mem_colon is None:
            raise InvalidRequestError(f"{flag}: {part!r} gives no memory; write e.g. {part}-40GB or {part}:40",
                                      field=flag)
        mem = float(mem_suffix or mem_colon)
        name = f"{kind}-{mem_suffix}GB" if mem_suffix else kind
        n = int(count or 1)
        if not 1 <= n <= 64:
            raise InvalidRequestError(f"{flag}: count {n} is out of range 1 to 64", field=flag)
        for _ in range(n):
            i = len(gpus)
            gpus.append(GpuInfo(index=i, name=f"NVIDIA {name}", mem_total_gb=mem, uuid=f"GPU-fake-{i:04d}"))
    return gpus


