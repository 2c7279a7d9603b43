"""GPU sets written as text: '2xA100-40GB,2xV100-16GB' (node agents' --fake-gpus, the simulator's --nodes), and what a GPU's
name says: its family, and whether a request's --gpu-type and --gpu-mem could use it."""

from __future__ import annotations

import re
from functools import lru_cache

from .errors import InvalidRequestError
from .model import GpuInfo

#: COUNTx (optional), a type (letters, digits, _.-, no space), and its memory as -NNGB or :NN.
_FAKE = re.compile(r"(?:([0-9]+)x)?([A-Za-z0-9][A-Za-z0-9_.-]*?)(?:-([^-]*)GB|:(.*))?", re.IGNORECASE)
#: The most memory one fake GPU may have, in GB (as --gpu-mem's bound).
MAX_GPU_MEM_GB = 1e6
_EXAMPLE = "e.g. 2xA100-40GB or 4xT4:16"


def parse_fake_gpus(spec: str, *, flag: str = "--fake-gpus") -> list[GpuInfo]:
    """'2xA100-40GB,2xV100-16GB' or '4xT4:16' -> GpuInfo list, indices in order.

    COUNTx is optional (1); memory comes from a -NNGB suffix (kept in the name, as
    NVML names carry it) or from :MEM_GB.
    """
    gpus: list[GpuInfo] = []
    for part in (p.strip() for p in spec.split(",")):
        m = _FAKE.fullmatch(part)
        if not part or not m or re.fullmatch(r"[0-9]+x", m.group(2), re.IGNORECASE):
            raise InvalidRequestError(f"{flag}: {part!r} is not COUNTxTYPE-MEMGB or COUNTxTYPE:MEM_GB (a type of "
                                      f"letters, digits and _.-), {_EXAMPLE}", field=flag)
        count, kind, mem_suffix, mem_colon = m.groups()
        if mem_suffix is None and mem_colon is None:
            example = f"write e.g. {part}-40GB or {part}:40" if "-" not in kind else _EXAMPLE
            raise InvalidRequestError(f"{flag}: {part!r} gives no memory; {example}", field=flag)
        mem = _memory(mem_suffix if mem_colon is None else mem_colon, part, flag)
        name = f"{kind}-{mem_suffix}GB" if mem_colon is None else kind
        n = int(count or 1)
        if not 1 <= n <= 64:
            raise InvalidRequestError(f"{flag}: {part!r}: count {n} is out of range 1 to 64", field=flag)
        for _ in range(n):
            i = len(gpus)
            gpus.append(GpuInfo(index=i, name=f"NVIDIA {name}", mem_total_gb=mem, uuid=f"GPU-fake-{i:04d}"))
    return gpus


def _memory(text: str, part: str, flag: str) -> float:
    """A GPU's memory in GB as the spec writes it: a positive number up to MAX_GPU_MEM_GB."""
    if not re.fullmatch(r"[0-9]+(?:\.[0-9]+)?", text):
        raise InvalidRequestError(f"{flag}: {part!r}: {text!r} is not a memory size in GB; {_EXAMPLE}", field=flag)
    mem = float(text)
    if not 0 < mem <= MAX_GPU_MEM_GB:
        raise InvalidRequestError(f"{flag}: {part!r}: {text} GB is out of range; more than 0, at most "
                                  f"{MAX_GPU_MEM_GB:,.0f} GB; {_EXAMPLE}", field=flag)
    return mem


_TOKEN = re.compile(r"[a-z0-9]+")
_VENDOR = frozenset({"nvidia", "geforce", "tesla"})


_MEMORY = re.compile(r"\d+(?:gb|g)")


def _tokens(text: str) -> set[str]:
    return set(_TOKEN.findall(text.lower())) - _VENDOR


@lru_cache(maxsize=4096)  # a pure function of two short strings, asked per job x node x GPU
def gpu_family_matches(wanted: str, gpu_name: str) -> bool:
    """True when every token of `wanted` is a token of the GPU's name, case-insensitively.

    'A100' matches 'NVIDIA A100-SXM4-40GB'; 'A100-80GB' does not match that one;
    'rtx 4090' matches 'NVIDIA GeForce RTX 4090'. An empty `wanted` matches nothing.
    """
    want = _tokens(wanted)
    return bool(want) and want <= _tokens(gpu_name)


def gpu_fits(gpu_types: tuple[str, ...], gpu_mem_gb: float, gpu) -> bool:
    """Whether a request of these GPU types (any, if none) and this much memory a GPU could run on `gpu`
    (a GpuInfo) at all."""
    if gpu_mem_gb and gpu.mem_total_gb + 1e-9 < gpu_mem_gb:
        return False
    return not gpu_types or any(gpu_family_matches(t, gpu.name) for t in gpu_types)


@lru_cache(maxsize=1024)
def gpu_family(gpu_name: str) -> str:
    """A GPU's family, for a gang's --same-type: its name's words less the vendor's and its memory size.
    'NVIDIA A100-SXM4-40GB' and 'A100-SXM4-80GB' are one family ('a100 sxm4'); an A100-PCIE or a
    V100 is another."""
    words = [t for t in _TOKEN.findall(gpu_name.lower()) if t not in _VENDOR and not _MEMORY.fullmatch(t)]
    return " ".join(words) or gpu_name.lower()
