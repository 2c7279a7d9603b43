"""Start-time forecasts (dispatcher/sim/forecast.py) on hand-made snapshots whose answer is known."""

import random
import time

import pytest

from dispatcher.policy import PolicyConfig
from dispatcher.sim.engine import Engine
from dispatcher.sim.nodes import make_nodes
from dispatcher.sim.forecast import HORIZON_S, forecast
from dispatcher.sim.policies import dispatch_policy
from dispatcher.sim.workload import EstimateModel, synthetic
from tests.builders import NOW_MS, make_job, make_node, snapshot

CONFIG = PolicyConfig()


def test_a_two_gpu_job_starts_when_the_two_gpus_it_waits_for_are_released_and_one_gpu_starts_now():
    # n1: 2 GPUs held by job r until +10 min (est 15 min, started 5 min ago); n2: 1 of 2 GPUs held for a day
    r = make_job("r").gpus(2).est(900).running_on("n1", 0, 1, started_s_ago=300)
    other = make_job("o").gpus(1).est(86400).running_on("n2", 0)
    snap = snapshot(pending=[make_job("j").gpus(2).est(60)], running=[r, other],
                    nodes=[make_node("n1").gpus(2).held(0, 1), make_node("n2").gpus(2).held(0)])
    f = forecast(snap, "j", NOW_MS, CONFIG)
    assert (f.start.at_ms - NOW_MS, f.start.node, f.start.after) == (600_000, "n1", ("r",)), f.start
    assert f.change == "--gpus 1" and f.change_start.at_ms == NOW_MS and f.change_start.node == "n2", f


def test_a_job_waits_for_cpus_and_memory_as_for_gpus():
    # two GPUs free but every CPU held by a CPU-only job until +90 s: `eta` said "now" while `why` said
    # "0 CPUs free" (the forecast's nodes had a million CPUs and no memory limit); then the same for memory
    cpu = make_job("c").gpus(0).cpus(4).est(90).running_on("n1")
    snap = snapshot(pending=[make_job("j").gpus(1).est(30)], running=[cpu],
                    nodes=[make_node("n1").gpus(2).cpus(4).held(cpus=4)])
    f = forecast(snap, "j", NOW_MS, CONFIG)
    assert (f.start.at_ms - NOW_MS, f.start.after) == (90_000, ("c",)), f.start
    mem = make_job("m").gpus(0).cpus(1).mem(60).est(120).running_on("n1")
    snap = snapshot(pending=[make_job("j").gpus(1).mem(8).est(30)], running=[mem],
                    nodes=[make_node("n1").gpus(2).cpus(8).mem(64).held(cpus=1, mem_gb=60)])
    assert forecast(snap, "j", NOW_MS, CONFIG).start.at_ms - NOW_MS == 120_000


def test_a_job_that_fits_now_starts_now_and_no_change_is_offered():
    snap = snapshot(pending=[make_job("j").gpus(1)], nodes=[make_node("n1").gpus(2)])
    f = forecast(snap, "j", NOW_MS, CONFIG)
    assert (f.start.at_ms, f.start.node, f.change) == (NOW_MS, "n1", ""), f


def test_the_queue_ahead_runs_first_for_its_estimates():
    # one GPU, free; a (high, 5 min) is ahead of b (normal): b starts when a ends
    snap = snapshot(pending=[make_job("a").gpus(1).priority("high").est(300), make_job("b").gpus(1).est(60)],
                    nodes=[make_node("n1").gpus(1)])
    f = forecast(snap, "b", NOW_MS, CONFIG)
    assert (f.start.at_ms - NOW_MS, f.start.after) == (300_000, ("a",)), f.start


def test_dropping_the_gpu_type_is_offered_when_another_type_is_free():
    snap = snapshot(pending=[make_job("j").gpus(1, "A100").est(60)],
                    running=[make_job("r").gpus(1).est(3600).running_on("a", 0)],
                    nodes=[make_node("a").gpus(1, "A100").held(0), make_node("v").gpus(1, "V100")])
    f = forecast(snap, "j", NOW_MS, CONFIG)
    assert f.start.at_ms - NOW_MS == 3_600_000 and f.change == "no --gpu-type", f
    assert (f.change_start.at_ms, f.change_start.node) == (NOW_MS, "v"), f


def test_a_job_no_node_frees_up_for_within_the_horizon_is_not_forecast():
    # running job with no estimate: the policy's unknown_remaining_s (1 day) > a 1-hour horizon
    snap = snapshot(pending=[make_job("j").gpus(1)], running=[make_job("r").gpus(1).running_on("n1", 0)],
                    nodes=[make_node("n1").gpus(1).held(0)])
    f = forecast(snap, "j", NOW_MS, CONFIG, horizon_s=3600)
    assert f.start.at_ms is None and f.change == "", f
    assert forecast(snap, "j", NOW_MS, CONFIG).start.at_ms - NOW_MS == CONFIG.unknown_remaining_s * 1000  # one event: on time


def test_a_job_not_pending_in_the_snapshot_is_a_key_error():
    with pytest.raises(KeyError):
        forecast(snapshot(nodes=[make_node("n1").gpus(1)]), "nope", NOW_MS, CONFIG)


def test_a_forecast_among_hundreds_of_waiting_jobs_is_quick():
    # a replay paused with ~180 jobs waiting on 64 GPUs (3x overloaded: waits of hours); the newest
    # of the largest jobs, and its what-ifs (docs/simulator.md: median 0.3 s over all 240 here)
    trace = synthetic(1500, random.Random(3), users=12, load_gpus=400.0)
    config = dispatch_policy().config_at()
    engine = Engine(trace, make_nodes(None, 64), config, estimates=EstimateModel("lognormal"), rng=random.Random(3))
    t = trace[1000].submit_s
    engine.run(until_s=t)
    now_ms = int(t * 1000)
    snap = engine.snapshot(now_ms)
    assert len(snap.pending) >= 150, len(snap.pending)
    last = max(snap.pending, key=lambda p: (p.spec.gpus, p.spec.submit_ms, p.spec.id)).spec.id  # a long wait
    began = time.perf_counter()
    f = forecast(snap, last, now_ms, config(t))
    took = time.perf_counter() - began
    print(f"forecast of job {last} among {len(snap.pending)} pending: {took * 1000:.0f} ms, {f}")
    assert took < 2.0, took  # 0.63 s on the 2-core dev machine; room for a loaded CI runner
    assert f.start.at_ms is not None and now_ms <= f.start.at_ms <= now_ms + HORIZON_S * 1000, f
