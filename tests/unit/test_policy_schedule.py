"""Scenario tests of schedule(): one cycle over a hand-built snapshot, asserting on the Plan.

Default weights (policy/config.py): priority 0.15, wait 0, fairness 0.005, remaining 0.09, fit 0.01,
attained 0.2 (sum 0.455); the score is the weighted mean Σ w·t / 0.455 over the terms present (a
blocked job has no fit term). Aging horizon 7200 s, remaining reference 600 s, LAS tiers at 1 and
10 GPU-hours; the smallest GPU in the cluster is the reference memory of a job that states none.
Default starvation bounds (half of each class's target): critical 30 min, high 2 h, normal 90 h,
low 6 days. Scores in comments use them, except where a test names its weights: the hand-computed
scores use HAND_WEIGHTS (an earlier default, sum 1.30), the class-dominance tests (in
test_policy_fairness.py) CLASSES_NEVER_CROSS (sum 1.305).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from dispatcher.core.plan import Code, Plan, Reservation
from dispatcher.policy import PolicyConfig, rest_verdict
from tests.builders import NOW_MS, make_job, make_node, placed, plan_of, seed_jobs, seed_node, snapshot, verdict_of


def codes_of(plan: Plan, pending) -> dict[str, Code]:
    """Every waiting job's code: its own verdict, or (for the jobs the cycle did not reach) the one
    policy.rest_verdict gives."""
    codes = {v.job_id: v.code for v in plan.verdicts}
    for p in snapshot(pending=pending).pending:
        if p.spec.id not in codes and p.spec.id not in placed(plan):
            codes[p.spec.id] = rest_verdict(plan, p, PolicyConfig())[0]
    return codes


# --- the seed scenario -----------------------------------------------------------------

def test_seed_cycle_places_the_critical_job_first_then_high_then_normal():
    plan = plan_of(seed_jobs(), [seed_node()])
    order = [p.job_id for p in plan.placements]
    assert order == ["JOB-004", "JOB-001", "JOB-003"], f"pick order {order}"


def test_seed_cycle_puts_the_a100_jobs_on_a100s_and_the_v100_job_on_a_v100():
    plan = plan_of(seed_jobs(), [seed_node()])
    want = {"JOB-004": ("n1", (0,)),   # equal A100s: the lowest index
            "JOB-001": ("n1", (1,)),   # the other A100
            "JOB-003": ("n1", (2,))}   # equal V100s: the lowest index
    assert placed(plan) == want, f"placed {placed(plan)}, want {want}"


def test_seed_cycle_gives_the_blocked_two_a100_job_lower_score_and_a_reservation_of_both_a100s():
    plan = plan_of(seed_jobs(), [seed_node()])
    v = verdict_of(plan, "JOB-002")
    # both A100s were free at the start of the cycle; JOB-004 and JOB-001 (higher classes) took them
    assert v.code is Code.LOWER_SCORE, f"JOB-002: {v.code} ({v.reason})"
    assert v.rank == 4, f"JOB-002 was picked at rank {v.rank}, want 4 (last)"
    # GPU 0 frees when JOB-004 ends (10 s), GPU 1 when JOB-001 ends (15 s): both at +15 s
    want = (Reservation("JOB-002", "n1", (0, 1), NOW_MS + 15_000),)
    assert plan.reservations == want, f"reservations {plan.reservations}, want {want}"
    needles = ["fitted on n1 at the start of this cycle", "JOB-004", "JOB-001", "reservation on n1 GPUs [0, 1]"]
    missing = [n for n in needles if n not in v.reason]
    assert not missing, f"reason {v.reason!r} lacks {missing}"


#: Fixed weights for the hand computations below, so that tuning the defaults does not move them.
HAND_WEIGHTS = replace(PolicyConfig(), weights={"priority": 1.0, "wait": 0.02, "fairness": 0.02, "remaining": 0.25,
                                                "fit": 0.01, "attained": 0.0})


@pytest.mark.parametrize("job_id, want", [
    # all jobs are alice's; the reference memory is 16 GB (the V100s)
    # priority 1.0*100 + wait 0.02*0 + fairness 0.02*100 + remaining 0.25*(100*600/610 = 98.361)
    #   + fit 0.01*(100*(0.7*(1-3/4) + 0.3*max(15,16)/40) = 17.5 + 12 = 29.5)
    # = (100 + 0 + 2 + 24.590 + 0.295) / 1.30 = 126.885 / 1.30
    ("JOB-004", 97.604),
    # 1.0*66.667 + 0.02*(100*30/7200 = 0.417) + 0.02*(100*(1 - 1/4) = 75) + 0.25*(100*600/615 = 97.561)
    #   + 0.01*(100*(0.7*(1-2/4) + 0.3*max(20,16)/40) = 35 + 15 = 50)
    # = (66.667 + 0.008 + 1.5 + 24.390 + 0.5) / 1.30 = 93.065 / 1.30
    ("JOB-001", 71.589),
    # 1.0*33.333 + 0.02*(100*10/7200 = 0.139) + 0.02*(100*(1 - 2/4) = 50) + 0.25*(100*600/630 = 95.238)
    #   + 0.01*(100*(0.7*(1-1/4) + 0.3*max(10,16)/16) = 52.5 + 30 = 82.5)
    # = (33.333 + 0.003 + 1 + 23.810 + 0.825) / 1.30 = 58.971 / 1.30
    ("JOB-003", 45.362),
], ids=["critical_job_scores_97_604", "high_job_scores_71_589", "normal_job_scores_45_362"])
def test_seed_cycle_scores_each_placement_by_the_weighted_terms(job_id, want):
    plan = plan_of(seed_jobs(), [seed_node()], config=HAND_WEIGHTS)
    got = {p.job_id: p.score for p in plan.placements}[job_id]
    assert got == pytest.approx(want, abs=1e-3), f"{job_id} scored {got}, want {want}"


def test_seed_cycle_scores_the_blocked_job_without_a_fit_term():
    plan = plan_of(seed_jobs(), [seed_node()], config=HAND_WEIGHTS)
    # 1.0*0 + 0.02*(100*20/7200 = 0.278) + 0.02*(100*(1 - 3/4) = 25) + 0.25*(100*600/660 = 90.909), no fit term
    # = (0 + 0.006 + 0.5 + 22.727) / 1.30 = 23.233 / 1.30 (the fit weight still divides)
    want = 17.871
    got = verdict_of(plan, "JOB-002").score
    assert got == pytest.approx(want, abs=1e-3), f"JOB-002 scored {got}, want {want}"


def test_the_critical_job_takes_the_only_free_a100_before_the_high_one():
    plan = plan_of(seed_jobs(), [seed_node().held(1)])
    got = placed(plan)
    assert got.get("JOB-004") == ("n1", (0,)), f"placed {got}, want JOB-004 on n1 GPU 0"
    assert "JOB-001" not in got, f"JOB-001 was placed: {got}"
    v = verdict_of(plan, "JOB-001")
    # GPU 0 was free at the start of the cycle: the critical job took it
    assert v.code is Code.LOWER_SCORE, f"JOB-001: {v.code} ({v.reason})"
    assert "JOB-004" in v.reason, f"reason {v.reason!r} does not name JOB-004"


# --- jobs that can never fit -----------------------------------------------------------

@pytest.mark.parametrize("never, nodes, needles", [
    (make_job("big").gpus(2, "A100").priority("critical"),
     [make_node("n1").gpus(1, "A100", 40).gpus(1, "V100", 16)],
     ["2xA100", "n1 with 1 matching GPUs"]),
    (make_job("big").gpus(1, "H100").priority("critical"),
     [make_node("n1").gpus(2, "A100", 40), make_node("n2").gpus(1, "A100", 80)],
     ["1xH100", "0 matching GPUs"]),
    (make_job("big").gpus(1, mem_gb=100).priority("critical"),
     [make_node("n1").gpus(2, "A100", 80)],
     ["≥100 GB", "0 matching GPUs"]),
    (make_job("big").gpus(1).cpus(64).priority("critical"),
     [make_node("n1").gpus(2, "A100", 40).cpus(32)],
     ["64 CPUs", "32 CPUs"]),
    (make_job("big").gpus(1).mem(512).priority("critical"),
     [make_node("n1").gpus(2, "A100", 40).mem(256)],
     ["512 GB RAM", "256 GB RAM"]),
    (make_job("big").gpus(6).priority("critical"),  # larger than any node, and than all of them whole
     [make_node("n1").gpus(2, "A100", 40), make_node("n2").gpus(2, "A100", 40)],
     ["6xGPU", "2 matching GPUs", "nor whole nodes together: 4 GPUs on all of them"]),
], ids=["two_a100s_on_a_one_a100_cluster", "an_h100_on_an_a100_cluster", "100gb_gpus_on_an_80gb_cluster",
        "more_cpus_than_any_node", "more_memory_than_any_node", "more_gpus_than_all_whole_nodes"])
def test_a_job_no_node_could_ever_hold_gets_no_fit_ever_and_blocks_nobody(never, nodes, needles):
    other = make_job("small").gpus(1).priority("low")
    plan = plan_of([never, other], nodes)
    v = verdict_of(plan, "big")
    assert v.code is Code.NO_FIT_EVER, f"big: {v.code} ({v.reason})"
    missing = [s for s in needles if s not in v.reason]
    assert not missing, f"reason {v.reason!r} lacks {missing}"
    assert "small" in placed(plan), f"small was not placed: {placed(plan)}, verdicts {plan.verdicts}"
    assert not plan.reservations, f"reservations {plan.reservations}, want none"


def test_a_job_with_no_live_node_gets_no_fit_ever_saying_so():
    plan = plan_of([make_job("j").gpus(1)], [])
    v = verdict_of(plan, "j")
    assert v.code is Code.NO_FIT_EVER and "no live node" in v.reason, f"j: {v.code} ({v.reason})"


# --- best fit --------------------------------------------------------------------------

@pytest.mark.parametrize("job, nodes, want", [
    # a: 100*(0.7*(1 - 0/4) + 0.3) = 100;  b: 100*(0.7*(1 - 3/4) + 0.3) = 47.5
    (make_job("j").gpus(1), [make_node("a").gpus(4).held(0, 1, 2), make_node("b").gpus(4)], ("a", (3,))),
    # same, names swapped, so the name tie-break cannot be what decides
    (make_job("j").gpus(1), [make_node("a").gpus(4), make_node("b").gpus(4).held(0, 1, 2)], ("b", (3,))),
    # a: 100*(0.7*(1 - 2/4) + 0.3) = 65;  b: 100*(0.7*(1 - 0/8) + 0.3) = 100
    (make_job("j").gpus(2), [make_node("a").gpus(4), make_node("b").gpus(8).held(0, 1, 2, 3, 4, 5)], ("b", (6, 7))),
    # CPU-only, packing over CPUs: a: 100*(0.7*(1 - 28/32) + 0.3) = 38.75;  b: 100*(0.7*(1 - 0/8) + 0.3) = 100
    (make_job("j").gpus(0).cpus(4), [make_node("a").cpus(32), make_node("b").cpus(8).held(cpus=4)], ("b", ())),
], ids=["a_one_gpu_job_goes_to_the_node_with_fewer_free_gpus", "the_tighter_node_wins_whatever_its_name",
        "a_two_gpu_job_fills_the_nearly_full_big_node", "a_cpu_only_job_fills_the_node_with_fewer_free_cpus"])
def test_best_fit_keeps_whole_nodes_free(job, nodes, want):
    got = placed(plan_of([job], nodes))
    assert got == {"j": want}, f"placed {got}, want j on {want}"


# --- GPU memory and type ---------------------------------------------------------------

MIXED_A_V = make_node("n1").gpus(1, "A100", 40).gpus(1, "V100", 16)  # 0: A100 40 GB; 1: V100 16 GB


@pytest.mark.parametrize("job, node, want", [
    (make_job("j").gpus(1, mem_gb=30), MIXED_A_V, ("n1", (0,))),
    (make_job("j").gpus(1), MIXED_A_V, ("n1", (1,))),
    (make_job("j").gpus(1, mem_gb=16), MIXED_A_V, ("n1", (1,))),
    (make_job("j").gpus(1, "A100"), MIXED_A_V, ("n1", (0,))),
    (make_job("j").gpus(1, "V100"), make_node("n1").gpus(1, "A100", 40).gpus(1, "V100", 16).held(1), None),
    (make_job("j").gpus(1, mem_gb=30), make_node("n1").gpus(1, "A100", 40).gpus(1, "V100", 16).held(0), None),
], ids=["a_30gb_job_takes_the_40gb_gpu", "a_job_with_no_preference_takes_the_smaller_gpu",
        "a_16gb_job_takes_the_16gb_gpu", "an_a100_job_takes_the_a100", "a_v100_job_never_takes_a_free_a100",
        "a_30gb_job_never_takes_a_free_16gb_gpu"])
def test_gpu_type_and_memory_are_hard_constraints_and_smaller_gpus_go_first(job, node, want):
    plan = plan_of([job], [node])
    got = placed(plan).get("j")
    assert got == want, f"j placed on {got}, want {want}; verdicts {plan.verdicts}"
    if want is None:
        assert verdict_of(plan, "j").code is Code.NO_FIT_NOW, f"verdicts {plan.verdicts}"


def test_a_job_with_a_memory_need_prefers_the_node_whose_gpu_it_fills_best():
    # c (16 GB) is too small for 30 GB; the reference (16 GB) is below the need, so the need counts:
    # a (80 GB): 100*(0.7*1 + 0.3*30/80) = 81.25;  b (40 GB): 100*(0.7*1 + 0.3*30/40) = 92.5
    plan = plan_of([make_job("j").gpus(1, mem_gb=30)],
                   [make_node("a").gpus(1, "A100", 80), make_node("b").gpus(1, "A100", 40),
                    make_node("c").gpus(1, "V100", 16)])
    got = plan.placements[0]
    assert (got.node, got.terms["fit"]) == ("b", 92.5), f"j on {got.node} with fit {got.terms['fit']}, want b, 92.5"


@pytest.mark.parametrize("nodes, want", [
    # reference 16 GB: a (80 GB): 100*(0.7*1 + 0.3*16/80) = 76;  b (16 GB): 100*(0.7*1 + 0.3*16/16) = 100
    ([make_node("a").gpus(1, "A100", 80), make_node("b").gpus(1, "V100", 16)], ("b", (0,))),
    # mirrored names, so the name cannot be what decides
    ([make_node("a").gpus(1, "V100", 16), make_node("b").gpus(1, "A100", 80)], ("a", (0,))),
    # reference 24 GB: a (40 GB): 100*(0.7 + 0.3*24/40) = 88;  b (24 GB): 100*(0.7 + 0.3*24/24) = 100
    ([make_node("a").gpus(1, "A100", 40), make_node("b").gpus(1, "RTX 4090", 24)], ("b", (0,))),
], ids=["the_16gb_gpu_wins_over_an_80gb_one", "whatever_the_node_names", "the_24gb_gpu_wins_over_a_40gb_one"])
def test_a_job_with_no_preference_takes_the_smaller_gpu_across_nodes_too(nodes, want):
    plan = plan_of([make_job("j").gpus(1)], nodes)
    assert placed(plan) == {"j": want}, f"placed {placed(plan)}, want j on {want} (the smaller GPU)"


# --- CPU-only jobs ---------------------------------------------------------------------

def test_cpu_only_jobs_run_while_every_gpu_is_taken_until_the_cpus_run_out():
    node = make_node("n1").gpus(2).held(0, 1).cpus(8)
    jobs = [make_job(f"c{i}").gpus(0).cpus(3).waited(10 - i) for i in range(4)] + [make_job("g").gpus(1)]
    plan = plan_of(jobs, [node])
    # 3 + 3 = 6 of 8 CPUs; a third job would need 9
    assert placed(plan) == {"c0": ("n1", ()), "c1": ("n1", ())}, f"placed {placed(plan)}"
    codes = codes_of(plan, jobs)
    # c2 and c3 fitted the 8 free CPUs at the start of the cycle; g never had a free GPU
    want = {"c2": Code.LOWER_SCORE, "c3": Code.LOWER_SCORE, "g": Code.NO_FIT_NOW}
    assert codes == want, f"verdicts {codes}, want {want}"


@pytest.mark.parametrize("busy, want", [
    # 4 CPUs each; a: 4 GPUs idle -> 100*(0.7*(1 - 28/32) + 0.3*(1 - 4/4)) = 8.75
    #              b: 4 GPUs busy -> 100*(0.7*(1 - 28/32) + 0.3*(1 - 0/4)) = 38.75
    ("b", "b"),
    ("a", "a"),   # mirrored, so the name cannot be what decides
], ids=["the_cpu_job_goes_beside_busy_gpus", "whatever_the_node_names"])
def test_cpu_only_jobs_avoid_stranding_idle_gpus(busy, want):
    nodes = [make_node(n).gpus(4).cpus(32).held(*(range(4) if n == busy else ())) for n in ("a", "b")]
    plan = plan_of([make_job("c").gpus(0).cpus(4)], nodes)
    assert placed(plan) == {"c": (want, ())}, f"placed {placed(plan)}, want c on {want} beside the busy GPUs"


def test_cpu_only_jobs_respect_cpus_and_memory_held_by_running_jobs():
    node = make_node("n1").cpus(8).mem(64).held(cpus=6, mem_gb=40)  # 2 CPUs, 24 GB left
    plan = plan_of([make_job("fits").gpus(0).cpus(2).mem(24), make_job("cpu").gpus(0).cpus(3),
                    make_job("mem").gpus(0).cpus(1).mem(25)], [node])
    assert set(placed(plan)) == {"fits"}, f"placed {placed(plan)}, want only 'fits'"


def test_a_cpu_only_job_waiting_for_cpus_is_told_of_cpus_and_memory_not_gpus():
    # "best node n1 has 0 of 4 matching GPUs free, 0 CPUs free" for a --gpus 0 job: only the CPUs applied
    node = make_node("n1").gpus(4).cpus(4).mem(64).held(cpus=4, mem_gb=10)
    plan = plan_of([make_job("c").gpus(0).cpus(2).mem(8)], [node])
    assert verdict_of(plan, "c").reason.endswith("best node n1 has 0 CPUs free, 54 GB memory free"), plan.verdicts


# --- EASY backfill ---------------------------------------------------------------------

def backfill_case(small_est_s, started_s_ago=0.0, running_est_s=100.0):
    """n1: two A100s, GPU 1 held by a running job; BIG wants both; SMALL wants one."""
    node = make_node("n1").gpus(2, "A100", 40).held(1, cpus=1)
    running = make_job("R").gpus(1).est(running_est_s).user("rita").running_on("n1", 1, started_s_ago=started_s_ago)
    big = make_job("BIG").gpus(2).priority("high").est(600).waited(60)
    small = make_job("SMALL").gpus(1).priority("normal").est(small_est_s).waited(10)
    return plan_of([big, small], [node], [running])


@pytest.mark.parametrize("small_est_s, started_s_ago, want_placed", [
    (50, 0, True),        # ends at +50 s, before the reservation at +100 s
    (100, 0, True),       # ends exactly at +100 s: allowed (<=)
    (101, 0, False),      # ends at +101 s, after +100 s
    (500, 0, False),
    (None, 0, False),     # no estimate: might run forever
    (50, 40, True),       # R started 40 s ago: frees at +60 s; 50 s ends before
    (70, 40, False),      # 70 s does not
], ids=["a_50s_job_backfills_before_a_100s_reservation", "a_job_ending_exactly_at_the_reservation_backfills",
        "a_101s_job_does_not_backfill", "a_500s_job_does_not_backfill", "a_job_with_no_estimate_does_not_backfill",
        "the_reservation_starts_when_the_running_job_is_estimated_to_end",
        "a_job_ending_after_that_does_not_backfill"])
def test_easy_backfill_lets_a_later_job_use_reserved_gpus_only_if_it_ends_first(small_est_s, started_s_ago,
                                                                                 want_placed):
    plan = backfill_case(small_est_s, started_s_ago)
    start = NOW_MS + (100 - int(started_s_ago)) * 1000
    want_resv = (Reservation("BIG", "n1", (0, 1), start),)
    assert plan.reservations == want_resv, f"reservations {plan.reservations}, want {want_resv}"
    assert verdict_of(plan, "BIG").code is Code.NO_FIT_NOW, f"verdicts {plan.verdicts}"
    if want_placed:
        assert placed(plan) == {"SMALL": ("n1", (0,))}, f"placed {placed(plan)}, want SMALL on n1 GPU 0"
    else:
        assert placed(plan) == {}, f"placed {placed(plan)}, want nothing"
        v = verdict_of(plan, "SMALL")
        assert v.code is Code.RESERVED, f"SMALL: {v.code} ({v.reason})"
        assert "reserved for job BIG" in v.reason, f"reason {v.reason!r} does not name BIG"


@pytest.mark.parametrize("ends_s, want_node", [
    ((300, 100, 200), "n2"),   # the node whose job ends first
    ((300, 100, 100), "n2"),   # a tie goes to the first such node
    ((100, 100, 100), "n1"),
    ((400, 300, 50), "n3"),    # the last node tried in name order is still found
], ids=["earliest_end_wins", "a_tie_goes_to_the_first_node", "all_tied", "the_last_node_can_win"])
def test_a_reservation_goes_where_the_blocked_job_could_start_first(ends_s, want_node):
    nodes = [make_node(f"n{i + 1}").gpus(2, "A100", 40).held(0, 1, cpus=1) for i in range(3)]
    running = [make_job(f"R{i + 1}").gpus(2).est(s).user("rita").running_on(f"n{i + 1}", 0, 1)
               for i, s in enumerate(ends_s)]
    plan = plan_of([make_job("BIG").gpus(2).priority("high").est(600)], nodes, running)
    start = NOW_MS + min(ends_s) * 1000
    assert plan.reservations == (Reservation("BIG", want_node, (0, 1), start),), plan.reservations


@pytest.mark.parametrize("started_s_ago, small_est_s, want_start_s, want_placed", [
    (103, 150, 60, False),  # 3 s past its 100 s estimate: a minute more, so a 150 s job may not jump BIG
    (103, 50, 60, True),    # a 50 s job ends within that minute
    (300, 150, 200, True),  # 200 s past it: as much again
], ids=["a_little_past_its_estimate_a_minute_more", "a_short_job_still_backfills", "far_past_it_as_much_again"])
def test_a_running_job_past_its_estimate_is_planned_to_run_as_much_again_as_it_overran(
        started_s_ago, small_est_s, want_start_s, want_placed):
    # it was planned to run a day more: BIG's reservation moved a day out, and every job backfilled past it
    plan = backfill_case(small_est_s, started_s_ago)
    assert plan.reservations == (Reservation("BIG", "n1", (0, 1), NOW_MS + want_start_s * 1000),), plan.reservations
    assert ("SMALL" in placed(plan)) is want_placed, (placed(plan), plan.verdicts)


def test_a_reservation_waits_a_day_for_a_running_job_with_no_estimate():
    plan = backfill_case(500, running_est_s=None)
    # unknown_remaining_s = 86400
    want = (Reservation("BIG", "n1", (0, 1), NOW_MS + 86_400_000),)
    assert plan.reservations == want, f"reservations {plan.reservations}, want {want}"


def test_a_reservation_does_not_hold_gpus_on_other_nodes():
    node = make_node("n1").gpus(2, "A100", 40).held(1)
    running = make_job("R").gpus(1).est(100).user("rita").running_on("n1", 1)
    plan = plan_of([make_job("BIG").gpus(2).priority("high").est(600), make_job("LONG").gpus(1).est(None)],
                   [node, make_node("n2").gpus(1, "A100", 40)], [running])
    assert placed(plan) == {"LONG": ("n2", (0,))}, f"placed {placed(plan)}, want LONG on n2"
    assert [r.job_id for r in plan.reservations] == ["BIG"], f"reservations {plan.reservations}"


def test_only_the_first_blocked_job_gets_a_reservation_by_default():
    node = make_node("n1").gpus(2, "A100", 40).held(1)
    running = make_job("R").gpus(1).est(100).running_on("n1", 1)
    jobs = [make_job("B1").gpus(2).priority("critical"), make_job("B2").gpus(2).priority("high")]
    plan = plan_of(jobs, [node], [running])
    assert [r.job_id for r in plan.reservations] == ["B1"], f"reservations {plan.reservations}, want B1 only"
    assert codes_of(plan, jobs)["B2"] == Code.NO_FIT_NOW and len(plan.reservations) == 1


def test_a_job_blocked_by_cpus_reserves_from_when_the_cpus_free_up():
    # R holds 6 of 8 CPUs (no GPU) until +100 s; BIG needs 4 CPUs, so it cannot start before +100 s
    node = make_node("n1").gpus(2, "A100", 40).cpus(8).held(cpus=6)
    running = make_job("R").gpus(0).cpus(6).est(100).user("rita").running_on("n1")
    big = make_job("BIG").gpus(1).cpus(4).priority("high").est(600)
    short = make_job("SHORT").gpus(1).cpus(1).est(10)  # ends at +10 s: should backfill
    plan = plan_of([big, short], [node], [running])
    starts = [r.start_ms - NOW_MS for r in plan.reservations]
    assert starts == [100_000], f"reservation starts {starts} ms from now, want [100000]"
    assert "SHORT" in placed(plan), f"SHORT was not placed: {plan.verdicts}"
    v = verdict_of(plan, "BIG")
    assert v.code is Code.NO_FIT_NOW and "starting in ~100 s" in v.reason, f"BIG: {v.code} ({v.reason})"


def test_a_job_past_the_reservation_takes_cpus_that_are_free_at_its_start_anyway():
    # R holds 6 of 8 CPUs and GPU 1 until +100 s; BIG reserves both GPUs and 4 CPUs from then. LONG has no
    # estimate (it runs past +100 s): it may not take the reserved GPUs, but its 1 CPU leaves BIG 1 + 6 = 7
    # CPUs at its start. Holding BIG's 4 CPUs out of the 2 free now kept LONG waiting for nothing.
    node = make_node("n1").gpus(2, "A100", 40).cpus(8).held(1, cpus=6)
    running = make_job("R").gpus(1).cpus(6).est(100).user("rita").running_on("n1", 1)
    big = make_job("BIG").gpus(2).cpus(4).priority("high").est(600)
    long = make_job("LONG").gpus(0).cpus(1)
    plan = plan_of([big, long], [node], [running])
    assert [(r.job_id, r.start_ms - NOW_MS) for r in plan.reservations] == [("BIG", 100_000)], plan.reservations
    assert placed(plan) == {"LONG": ("n1", ())}, plan.verdicts
    whole = make_job("BIG").gpus(2).cpus(8).priority("high").est(600)  # BIG needs every CPU at its start
    plan = plan_of([whole, long], [node], [running])
    assert plan.reservations and not placed(plan), plan.verdicts


@pytest.mark.parametrize("reserve_min_gpus, want", [(2, "BIG"), (1, "S1")],
                         ids=["reserve_min_gpus_2_leaves_it_to_the_big_one", "by_default_easy_gives_it_to_the_best_score"])
def test_a_stream_of_better_scored_one_gpu_jobs_does_not_keep_the_reservation_from_a_four_gpu_job(
        reserve_min_gpus, want):
    node = make_node("n1").gpus(4, "A100", 40).held(0, 1, 2, 3, cpus=1)
    running = [make_job(f"R{i}").gpus(1).est(30 * (i + 1)).user("rita").running_on("n1", i) for i in range(4)]
    pending = [make_job("BIG").gpus(4).est(600).user("ana").waited(300),  # waited 5 min
               make_job("S1").gpus(1).est(30).user("bo"), make_job("S2").gpus(1).est(30).user("cy")]  # fresh, short
    config = replace(PolicyConfig(), reserve_min_gpus=reserve_min_gpus)
    plan = plan_of(pending, [node], running, config=config)
    assert [r.job_id for r in plan.reservations] == [want], plan.reservations
    if want == "BIG":  # the 1-GPU jobs start on the next GPUs that free, unless they would end after BIG's start
        assert "reserved for job BIG" in verdict_of(plan, "S2").reason or verdict_of(plan, "S2").code is Code.NO_FIT_NOW
