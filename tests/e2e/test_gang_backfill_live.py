"""A gang of 2 whole nodes behind one-node jobs, live and in the simulator: the same policy code gives
the same starts, and the gang waits no longer than EASY backfill lets it (a short job backfills into
the free GPU, a long one waits rather than delay the gang's reservation).

Two agents of 2 GPUs each. The simulator is told each job's run time (oracle estimates); live, each
estimate is 2 s more, so that no job is past its estimate in the moment between two ends that the
simulator takes as one instant (a job past its estimate has no end to reserve from).
"""

import time

import pytest

from dispatcher.api import Client
from dispatcher.policy import PolicyConfig
from dispatcher.sim.engine import Engine
from dispatcher.sim.nodes import make_nodes
from dispatcher.sim.workload import EstimateModel, TraceJob
from dispatcher.store.jobs import read_job
from dispatcher.store.nodes import read_nodes

pytestmark = pytest.mark.slow

#: (job, GPUs, seconds it runs = its estimate, wave): wave 0 runs first; wave 1 comes a second later
SCENARIO = [("A", 1, 6, 0), ("B", 2, 6, 0), ("G", 4, 2, 1), ("D", 1, 1, 1), ("E", 1, 10, 1)]
FAST = {"DISPATCH_NODE_TIMEOUT_S": "6", "DISPATCH_HEARTBEAT_S": "0.5"}


def simulated_starts() -> dict[str, float]:
    """job -> when it first started, in the simulator."""
    trace = [TraceJob(name, float(wave), "u", gpus, float(secs)) for name, gpus, secs, wave in SCENARIO]
    engine = Engine(trace, make_nodes("2x2xA100-40GB", None), PolicyConfig(), estimates=EstimateModel(kind="oracle"))
    result = engine.run()
    return {job.spec.id: job.first_start_s for job in result.jobs}


def test_a_whole_node_gang_waits_only_as_easy_backfill_lets_it_and_starts_as_simulated(cli, client, redis_url):
    for name in ("h1", "h2"):
        cli.start("worker", "--node", name, "--fake-gpus", "2xA100-40GB", "--cpus", "8", log_name=f"worker-{name}",
                  **FAST)
    cli.wait_for(lambda: len(read_nodes(client, cli.ns)[0]) == 2, timeout=30, what="the agents to register")
    api, ids = Client(redis_url, cli.ns), {}
    cli.start("scheduler", **FAST)
    for wave in (0, 1):  # each wave in one transaction: one cycle sees it whole, as one simulated instant
        jobs = [(name, gpus, secs) for name, gpus, secs, w in SCENARIO if w == wave]
        ids.update(zip([n for n, *_ in jobs], api.submit_many(
            [{"command": ["sleep", str(secs)], "gpus": gpus, "est": f"{secs + 2}s", "name": name}
             for name, gpus, secs in jobs])))
        if wave == 0:  # the second wave comes once the first runs, a second later (as simulated)
            cli.wait_for(lambda: all(read_job(client, cli.ns, i)["state"] == "running" for i in ids.values()),
                         what="the first wave to start")
            time.sleep(1)
    cli.wait_for(lambda: all(read_job(client, cli.ns, i)["state"] == "succeeded" for i in ids.values()),
                 timeout=90, what="every job to end")
    live = {name: read_job(client, cli.ns, i) for name, i in ids.items()}
    sim = simulated_starts()

    def order(starts):  # the jobs in the order they first started; those within 0.3 s (one cycle) as a set
        out, last = [], None
        for job, t in sorted(starts.items(), key=lambda kv: kv[1]):
            if last is None or t - last > 0.3:
                out.append(set())
            out[-1].add(job)
            last = t
        return out

    t0 = min(j["started_at"] for j in live.values())
    live_starts = {name: j["started_at"] - t0 for name, j in live.items()}
    print(live_starts)
    assert order(live_starts) == order(sim) == [{"A", "B"}, {"D"}, {"G"}, {"E"}], \
        (live_starts, sim)
    assert {n for n, _ in live["G"]["ranks"]} == {"h1", "h2"}  # both whole nodes
    # EASY: D (1 s) backfilled at once; E (10 s) waited for the gang rather than delay it; the gang
    # started as soon as A and B had both ended (within a few scheduler ticks)
    assert live["D"]["started_at"] < live["G"]["started_at"] < live["E"]["started_at"]
    assert live["G"]["started_at"] - max(live["A"]["finished_at"], live["B"]["finished_at"]) < 3.0
    assert (sim["D"], sim["G"], sim["E"]) == (1, 6, 8)  # the same in the simulator
