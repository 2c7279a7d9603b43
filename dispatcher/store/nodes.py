"""Node records: heartbeats written by node agents, read by the scheduler and `dispatch nodes`."""

from __future__ import annotations

import re

from dataclasses import dataclass

import msgpack

from ..core.errors import InvalidRequestError, MalformedRecord, NotFoundError
from ..core.model import GpuInfo
from . import keys, scripts
from .codec import decode_node_info, encode_node_info
from .connect import text, tolerant
from .quarantine import MAX_MS, NAME, Entry, valid_name


#: The longest reason `dispatch drain --reason` takes.
MAX_REASON = 200
#: The reason a drain mark that cannot be read stands for.
UNREADABLE = "(its drain mark is unreadable)"


@dataclass(frozen=True)
class Drain:
    """A node takes no new job (`dispatch drain`): why, who said so, when. Its jobs run to their end."""
    reason: str
    by: str
    at_ms: int


@dataclass(frozen=True)
class NodeRecord:
    name: str
    gpus: tuple[GpuInfo, ...]
    cpus: int
    mem_gb: float
    seen_ms: int
    alloc: dict[int, str]  # GPU index -> job id holding it
    drain: Drain | None = None  # drained (keys.nodes_drain): no new job starts there
    timeout_s: float = 0.0  # its agent's node timeout (codec.node_timeout_s); 0.0: not said

    def alive(self, now_ms: int, timeout_s: float) -> bool:
        return now_ms - self.seen_ms <= timeout_s * 1000


def write_heartbeat(client, ns: str, name: str, gpus: list[GpuInfo], cpus: int, mem_gb: float,
                    now_ms: int, *, announce: bool = False, changed: bool = True, address: str = "",
                    agent: str = "", timeout_s: float = 0.0) -> None:
    """One pipeline: the node hash and its heartbeat score. `changed`: what the scheduler reads of it
    (GPU list, CPUs, memory, blocked GPUs: schedule_facts) differs from the last heartbeat, so the
    leader reads it again (keys.nodes_changed). `announce` wakes the scheduler. `address`: where the
    node's jobs are reached (a gang's ranks meet there: workers/gang.py). `agent`: which agent beats
    for the node (other_agent). `timeout_s`: the agent's node timeout (codec.encode_node_info)."""
    pipe = client.pipeline(transaction=True)
    fields = {"info": encode_node_info(gpus, cpus, mem_gb, timeout_s), "seen_ms": now_ms}
    if address:
        fields["address"] = address
    if agent:
        fields["agent"] = agent
    pipe.hset(keys.node(ns, name), mapping=fields)
    pipe.zadd(keys.nodes_heartbeat(ns), {name: now_ms})
    if changed:
        pipe.sadd(keys.nodes_changed(ns), name)
    if announce:
        pipe.publish(keys.events(ns), b"node")
    pipe.execute()


def read_addresses(client, ns: str, names: list[str]) -> dict[str, str]:
    """Each node's advertised address ("" where it gave none)."""
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.hget(keys.node(ns, name), "address")
    return {name: text(a) if isinstance(a, bytes) else "" for name, a in zip(names, pipe.execute(raise_on_error=False))}


def other_agent(client, ns: str, name: str, agent: str, now_ms: int, timeout_s: float) -> tuple[str, float] | None:
    """(the other agent, seconds since its heartbeat) if an agent other than `agent` beats for node
    `name` and is not yet declared dead: a second agent of one node would take its launches and run
    its jobs twice (docs/guarantees.md). None if the node is free for `agent`."""
    other, seen = client.hmget(keys.node(ns, name), "agent", "seen_ms")
    other, seen = text(other), text(seen)
    if not other or other == agent or not seen.isdigit() or now_ms - int(seen) > timeout_s * 1000:
        return None
    return other, max(0.0, (now_ms - int(seen)) / 1000)


def node_agent(client, ns: str, name: str) -> str:
    """Which agent beats for node `name` now ("" for none): an agent that finds another's name there was
    replaced while it was stopped (declared dead, another started under the node's name)."""
    return text(client.hget(keys.node(ns, name), "agent"))


def remove_node(client, ns: str, name: str, agent: str) -> bool:
    """Node agent `agent` leaving cleanly: its node stops being offered work at once. Only while the
    node's record names that agent (one MULTI watched on it): an agent refused because another runs the
    node, or one that was taken over, leaves the live one's node be. False if it did."""
    import redis

    node = keys.node(ns, name)
    with client.pipeline(transaction=True) as pipe:
        for _ in range(5):  # (another write to the node's record between the look and the MULTI: again)
            try:
                pipe.watch(node)
                if text(pipe.hget(node, "agent")) != agent:
                    return False
                pipe.multi()
                pipe.zrem(keys.nodes_heartbeat(ns), name)
                pipe.hdel(node, "info", "agent")
                pipe.sadd(keys.nodes_changed(ns), name)
                pipe.publish(keys.events(ns), b"node")
                pipe.execute()
                return True
            except redis.WatchError:
                continue
    return False


def drain(client, ns: str, name: str, reason: str, by: str, now_ms: int) -> Drain | None:
    """Mark node `name` drained (keys.nodes_drain) and wake the scheduler, in one MULTI watched on the
    marks; returns the mark it replaced (None: it was not drained). Drained again with no reason, it
    keeps the reason it had (kept_reason). NotFoundError for a node never seen."""
    import redis

    reason = " ".join(reason.split())
    if len(reason) > MAX_REASON:
        raise InvalidRequestError(f"--reason is {len(reason)} characters; at most {MAX_REASON}", field="--reason")
    _known(client, ns, name)
    key = keys.nodes_drain(ns)
    with client.pipeline(transaction=True) as pipe:
        while True:
            try:
                pipe.watch(key)
                raw = pipe.hget(key, name)
                was = None if raw is None else decode_drain(raw)
                mark = msgpack.packb({"v": 1, "reason": kept_reason(reason, was), "by": by, "at_ms": int(now_ms)})
                pipe.multi()
                pipe.hset(key, name, mark)
                pipe.publish(keys.events(ns), b"node")
                pipe.execute()
                return was
            except redis.WatchError:
                continue


def kept_reason(reason: str, was: Drain | None) -> str:
    """A drain's reason: the one given, else (a drain again with no --reason) the one the node had."""
    return reason or (was.reason if was is not None and was.reason != UNREADABLE else "")


def resume(client, ns: str, name: str) -> Drain | None:
    """Take node `name`'s drain mark away and wake the scheduler, in one MULTI; returns the mark taken
    (None: it was not drained). NotFoundError for a node never seen."""
    _known(client, ns, name)
    pipe = client.pipeline(transaction=True)
    pipe.hget(keys.nodes_drain(ns), name)
    pipe.hdel(keys.nodes_drain(ns), name)
    pipe.publish(keys.events(ns), b"node")
    was = pipe.execute()[0]
    return None if was is None else decode_drain(was)


def _known(client, ns: str, name: str) -> None:
    """A node is known once its agent has registered (its record stays when the agent stops), or while
    it carries a drain mark."""
    pipe = client.pipeline(transaction=False)
    pipe.exists(keys.node(ns, name))
    pipe.hexists(keys.nodes_drain(ns), name)
    if any(pipe.execute()):
        return
    names = [text(n) for n in tolerant(lambda: client.zrange(keys.nodes_heartbeat(ns), 0, -1), [])]
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    raise NotFoundError(f"no node {name!r}; " + (f"known nodes: {shown}" if names else "no node has registered"))


def decode_drain(raw) -> Drain:
    """A drain mark. One that cannot be read still drains its node (someone meant to): `dispatch resume`
    takes it away."""
    try:
        d = msgpack.unpackb(raw, raw=False)
        return Drain(str(d.get("reason", ""))[:MAX_REASON], str(d.get("by", ""))[:64], int(d.get("at_ms", 0)))
    except Exception:  # hostile or corrupt: any error of the decoder or of the fields
        return Drain(UNREADABLE, "", 0)


def read_drains(client, ns: str) -> dict[str, Drain]:
    """Every drained node's mark (one HGETALL); names that are no node name are left out. A key of the
    wrong type raises (the leader sets it aside: quarantine.FIXED); views read it through tolerant()."""
    return _drains(client.hgetall(keys.nodes_drain(ns)))


def _drains(raw: dict) -> dict[str, Drain]:
    return {text(name): decode_drain(mark) for name, mark in raw.items() if NAME.fullmatch(name)}


def schedule_facts(gpus: list[GpuInfo], cpus: int, mem_gb: float) -> tuple:
    """What the scheduler reads of a heartbeat: a change here is a change to keys.nodes_changed."""
    return tuple((g.index, g.name, g.mem_total_gb, g.uuid, g.blocked) for g in gpus), cpus, mem_gb


def _beats(ns: str, raw) -> tuple[list[tuple[str, float]], list[Entry]]:
    """The heartbeat index as (name, score), and its bad entries: a member that is no node name, a
    score that is not a time."""
    beats, bad, ok = [], [], NAME.fullmatch
    for name, seen in raw:
        if not ok(name):
            bad.append(Entry(keys.nodes_heartbeat(ns), name, "not a node name", "member"))
        elif not -MAX_MS <= seen <= MAX_MS:  # (is_time, inline: this runs for every node every cycle)
            bad.append(Entry(keys.nodes_heartbeat(ns), name, "its heartbeat is not a time", "score", repr(seen)))
        else:
            beats.append((text(name), seen))
    return beats, bad


def read_infos(client, ns: str) -> tuple[list[tuple[str, float, bytes | Exception | None]], list[Entry]]:
    """Every node with a heartbeat: (name, its heartbeat score (ms), its raw info record, None, or the
    error reading a record of the wrong type), and the heartbeat index's bad entries."""
    beats, bad = _beats(ns, client.zrange(keys.nodes_heartbeat(ns), 0, -1, withscores=True))
    infos = scripts.hget_each(client, [keys.node(ns, name) for name, _ in beats], "info")
    return [(name, seen, info) for (name, seen), info in zip(beats, infos)], bad


def read_changed_infos(client, ns: str, known):
    """Every node with a heartbeat as (name, score), the raw info of those that changed since the last
    call (keys.nodes_changed, taken) or are not in `known`, the heartbeat index's bad entries, and the
    drain marks (as read_drains, in the same round trip): two round trips, the second only for what
    changed."""
    pipe = client.pipeline(transaction=True)
    pipe.zrange(keys.nodes_heartbeat(ns), 0, -1, withscores=True)
    pipe.smembers(keys.nodes_changed(ns))
    pipe.delete(keys.nodes_changed(ns))
    pipe.hgetall(keys.nodes_drain(ns))
    beats, changed, _, drains = pipe.execute()
    beats, bad = _beats(ns, beats)
    changed = {text(n) for n in changed}
    todo = [name for name, _ in beats if name in changed or name not in known]
    raws = dict(zip(todo, scripts.hget_each(client, [keys.node(ns, n) for n in todo], "info") if todo else ()))
    return beats, raws, bad, _drains(drains)


def node_state(alive: bool, drain, held: bool) -> str:
    """up, draining (drained, jobs still hold GPUs there), drained (idle), down (no heartbeat within the
    node timeout; ", drained" if it is): `dispatch nodes` and `dispatch top` say it."""
    if not alive:
        return "down, drained" if drain else "down"
    if drain:
        return "draining" if held else "drained"
    return "up"


def read_nodes(client, ns: str) -> tuple[list[NodeRecord], list[str]]:
    """Every node with a heartbeat and its GPUs held, and the problems met (malformed records, keys of
    the wrong type and bad heartbeat entries are skipped). Read-only."""
    infos, bad = tolerant(lambda: read_infos(client, ns), None) or ([], [f"{keys.nodes_heartbeat(ns)} is no zset"])
    problems = [str(e) for e in bad]
    infos = [i for i in infos if i[2] is not None]
    pipe = client.pipeline(transaction=False)
    for name, _, _ in infos:
        pipe.hgetall(keys.node_alloc(ns, name))
    pipe.hgetall(keys.nodes_drain(ns))
    *allocs, drains = pipe.execute(raise_on_error=False)
    if isinstance(drains, Exception):
        problems.append(f"{keys.nodes_drain(ns)} is no hash")
    drains = {} if isinstance(drains, Exception) else _drains(drains)
    nodes = []
    for (name, seen, info), alloc in zip(infos, allocs):
        try:
            gpus, cpus, mem_gb = decode_node_info(info, key=keys.node(ns, name))
            if isinstance(alloc, Exception):
                problems.append(f"{keys.node_alloc(ns, name)} is no hash")
                alloc = {}
            held = {int(g): text(j) for g, j in alloc.items() if text(g).isascii() and text(g).isdigit()}
            nodes.append(NodeRecord(name, gpus, cpus, mem_gb, int(seen), held, drains.get(name)))
        except (MalformedRecord, ValueError, OverflowError) as e:
            problems.append(str(e))
            continue
    return sorted(nodes, key=lambda n: _natural(n.name)), problems  # (by heartbeat they reorder every poll)


def holder_ids(value) -> list[str]:
    """The job ids in a GPU's holder value (keys.node_alloc): "id", or "~id,id" for sharing jobs."""
    return [h for h in text(value).lstrip("~").split(",") if h and ":" not in h]


def read_node(client, ns: str, name: str) -> NodeRecord:
    """One node as read_nodes reads each (its heartbeat, GPUs, CPUs, memory, GPUs held, drain mark): a
    handful of commands, whatever the cluster's size. NotFoundError for a node with no record (never
    seen, or gone: `remove_node`); MalformedRecord for one that cannot be read."""
    if not valid_name(name):
        raise NotFoundError(f"no node {name!r}")
    pipe = client.pipeline(transaction=False)
    pipe.zscore(keys.nodes_heartbeat(ns), name)
    pipe.hget(keys.node(ns, name), "info")
    pipe.hgetall(keys.node_alloc(ns, name))
    pipe.hget(keys.nodes_drain(ns), name)
    seen, info, alloc, mark = pipe.execute(raise_on_error=False)
    if not isinstance(info, bytes):
        raise NotFoundError(f"no node {name!r}" + ("" if info is None else f": {keys.node(ns, name)} is no hash"))
    gpus, cpus, mem_gb = decode_node_info(info, key=keys.node(ns, name))
    held = {int(g): text(j) for g, j in (alloc.items() if isinstance(alloc, dict) else ())
            if text(g).isascii() and text(g).isdigit()}
    seen_ms = int(seen) if isinstance(seen, float) and -MAX_MS <= seen <= MAX_MS else 0
    return NodeRecord(name, gpus, cpus, mem_gb, seen_ms, held, decode_drain(mark) if isinstance(mark, bytes) else None)


def _natural(name: str) -> tuple:
    """n2 before n10."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name))
