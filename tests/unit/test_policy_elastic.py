"""Elastic requests (`--gpus MIN-MAX --scaling ...`): the policy starts a job with the GPU count that
finishes it soonest, waiting included, and says why."""

import pytest

from dispatcher.core.plan import Code
from dispatcher.core.elastic import ScalingError, counts, parse_scaling, run_time
from tests.builders import make_job, make_node, plan_of, verdict_of

HOUR = 3600.0


def busy_node(held: int, for_s: float):
    """An 8-GPU node with `held` GPUs held by one long job that ends in `for_s` seconds."""
    node = make_node("n1").gpus(8).held(*range(held))
    job = make_job("long").gpus(held).est(for_s).user("bob").running_on("n1", *range(held))
    return node, job


def test_on_an_idle_node_an_elastic_job_takes_every_gpu_it_may():
    plan = plan_of([make_job("e").elastic(1, 8).est(HOUR)], [make_node("n1").gpus(8)])
    (p,) = plan.placements
    assert len(p.gpus) == 8 and "elastic: 8 GPUs finish soonest" in p.reason, p.reason


def test_with_six_gpus_busy_for_long_it_starts_now_on_the_two_left():
    node, long_job = busy_node(6, 10 * HOUR)
    plan = plan_of([make_job("e").elastic(1, 8).est(HOUR)], [node], [long_job])
    (p,) = plan.placements
    assert p.gpus == (6, 7), p
    # 1 GPU: 8h, 2 GPUs: 4h now; 8 GPUs: 1h after a 10h wait
    assert "elastic: 2 GPUs finish soonest" in p.reason and "8 starts in ~10h, runs ~1h" in p.reason, p.reason


def test_when_the_busy_gpus_free_up_soon_it_waits_for_all_of_them():
    node, long_job = busy_node(6, 600)  # 10 minutes
    table = "1:100h,2:50h,8:1h"
    plan = plan_of([make_job("e").elastic(1, 8, table)], [node], [long_job])
    assert plan.placements == ()
    (v,) = plan.verdicts
    assert v.code == Code.NO_FIT_NOW and "elastic: 8 GPUs finish soonest" in v.reason, v.reason
    assert [(r.job_id, len(r.gpus)) for r in plan.reservations] == [("e", 8)]


def test_an_elastic_job_too_big_for_any_node_still_fits_with_fewer():
    plan = plan_of([make_job("e").elastic(2, 16).est(HOUR)], [make_node("n1").gpus(8)])
    (p,) = plan.placements
    assert len(p.gpus) == 8, p


@pytest.mark.parametrize("scaling, gpus, want", [
    ("linear", 2, 4 * HOUR), ("linear", 8, HOUR),
    ("amdahl:1", 4, 2 * HOUR), ("amdahl:0", 1, HOUR),
    ("1:10h,2:5.5h,8:1.5h", 2, 5.5 * HOUR), ("1:10h,2:5.5h,8:1.5h", 4, HOUR * 8 / 4),
])
def test_run_time_on_g_gpus_follows_the_scaling_the_user_gave(scaling, gpus, want):
    spec = make_job("e").elastic(1, 8, scaling).est(HOUR).obj()
    assert run_time(spec, gpus) == pytest.approx(want)


def test_a_table_offers_only_its_own_counts():
    assert counts(make_job("e").elastic(1, 8, "1:10h,2:5.5h,8:1.5h").obj()) == [1, 2, 8]
    assert counts(make_job("e").elastic(3, 8).obj()) == [3, 4, 8]


@pytest.mark.parametrize("text", ["amdahl:1.5", "amdahl:x", "1:10h,1:5h", "fast", "0:1h", "2:-1h"])
def test_a_scaling_that_does_not_parse_says_what_is_expected(text):
    with pytest.raises(ScalingError):
        parse_scaling(text)


def test_with_no_count_reservable_it_waits_with_what_one_node_holds_not_as_a_gang_of_its_most():
    from dispatcher.policy.config import PolicyConfig

    nodes = [make_node(n).gpus(8).held(*range(8)) for n in ("n1", "n2")]
    running = [make_job(f"r{n}").gpus(8).est(10 * HOUR).user("bob").running_on(n, *range(8)) for n in ("n1", "n2")]
    ahead = [make_job(j).gpus(8).est(HOUR).priority("high").user(j) for j in ("a", "b")]  # they reserve both nodes
    plan = plan_of(ahead + [make_job("e").elastic(4, 16).est(HOUR).user("z")], nodes, running,
                   PolicyConfig(reservations=3))
    v = verdict_of(plan, "e")
    assert "no count could start" in v.reason and "needs 8xGPU" in v.reason, v.reason
    assert "whole nodes" not in v.reason  # 16 GPUs would be a gang across nodes: it never asked for --nodes


def test_an_elastic_job_takes_no_more_than_its_teams_limit_rather_than_wait_for_ever():
    from dataclasses import replace as with_
    from dispatcher.policy import PolicyConfig
    from dispatcher.policy.config import TeamQuota

    config = with_(PolicyConfig(), teams={"vision": TeamQuota(limit_gpus=3)})
    job = make_job("e").elastic(1, 4).est(HOUR)._set(team="vision")  # 1, 2 or 4 (powers of two)
    plan = plan_of([job], [make_node("n1").gpus(8)], config=config)
    (p,) = plan.placements  # 4 finished soonest, but the team may hold 3 at most: it waited with all 8 idle
    assert len(p.gpus) == 2 and "elastic: 2 GPUs finish soonest" in p.reason and "4 starts" not in p.reason, p.reason
