"""Scenario tests of schedule(), continued (test_policy_schedule.py has the seed scenario, jobs that
never fit, best fit, GPU memory and type, CPU-only jobs and EASY backfill): fair share (DRF), the
same plan for the same snapshot, team limits and guarantees, GPU sharing, starvation and class
dominance. Defaults as stated in test_policy_schedule.py's docstring."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dispatcher.core.plan import Code, Plan, Reservation
from dispatcher.policy import PolicyConfig
from dispatcher.policy.schedule import schedule
from dispatcher.policy.config import TeamQuota
from tests.builders import NOW_MS, make_job, make_node, placed, plan_of, seed_jobs, seed_node, snapshot, verdict_of


#: The weights of the earlier default: one class step outweighs every other term at its maximum.
CLASSES_NEVER_CROSS = {"priority": 1.0, "attained": 0.2, "remaining": 0.09, "fit": 0.01, "fairness": 0.005, "wait": 0.0}


# --- fairness (DRF) --------------------------------------------------------------------

def test_drf_places_gpu_heavy_and_cpu_heavy_users_within_one_job_of_each_other():
    # gina: 2 GPUs + 2 CPUs per job -> 2/8 = 0.25 share each; carl: 1 GPU + 8 CPUs -> 8/32 = 0.25 each
    gina = [make_job(f"g{i:02d}").gpus(2).cpus(2).user("gina") for i in range(10)]
    carl = [make_job(f"c{i:02d}").gpus(1).cpus(8).user("carl") for i in range(10)]
    plan = plan_of(gina + carl, [make_node("n1").gpus(8).cpus(32)])
    per_user = {"gina": 0, "carl": 0}
    for p in plan.placements:
        per_user["gina" if p.job_id.startswith("g") else "carl"] += 1
    assert abs(per_user["gina"] - per_user["carl"]) <= 1, f"placed per user {per_user}"
    assert sum(per_user.values()) >= 4, f"placed per user {per_user}: the node was left mostly idle"
    used = sum(len(p.gpus) for p in plan.placements)
    assert used <= 8, f"{used} GPUs placed on an 8-GPU node"


def test_drf_prefers_the_user_with_the_smaller_dominant_share():
    node = make_node("n1").gpus(8).held(0, 1, 2, 3, 4, 5)
    running = [make_job(f"r{i}").gpus(1).user("heavy").running_on("n1", i) for i in range(6)]
    # same static score; fairness: heavy 0.005*100*(1 - 6/8) / 0.455 = 0.275, light 0.005*100 / 0.455 = 1.099
    jobs = [make_job("a-heavy").gpus(2).user("heavy"), make_job("b-light").gpus(2).user("light")]
    plan = plan_of(jobs, [node], running)
    assert set(placed(plan)) == {"b-light"}, f"placed {placed(plan)}, want b-light"


def test_priority_outweighs_the_fairness_of_an_idle_user():
    node = make_node("n1").gpus(4).held(0, 1)
    running = [make_job(f"r{i}").gpus(1).user("heavy").running_on("n1", i) for i in range(2)]
    # before fit, both fresh (attained 100) without estimates (remaining 50):
    # heavy critical: (0.15*100 + 0.005*(100*(1 - 2/4) = 50) + 0.09*50 + 0.2*100) / 0.455 = 39.75 / 0.455 = 87.363
    # light normal:   (0.15*33.333 + 0.005*100 + 0.09*50 + 0.2*100) / 0.455 = 30.0 / 0.455 = 65.934
    jobs = [make_job("crit").gpus(2).priority("critical").user("heavy"), make_job("norm").gpus(2).user("light")]
    plan = plan_of(jobs, [node], running)
    assert set(placed(plan)) == {"crit"}, f"placed {placed(plan)}, want crit"


# --- determinism -----------------------------------------------------------------------

def _full(plan: Plan):
    """The plan with the placement terms (excluded from Placement equality) spelled out."""
    return plan, [p.terms for p in plan.placements]


@pytest.mark.parametrize("case", ["seed", "backfill", "drf"],
                         ids=["seed_scenario", "backfill_scenario", "drf_scenario"])
def test_the_same_snapshot_gives_an_identical_plan_twice(case):
    if case == "seed":
        snap = snapshot(pending=seed_jobs(), nodes=[seed_node()])
    elif case == "backfill":
        snap = snapshot(pending=[make_job("BIG").gpus(2).priority("high"), make_job("S").gpus(1).est(5)],
                        nodes=[make_node("n1").gpus(2).held(1)],
                        running=[make_job("R").gpus(1).est(100).running_on("n1", 1)])
    else:
        snap = snapshot(pending=[make_job(f"g{i}").gpus(2).cpus(2).user("gina") for i in range(5)]
                        + [make_job(f"c{i}").gpus(1).cpus(8).user("carl") for i in range(5)],
                        nodes=[make_node("n1").gpus(8).cpus(32), make_node("n0").gpus(2).cpus(8)])
    first, second = _full(schedule(snap, now_ms=NOW_MS)), _full(schedule(snap, now_ms=NOW_MS))
    assert first == second, f"first {first}\nsecond {second}"


def test_the_order_of_pending_jobs_and_nodes_in_the_snapshot_does_not_matter():
    jobs = seed_jobs() + [make_job("JOB-005").gpus(1).user("bob"), make_job("JOB-006").gpus(0).cpus(4)]
    nodes = [seed_node(), make_node("n0").gpus(1, "V100", 16).cpus(4)]
    forward = _full(plan_of(jobs, nodes))
    backward = _full(plan_of(list(reversed(jobs)), list(reversed(nodes))))
    assert forward == backward, f"forward {forward}\nbackward {backward}"


def test_a_score_tie_between_users_goes_to_the_earlier_job_id():
    # a1 and b1: same class, submit time, estimate and share -> identical scores
    plan = plan_of([make_job("a1").gpus(1).user("alice"), make_job("b1").gpus(1).user("bob")],
                   [make_node("n1").gpus(1)])
    assert set(placed(plan)) == {"a1"}, f"placed {placed(plan)}, want a1 (earlier id), like a1/b1 of one user"


def test_a_score_tie_within_one_user_goes_to_the_earlier_job_id():
    plan = plan_of([make_job("b1").gpus(1), make_job("a1").gpus(1)], [make_node("n1").gpus(1)])
    assert set(placed(plan)) == {"a1"}, f"placed {placed(plan)}, want a1"


@pytest.mark.parametrize("users", [("alice", "alice"), ("alice", "bob"), ("bob", "alice")],
                         ids=["within_one_user", "across_users", "across_users_mirrored"])
def test_numeric_job_ids_break_a_tie_in_numeric_order(users):
    # "9" sorts after "10" as text; as a number it is the earlier job
    plan = plan_of([make_job("10").gpus(1).user(users[0]), make_job("9").gpus(1).user(users[1])],
                   [make_node("n1").gpus(1)])
    assert set(placed(plan)) == {"9"}, f"placed {placed(plan)}, want job 9 before job 10"


# --- team limits and guarantees --------------------------------------------------------

def team_job(job_id: str, team: str, user: str):
    return make_job(job_id).user(user)._set(team=team)


@pytest.mark.parametrize("limit, want_gpus, want_code", [
    (2, 1, Code.OVER_LIMIT),    # holds 2 of 2: one more is over
    (3, 1, None),               # holds 2 of 3: one more fits the limit
    (3, 2, Code.OVER_LIMIT),    # holds 2 of 3: two more would be 4
    (None, 2, None),            # no limit
], ids=["at_the_limit_one_more_gpu_is_over", "below_the_limit_one_more_gpu_starts",
        "two_more_gpus_would_pass_the_limit", "no_limit_means_no_limit"])
def test_a_team_at_its_gpu_limit_waits_while_another_team_starts(limit, want_gpus, want_code):
    # vision already holds GPUs 0 and 1 of n1; its new job is a higher class than nlp's, so only the limit stops it
    node = make_node("n1").gpus(6).held(0, 1)
    running = [team_job(f"rv{i}", "vision", "vic").gpus(1).running_on("n1", i) for i in range(2)]
    config = PolicyConfig(teams={"vision": TeamQuota(guarantee_gpus=0, limit_gpus=limit)})
    jobs = [team_job("vis", "vision", "vic").gpus(want_gpus).priority("high"), team_job("nlp", "nlp", "nora").gpus(1)]
    plan = plan_of(jobs, [node], running, config)
    assert "nlp" in placed(plan), f"nlp was not placed: {plan.verdicts}"
    if want_code is None:
        assert "vis" in placed(plan), f"vis was not placed: {plan.verdicts}"
    else:
        v = verdict_of(plan, "vis")
        assert v.code is want_code, f"vis: {v.code} ({v.reason})"
        assert f"limit of {limit} GPUs" in v.reason, f"reason {v.reason!r} does not give the limit"
        assert not plan.reservations, f"a job over its team limit got a reservation: {plan.reservations}"


def test_a_job_of_any_type_held_for_a_team_starts_where_it_takes_none_of_the_teams_gpus():
    # n1: 2 free A100s, which team a (owed 2) waits for; n2: 1 free V100. b's jobs may take any GPU
    config = PolicyConfig(teams={"a": TeamQuota(guarantee_gpus=2), "b": TeamQuota(guarantee_gpus=0)})
    nodes = [make_node("n1").gpus(2, "A100"), make_node("n2").gpus(1, "V100", 16.0)]
    b = [team_job(f"b{i}", "b", "bob").gpus(1).priority("high").waited(600 - i) for i in range(1, 4)]
    a = [team_job(f"a{i}", "a", "ann").gpus(1, "A100") for i in (1, 2)]
    plan = plan_of(b + a, nodes, config=config)
    assert placed(plan) == {"b1": ("n2", (0,)), "a1": ("n1", (0,)), "a2": ("n1", (1,))}, (placed(plan), plan.verdicts)
    assert verdict_of(plan, "b2").code is Code.HELD_FOR_TEAM, verdict_of(plan, "b2")


def test_a_job_larger_than_its_teams_limit_is_told_it_cannot_start_until_the_limit_is_raised():
    config = PolicyConfig(teams={"vision": TeamQuota(guarantee_gpus=0, limit_gpus=2)})
    plan = plan_of([team_job("big", "vision", "vic").gpus(3)], [make_node("n1").gpus(8)], config=config)
    v = verdict_of(plan, "big")
    assert v.code is Code.OVER_LIMIT and "more than team vision's limit of 2" in v.reason \
        and "until the policy raises the limit" in v.reason, v.reason


@pytest.mark.parametrize("a_jobs, want_b", [
    (2, 2),     # a is owed 2 of the 4 free GPUs: b gets the other 2
    (1, 3),     # a has only 1 job waiting: it is owed 1
    (0, 4),     # a waits for nothing: its guarantee holds nothing back
    (3, 2),     # a wants 3 but is owed only its guarantee of 2; its third job competes like b's
], ids=["b_gets_what_a_is_not_owed", "a_is_owed_only_what_it_waits_for", "an_idle_guarantee_holds_nothing_back",
        "a_guarantee_is_a_floor_not_a_claim_on_everything"])
def test_a_team_below_its_guarantee_gets_free_gpus_before_others_borrow_them(a_jobs, want_b):
    config = PolicyConfig(teams={"a": TeamQuota(guarantee_gpus=2), "b": TeamQuota(guarantee_gpus=0)})
    # b's four jobs waited longer and are a higher class, so they rank ahead of all of a's: only the guarantee
    # can keep GPUs for a
    b = [team_job(f"b{i}", "b", "bob").gpus(1).priority("high").waited(600 - i) for i in range(1, 5)]
    a = [team_job(f"a{i}", "a", "ann").gpus(1) for i in range(1, a_jobs + 1)]
    plan = plan_of(b + a, [make_node("n1").gpus(4)], config=config)
    got = placed(plan)
    want_placed = {f"b{i}" for i in range(1, want_b + 1)} | {f"a{i}" for i in range(1, min(a_jobs, 4 - want_b) + 1)}
    assert set(got) == want_placed, f"placed {sorted(got)}, want {sorted(want_placed)}; verdicts {plan.verdicts}"
    for i in range(want_b + 1, 5):
        v = verdict_of(plan, f"b{i}")
        assert v.code is Code.HELD_FOR_TEAM, f"b{i}: {v.code} ({v.reason})"
        assert "a needs" in v.reason, f"reason {v.reason!r} does not say which team the GPUs are held for"


@pytest.mark.parametrize("a_types, b_types, want_b", [
    (("A100",), ("V100",), 4),  # a waits for A100s only: b's V100 jobs take every free V100
    (("A100",), (), 4),         # b's jobs may take any GPU, but only V100s are free: none a could use
    ((), ("V100",), 2),         # a's jobs may take any GPU: so may b's V100 jobs
    (("V100",), ("V100",), 2),  # the same type: as on one kind of GPU
], ids=["gpus_the_team_cannot_use_are_not_held_for_it", "a_job_of_any_type_on_gpus_the_team_cannot_use",
        "a_team_that_takes_any_type_holds_any", "the_same_type_is_held"])
def test_a_guarantee_holds_gpus_only_from_jobs_that_could_take_the_teams_types(a_types, b_types, want_b):
    # n1's 2 A100s are busy with team c's jobs, n2's 4 V100s free. Team a is owed 2 GPUs and waits with 2 jobs;
    # b's 4 jobs rank first
    config = PolicyConfig(teams={"a": TeamQuota(guarantee_gpus=2), "b": TeamQuota(guarantee_gpus=0)})
    nodes = [make_node("n1").gpus(2, "A100").held(0, 1), make_node("n2").gpus(4, "V100", 16.0)]
    running = [team_job(f"c{i}", "c", "cat").gpus(1, "A100").running_on("n1", i) for i in (0, 1)]
    b = [team_job(f"b{i}", "b", "bob").gpus(1, *b_types).priority("high").waited(600 - i) for i in range(1, 5)]
    a = [team_job(f"a{i}", "a", "ann").gpus(1, *a_types) for i in (1, 2)]
    plan = plan_of(b + a, nodes, running, config=config)
    got = set(placed(plan))
    assert {f"b{i}" for i in range(1, 5)} & got == {f"b{i}" for i in range(1, want_b + 1)}, \
        f"placed {sorted(got)}, want b1-b{want_b}; verdicts {plan.verdicts}"
    for i in range(want_b + 1, 5):
        assert verdict_of(plan, f"b{i}").code is Code.HELD_FOR_TEAM, f"b{i}: {verdict_of(plan, f'b{i}')}"


# --- GPU sharing -----------------------------------------------------------------------

def sharing(job_id: str, mem_gb: float):
    return make_job(job_id).gpus(1, mem_gb=mem_gb)._set(share=True)


def test_sharing_jobs_pack_onto_one_gpu_within_its_memory():
    # one 40 GB GPU: s1 + s2 declare 15 + 15 = 30 GB; s3 would need 15 more but only 10 are left;
    # the exclusive job cannot take a GPU that sharing jobs hold
    jobs = [sharing("s1", 15).waited(30), sharing("s2", 15).waited(20), sharing("s3", 15).waited(10),
            make_job("excl").gpus(1).priority("low")]
    plan = plan_of(jobs, [make_node("n1").gpus(1, "A100", 40)])
    assert placed(plan) == {"s1": ("n1", (0,)), "s2": ("n1", (0,))}, f"placed {placed(plan)}; {plan.verdicts}"
    assert all(p.share for p in plan.placements), f"placements {plan.placements} are not marked as shared"
    # both fitted the free GPU at the start of the cycle: s1 and s2 took its room
    codes = {v.job_id: v.code for v in plan.verdicts}
    assert codes == {"s3": Code.LOWER_SCORE, "excl": Code.LOWER_SCORE}, f"verdicts {codes}"


@pytest.mark.parametrize("job, want", [
    (sharing("j", 10), ("n1", (0,))),       # 40 - 30 = 10 GB left: exactly enough
    (sharing("j", 15), None),               # 15 > 10
    (make_job("j").gpus(1), None),          # exclusive: never onto a shared GPU
    (make_job("j").gpus(1, mem_gb=10), None),
], ids=["a_sharing_job_fits_the_memory_left", "a_sharing_job_needing_more_than_is_left_waits",
        "an_exclusive_job_never_takes_a_shared_gpu", "nor_does_an_exclusive_job_that_would_fit_the_memory_left"])
def test_a_gpu_already_shared_takes_only_sharing_jobs_that_fit_what_is_left(job, want):
    # GPU 0 (40 GB) is held by sharing jobs declaring 30 GB in all: not free, but shared
    node = replace(make_node("n1").gpus(1, "A100", 40).held(0).obj(), shared=((0, 30.0),))
    plan = plan_of([job], [node])
    got = placed(plan).get("j")
    assert got == want, f"j placed on {got}, want {want}; verdicts {plan.verdicts}"
    if want is None:
        assert verdict_of(plan, "j").code is Code.NO_FIT_NOW, f"verdicts {plan.verdicts}"


def shared_gpu_with_a_reservation(sharer_est_s):
    """n1: one 40 GB GPU shared by S (20 GB, ends at +100 s); E (exclusive, high) is blocked and reserves
    GPU 0 from +100 s; J (sharing, 10 GB) would fit the 20 GB left."""
    node = replace(make_node("n1").gpus(1, "A100", 40).held(0).obj(), shared=((0, 20.0),))
    running = [sharing("S", 20).est(100).user("sam").running_on("n1", 0)]
    jobs = [make_job("E").gpus(1).priority("high"), sharing("J", 10).est(sharer_est_s)]
    return plan_of(jobs, [node], running)


def test_a_sharing_job_that_ends_before_a_reservation_backfills_onto_the_shared_gpu():
    plan = shared_gpu_with_a_reservation(50)   # ends at +50 s, before +100 s
    assert plan.reservations == (Reservation("E", "n1", (0,), NOW_MS + 100_000),), f"{plan.reservations}"
    assert placed(plan) == {"J": ("n1", (0,))}, f"placed {placed(plan)}; verdicts {plan.verdicts}"
    assert "backfilled" in plan.placements[0].reason, f"reason {plan.placements[0].reason!r}"


@pytest.mark.parametrize("sharer_est_s", [None, 200], ids=["no_estimate", "ends_after_the_reservation"])
def test_a_sharing_job_held_back_by_a_reservation_is_told_so(sharer_est_s):
    plan = shared_gpu_with_a_reservation(sharer_est_s)
    assert plan.reservations == (Reservation("E", "n1", (0,), NOW_MS + 100_000),), f"{plan.reservations}"
    assert placed(plan) == {}, f"placed {placed(plan)}"
    v = verdict_of(plan, "J")
    # like an exclusive job in test_easy_backfill_lets_a_later_job_use_reserved_gpus_only_if_it_ends_first
    assert v.code is Code.RESERVED and "reserved for job E" in v.reason, f"J: {v.code} ({v.reason})"


# --- starvation ------------------------------------------------------------------------

HOUR = 3600
DAY = 24 * HOUR


@pytest.mark.parametrize("priority, waited_s, starving", [
    ("low", 6 * DAY + HOUR, True),      # past the 6-day bound
    ("low", 6 * DAY - HOUR, False),     # not yet: the critical job's class wins
    ("normal", 90 * HOUR + HOUR, True),   # past 90 hours
    ("normal", 90 * HOUR - HOUR, False),
    ("high", 3 * HOUR, True),           # past 2 h
], ids=["a_low_job_past_6_days_goes_first", "a_low_job_just_under_6_days_still_waits",
        "a_normal_job_past_90_hours_goes_first", "a_normal_job_just_under_90_hours_still_waits",
        "a_high_job_past_2h_goes_first"])
def test_a_starving_job_is_served_before_a_fresh_critical_job(priority, waited_s, starving):
    old = make_job("old").gpus(1).priority(priority).waited(waited_s).user("olga")
    crit = make_job("crit").gpus(1).priority("critical").user("carl")
    plan = plan_of([crit, old], [make_node("n1").gpus(1)])
    winner, loser = ("old", "crit") if starving else ("crit", "old")
    assert set(placed(plan)) == {winner}, f"placed {placed(plan)}, want {winner}"
    p = plan.placements[0]
    assert ("starving" in p.reason) is starving, f"{winner}'s reason {p.reason!r} (starving: {starving})"
    assert verdict_of(plan, loser).code is Code.LOWER_SCORE, f"verdicts {plan.verdicts}"


@pytest.mark.parametrize("waited_s, want_resv", [
    (6 * DAY + HOUR, True),  # starving (past the low bound of 6 days): a reservation even with reservations=0
    (1 * HOUR, False),       # not starving: none, as configured
], ids=["a_starving_blocked_job_gets_a_reservation_beyond_the_configured_count",
        "a_blocked_job_that_is_not_starving_gets_none"])
def test_a_starving_job_that_does_not_fit_reserves_gpus(waited_s, want_resv):
    node = make_node("n1").gpus(2, "A100", 40).held(1)
    running = make_job("R").gpus(1).est(100).user("rita").running_on("n1", 1)
    old = make_job("OLD").gpus(2).priority("low").waited(waited_s)
    plan = plan_of([old], [node], [running], PolicyConfig(reservations=0, preempt_by="class"))
    want = (Reservation("OLD", "n1", (0, 1), NOW_MS + 100_000),) if want_resv else ()
    assert plan.reservations == want, f"reservations {plan.reservations}, want {want}"
    if want_resv:
        v = verdict_of(plan, "OLD")
        assert v.code is Code.NO_FIT_NOW and "starving" in v.reason, f"OLD: {v.code} ({v.reason})"
    else:  # more GPUs than any node has free and nothing else to try: it waits among the plan's `rest`
        assert plan.rest == 1 and "no node has room" in plan.rest_reason, (plan.rest, plan.rest_reason, plan.verdicts)


# --- class dominance -------------------------------------------------------------------

@pytest.mark.parametrize("normal_est_s, high_est_s, high_user_gpus", [
    (None, None, 0),
    # everything else favours the normal job: a long wait, est 1 s, an idle user; the high job has a
    # huge estimate and its user holds 7 of 8 GPUs. Under CLASSES_NEVER_CROSS (no wait weight; both
    # fresh, attained 100):
    # normal: (33.333 + 0.005*100 + 0.09*(100*600/601 = 99.834) + 0.2*100 + 0.01*fit) / 1.305 <= 63.818 / 1.305
    # high:   (66.667 + 0.005*(100*(1 - 7/8) = 12.5) + 0.09*(~0) + 0.2*100 + 0.01*fit) / 1.305 >= 86.729 / 1.305
    (1, 10 ** 9, 7),
], ids=["plain", "every_other_term_favours_the_normal_job"])
def test_a_higher_class_always_ranks_above_a_lower_one_when_classes_never_cross(normal_est_s, high_est_s,
                                                                                high_user_gpus):
    # exactly one free GPU: the others are held by the high job's user
    node = make_node("n1").gpus(high_user_gpus + 1).held(*range(high_user_gpus))
    running = [make_job(f"r{i}").gpus(1).user("hank").running_on("n1", i) for i in range(high_user_gpus)]
    jobs = [make_job("norm").gpus(1).user("nina").est(normal_est_s).waited(100 * 86400),
            make_job("high").gpus(1).user("hank").priority("high").est(high_est_s)]
    config = PolicyConfig(starvation_s={}, class_step=100.0, weights=CLASSES_NEVER_CROSS)
    plan = plan_of(jobs, [node], running, config)
    assert set(placed(plan)) == {"high"}, f"placed {placed(plan)}, want only the high job; verdicts {plan.verdicts}"
    high, norm = plan.placements[0], verdict_of(plan, "norm")
    assert high.rank < norm.rank, f"high picked at rank {high.rank}, norm at {norm.rank}"


def test_jobs_the_cycle_did_not_reach_say_when_cpus_not_gpus_are_what_is_missing():
    nodes = [make_node("vm").gpus(4).cpus(2).held(0, 1, cpus=2)]  # 2 GPUs free, both CPUs taken
    running = [make_job(f"r{i}").gpus(1).running_on("vm", i) for i in range(2)]
    plan = schedule(snapshot(pending=[make_job(f"p{i}").gpus(1) for i in range(30)], running=running, nodes=nodes),
                    now_ms=NOW_MS)
    assert not plan.placements
    assert "at most 2 GPUs free on one node, but no CPU free on any" in plan.rest_reason
