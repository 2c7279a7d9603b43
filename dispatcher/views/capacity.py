"""Free capacity by GPU model: how many GPUs of each model are free and usable now, and on how many
nodes a job of 1, 2, 4 or 8 of them could start ("can a 4xA100 job start now?", before the queue is
counted: `dispatch why --fresh` and `eta` count it). Pure: the caller passes the node records and the
running jobs it read; `dispatch nodes --free`, the board and the page show it. And why a job the last
cycle did not reach waits (short_of; fill_unreached reads what it needs).
"""

from __future__ import annotations

from ..core.gpuspec import gpu_fits
from ..store.samples import holders, node_use

#: The job sizes the view answers for.
SIZES = (1, 2, 4, 8)


def capacity(nodes, running, now_ms: int, node_timeout_s: float, *, taken=None, use=None,
             stranded=None) -> list[dict]:
    """One row per GPU model (name and memory) on live, undrained nodes: nodes, GPUs (zombie-blocked
    ones left out), free GPUs, the free ones stranded (`stranded`: the (node, index) pairs samples.figures
    found no waiting job can use; without it, those with no CPU or memory left beside them), and for
    each size in SIZES the nodes where that many of its free GPUs are usable now. `taken`, `use`:
    holders(running) and node_use(running), when the caller has them."""
    taken = holders(running) if taken is None else taken
    cpus_used, mem_used = node_use(running) if use is None else use
    rows: dict[tuple[str, float], dict] = {}
    for n in sorted(nodes, key=lambda n: n.name):
        if not n.alive(now_ms, node_timeout_s) or n.drain is not None:
            continue
        room = n.cpus - cpus_used.get(n.name, 0) >= 1 and n.mem_gb - mem_used.get(n.name, 0.0) >= 1
        here: dict[tuple[str, float], int] = {}
        for g in n.gpus:
            key = (g.name.replace("NVIDIA ", ""), g.mem_total_gb)
            row = rows.get(key)
            if row is None:
                row = rows[key] = {"model": key[0], "mem_gb": key[1], "nodes": 0, "gpus": 0, "free": 0,
                                   "stranded": 0, "fits": {str(s): 0 for s in SIZES}, "_seen": set()}
            if n.name not in row["_seen"]:
                row["_seen"].add(n.name)
                row["nodes"] += 1
            if g.blocked:
                continue
            row["gpus"] += 1
            if (n.name, g.index) not in taken:
                row["free"] += 1
                row["stranded"] += (n.name, g.index) in stranded if stranded is not None else not room
                here[key] = here.get(key, 0) + (1 if room else 0)
        for key, usable in here.items():
            for s in SIZES:
                rows[key]["fits"][str(s)] += usable >= s
    out = sorted(rows.values(), key=lambda r: (r["model"], r["mem_gb"]))
    for r in out:
        del r["_seen"]
    return out


def describe(rows: list[dict]) -> list[list]:
    """Table rows: model, nodes, GPUs, free (stranded), and the nodes that fit each size now."""
    return [[r["model"], r["nodes"], r["gpus"],
             f"{r['free']}" + (f" ({r['stranded']} stranded)" if r["stranded"] else ""),
             *(r["fits"][str(s)] for s in SIZES)] for r in rows]


def free_by_kind(nodes, running) -> tuple[dict, list[dict]]:
    """What short_of reads of a cluster, once for many jobs: a GpuInfo of each GPU kind (name and memory)
    on its undrained nodes, and per node {kind: [usable GPUs, free ones]}."""
    taken = {(r.node, g) for r in running for g in r.gpus}
    kinds: dict[tuple, object] = {}
    per_node = []
    for n in nodes:
        here: dict[tuple, list[int]] = {}
        for g in n.gpus if n.drain is None else ():
            if not g.blocked:
                kind = (g.name, g.mem_total_gb)
                kinds.setdefault(kind, g)
                counts = here.setdefault(kind, [0, 0])
                counts[0] += 1
                counts[1] += (n.name, g.index) not in taken
        per_node.append(here)
    return kinds, per_node


def short_of(cluster: tuple[dict, list[dict]], job: dict) -> str:
    """Why no node could take one-node `job` (a job view) now: GPUs of its types and memory, free on one
    undrained node, too few everywhere; "" if one has them, or for a job of whole nodes or a sharer. For
    the jobs a cycle did not reach (their group's first job got the verdict), whose one rest reason
    speaks of no job in particular. `cluster`: free_by_kind's."""
    kinds, per_node = cluster
    need = job["min_gpus"] or job["gpus_requested"]  # (an elastic job starts on its least)
    if not need or job["nodes"] > 1 or job["share"] or need > max((sum(c[0] for c in here.values())
                                                                    for here in per_node), default=0):
        return ""
    types, mem_gb = tuple(job["gpu_types"]), job["gpu_mem_gb"]
    usable = {k for k, g in kinds.items() if gpu_fits(types, mem_gb, g)}
    best = max((sum(c[1] for k, c in here.items() if k in usable) for here in per_node), default=0)
    if best >= need:
        return ""
    matching = sum(c[0] for here in per_node for k, c in here.items() if k in usable)
    what = f"{need}x{'|'.join(job['gpu_types'])}" if job["gpu_types"] else f"{need} GPU{'s' if need > 1 else ''}"
    mem = f" of {job['gpu_mem_gb']:g} GB or more" if job["gpu_mem_gb"] else ""
    return (f"needs {what}{mem}: at most {best} of those free on one node now ({matching} in the cluster that "
            "take jobs); jobs like it wait as the first of them was told (dispatch why --fresh judges it now)")


def fill_unreached(client, ns: str, jobs: list[dict]) -> None:
    """The pending jobs among these views with no reason of their own (the last cycle did not reach
    them) get short_of's, from the cluster the leader published (one read, one answer per request), or
    else the cycle's rest reason (store.stats.fill_rest_reason)."""
    from ..store import cluster
    from ..store.stats import fill_rest_reason

    todo = [j for j in jobs if j["state"] == "pending" and not j["reason"] and j["gpus_requested"]]
    pub = cluster.read(client, ns) if todo else None
    kinds = free_by_kind(pub.nodes, pub.running) if pub is not None else None
    said: dict[tuple, str] = {}
    for j in todo if pub is not None else ():
        key = (j["gpus_requested"], j["min_gpus"], tuple(j["gpu_types"]), j["gpu_mem_gb"], j["nodes"], j["share"])
        if key not in said:
            said[key] = short_of(kinds, j)
        j["reason"] = said[key]
    fill_rest_reason(client, ns, jobs)
