"""The simulated cluster's nodes: `--nodes 2x8xA100-80GB,...` or `--gpus N --gpus-per-node 8`."""

from __future__ import annotations

import re
from typing import Callable

from ..core.model import GpuInfo, JobSpec
from .workload import MAX_CLUSTER_GPUS

#: One part of `--nodes`: NODESxGPUSxTYPE, a node of mixed GPUs its GPUSxTYPE parts joined with '+'.
_GPUS_OF_A_NODE = re.compile(r"[0-9]+x[^x+]", re.IGNORECASE)


def make_nodes(spec: str | None, gpus: int | None, gpus_per_node: int = 8) -> list[tuple[str, tuple[GpuInfo, ...]]]:
    """`--nodes 2x8xA100-80GB,2x8xV100-32GB` or `--gpus 256 --gpus-per-node 8` -> [(name, gpus)].
    A node of mixed GPUs joins its parts with '+': `1x2xA100-40GB+2xV100-16GB`. At most
    MAX_CLUSTER_GPUS GPUs in all, checked before any node is made."""
    from ..core.errors import InvalidRequestError
    from ..core.gpuspec import parse_fake_gpus

    if spec and gpus:
        raise InvalidRequestError("give the cluster as --gpus N or as --nodes SPEC, not both", field="--nodes")
    nodes: list[tuple[str, tuple[GpuInfo, ...]]] = []
    if spec:
        parts: list[tuple[int, tuple[GpuInfo, ...]]] = []
        total = 0
        for part in (p.strip() for p in spec.split(",")):
            count, rest = _nodes_part(part)
            node_gpus = tuple(parse_fake_gpus(rest.replace("+", ","), flag="--nodes"))
            total += count * len(node_gpus)
            if total > MAX_CLUSTER_GPUS:
                raise InvalidRequestError(f"--nodes: {spec} is more than {MAX_CLUSTER_GPUS:,} GPUs, the most the "
                                          f"simulator takes", field="--nodes")
            parts.append((count, node_gpus))
        for times, node_gpus in parts:
            kind = node_gpus[0].name.replace("NVIDIA ", "").lower().replace(" ", "-")
            for _ in range(times):
                nodes.append((f"{kind}-{len(nodes):03d}", node_gpus))
    elif gpus:
        if gpus < 1 or gpus_per_node < 1:
            raise InvalidRequestError("--gpus and --gpus-per-node must be at least 1", field="--gpus")
        if gpus > MAX_CLUSTER_GPUS:
            raise InvalidRequestError(f"--gpus: {gpus} is more than {MAX_CLUSTER_GPUS:,}, the most the simulator "
                                      f"takes", field="--gpus")
        full, left = divmod(gpus, gpus_per_node)
        for size in [gpus_per_node] * full + ([left] if left else []):
            nodes.append((f"n{len(nodes):03d}",
                          tuple(GpuInfo(i, "NVIDIA GPU-80GB", 80.0) for i in range(size))))
    else:
        raise InvalidRequestError("give the cluster: --gpus N [--gpus-per-node 8] or --nodes SPEC", field="--gpus")
    return nodes


def _nodes_part(part: str) -> tuple[int, str]:
    """'2x8xA100-80GB' -> (2, '8xA100-80GB'). Each GPU kind of a node says how many: '8xA100-80GB' alone is
    refused (it reads as 8 nodes of 1 GPU, while --fake-gpus reads it as one node of 8)."""
    from ..core.errors import InvalidRequestError

    count, sep, rest = part.partition("x")
    if _counted(part) and not _counted(rest):  # '8xA100-80GB': GPUSxTYPE, with no NODES
        gpus = sum(int(piece.strip().partition("x")[0]) for piece in part.split("+"))
        old = f", or {count}x1x{rest} for {count} nodes of one" if "+" not in part and gpus > 1 else ""
        raise InvalidRequestError(f"--nodes: {part!r} gives no GPUS per node; the form is NODESxGPUSxTYPE: write "
                                  f"1x{part} for one node of {gpus} GPU{'s' if gpus != 1 else ''}{old}",
                                  field="--nodes")
    if not sep or not count.isdigit() or not _counted(rest):
        raise InvalidRequestError(f"--nodes: {part!r} is not NODESxGPUSxTYPE (a node of mixed GPUs: GPUSxTYPE parts "
                                  f"joined with '+'), e.g. 2x8xA100-80GB or 1x2xA100-40GB+2xV100-16GB",
                                  field="--nodes")
    if int(count) < 1:
        raise InvalidRequestError(f"--nodes: {part!r}: node count {int(count)} is out of range; give at least 1 node",
                                  field="--nodes")
    return int(count), rest


def _counted(gpus: str) -> bool:
    """Whether each '+' part of `gpus` is GPUSxTYPE (a count first)."""
    return all(_GPUS_OF_A_NODE.match(piece.strip()) for piece in gpus.split("+"))


def never_fits(nodes) -> Callable[[JobSpec], bool]:
    """Whether no node of the cluster (make_nodes' list), empty, could ever hold a job, as the policy
    judges it (NO_FIT_EVER, gangs across whole nodes as the simulator runs them), whatever the policy
    in force holds back (reserves, quotas)."""
    from ..core.plan import NodeView
    from ..policy.fit import GpuMemo
    from ..policy.verdicts import NeverFit

    views = [NodeView(name, gpus, 1_000_000, 1e9, tuple(g.index for g in gpus), 1_000_000, 1e9)
             for name, gpus in nodes]
    return NeverFit(views, True, GpuMemo()).check
