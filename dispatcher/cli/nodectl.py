"""The commands about nodes: nodes (what each holds, and its state), drain and resume (Slurm's
`scontrol update nodename=X state=DRAIN` and `state=RESUME`). Registered lazily in cli/__init__.py.

A drained node takes no new job: the jobs it runs finish there, nothing new starts there (no
placement, reservation, preemption for a job to start there, or gang rank). The mark is a fact of the
node in Redis (store/nodes.py, keys.nodes_drain), kept through the agent's and the scheduler's
restarts until `dispatch resume`. With identity on, only an admin drains or resumes, through a signed
request the leading scheduler carries out; without it, anyone who may cancel may drain.
"""

from __future__ import annotations

import json
import time

import click

from . import _table, common, json_flag
from ..auth.identity import current_user
from ..clock import now_ms
from ..core.errors import InvalidRequestError
from ..core.units import age


def _mark(drain, now: float) -> dict | None:
    if drain is None:
        return None
    return {"reason": drain.reason, "by": drain.by, "at": drain.at_ms / 1000.0,
            "ago_s": round(now - drain.at_ms / 1000.0, 1) if drain.at_ms else None}


def _said(name: str, mark: dict) -> str:
    """'n1 drained by alice 12m ago: disk swap'"""
    by = f" by {mark['by']}" if mark["by"] else ""
    when = f" {age(mark['ago_s'])} ago" if mark["ago_s"] is not None else ""
    return f"{name} drained{by}{when}" + (f": {mark['reason']}" if mark["reason"] else "")


@click.command()
@click.option("--free", "free", is_flag=True, help="Free capacity by GPU model: free GPUs (and those stranded "
              "with no CPU or memory beside them), and on how many nodes a job of 1, 2, 4 or 8 GPUs fits now.")
@json_flag
@common
def nodes(ctx, free, as_json):
    """Nodes, their state (up, draining, drained, down), their GPUs and what holds them."""
    from ..config import Timing
    from ..store.nodes import node_state, read_nodes

    if free:
        return _capacity(ctx, as_json)
    found, problems = read_nodes(ctx.client, ctx.ns)
    now = now_ms()
    timeout = Timing.from_env().node_timeout_s
    out = [{
        "name": n.name, "alive": n.alive(now, timeout), "state": node_state(n.alive(now, timeout), n.drain, bool(n.alloc)),
        "drain": _mark(n.drain, now / 1000.0), "seen_s_ago": round((now - n.seen_ms) / 1000, 1),
        "cpus": n.cpus, "mem_gb": n.mem_gb,
        "gpus": [{"index": g.index, "name": g.name, "mem_total_gb": g.mem_total_gb, "mem_used_gb": g.mem_used_gb,
                  "util_pct": g.util_pct, "uuid": g.uuid, "job": n.alloc.get(g.index), "blocked": g.blocked or None}
                 for g in n.gpus],
    } for n in found]
    if as_json:
        click.echo(json.dumps(out, indent=1))
        return
    from ..store.dependencies import element_names
    from ..store.nodes import holder_ids

    holders = {g["job"]: holder_ids(g["job"]) for n in out for g in n["gpus"] if g["job"]}
    names = element_names(ctx.client, ctx.ns, {i for ids in holders.values() for i in ids})  # (an element: 12_5)
    rows = []
    for n in out:
        kinds = sorted({g["name"].replace("NVIDIA ", "") for g in n["gpus"]})
        free = 0 if not n["alive"] or n["drain"] else \
            sum(1 for g in n["gpus"] if g["job"] is None and not g["blocked"])  # (a dead or drained node: none)
        blocked = sum(1 for g in n["gpus"] if g["blocked"])
        state = n["state"] + (f", {blocked} GPU blocked" if blocked else "")
        held = ",".join(f"{g['index']}:" + "+".join(names.get(i, i) for i in holders[g["job"]])
                        for g in n["gpus"] if g["job"])  # GPU:job(s), as queue names them
        rows.append([n["name"], state, f"{free}/{len(n['gpus'])}", ",".join(kinds) or "-",
                     n["cpus"], f"{n['mem_gb']:g}", f"{n['seen_s_ago']:g}s", held or "-"])
    click.echo(_table(rows, ["NODE", "STATE", "FREE", "GPU TYPES", "CPUS", "MEM_GB", "SEEN", "HELD BY (GPU:JOB)"]))
    for n in out:
        if n["drain"]:
            click.echo(_said(n["name"], n["drain"]))
        for g in n["gpus"]:
            if g["blocked"]:
                click.echo(f"{n['name']} GPU {g['index']}: {g['blocked']}")
    for p in problems:
        click.echo(f"warning: {p}", err=True)


def _capacity(ctx, as_json: bool) -> None:
    from ..config import Timing
    from ..store.snapshot import read_snapshot
    from ..store.spec_cache import SpecCache
    from ..views.capacity import SIZES, capacity, describe

    now, timeout = now_ms(), Timing.from_env().node_timeout_s
    read = read_snapshot(ctx.client, ctx.ns, now, timeout, SpecCache(), with_pending=False)
    rows = capacity(read.nodes, read.snapshot.running, now, timeout)
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return
    if not rows:
        click.echo("no live node takes jobs (dispatch nodes shows them all)")
        return
    click.echo(_table(describe(rows), ["GPU", "NODES", "GPUS", "FREE", *(f"FITS {s}x" for s in SIZES)]))
    click.echo("FITS Nx: nodes where N GPUs of that model, and a CPU and memory beside them, are free now "
               "(the queue before a job is not counted: dispatch why --fresh does)")


def _act(ctx, kind: str, node: str, reason: str = ""):
    """Drain or resume `node`: directly, or as a signed request while identity is on. Returns the mark
    it replaced or took (None: the node was not drained)."""
    from ..store import nodes as store_nodes
    from ..store.requests import identity_on, node_signed

    if identity_on(ctx.client, ctx.ns):
        return node_signed(ctx.client, ctx.ns, kind, current_user(), node, reason)
    if kind == "drain":
        return store_nodes.drain(ctx.client, ctx.ns, node, reason, current_user(), now_ms())
    return store_nodes.resume(ctx.client, ctx.ns, node)


def _holding(ctx, node: str) -> int:
    """How many jobs hold GPUs on `node` now."""
    from ..store import keys
    from ..store.nodes import holder_ids
    from ..store.connect import tolerant

    alloc = tolerant(lambda: ctx.client.hgetall(keys.node_alloc(ctx.ns, node)), {})
    return len({j for v in alloc.values() for j in holder_ids(v)})


@click.command()
@click.argument("node")
@click.option("--reason", default=None, metavar="TEXT", help="Why (shown by `dispatch nodes` and `dispatch why`).")
@common
def drain(ctx, node, reason):
    """Take no new job on NODE: the jobs it runs finish there; nothing new starts there until `dispatch
    resume NODE`. Again on a drained node: a new --reason replaces the old; with none, the old one stays.
    (With identity on: admins.)"""
    from ..store.nodes import kept_reason

    if reason is not None and not reason.strip():  # (--reason "$WHY" with WHY unset: a typo, not "no reason")
        raise InvalidRequestError("--reason: empty; say why, or leave --reason out", field="--reason")
    reason = reason or ""
    was = _act(ctx, "drain", node, reason)
    busy = _holding(ctx, node)
    now = time.time()
    if was is not None:
        kept = kept_reason(" ".join(reason.split()), was)
        click.echo(f"{node}: already drained (was: {_said(node, _mark(was, now))}); reason now: {kept or '-'}")
        return
    running = f"draining: {busy} job{'s' if busy != 1 else ''} still running there" if busy else "drained: idle"
    click.echo(f"{node}: {running}; no new job starts there (`dispatch resume {node}` to undo)")


@click.command()
@click.argument("node")
@common
def resume(ctx, node):
    """Let a drained NODE take new jobs again. (With identity on: admins.)"""
    was = _act(ctx, "resume", node)
    if was is None:
        click.echo(f"{node}: not drained; nothing to resume")
        return
    click.echo(f"{node}: resumed; it takes new jobs again (was: {_said(node, _mark(was, time.time()))})")
