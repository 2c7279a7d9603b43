"""The interactive lane: `reserve = { high = 2 }` keeps two GPUs free for high (and critical) work;
lower classes start only where that many stay free, and the lane shrinks by what such work holds."""

from __future__ import annotations

from dataclasses import replace

from dispatcher.core.plan import Code
from dispatcher.policy import PolicyConfig
from dispatcher.policy.schedule import schedule
from dispatcher.policy.profiles import parse_policy
from dispatcher.policy.render import render_policy
from tests.builders import NOW_MS, make_job, make_node, snapshot

LANE = replace(PolicyConfig(), reserve={"high": 2})


def started(plan) -> set[str]:
    return {p.job_id for p in plan.placements}


def test_a_normal_job_may_not_take_the_gpus_kept_for_high_work():
    nodes = [make_node("n1").gpus(4)]
    plan = schedule(snapshot(pending=[make_job("big").gpus(3)], nodes=nodes), now_ms=NOW_MS, config=LANE)
    assert started(plan) == set()
    (v,) = plan.verdicts
    assert v.code == Code.HELD_FOR_CLASS and "2 of them are kept for high work" in v.reason
    plan = schedule(snapshot(pending=[make_job("two").gpus(2)], nodes=nodes), now_ms=NOW_MS, config=LANE)
    assert started(plan) == {"two"}, "two GPUs stay free: the lane holds"


def test_high_and_critical_work_use_the_lane_and_low_work_waits_behind_it():
    nodes = [make_node("n1").gpus(2)]
    pending = [make_job("shell").gpus(1).priority("high"), make_job("fix").gpus(1).priority("critical"),
               make_job("batch").gpus(1).priority("low").waited(3600)]
    assert started(schedule(snapshot(pending=pending, nodes=nodes), now_ms=NOW_MS, config=LANE)) == {"shell", "fix"}


def test_the_lane_is_what_is_left_of_the_reserve_after_the_high_work_running():
    nodes = [make_node("n1").gpus(4).held(0)]
    running = [make_job("shell").gpus(1).priority("high").running_on("n1", 0)]
    plan = schedule(snapshot(pending=[make_job("train").gpus(2)], running=running, nodes=nodes),
                    now_ms=NOW_MS, config=LANE)
    assert started(plan) == {"train"}, "3 free, 1 kept (the shell holds the other GPU of the lane)"


def test_without_a_reserve_nothing_is_kept():
    nodes = [make_node("n1").gpus(4)]
    assert started(schedule(snapshot(pending=[make_job("big").gpus(4)], nodes=nodes), now_ms=NOW_MS)) == {"big"}


def test_a_policy_file_sets_the_reserve_and_writes_it_back():
    pset = parse_policy("[defaults]\nreserve = { high = 2 }\n")
    assert pset.profiles["default"].reserve == {"high": 2}
    assert parse_policy(render_policy(pset)) == pset



def test_a_reservation_behind_a_job_with_no_estimate_says_when_it_ends_not_in_24_hours():
    nodes = [make_node("n1").gpus(1).held(0)]
    running = [make_job("hog").gpus(1).est(None).running_on("n1", 0)]
    plan = schedule(snapshot(pending=[make_job("next").gpus(1).priority("high")], running=running, nodes=nodes),
                    now_ms=NOW_MS, config=PolicyConfig())
    (v,) = plan.verdicts
    assert "holds a reservation on n1 GPUs [0] starting when the jobs holding them end (one has no estimate " \
           "left)" in v.reason, v.reason
    assert "24 h" not in v.reason
    timed = [make_job("hog").gpus(1).est(600).running_on("n1", 0)]
    (v,) = schedule(snapshot(pending=[make_job("next").gpus(1)], running=timed, nodes=nodes), now_ms=NOW_MS,
                    config=PolicyConfig()).verdicts
    assert "holds a reservation on n1 GPUs [0] starting in ~10 min" in v.reason, v.reason


def test_a_normal_gang_with_no_estimate_holds_no_nodes_whose_start_nobody_can_tell_unless_it_starves():
    # without estimates nothing may backfill such a hold: a normal 32-GPU job held a whole 32-GPU cluster's
    # GPUs idle as they came free, through 1,480 cycles (average JCT 1.9x FIFO's on the Philly week's first 400
    # jobs with no --est); high and critical gangs, and a starving one, still hold them; a one-node job still
    # holds its GPUs (EASY's seed case: a 2-GPU job is not starved by a stream of 1-GPU jobs)
    nodes = [make_node("n1").gpus(2).held(0), make_node("n2").gpus(2).held(0)]
    running = [make_job(f"hog{i}").gpus(1).est(None).running_on(f"n{i}", 0) for i in (1, 2)]
    for job, held in ((make_job("big").gpus(4), False), (make_job("big").gpus(4).priority("high"), True),
                      (make_job("big").gpus(4).waited(200 * 3600), True)):  # (normal starves after 90 h)
        plan = schedule(snapshot(pending=[job, make_job("small").gpus(1)], running=running, nodes=nodes),
                        now_ms=NOW_MS, config=PolicyConfig())
        assert bool(plan.reservations) is held, plan
        assert ("small" in {p.job_id for p in plan.placements}) is not held, plan  # a free GPU: used, or held
    pair = schedule(snapshot(pending=[make_job("pair").gpus(2), make_job("small").gpus(1)], running=running[:1],
                             nodes=nodes[:1]), now_ms=NOW_MS, config=PolicyConfig())
    assert [r.job_id for r in pair.reservations] == ["pair"] and not pair.placements, pair  # one node: held
    timed = [make_job(f"hog{i}").gpus(1).est(600).running_on(f"n{i}", 0) for i in (1, 2)]  # a start told: as before
    plan = schedule(snapshot(pending=[make_job("big").gpus(4)], running=timed, nodes=nodes), now_ms=NOW_MS,
                    config=PolicyConfig())
    assert {r.start_ms - NOW_MS for r in plan.reservations} == {600_000}
