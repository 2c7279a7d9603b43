"""The scheduling cycle on the realistic queue (realqueue.py), through Redis, with the default lease.

For each size (pending jobs x nodes) the parent writes the realistic cluster into a fresh
namespace (about 3.4 running jobs a node, three classes, 40% checkpointable; 50 users x 20
templates pending, all classes, types, memory, estimates, waits up to 3 days). A child process
(clean RSS) then runs `Scheduler.cycle()` with the default Timing (its 5 s lease) and reports:

- cold: the first cycle of a new leader (reads and decodes every job);
- steady: cycles with nothing new (medians), split into read / policy / commit;
- churn: before each cycle, 10 running jobs end (as their agents would end them) and 10 new
  jobs arrive (templates of the same kind);
- Redis commands per steady and churn cycle (INFO commandstats delta) and the child's peak RSS.

Not here: the reaction to one submit (cycle.py measures it on the uniform queue, where the one
free GPU is sure to go to the new job; on this queue other pending jobs compete for any room).

No agents run: preempted jobs stay `preempting`, as on a cluster whose agents are slow to stop
them, so every cycle also searches for victims for the blocked high and critical jobs.

    python scripts/bench/realcycle.py [--sizes 10000x1000,100000x1000] [--repeats 5] [--json F]
                                      [--profile F]
(--profile F: the steady cycles' cProfile in F.<size>, the churn cycles' in F.<size>.churn, the cold
one's in F.<size>.cold)
"""

from __future__ import annotations

import json
import random
import sys

import benchlib as bl
import cluster
from realqueue import Realistic, command_line


def run_child(bench: bl.Bench, ns: str, seed: str, nodes: int, repeats: int, profile: str = "") -> dict:
    return bl.run_child("realcycle.py", {"url": bench.url, "ns": ns, "seed": seed, "nodes": nodes,
                                         "repeats": repeats, "profile": profile})


def main() -> None:
    profile = ""
    if "--profile" in sys.argv:  # --profile FILE: the steady cycles' cProfile, FILE.<size> for each size
        at = sys.argv.index("--profile")
        profile = sys.argv[at + 1]
        del sys.argv[at:at + 2]
    command_line("real", lambda bench, ns, size, nodes, args: run_child(
        bench, ns, size, nodes, args.repeats, f"{profile}.{size}" if profile else ""), repeats=5)


# -- the child --------------------------------------------------------------------------------
def churn(client, ns: str, rng: random.Random, gen: Realistic, ends: int = 10, arrivals: int = 10) -> None:
    """`ends` running jobs end as their agents would end them; `arrivals` new jobs are submitted."""
    from dispatcher.store.jobs import write_jobs

    running = [j for j in cluster.active_jobs(client, ns)]
    cluster.finish(client, ns, rng.sample(running, min(ends, len(running))))
    write_jobs(client, ns, gen.arrivals(arrivals, cluster.now_ms()))


def child(args: dict) -> dict:
    __import__("rq")  # the scheduler's planner imports it: part of the baseline
    from dispatcher.config import Timing
    from dispatcher.scheduler.loop import Scheduler
    from dispatcher.store.connect import connect

    client = connect(args["url"])
    ns, repeats = args["ns"], args["repeats"]
    rss_base, _ = bl.rss_mb()
    sched = Scheduler(client, ns, timing=Timing(node_timeout_s=86400.0))  # the default lease
    sched.lease.keep()  # renewed from its side thread, as Scheduler.run does
    out = {}
    profilers = {}
    if args.get("profile"):
        import cProfile

        profilers = {"steady": cProfile.Profile(), "churn": cProfile.Profile()}
    with bl.phase_times(sched) as phases:
        cold = bool(profilers) and __import__("cProfile").Profile()
        if cold:
            cold.enable()
        cold_s, _ = bl.timed(sched.cycle)
        if cold:
            cold.disable()
            cold.dump_stats(args["profile"] + ".cold")
        out.update(cold_ms=cold_s * 1000, cold_breakdown_ms=bl.breakdown_ms(phases, cold_s))
        for name, before in (("steady", None), ("churn", churn)):
            rng, gen = random.Random(args["seed"]), Realistic(args["seed"], args["nodes"])
            sched.cycle()  # settle what the previous phase started
            times, splits, commands = [], [], []
            for _ in range(repeats):
                if before:
                    before(client, ns, rng, gen)
                phases.clear()
                n0 = bl.commands_executed(client)
                if profilers:
                    profilers[name].enable()
                dt, plan = bl.timed(sched.cycle)
                if profilers:
                    profilers[name].disable()
                commands.append(bl.commands_executed(client) - n0)
                times.append(dt * 1000)
                splits.append(bl.breakdown_ms(phases, dt))
            out.update({f"{name}_ms": bl.median(times), f"{name}_max_ms": max(times),
                        f"{name}_breakdown_ms": bl.median_each(splits), f"{name}_commands": bl.median(commands)})
    if profilers:
        profilers["steady"].dump_stats(args["profile"])
        profilers["churn"].dump_stats(args["profile"] + ".churn")
    rss_now, rss_peak = bl.rss_mb()
    out.update(rss_base_mb=rss_base, rss_peak_mb=rss_peak, pending=len(sched.mirror.backlog))
    return out


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        print(json.dumps(child(json.loads(sys.argv[2]))))
    else:
        main()
