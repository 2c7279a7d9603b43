"""Per-class promises, the reservation for the longest overdue job, and classes that cross by LAS tier."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dispatcher.policy import PolicyConfig
from dispatcher.policy.profiles import parse_policy
from dispatcher.policy.promises import describe, promise
from tests.builders import make_job, make_node, plan_of

HOUR, DAY = 3600.0, 86400.0


def _full_cluster():
    """Two 8-GPU nodes, every GPU held by a 1-GPU job that ends within the hour (estimates)."""
    nodes = [make_node(n).gpus(8).held(*range(8), cpus=8) for n in ("n1", "n2")]
    running = [make_job(f"r{n}{i}").gpus(1).est(600 + 60 * i + (300 if n == "n2" else 0)).user("rita")
               .running_on(n, i, started_s_ago=60) for n in ("n1", "n2") for i in range(8)]
    return nodes, running


@pytest.mark.parametrize("share, big_waited_s, want", [
    (None, 3 * DAY, "short"),  # off: the best-scored blocked job holds the one reservation
    (0.2, 3 * DAY, "big"),     # 3 days is 40% of the normal class's 7.5-day target: the big job holds it
    (0.2, 0.5 * DAY, "short"),  # half a day is under 20% of the target: the score decides
], ids=["off", "past_the_share_of_its_target", "under_the_share"])
def test_the_reservation_goes_to_the_job_longest_overdue_against_its_target(share, big_waited_s, want):
    nodes, running = _full_cluster()
    big = make_job("big").gpus(8).est(20 * HOUR).waited(big_waited_s).user("bea")
    short = make_job("short").gpus(8).est(60).user("sam")  # scores higher: a much shorter estimate
    config = replace(PolicyConfig(), reserve_longest_wait=share, reservations=1, preemption=False,
                     targets_s={**PolicyConfig().targets_s, "normal": 7.5 * DAY},
                     starvation_s={})
    plan = plan_of([big, short], nodes, running, config)
    held = [r.job_id for r in plan.reservations]
    assert held == [want], f"reservations {plan.reservations}; verdicts {plan.verdicts}"


def test_longest_overdue_compares_classes_by_their_targets_not_by_the_clock():
    # the low job waited longer (2 days) but only half its 4-day target; the normal job waited its whole
    # 1-day target: the normal job is the more overdue, and it holds the reservation
    nodes, running = _full_cluster()
    low = make_job("low").gpus(8).priority("low").waited(2 * DAY).user("lou")
    norm = make_job("norm").gpus(8).waited(1 * DAY).user("nora")
    config = replace(PolicyConfig(), reserve_longest_wait=0.1, reservations=1, preemption=False, starvation_s={},
                     targets_s={"critical": HOUR, "high": 4 * HOUR, "normal": DAY, "low": 4 * DAY})
    plan = plan_of([low, norm], nodes, running, config)
    assert [r.job_id for r in plan.reservations] == ["norm"], plan.reservations


@pytest.mark.parametrize("step, want_preempted", [(100.0, False), (0.5, True)],
                         ids=["classes_never_cross", "half_a_tier_per_class"])
def test_with_a_small_class_step_a_fresh_low_job_preempts_a_normal_job_that_had_its_share(step, want_preempted):
    node = make_node("n1").gpus(1).held(0, cpus=1)
    # the normal job has run 12 h on its GPU: 12 GPU-hours, past both LAS tiers (1 and 10 GPU-hours)
    veteran = make_job("vet").gpus(1)._set(checkpointable=True).user("vic").running_on("n1", 0,
                                                                                     started_s_ago=12 * HOUR)
    fresh = make_job("new").gpus(1).priority("low").est(600).user("fay")
    config = replace(PolicyConfig(), class_step=step, preempt_by="class+attained")
    plan = plan_of([fresh], [node], [veteran], config)
    assert bool(plan.preemptions) is want_preempted, f"preemptions {plan.preemptions}; verdicts {plan.verdicts}"
    if want_preempted:
        assert plan.preemptions[0].job_id == "vet" and plan.preemptions[0].mode == "graceful"


def test_a_fresh_normal_job_never_preempts_a_fresh_critical_one_whatever_the_step():
    node = make_node("n1").gpus(1).held(0, cpus=1)
    crit = make_job("crit").gpus(1).priority("critical")._set(checkpointable=True).running_on("n1", 0,
                                                                                             started_s_ago=600)
    plan = plan_of([make_job("n").gpus(1).est(60)], [node], [crit], replace(PolicyConfig(), class_step=0.5))
    assert plan.preemptions == ()


def test_a_policy_file_sets_targets_and_the_starvation_bounds_follow_at_half():
    pset = parse_policy('[defaults]\ntargets = { low = "2d", high = "30m" }\nclass_step = 0.5\n'
                        'reserve_longest_wait = 0.25\n')
    c = pset.profiles["default"]
    assert c.targets_s["low"] == 2 * DAY and c.starvation_s["low"] == DAY and c.starvation_s["high"] == 900
    assert c.class_step == 0.5 and c.reserve_longest_wait == 0.25
    off = parse_policy('[defaults]\nreserve_longest_wait = "never"\n').profiles["default"]
    assert off.reserve_longest_wait is None
    explicit = parse_policy('[defaults]\ntargets = { low = "2d" }\nstarvation = { low = "6h" }\n').profiles["default"]
    assert explicit.starvation_s["low"] == 6 * HOUR


def test_why_says_how_far_a_job_is_from_its_class_promise():
    config = replace(PolicyConfig(), targets_s={**PolicyConfig().targets_s, "low": 12 * DAY},
                     starvation_s={**PolicyConfig().starvation_s, "low": 6 * DAY})
    text = describe(promise("low", 3 * DAY, config))
    assert text == "waited 3d of the low class's 12d target (25%); past 6d it goes ahead of every class", text
    late = describe(promise("low", 13 * DAY, config))
    assert "over it by 1d" in late, late
    assert promise("low", 1.0, replace(config, targets_s={})) is None
