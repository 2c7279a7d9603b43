"""Time alone changes the live scheduler's plan (it cycles every second); a replay cycles at those
moments too, not only when a job arrives or ends."""

from dispatcher.policy.config import PolicyConfig
from dispatcher.sim.engine import Engine
from dispatcher.sim.nodes import make_nodes
from dispatcher.sim.workload import EstimateModel, TraceJob


def first_start(trace, nodes="1x8xA100-80GB", job="y", config=PolicyConfig(), **engine):
    result = Engine(trace, make_nodes(nodes, None), config, estimates=EstimateModel("oracle"), **engine).run()
    return {j.spec.id: j for j in result.jobs}[job].first_start_s, result


def test_a_critical_job_behind_a_minimum_run_starts_when_the_minimum_run_ends():
    # x started at 0 and is protected for its minimum run (5 min); y needs its GPUs. Live: preempted at
    # 300 s, saved by 330 s.
    trace = [TraceJob("x", 0, "u", 8, 36000), TraceJob("y", 1, "v", 8, 600, (), "critical")]
    started, _ = first_start(trace)
    assert PolicyConfig().min_run_s == 300.0 and started == 330.0, "the minimum run, then a 30 s checkpoint save"
    started, _ = first_start(trace, config=PolicyConfig(min_run_s=30.0))
    assert started == 60.0


def test_without_ticks_the_same_job_waits_for_the_next_event():
    trace = [TraceJob("x", 0, "u", 8, 36000), TraceJob("y", 1, "v", 8, 600, (), "critical")]
    started, _ = first_start(trace, tick_s=None)
    assert started == 36000.0, "nothing arrives or ends before x does"


def test_a_running_job_passing_its_service_tier_becomes_a_victim_at_that_moment():
    # One class: y (no service yet) outranks x once x has received 3,600 GPU-seconds (450 s on 8 GPUs).
    trace = [TraceJob("x", 0, "u", 8, 36000), TraceJob("y", 10, "v", 8, 600)]
    started, result = first_start(trace)
    assert started == 480.0, "x passes its first tier at 450 s; its checkpoint save takes 30 s"
    assert {j.spec.id: j for j in result.jobs}["x"].preemptions == 1


def test_a_job_that_can_never_start_ends_the_replay_instead_of_ticking_forever():
    trace = [TraceJob("x", 0, "u", 4, 100), TraceJob("big", 5, "v", 16, 100)]  # one 8-GPU node
    started, result = first_start(trace, job="big")
    assert started is None and result.unfinished == 1
    assert result.cycles < 10


def test_a_quiet_day_is_replayed_with_ticks_that_space_out_while_they_change_nothing():
    # a job that fills the node for a day and one waiting behind it, with no preemption: nothing
    # happens for a day, but aging, class targets and time-of-day profiles move on
    trace = [TraceJob("a", 0, "u", 8, 86400), TraceJob("w", 60, "v", 8, 60)]
    config = PolicyConfig(preemption=False)
    started, ticking = first_start(trace, job="w", config=config, tick_s=300.0)
    _, quiet = first_start(trace, job="w", config=config, tick_s=None)
    assert started == 86400.0 and quiet.cycles <= 3
    times = [t for t, *_ in ticking.timeline]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert gaps[1:5] == [300.0, 600.0, 1200.0, 2400.0], gaps  # (w arrives 60 s in) each tick that changed nothing doubles the gap
    assert max(gaps) <= 3600.0 and ticking.cycles <= 30, "at most an hour apart: 27 cycles, not 288"


def test_a_job_of_no_gpu_runs_beside_the_others_with_ticks():
    trace = [TraceJob("x", 0, "u", 8, 100), TraceJob("cpu", 1, "v", 0, 50), TraceJob("y", 2, "v", 8, 10)]
    started, result = first_start(trace, job="cpu")
    assert started == 1.0 and result.unfinished == 0
