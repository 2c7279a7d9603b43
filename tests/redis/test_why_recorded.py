"""`dispatch why` answers from what the leading scheduler recorded at its last cycle (the job's
verdict, the published reservations and rest reason), against a real server and the real
scheduler; `--fresh` runs the policy on the whole queue, bounded in time."""

import pytest

from dispatcher.clock import now_ms
from dispatcher.scheduler.loop import Scheduler
from dispatcher.store import keys
from dispatcher.store import stats as published
from dispatcher.store.jobs import read_job
from dispatcher.views.explain import WhatIfTimeout, explain, recorded, what_if
from tests.redis.test_store import beat, submit


def test_a_blocked_job_gets_its_verdict_numbers_and_the_reservation_from_the_last_cycle(client, ns):
    beat(client, ns, "a", gpus=2)
    small = submit(client, ns, gpus=1, est="1h")
    sched = Scheduler(client, ns)
    sched.cycle()  # the small job starts
    big = submit(client, ns, gpus=2, est="10m")
    sched.cycle()
    out = recorded(client, ns, big)
    o = out["outcome"]
    fresh = explain(client, ns, big)["outcome"]
    assert o["code"] == fresh["code"] and o["reason"] == fresh["reason"] and o["rank"] == fresh["rank"]
    assert abs(o["score"] - fresh["score"]) < 0.1 and set(o["terms"]) == set(fresh["terms"])
    assert out["pending"] == 1 and out["live_nodes"] == 1 and out["as_of"]["stale"] is False
    assert [r["job"] for r in out["reservations"]] == [big]  # EASY: the blocked 2-GPU job holds node a
    assert out["promise"]["class"] == "normal" and not out["fresh"]
    assert read_job(client, ns, small)["verdict"] is None  # it started: no verdict on its record


def test_a_verdict_left_behind_by_a_new_reason_is_not_shown(client, ns):
    beat(client, ns, "a", gpus=1)
    hog = submit(client, ns, gpus=1)
    waiting = submit(client, ns, gpus=1)
    Scheduler(client, ns).cycle()
    assert read_job(client, ns, waiting)["verdict"]["code"] == "lower_score"  # the hog took its GPU this cycle
    client.hset(keys.job(ns, waiting), "reason", "something else wrote this")  # as a commit or an end would
    assert read_job(client, ns, waiting)["verdict"] is None
    out = recorded(client, ns, waiting)["outcome"]
    assert out == {"code": "waiting", "reason": "something else wrote this", "rank": None}
    assert hog


def test_quick_cycles_keep_the_reasons_of_the_jobs_they_did_not_judge(client, ns):
    beat(client, ns, "a", gpus=1)
    submit(client, ns, gpus=1)
    waiting = submit(client, ns, gpus=1)
    sched = Scheduler(client, ns)
    sched.cycle()
    sched.cycle()  # a full cycle judges `waiting`
    reason = read_job(client, ns, waiting)["reason"]
    assert reason
    later = submit(client, ns, gpus=1)
    sched.cycle(quick=True)  # only the arrival is judged
    assert read_job(client, ns, waiting)["reason"] == reason and read_job(client, ns, later)["reason"]


def test_a_job_the_cycle_did_not_reach_shows_the_published_rest_reason(client, ns):
    # before any scheduler: says so; after one, a job with no reason of its own gets the rest reason
    waiting = submit(client, ns, gpus=1)
    assert recorded(client, ns, waiting)["outcome"]["code"] == "not_judged"
    client.hset(keys.scheduler_stats(ns), mapping={"at_ms": now_ms(), "rest_reason": "no GPU free anywhere"})
    out = recorded(client, ns, waiting)
    assert out["outcome"] == {"code": "not_reached", "rank": None, "reason": "no GPU free anywhere"}


def test_garbage_in_the_published_figures_reads_as_absent(client, ns):
    client.hset(keys.scheduler_stats(ns), mapping={"at_ms": "soon", "cycles": "7", "reservations": b"\xc1\x00",
                                                   "pending": "1e3"})
    got = published.read(client, ns)
    assert got["at_ms"] is None and got["cycles"] == 7 and got["reservations"] == [] and got["pending"] == 1000


def test_a_what_if_that_takes_too_long_gives_up_with_one_line(client, ns, monkeypatch):
    import threading

    import dispatcher.views.explain as explain_mod

    waiting = submit(client, ns, gpus=1)
    release = threading.Event()
    monkeypatch.setattr(explain_mod, "explain", lambda *a, **k: release.wait(5) and {})
    with pytest.raises(WhatIfTimeout, match="did not finish in 0.2s"):
        what_if(client, ns, waiting, 0.2)
    release.set()


def test_why_shows_the_reservations_that_concern_the_job_not_every_one_in_the_cluster(client, ns):
    """A job waiting for an A100 is shown its own reservation, not a V100's held for another job (it
    read as if the job waited on that GPU); a job that takes any GPU is shown both: either may stand in
    its way."""
    from dispatcher.core.model import GpuInfo
    from dispatcher.store.nodes import write_heartbeat
    from dispatcher.store.policies import write_applied

    write_applied(client, ns, "[defaults]\nreservations = 2\n", "test", now_ms())  # EASY's first two blocked jobs
    write_heartbeat(client, ns, "a", [GpuInfo(i, "NVIDIA A100-40GB", 40.0) for i in range(2)], 8, 64.0, now_ms())
    write_heartbeat(client, ns, "v", [GpuInfo(0, "Tesla V100-16GB", 16.0)], 8, 64.0, now_ms())
    submit(client, ns, gpus=2, gpu_type="A100", est="1h")
    submit(client, ns, gpus=1, gpu_type="V100", est="1h")
    sched = Scheduler(client, ns)
    sched.cycle()  # both nodes full
    on_a100 = submit(client, ns, gpus=2, gpu_type="A100", est="10m")
    on_v100 = submit(client, ns, gpus=1, gpu_type="V100", est="10m")
    sched.cycle()
    sched.lease.release()
    held = {r["job"]: r["node"] for r in published.read(client, ns)["reservations"]}
    assert held == {on_a100: "a", on_v100: "v"}, held  # the cycle reserved for both
    for job, own in ((on_a100, "a"), (on_v100, "v")):
        for out in (recorded(client, ns, job), explain(client, ns, job)):
            assert [(r["job"], r["node"]) for r in out["reservations"]] == [(job, own)], out["reservations"]
    anyone = submit(client, ns, gpus=1, est="10m")
    assert {r["job"] for r in recorded(client, ns, anyone)["reservations"]} == {on_a100, on_v100}


def test_why_shows_a_score_line_that_adds_up_as_written(cli, client):
    # the fit term (0 until placed) was left out while the divisor counted its weight: 69.0 = (...) / 0.455
    # with the listed weights summing to 0.445
    import re

    beat(client, cli.ns, "n1", gpus=2)
    cli.submit("--gpus", "2", "--", "true")
    job = cli.submit("--gpus", "2", "--", "true")  # (the first takes the node: it waits)
    sched = Scheduler(client, cli.ns)
    sched.cycle()
    sched.lease.release()
    out = cli.run("why", job).stdout
    line = next((x for x in out.splitlines() if x.strip().startswith("score ")), out)
    m = re.fullmatch(r"\s*score ([\d.]+) = \((.*)\) / ([\d.e-]+)", line)
    parts = [re.fullmatch(r"(\w+) ([\d.]+)x([\d.e-]+)", p.strip()).groups() for p in m.group(2).split(" + ")]
    weights = sum(float(w) for _, _, w in parts)
    assert "fit" in [k for k, _, _ in parts] and abs(weights - float(m.group(3))) < 1e-6, line
    assert abs(sum(float(v) * float(w) for _, v, w in parts) / weights - float(m.group(1))) < 0.1, line


def test_a_job_the_cycle_did_not_reach_is_told_no_node_has_its_gpu_type_free(client, ns, monkeypatch):
    # a T4 array's elements read "no node has room for it this cycle (at most 8 GPUs free on one node)"
    # while 8 A100s were free: the cycle's one rest reason, about no job in particular
    from dispatcher.core.model import GpuInfo
    from dispatcher.store import cluster
    from dispatcher.store.nodes import write_heartbeat

    monkeypatch.setattr(cluster, "PUBLISH_EVERY_MS", 0)  # (each cycle publishes: no second's wait)
    write_heartbeat(client, ns, "t4", [GpuInfo(i, "NVIDIA T4-16GB", 16.0) for i in range(2)], 8, 64.0, now_ms())
    beat(client, ns, "big", gpus=8)
    sched = Scheduler(client, ns)
    for _ in range(2):
        submit(client, ns, gpus=1, gpu_type="T4", est="1h")
    sched.cycle()  # both T4s taken
    waiting = [submit(client, ns, gpus=1, gpu_type="T4", est="1h") for _ in range(4)]
    sched.cycle()
    sched.cycle()
    unreached = [j for j in waiting if recorded(client, ns, j)["outcome"]["code"] == "not_reached"]
    assert unreached, [recorded(client, ns, j)["outcome"] for j in waiting]  # (the first of them got a verdict)
    reason = recorded(client, ns, unreached[0])["outcome"]["reason"]
    assert reason.startswith("needs 1xT4: at most 0 of those free on one node now (2 in the cluster"), reason
    any_gpu = submit(client, ns, gpus=1, est="1h")
    assert "needs" not in recorded(client, ns, any_gpu)["outcome"].get("reason", "")  # an A100 is free for it
