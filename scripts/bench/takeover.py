"""A standby taking the lead on the realistic queue (realqueue.py): warm (it followed the change feed,
store/feed.py) against cold (a scheduler that never read the queue), in the same child process.

For each size (pending jobs x nodes) a child process (clean RSS) runs, with the default Timing (its
5 s lease):

1. the leader's first cycle (cold), then a standby's first turn (its whole read of the queue);
2. `repeats` rounds of churn (10 running jobs end, 10 jobs arrive), a leader cycle, and the standby's
   turn, which rereads what the leader's take put in the feed (follow_ms: its cost each tick);
3. one more churn the leader never takes; the leader lets go of the lease; the standby's next cycle
   takes the lead: it takes the changed set, rereads those jobs, reads the nodes whole, runs the
   policy and commits (warm_takeover_ms);
4. the same once more for a third scheduler that never stood by (cold_takeover_ms: it reads every
   job). The two alternate `rounds` times, a fresh cold scheduler each round.

Also the RSS the standby's mirror adds (a standby now holds the queue as the leader does).

    python scripts/bench/takeover.py [--sizes 10000x1000,100000x1000] [--repeats 5] [--rounds 2] [--json F]
"""

from __future__ import annotations

import json
import random
import sys

import benchlib as bl
from realcycle import churn
from realqueue import Realistic, command_line


def main() -> None:
    command_line("takeover", lambda bench, ns, size, nodes, args: bl.run_child(
        "takeover.py", {"url": bench.url, "ns": ns, "seed": size, "nodes": nodes, "repeats": args.repeats,
                        "rounds": args.rounds}), repeats=5, rounds=2)


def child(args: dict) -> dict:
    __import__("rq")
    from dispatcher.config import Timing
    from dispatcher.scheduler.loop import Scheduler
    from dispatcher.store.connect import connect

    client = connect(args["url"])
    ns = args["ns"]
    rng, gen = random.Random(args["seed"]), Realistic(args["seed"], args["nodes"])
    timing = Timing(node_timeout_s=86400.0)

    def scheduler(name: str):
        s = Scheduler(client, ns, timing=timing, holder=name)
        s.lease.keep()
        return s

    leader = scheduler("first")
    out = {"leader_cold_ms": bl.timed(leader.cycle)[0] * 1000}
    rss0, _ = bl.rss_mb()
    standby = scheduler("standby")
    out["standby_first_ms"] = bl.timed(standby.cycle)[0] * 1000
    assert not standby.leading
    out["standby_rss_mb"] = bl.rss_mb()[0] - rss0
    warm, cold, follow, changed = [], [], [], []
    for r in range(args["rounds"]):
        for _ in range(args["repeats"]):
            churn(client, ns, rng, gen)
            leader.cycle()
            dt, _ = bl.timed(standby.cycle)
            follow.append(dt * 1000)
        churn(client, ns, rng, gen)  # what the leader never took: in the set when the standby leads
        leader.lease.release()
        dt, _ = bl.timed(standby.cycle)
        assert standby.leading, "the standby did not take the lead"
        warm.append(dt * 1000)
        changed.append(standby.mirror.changed)
        # the same for a scheduler that never stood by: it reads every job
        churn(client, ns, rng, gen)
        standby.lease.release()
        fresh = scheduler(f"cold-{r}")
        dt, _ = bl.timed(fresh.cycle)
        assert fresh.leading, "the cold scheduler did not take the lead"
        cold.append(dt * 1000)
        fresh.lease.release()
        del fresh
        standby.lease.keep()
        standby.cycle()  # it leads again (its mirror follows on: the cold one's takes are in the feed)
        leader.lease.keep()
        leader.cycle()  # and the first leader stands by, following from where it let go
        assert standby.leading and not leader.leading
        leader, standby = standby, leader
    out.update(follow_ms=bl.median(follow), follow_max_ms=max(follow), warm_takeover_ms=bl.median(warm),
               warm_takeover_max_ms=max(warm), jobs_reread_at_takeover=bl.median(changed),
               cold_takeover_ms=bl.median(cold), warm_over_cold=round(bl.median(warm) / bl.median(cold), 3),
               pending=len(standby.mirror.backlog))
    return {k: (round(v, 1) if isinstance(v, float) else v) for k, v in out.items()}


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        print(json.dumps(child(json.loads(sys.argv[2]))))
    else:
        main()
