"""Benchmark 2: the scheduling cycle under a long queue on a full cluster.

For each size (pending jobs x nodes of 8 GPUs) the parent writes the cluster into a
namespace: heartbeats, every GPU held by a running job except one GPU of the first
node, and the pending jobs (2, 4 or 8 GPUs each, so none can start). A child process
per size (clean RSS) then times, in-process, `Scheduler(client, ns).cycle()`:

- the first (cold) cycle: decodes every spec, writes every job's reason;
- steady cycles: the median, split into read_snapshot / policy / commit / the rest;
- reacting to one submit: after a full cycle, submit a 1-GPU high-priority job that fits
  the free GPU, run the cycle the scheduler's loop runs when only a submit woke it
  (cycle(quick=True)), and stop the clock once it has committed the job (state assigned);
- Redis commands per steady cycle (INFO commandstats delta) and round trips (counted
  in redis-py); its RSS after imports and its peak.

Baselines: a raw pipelined read of the same job hashes and node records (what a
cycle must at least read), and for the reaction the raw floor: writing one job
record plus one commit_placement call.
"""

from __future__ import annotations

import json
import sys
import time

import benchlib as bl
import cluster

SIZES_FULL = [(p, n) for p in (1_000, 10_000, 100_000) for n in (10, 100, 1_000)]
SIZES_QUICK = [(p, n) for p in (1_000, 10_000) for n in (10, 100)]
CYCLE_TARGET_MS = 100.0  # at TARGET_SIZE; checked at every size
TARGET_SIZE = (100_000, 1_000)
REACT_TARGET_MS = 5.0
RSS_TARGET_MB = 500.0
#: 'Round trips per cycle bounded by a constant': lease, nodes (2), indexes, jobs, commit, decisions.
ROUND_TRIPS_BOUND = 8


# -- the parent -------------------------------------------------------------------------------
def setup(client, ns: str, pending: int, nodes: int) -> str:
    names = cluster.node_names(nodes)
    cluster.add_nodes(client, ns, names)
    react_node = cluster.fill(client, ns, names, free_on_first=1)
    cluster.submit(client, ns, cluster.job_specs(pending, gpus=(2, 2, 4, 8), seed=pending + nodes))
    return react_node


def raw_read(client, ns: str) -> None:
    """What a cycle must at least read, with no decoding: the node records, both indexes, and per
    job the fields read_snapshot asks for once specs are cached."""
    from dispatcher.store import keys

    beats = client.zrange(keys.nodes_heartbeat(ns), 0, -1)
    pipe = client.pipeline(transaction=False)
    for name in beats:
        pipe.hget(keys.node(ns, name.decode()), "info")
        pipe.hgetall(keys.node_alloc(ns, name.decode()))
    pipe.execute()
    index = client.pipeline(transaction=True)
    index.zrange(keys.jobs_pending(ns), 0, -1, withscores=True)
    index.zrange(keys.jobs_active(ns), 0, -1)
    pending, active = index.execute()
    pipe = client.pipeline(transaction=False)
    for job_id, _ in pending:
        pipe.hmget(keys.job(ns, job_id.decode()), "epoch", "attempt", "state")
    for job_id in active:
        pipe.hmget(keys.job(ns, job_id.decode()), "node", "gpus", "assigned_ms", "started_ms", "state", "epoch",
                   "checkpoint_ms", "last_preempted_ms")
    pipe.execute()


def measure_raw_read(client, ns: str, repeats: int, trips: bl.RoundTrips) -> dict:
    raw_read(client, ns)  # warm
    times = [bl.timed(raw_read, client, ns)[0] for _ in range(repeats)]
    before = bl.commands_executed(client)
    with trips.measure() as rt:
        raw_read(client, ns)
    return {"ms": bl.median(times) * 1000, "commands": bl.commands_executed(client) - before, "round_trips": rt["n"]}


def run_child(bench: bl.Bench, ns: str, react_node: str, repeats: int, budget_s: float) -> dict:
    return bl.run_child("cycle.py", {"url": bench.url, "ns": ns, "react_node": react_node, "repeats": repeats,
                                     "budget_s": budget_s})


def run(bench: bl.Bench) -> list[bl.Figure]:
    """Sizes run smallest first, within bench.budget (a size whose smallest run, a cold, a steady and
    a reacting cycle, would not fit is skipped). Within a size, repeats stop early once its share of
    the budget is spent (at least one of each is always run)."""
    sizes = sorted(SIZES_QUICK if bench.quick else SIZES_FULL, key=lambda s: (s[0] * s[1], s[1]))
    repeats = bench.repeats(3, 5)
    budget = bench.budget("cycle")
    trips = bl.RoundTrips().install()
    rows, costs = [], []
    try:
        for k, (pending, nodes) in enumerate(sizes):
            if not budget.allows(bl.size_label(pending, nodes), bl.extrapolate(costs, (pending, nodes)),
                                 "cold + steady + reacting cycle, extrapolated linearly in jobs x nodes"):
                continue
            ns = bench.namespace(f"cycle-{pending}-{nodes}")
            react_node = setup(bench.client, ns, pending, nodes)
            raw = measure_raw_read(bench.client, ns, repeats, trips)
            got = run_child(bench, ns, react_node, repeats, budget.left() / (len(sizes) - k))
            bench.drop(ns)
            rows.append((pending, nodes, raw, got))
            costs.append(((pending, nodes), (got["cold_ms"] + 2 * got["steady_ms"]) / 1000))
    finally:
        trips.uninstall()
    if rows and TARGET_SIZE not in [(p, n) for p, n, _, _ in rows]:
        guess = bl.extrapolate([((p, n), got["steady_ms"]) for p, n, _, got in rows], TARGET_SIZE)
        if guess is not None:
            bench.notes.append(f"cycle {bl.size_label(*TARGET_SIZE)} not measured (the full run measures it); "
                               f"a linear extrapolation in pending jobs x nodes from the measured sizes, an upper "
                               f"bound, gives about {guess:,.0f} ms (target {CYCLE_TARGET_MS:g} ms)")
    return figures(rows) if rows else []


def figures(rows) -> list[bl.Figure]:
    out = []
    raw_what = "raw pipelined HMGET of the same job hashes + node records, no decoding"
    for pending, nodes, raw, got in rows:
        label = bl.size_label(pending, nodes)
        note = "" if got["steady_placed"] == 0 else f"steady cycles placed {got['steady_placed']} jobs (unexpected)"
        out += [
            bl.Figure(f"cycle.full_ms[{label}]", got["steady_ms"], "ms", raw["ms"], raw_what,
                      bl.below(CYCLE_TARGET_MS, "ms"), got["steady_n"], note=note,
                      extra={"breakdown_ms": got["breakdown_ms"], "running_jobs": got["running"]}),
            bl.Figure(f"cycle.cold_ms[{label}]", got["cold_ms"], "ms", raw["ms"], raw_what, None, 1,
                      note="first cycle of a fresh scheduler: decodes every spec, writes every reason",
                      extra={"breakdown_ms": got["cold_breakdown_ms"]}),
            bl.Figure(f"cycle.react_ms[{label}]", got["react_ms"], "ms", got["react_floor_ms"],
                      "raw write of one job record + one commit_placement call", bl.below(REACT_TARGET_MS, "ms"),
                      got["react_n"], note="submit() of a 1-GPU job that fits, then the quick cycle a submit "
                      "event makes (place_arrivals on the last full cycle's state), until committed"),
            bl.Figure(f"cycle.commands[{label}]", got["commands"], "commands", raw["commands"],
                      "commands of the raw read", None, got["steady_n"],
                      note="server-side, INFO commandstats delta over a steady cycle (Lua's calls included)"),
            bl.Figure(f"cycle.round_trips[{label}]", got["round_trips"], "round trips", raw["round_trips"],
                      "round trips of the raw read", bl.at_most(ROUND_TRIPS_BOUND), got["steady_n"],
                      note="the most in a steady cycle, counted in redis-py (a pipeline is one); the bound stands "
                           "for 'a constant, whatever the size'"),
            bl.Figure(f"cycle.rss_mb[{label}]", got["rss_peak_mb"], "MB", got["rss_base_mb"],
                      "the child's RSS after imports, before the scheduler", bl.below(RSS_TARGET_MB, "MB"), 1,
                      note="peak RSS (VmHWM) of a process running only this scheduler"),
        ]
    out += growth(rows)
    return out


def growth(rows) -> list[bl.Figure]:
    """log-log slopes of the steady cycle time: over pending jobs (at the node count measured with the
    most job counts) and over nodes (at the job count measured with the most node counts)."""
    out = []
    target = bl.at_most(1.1, "(1 = linear; 0.1 allowed for noise)")
    for axis, other, fixed_of, x_of in (("pending", "nodes", lambda r: r[1], lambda r: r[0]),
                                        ("nodes", "pending", lambda r: r[0], lambda r: r[1])):
        groups = {}
        for r in rows:
            groups.setdefault(fixed_of(r), []).append(r)
        fixed, sel = max(groups.items(), key=lambda g: (len(g[1]), g[0]))
        if len(sel) < 2:
            continue
        sel.sort(key=x_of)
        xs = [x_of(r) for r in sel]
        out.append(bl.Figure(f"cycle.growth_exponent[{axis}, {other}={fixed}]",
                             bl.log_slope(xs, [r[3]["steady_ms"] for r in sel]), "exponent",
                             bl.log_slope(xs, [r[2]["ms"] for r in sel]), "the raw read's exponent", target, 1,
                             note=f"log-log slope of the steady cycle time over {axis} = {xs}"))
    return out


# -- the child --------------------------------------------------------------------------------
class Repeats:
    """Up to `n` runs, stopping early once `share_s` seconds are spent (at least one always runs)."""

    def __init__(self, n: int, share_s: float):
        self.n, self.share_s = n, share_s

    def __call__(self):
        since = time.monotonic()
        for i in range(self.n):
            if i and time.monotonic() - since > self.share_s:
                return
            yield i


def steady_cycles(sched, client, phases: dict, trips: bl.RoundTrips, repeats) -> dict:
    """Cycles with nothing new: time and phases of each, commands and round trips."""
    times, splits, commands, round_trips, placed = [], [], [], 0, 0
    for _ in repeats():
        before = bl.commands_executed(client)
        phases.clear()
        with trips.measure() as rt:
            dt, plan = bl.timed(sched.cycle)
        commands.append(bl.commands_executed(client) - before)
        round_trips = max(round_trips, rt["n"])
        times.append(dt * 1000)
        splits.append(bl.breakdown_ms(phases, dt))
        placed += len(plan.placements)
    return {"steady_ms": bl.median(times), "steady_n": len(times), "steady_placed": placed,
            "breakdown_ms": bl.median_each(splits),
            "commands": bl.median(commands), "round_trips": round_trips}


def reactions(sched, client, url: str, ns: str, node: str, repeats) -> dict:
    """submit() of a 1-GPU job that fits the free GPU, then one cycle: until it is committed (assigned).
    Each is then finished, freeing the GPU for the next."""
    from dispatcher.api import Client

    submitter = Client(url, ns)
    times = []
    for _ in repeats():
        sched.cycle()  # the full cycle a finish event makes (untimed): the state a submit then meets
        t0 = time.perf_counter()
        job = submitter.submit(["python", "infer.py"], gpus=1, priority="high", est="60s", name="react")
        sched.cycle(quick=True)  # as the scheduler's loop runs it when only submits woke it
        times.append((time.perf_counter() - t0) * 1000)
        state, epoch = client.hmget(f"{ns}:job:{job}", "state", "epoch")
        if state != b"assigned":
            raise RuntimeError(f"the react job {job} is {state!r} after one cycle, not assigned")
        cluster.finish(client, ns, [(job, node, int(epoch), None)])
    return {"react_ms": bl.median(times), "react_n": len(times)}


def react_floor(client, ns: str, node: str, gpu: int, n: int) -> dict:
    """The raw floor of a reaction: write one job record, run commit_placement.lua on it."""
    from dispatcher.store.jobs import write_jobs
    from dispatcher.store.scripts import Scripts

    scripts = Scripts(client, ns)
    spec = cluster.job_specs(1, gpus=(1,))[0]
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        (job,) = write_jobs(client, ns, [spec])
        epoch = scripts.commit_placement(job, node, (gpu,), 0, cluster.now_ms())
        times.append((time.perf_counter() - t0) * 1000)
        cluster.finish(client, ns, [(job, node, epoch, None)])
    return {"react_floor_ms": bl.median(times)}


def child(args: dict) -> dict:
    __import__("rq")  # the scheduler's planner imports it: part of the baseline
    from dispatcher.scheduler.loop import Scheduler
    from dispatcher.store.connect import connect

    client = connect(args["url"])
    ns, node, repeats = args["ns"], args["react_node"], args["repeats"]
    rss_base, _ = bl.rss_mb()
    trips = bl.RoundTrips().install()
    sched = Scheduler(client, ns, timing=cluster.TIMING)
    with bl.phase_times(sched) as phases:
        cold_s, _ = bl.timed(sched.cycle)
        out = {"cold_ms": cold_s * 1000, "cold_breakdown_ms": bl.breakdown_ms(phases, cold_s)}
        # what is left of the budget after the cold cycle: half for steady cycles, half for reactions
        runs = Repeats(repeats, max(0.0, args["budget_s"] - cold_s) / 2)
        out.update(steady_cycles(sched, client, phases, trips, runs))
        out.update(reactions(sched, client, args["url"], ns, node, runs))
    out.update(react_floor(client, ns, node, cluster.FREE_GPU, repeats))
    rss_now, rss_peak = bl.rss_mb()
    out.update(running=len(cluster.active_jobs(client, ns)), rss_base_mb=rss_base, rss_now_mb=rss_now,
               rss_peak_mb=rss_peak)
    return out


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "--child":
    print(json.dumps(child(json.loads(sys.argv[2]))))
