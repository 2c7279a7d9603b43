"""Cluster figures over time: GPU allocation, utilization, fragmentation, queue length.

The leading scheduler records one sample per SAMPLE_EVERY_MS into a capped stream
(keys.samples) from the snapshot it has just read, so sampling costs no extra read
and there is exactly one writer however many dashboards run. The dashboard, `dispatch
top` and /metrics read them for the charts and for the alerts that need a duration
("utilization low for 30 minutes").
"""

from __future__ import annotations

import json

from functools import lru_cache

from ..core.gpuspec import gpu_fits
from ..core.model import IDLE_UTIL_PCT, GpuInfo
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


def gpu_requests(pending) -> tuple[tuple[int, tuple[str, ...], float], ...]:
    """What pending jobs (PendingJobs, or a policy Backlog) ask of one node's GPUs: (GPUs on one node, GPU
    types, GPU memory), the fewest GPUs of each (types, memory): what fragmentation is measured against."""
    shapes = getattr(pending, "shapes", None)  # a Backlog: one look per request shape, not per job
    asked = ((s[7] if s[6] >= 2 else s[0], s[1], s[2]) for s in shapes) if shapes is not None else \
        ((p.spec.gpus_per_node if p.spec.nodes >= 2 else p.spec.min_gpus or p.spec.gpus, p.spec.gpu_types,
          p.spec.gpu_mem_gb) for p in pending)
    least: dict[tuple, int] = {}
    for need, types, mem in asked:
        if need > 0:
            least[(tuple(types), float(mem))] = min(need, least.get((tuple(types), float(mem)), need))
    return tuple((n, t, m) for (t, m), n in sorted(least.items()))


def stranded_gpus(nodes, free: dict[str, list], requests) -> set[tuple[str, int]]:
    """The free GPUs (`free`: node name -> its free GpuInfos, on live nodes that take jobs, with CPU and memory
    left beside them) that a waiting request could use but none can start on: each request that wants one
    (its type and memory) asks more of that node than it has free. A request no node could ever hold, and a
    GPU no request wants, strand nothing. A job larger than any node runs on whole nodes (an auto gang).
    Each answer is worked out once per GPU list (nodes of one kind repeat)."""
    def kind(gpus) -> tuple:
        return tuple((g.name, g.mem_total_gb) for g in gpus if not g.blocked)

    counted: dict[tuple, int] = {}  # (a GPU list's kind, types, memory) -> how many of it a request may use

    def usable(k: tuple, types, mem) -> int:
        got = counted.get((k, types, mem))
        if got is None:
            got = counted[(k, types, mem)] = sum(1 for name, gb in k if _fits(types, mem, name, gb))
        return got

    kinds = {n.name: kind(n.gpus) for n in nodes}
    most = {(t, m): max((usable(k, t, m) for k in set(kinds.values())), default=0) for _, t, m in requests}
    total = {(t, m): sum(usable(k, t, m) for k in kinds.values()) for _, t, m in requests}
    ever = [r for r in requests if r[0] <= total[r[1:]]]  # (more than one node has: on whole nodes)
    out = set()
    for name, gpus in free.items():
        here = kind(gpus)
        wanted = startable = 0
        for need, types, mem in ever:
            fits = usable(here, types, mem)
            if not fits:
                continue
            if need > most[(types, mem)]:  # an auto gang: this node whole
                need = usable(kinds[name], types, mem)
            mask = _mask(here, types, mem)
            wanted |= mask
            if fits >= need:
                startable |= mask
        out.update((name, g.index) for i, g in enumerate(gpus) if (wanted & ~startable) >> i & 1)
    return out


@lru_cache(maxsize=4096)
def _mask(k: tuple, types: tuple, mem: float) -> int:
    """Which GPUs of a list of this kind (bit i: its i-th) a request of these types and memory may use."""
    return sum(1 << i for i, (name, gb) in enumerate(k) if _fits(types, mem, name, gb))


@lru_cache(maxsize=4096)
def _fits(types: tuple, mem: float, name: str, mem_gb: float) -> bool:
    return gpu_fits(types, mem, GpuInfo(0, name, mem_gb))


def holders(running) -> dict[tuple[str, int], list]:
    """(node, GPU index) -> the RunningJobs holding it (several for sharing jobs), from the job
    records, as the snapshot counts what is free."""
    out: dict[tuple[str, int], list] = {}
    for r in running:
        for g in r.gpus:
            out.setdefault((r.node, g), []).append(r)
    return out


def figures(nodes, running, now_ms: int, node_timeout_s: float, requests,
            idle_pct: float = IDLE_UTIL_PCT, *, taken=None, use=None) -> dict:
    """Figures of the live nodes (NodeRecords) with the RunningJobs: usable GPUs, GPUs held, GPUs
    blocked by zombies, mean utilization (%), fragmentation, the held GPUs that are idle
    ("node:index"), and the free GPUs no waiting job can use now (`stranded`, and `stranded_at`: which).

    A free GPU is stranded when its node has no CPU or no GB of memory left beside it (the jobs there
    asked for them all), or when the pending requests (`requests`: gpu_requests') that could use it all
    need more of its node than is free (stranded_gpus): none of them can start on it. Fragmentation, in
    [0, 1], is the stranded share of the free GPUs; 0 when nothing is free. A drained node's free GPUs are
    none of these: no job may start there (its held ones count, held). `taken` and `use`: holders(running)
    and node_use(running), when the caller has them already."""
    gpus = held = blocked = free = 0
    util_sum, idle, taken = 0.0, [], holders(running) if taken is None else taken
    cpus_used, mem_used = node_use(running) if use is None else use
    roomy: dict[str, list] = {}  # node -> its free GPUs, on nodes with a CPU and a GB left
    boxed: set[tuple[str, int]] = set()  # free GPUs with no CPU or memory left beside them
    live = [n for n in nodes if n.alive(now_ms, node_timeout_s)]
    for n in live:
        node_free = []
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
                node_free.append(g)
        free += len(node_free)
        if n.cpus - cpus_used.get(n.name, 0) < 1 or n.mem_gb - mem_used.get(n.name, 0.0) < 1:
            boxed.update((n.name, g.index) for g in node_free)
        elif node_free:
            roomy[n.name] = node_free
    at = boxed | stranded_gpus([n for n in live if n.drain is None], roomy, requests)
    seen = gpus + blocked
    return {"gpus": gpus, "held": held, "blocked": blocked, "util_pct": round(util_sum / seen, 1) if seen else 0.0,
            "frag": round(len(at) / free, 3) if free else 0.0, "idle": idle, "free": free, "stranded": len(at),
            "stranded_at": at}


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
    f = figures(read.nodes, read.snapshot.running, now_ms, node_timeout_s, gpu_requests(read.snapshot.pending),
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
