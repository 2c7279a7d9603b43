"""A node's page (/node/<name>, from /api/node/<name>): its heartbeat's age, alive or dead, its drain
mark, CPUs and memory, each GPU (model, utilization, memory, the jobs and users holding it, a zombie
blocking it), the jobs running there and the scheduler's recent decisions about it.

Reads one node: its heartbeat record, its allocation and drain mark (store/nodes.read_node), the records
of the jobs placed there (the active index's node fields: a CPU-only job holds no GPU) and the decision log (at most its DECISIONS_KEPT newest entries); never
the rest of the cluster. Read-only.
"""

from __future__ import annotations

from ..clock import now_ms
from ..store.decisions import read_decisions
from ..store.job_record import placed_on
from ..store.jobs import read_jobs
from ..store.nodes import holder_ids, read_node

#: The decisions about the node the page lists (newest first).
DECISIONS_SHOWN = 20


def holders_of(alloc: dict[int, str]) -> dict[int, list[str]]:
    """GPU index -> the job ids holding it, from the allocation hash (a shared GPU's value is
    "~id1,id2", lua/commit_placement.lua)."""
    return {g: holder_ids(v) for g, v in alloc.items()}


def node_view(client, ns: str, name: str, node_timeout_s: float) -> dict:
    """What the node's page shows (NotFoundError for a node with no record)."""
    now = now_ms()
    n = read_node(client, ns, name)
    held = holders_of(n.alloc)
    on_node = {j for ids in held.values() for j in ids} | set(placed_on(client, ns, name))  # (CPU-only jobs too)
    jobs = {j["id"]: j for j in read_jobs(client, ns, sorted(on_node))}
    alive = bool(n.seen_ms) and n.alive(now, node_timeout_s)
    gpus = []
    for g in n.gpus:
        on = [jobs[j] for j in held.get(g.index, []) if j in jobs]
        gpus.append({"index": g.index, "name": g.name.replace("NVIDIA ", ""), "uuid": g.uuid, "util_pct": g.util_pct,
                     "mem_used_gb": g.mem_used_gb, "mem_total_gb": g.mem_total_gb,
                     "jobs": [j["id"] for j in on], "users": sorted({j["user"] for j in on}),
                     "blocked": g.blocked or None,
                     "state": "dead" if not alive else "blocked" if g.blocked else "held" if on else
                     "drained" if n.drain else "free"})  # (drained: free, but no job may start there)
    running = sorted(jobs.values(), key=lambda j: int(j["id"]) if j["id"].isdigit() else 0)
    return {"name": n.name, "now": now / 1000.0, "alive": alive, "timeout_s": node_timeout_s,
            "seen_at": n.seen_ms / 1000.0 if n.seen_ms else None,
            "seen_s_ago": round((now - n.seen_ms) / 1000.0, 1) if n.seen_ms else None,
            "cpus": n.cpus, "mem_gb": n.mem_gb,
            "cpus_used": sum(j["cpus"] for j in running), "mem_used_gb": round(sum(j["mem_gb"] for j in running), 1),
            "drain": None if n.drain is None else {"reason": n.drain.reason, "by": n.drain.by,
                                                   "at": n.drain.at_ms / 1000.0 if n.drain.at_ms else None},
            "gpus": gpus,
            "jobs": [{"id": j["id"], "name": j["name"], "user": j["user"], "team": j["team"], "class": j["priority"],
                      "state": j["state"], "gpus": sorted(g for g, ids in held.items() if j["id"] in ids),
                      "run_s": round(now / 1000.0 - j["started_at"], 1) if j["started_at"] else None}
                     for j in running],
            "decisions": read_decisions(client, ns, node=name, limit=DECISIONS_SHOWN)}
