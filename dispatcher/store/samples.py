"""Cluster figures over time: GPU allocation, utilization, fragmentation, queue length.

The leading scheduler records one sample per SAMPLE_EVERY_MS into a capped stream
(keys.samples) from the snapshot it has just read, so sampling costs no extra read
and there is exactly one writer however many dashboards run. The dashboard, `dispatch
top` and /metrics read them for the charts and for the alerts that need a duration
("utilization low for 30 minutes").
"""

from __future__ import annotations

import json

from ..core.model import IDLE_UTIL_PCT
from . import keys
from .connect import text, tolerant
from .quarantine import is_time

#: One sample per this many milliseconds (the first cycle in each slot records it).
SAMPLE_EVERY_MS = 15_000
#: Samples kept: 12 hours of them (approximate trim).
SAMPLES_KEPT = 12 * 3600 * 1000 // SAMPLE_EVERY_MS
#: At most this many idle GPUs are named in one sample (the count is always exact).
IDLE_NAMED = 512
#: The users (and teams) holding the most GPUs a sample names; the rest are summed under OTHERS.
TOP_HOLDERS = 20
OTHERS = "others"


def smallest_request(pending) -> int:
    """The fewest GPUs any pending job (PendingJobs, or a policy Backlog) asks for; 0 when none asks
    for a GPU."""
    shapes = getattr(pending, "shapes", None)  # a Backlog: one look per request shape, not per job
    if shapes is not None:
        return min((shape[0] for shape in shapes if shape[0] > 0), default=0)
    return min((p.spec.gpus for p in pending if p.spec.gpus > 0), default=0)


def holders(running) -> dict[tuple[str, int], list]:
    """(node, GPU index) -> the RunningJobs holding it (several for sharing jobs), from the job
    records, as the snapshot counts what is free."""
    out: dict[tuple[str, int], list] = {}
    for r in running:
        for g in r.gpus:
            out.setdefault((r.node, g), []).append(r)
    return out


def figures(nodes, running, now_ms: int, node_timeout_s: float, smallest: int,
            idle_pct: float = IDLE_UTIL_PCT, *, taken=None, use=None) -> dict:
    """Figures of the live nodes (NodeRecords) with the RunningJobs: usable GPUs, GPUs held, GPUs
    blocked by zombies, mean utilization (%), fragmentation, the held GPUs that are idle
    ("node:index"), and the free GPUs no job can use now (`stranded`).

    A free GPU is stranded when its node has no CPU or no GB of memory left beside it (the jobs there
    asked for them all), or fewer free GPUs than the smallest pending request (`smallest`): no
    waiting job can use it however long it waits. Fragmentation, in [0, 1], is the stranded share of
    the free GPUs; 0 when nothing is free. A drained node's free GPUs are none of these: no job may
    start there (its held ones count, held). `taken` and `use`: holders(running) and node_use(running),
    when the caller has them already."""
    gpus = held = blocked = free = stranded = 0
    util_sum, idle, taken = 0.0, [], holders(running) if taken is None else taken
    cpus_used, mem_used = node_use(running) if use is None else use
    for n in nodes:
        if not n.alive(now_ms, node_timeout_s):
            continue
        node_free = 0
        for g in n.gpus:
            util_sum += g.util_pct
            if g.blocked:
                blocked += 1
                continue
            if n.drain is not None and (n.name, g.index) not in taken:
                continue  # (drained: not usable, so neither free nor a low allocation's)
            gpus += 1
            if (n.name, g.index) in taken:
                held += 1
                if g.util_pct < idle_pct:
                    idle.append(f"{n.name}:{g.index}")
            else:
                node_free += 1
        free += node_free
        if node_free < smallest or n.cpus - cpus_used.get(n.name, 0) < 1 or n.mem_gb - mem_used.get(n.name, 0.0) < 1:
            stranded += node_free
    seen = gpus + blocked
    return {"gpus": gpus, "held": held, "blocked": blocked, "util_pct": round(util_sum / seen, 1) if seen else 0.0,
            "frag": round(stranded / free, 3) if free else 0.0, "idle": idle, "free": free, "stranded": stranded}


def held_by(running, top: int = TOP_HOLDERS) -> tuple[dict[str, int], dict[str, int]]:
    """GPUs held per team and per user by the RunningJobs (one per node a gang holds): the `top` holders
    of each by name, the rest summed under OTHERS, so a sample stays small however many users run."""
    teams: dict[str, int] = {}
    users: dict[str, int] = {}
    for r in running:
        spec = r.spec
        team, user = getattr(spec, "team", "") or "", getattr(spec, "user", "") or ""
        teams[team] = teams.get(team, 0) + len(r.gpus)
        users[user] = users.get(user, 0) + len(r.gpus)

    def capped(held: dict[str, int]) -> dict[str, int]:
        ranked = sorted(held.items(), key=lambda kv: (-kv[1], kv[0]))
        out = dict(ranked[:top])
        if ranked[top:]:
            out[OTHERS] = out.get(OTHERS, 0) + sum(n for _, n in ranked[top:])
        return out

    return capped(teams), capped(users)


def node_use(running) -> tuple[dict[str, int], dict[str, float]]:
    """CPUs and GB of memory the running jobs asked for, per node (a gang's per rank, on each rank's)."""
    cpus: dict[str, int] = {}
    mem: dict[str, float] = {}
    for r in running:
        cpus[r.node] = cpus.get(r.node, 0) + r.spec.cpus
        mem[r.node] = mem.get(r.node, 0.0) + r.spec.mem_gb
    return cpus, mem


#: (id of the client, namespace) -> the last slot this process recorded: a cycle between two
#: samples costs one dict lookup, not a pass over the queue.
_recorded: dict[tuple[int, str], int] = {}


def sample_due(client, ns: str, now_ms: int, every_ms: int = SAMPLE_EVERY_MS) -> bool:
    """Would record_sample write a sample now (this process has none in this slot yet)?"""
    return _recorded.get((id(client), ns)) != now_ms - now_ms % every_ms


def record_sample(client, ns: str, now_ms: int, read, node_timeout_s: float,
                  every_ms: int = SAMPLE_EVERY_MS, idle_pct: float = IDLE_UTIL_PCT) -> bool:
    """Append a sample of `read` (what the scheduler read this cycle: .nodes, and .snapshot with
    .pending and .running) unless this slot of `every_ms` has one already; returns whether it
    wrote. Cheap to call every cycle; safe from any number of schedulers (a second writer in the
    same slot is refused by the stream's id order)."""
    import redis

    if not sample_due(client, ns, now_ms, every_ms):
        return False
    slot = now_ms - now_ms % every_ms
    _recorded[(id(client), ns)] = slot
    f = figures(read.nodes, read.snapshot.running, now_ms, node_timeout_s, smallest_request(read.snapshot.pending),
                idle_pct)
    fields = {"v": 1, "gpus": f["gpus"], "held": f["held"], "blocked": f["blocked"], "util_pct": f["util_pct"],
              "frag": f["frag"], "pending": len(read.snapshot.pending), "running": len(read.snapshot.running),
              "idle_n": len(f["idle"]), "idle": " ".join(f["idle"][:IDLE_NAMED])}
    teams, users = held_by(read.snapshot.running)  # fair share over time: the dashboard's chart
    fields.update(teams=json.dumps(teams, separators=(",", ":")), users=json.dumps(users, separators=(",", ":")))
    try:
        client.xadd(keys.samples(ns), fields, id=f"{slot}-0", maxlen=SAMPLES_KEPT,
                    approximate=True)
    except redis.exceptions.ResponseError:  # this slot has its sample (or the clock went back)
        return False
    return True


def read_samples(client, ns: str, since_ms: int = 0) -> list[dict]:
    """Samples from `since_ms` on (one before 1970: all), oldest first: t_ms, gpus, held, blocked, util_pct,
    frag, pending, running, idle_n, idle (a list of "node:index"), and teams and users (name -> GPUs held:
    empty in a sample recorded before they were)."""
    out = []
    for entry_id, raw in tolerant(lambda: client.xrange(keys.samples(ns), min=str(max(0, since_ms))), []):
        f = {text(k): text(v) for k, v in raw.items()}
        try:
            s = {k: int(f[k]) for k in ("gpus", "held", "blocked", "pending", "running", "idle_n")}
            s.update(util_pct=float(f["util_pct"]), frag=float(f["frag"]))
        except (KeyError, ValueError):
            continue
        if not all(is_time(v) for v in s.values()):  # inf, nan: not a figure
            continue
        s["t_ms"] = int(text(entry_id).split("-")[0])
        s["idle"] = f.get("idle", "").split()
        s["teams"], s["users"] = _counts(f.get("teams")), _counts(f.get("users"))
        out.append(s)
    return out


def _counts(raw: str | None) -> dict[str, int]:
    """A sample's {name: GPUs} field; {} when absent (an older sample) or unreadable."""
    try:
        d = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return {k: v for k, v in d.items() if isinstance(k, str) and type(v) is int} if isinstance(d, dict) else {}
