"""Resource fit: which GPUs of a node a job may use, and how tightly it packs.

GPU type and minimum memory are hard constraints; packing is a score. A gang's --same-type keeps
its nodes on one GPU family (gpu_family, by_family). A cycle asks which GPUs a
request may use per job x node: its GpuMemo (one per cycle, owned by the caller) answers each
(GPU list, request) once. The module-level gpu_usable, usable, usable_count and fits_ever ask the
same of a memo of their own, for callers outside a cycle.
"""

from __future__ import annotations

from typing import NamedTuple

from ..core.gpuspec import gpu_family, gpu_fits
from ..core.plan import NodeView
from ..core.model import JobSpec



def by_family(job: JobSpec, node: NodeView, indices) -> dict[str, list[int]]:
    """`indices` of `node` by GPU family, in their order, for a gang that keeps to one family
    (job.same_type); all under "" for one that may mix them."""
    if not job.same_type:
        return {"": list(indices)}
    out: dict[str, list[int]] = {}
    for i in indices:
        out.setdefault(gpu_family(node.gpu(i).name), []).append(i)
    return out


# -- fit facts per (request, GPU list): asked per job x node, the same few answers, per cycle ---------
class GpuFacts(NamedTuple):
    """What a node's GPU list is, for fit: `kind` names it by content (indices, names, memory), so
    nodes of one kind give every request the same usable GPUs; `alike`: all its GPUs have one name
    and memory (then only how many are free matters to an exclusive job); its smallest GPU memory."""

    kind: int
    alike: bool
    min_mem_gb: float


class GpuMemo:
    """What one cycle learns about its nodes' GPU lists, kept by the caller for that cycle (the
    policy's Cycle makes one): a node's GpuFacts, and which GPUs of a kind a request may use. The
    same few GPU lists recur across a cycle's nodes and every job x node asks, so each answer is
    worked out once per cycle. Nodes are told apart by name (a snapshot has one view per name)."""

    __slots__ = ("_facts", "_kinds", "_usable", "_family")

    def __init__(self) -> None:
        self._facts: dict[str, GpuFacts] = {}  # node name -> its GpuFacts
        self._kinds: dict[tuple, int] = {}  # (index, name, memory) per GPU -> kind number
        self._usable: dict[tuple, frozenset] = {}  # (kind number, gpu_types, gpu_mem_gb) -> usable indices
        self._family: dict[int, str | None] = {}  # kind number -> its one GPU family (None: several)

    def family(self, node: NodeView) -> str | None:
        """The one GPU family of `node`'s GPUs (gpu_family), None if they are of several."""
        kind = self.facts(node).kind
        if kind not in self._family:
            families = {gpu_family(g.name) for g in node.gpus}
            self._family[kind] = next(iter(families)) if len(families) == 1 else None
        return self._family[kind]

    def facts(self, node: NodeView) -> GpuFacts:
        """The GpuFacts of `node`'s GPU list."""
        got = self._facts.get(node.name)
        if got is None:
            gpus = node.gpus
            content = tuple((g.index, g.name, g.mem_total_gb) for g in gpus)
            got = self._facts[node.name] = GpuFacts(
                self._kinds.setdefault(content, len(self._kinds)), len({c[1:] for c in content}) == 1,
                min((g.mem_total_gb for g in gpus), default=float("inf")))
        return got

    def _usable_set(self, job: JobSpec, node: NodeView) -> frozenset:
        key = (self.facts(node).kind, job.gpu_types, job.gpu_mem_gb)
        got = self._usable.get(key)
        if got is None:
            got = self._usable[key] = frozenset(g.index for g in node.gpus if gpu_ok(job, g))
        return got

    def gpu_usable(self, job: JobSpec, node: NodeView, index: int) -> bool:
        """May `job` run on GPU `index` of `node` (type and memory; not whether it is free)?"""
        if not job.gpu_types and not job.gpu_mem_gb:
            return True
        return index in self._usable_set(job, node)

    def usable(self, job: JobSpec, node: NodeView, indices) -> list[int]:
        """The GPUs among `indices` of `node` that `job` may use, in their order."""
        if not job.gpu_types and not job.gpu_mem_gb:  # any GPU will do
            return list(indices)
        ok = self._usable_set(job, node)
        if len(ok) == len(node.gpus):  # every GPU of the node will do
            return list(indices)
        return [i for i in indices if i in ok]

    def usable_count(self, job: JobSpec, node: NodeView) -> int:
        """How many of the node's GPUs `job` may use (type and memory), free or not."""
        if not job.gpu_types and not job.gpu_mem_gb:  # any GPU will do
            return len(node.gpus)
        return len(self._usable_set(job, node))

    def fits_ever(self, job: JobSpec, node: NodeView) -> bool:
        """Could `job` run on `node` if the node were empty?"""
        if job.cpus > node.cpus or job.mem_gb > node.mem_gb + 1e-9 or job.gpus > len(node.gpus):
            return False
        return self.usable_count(job, node) >= job.gpus


# -- the same questions without a cycle (one-off callers and tests): a memo of their own ---------
def gpu_usable(job: JobSpec, node: NodeView, index: int) -> bool:
    return GpuMemo().gpu_usable(job, node, index)


def usable(job: JobSpec, node: NodeView, indices) -> list[int]:
    return GpuMemo().usable(job, node, indices)


def usable_count(job: JobSpec, node: NodeView) -> int:
    return GpuMemo().usable_count(job, node)


def fits_ever(job: JobSpec, node: NodeView) -> bool:
    return GpuMemo().fits_ever(job, node)


def gpu_ok(job: JobSpec, gpu) -> bool:
    """Whether `job` (its gpu_types and gpu_mem_gb) could run on `gpu` (a GpuInfo) at all."""
    return gpu_fits(job.gpu_types, job.gpu_mem_gb, gpu)


def choose_gpus(job: JobSpec, node: NodeView, candidates: list[int],
                shared_used: dict[int, float] | None = None) -> tuple[int, ...]:
    """Pick `job.gpus` GPUs out of usable `candidates`.

    Exclusive jobs: the smallest memory that fits first (keeping big GPUs for big
    jobs), then the lowest index; all of one GPU family (gpu_family) when one family
    among the candidates has enough, that of the smallest such GPUs, so that a
    2-GPU job on a node of A100s and V100s does not get one of each while two of a
    kind are free. Sharing jobs: GPUs already shared first, the one left fullest
    after this job first, so that sharing packs instead of spreading.
    Assumes enough candidates.
    """
    if job.share and shared_used is not None:
        def key(i):
            left = node.gpu(i).mem_total_gb - shared_used.get(i, 0.0) - job.gpu_mem_gb
            return (i not in shared_used, left, i)
        return tuple(sorted(sorted(candidates, key=key)[: job.gpus]))

    def key(i):
        return (node.gpu(i).mem_total_gb, i)
    ranked = sorted(candidates, key=key)
    if job.gpus >= 2 and len({g.name for g in node.gpus}) > 1:  # a node of one model is one family (hot path)
        families: dict[str, list[int]] = {}
        for i in ranked:
            families.setdefault(gpu_family(node.gpu(i).name), []).append(i)
        whole = [f[: job.gpus] for f in families.values() if len(f) >= job.gpus]
        if whole and len(families) > 1:
            ranked = min(whole, key=lambda f: [key(i) for i in f])
    return tuple(sorted(ranked[: job.gpus]))


def fit_score(job: JobSpec, node: NodeView, chosen: tuple[int, ...], free_gpus_after: int,
              free_cpus_after: int, *, ref_mem_gb: float = 0.0,
              shared_used: dict[int, float] | None = None) -> float:
    """Best-fit packing score in [0, 100]; higher is a tighter fit.

    GPU job:   packing = 1 - free GPUs after / GPUs on the node (a sharing job: the
               mean fraction of its GPUs' memory in use after it lands);
               memory  = mean over chosen GPUs of max(need, ref_mem_gb) / size, where
               ref_mem_gb is the smallest GPU in the cluster, so a job that states
               no need still prefers small GPUs and leaves big ones for big jobs.
    CPU job:   packing = 1 - free CPUs after / CPUs on the node;
               memory  = share of the node's GPUs already busy (1 on a node without
               GPUs), so CPU-only work avoids stranding idle GPUs without CPUs.
    score    = 100 * (0.7 * packing + 0.3 * memory)
    """
    if job.gpus:
        if job.share and shared_used is not None:
            packing = sum(min(1.0, (shared_used.get(i, 0.0) + job.gpu_mem_gb) / node.gpu(i).mem_total_gb)
                          for i in chosen) / len(chosen)
        else:
            packing = 1.0 - free_gpus_after / max(1, len(node.gpus))
        need = max(job.gpu_mem_gb, ref_mem_gb)
        memory = (sum(need / max(node.gpu(i).mem_total_gb, 1e-9) for i in chosen) / len(chosen)) if need else 1.0
    else:
        packing = 1.0 - free_cpus_after / max(1, node.cpus)
        memory = 1.0 - free_gpus_after / len(node.gpus) if node.gpus else 1.0
    return 100.0 * (0.7 * max(0.0, packing) + 0.3 * min(1.0, max(0.0, memory)))


def describe_gang(job: JobSpec) -> str:
    """'2 nodes with 4 free A100 ≥40 GB GPUs each (one GPU type), 4 CPUs and 64 GB RAM on each'."""
    kind = "|".join(job.gpu_types) + " " if job.gpu_types else ""
    mem = f"≥{job.gpu_mem_gb:g} GB " if job.gpu_mem_gb else ""
    text = f"{job.nodes} nodes with {job.gpus_per_node} free {kind}{mem}GPUs each"
    text += " (one GPU type)" if job.same_type else ""
    if job.cpus > 1 or job.mem_gb:
        text += f", {job.cpus} CPU{'s' if job.cpus != 1 else ''}"
        text += f" and {job.mem_gb:g} GB RAM on each" if job.mem_gb else " on each"
    return text


def describe_need(job: JobSpec) -> str:
    """'2xA100 ≥30 GB, 4 CPUs, 64 GB RAM' — the request in one phrase."""
    parts = []
    if job.gpus:
        kind = "|".join(job.gpu_types) or "GPU"
        mem = f" ≥{job.gpu_mem_gb:g} GB" if job.gpu_mem_gb else ""
        parts.append(f"{job.gpus}x{kind}{mem}{' shared' if job.share else ''}")
    parts.append(f"{job.cpus} CPU{'s' if job.cpus != 1 else ''}")
    if job.mem_gb:
        parts.append(f"{job.mem_gb:g} GB RAM")
    return ", ".join(parts)
