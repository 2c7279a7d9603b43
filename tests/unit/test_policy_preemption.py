"""Preemption in schedule(): a blocked job stops (or shrinks) cheaper running jobs and holds their GPUs.

Snapshot in, Plan out. Unless a test says otherwise the config is the default one:
forced_min_gap 2, preempt_cooldown_s 600, min_run_s 30 (preemption_builders.MIN_RUN_S; the default is 300),
preemptors_per_cycle 4, no teams.
Victim cost, compared in order (preemption.py): the victim's class, killed without a checkpoint
(forced), GPU-seconds lost (since the last checkpoint, else the start, times the GPUs held),
GPUs freed beyond the need, then the job id. Nodes are A100 40 GB unless a test says otherwise.
"""

from __future__ import annotations


import pytest

from dispatcher.core.plan import Code, Reservation
from dispatcher.core.model import PRIORITIES
from dispatcher.policy import PolicyConfig
from dispatcher.policy.config import TeamQuota
from tests.builders import NOW_MS, make_job, placed, verdict_of
from tests.preemption_builders import critical, full_node, plan_of, preempted, running_job


# --- 1. the basic case -----------------------------------------------------------------

def test_a_critical_job_on_a_full_node_gracefully_preempts_one_low_job_and_reserves_its_gpu_from_now():
    running = [running_job("l1", "low", 0), running_job("l2", "low", 1)]
    plan = plan_of([critical("c")], [full_node()], running)
    # both cost the same (low, graceful, 100 s x 1 GPU = 100 GPU-s, 1 GPU): the id breaks the tie
    want = [("l1", "n1", "graceful", (0,), "c", (), 100.0)]
    assert preempted(plan) == want, f"preemptions {preempted(plan)}, want {want}"
    resv = (Reservation("c", "n1", (0,), NOW_MS),)
    assert plan.reservations == resv, f"reservations {plan.reservations}, want {resv}"
    assert "c" not in placed(plan), f"the preemptor was placed this cycle: {placed(plan)}"
    v = verdict_of(plan, "c")
    assert v.code is Code.NO_FIT_NOW, f"c: {v.code} ({v.reason})"
    needles = ["preempting job l1 (graceful) on n1", "holds GPUs [0]"]
    missing = [n for n in needles if n not in v.reason]
    assert not missing, f"verdict reason {v.reason!r} lacks {missing}"
    reason = plan.preemptions[0].reason
    assert "critical job c outranks low" in reason and "checkpoint and requeue" in reason, f"reason {reason!r}"


def test_a_reservation_of_a_lower_class_does_not_hold_back_critical_or_high_work_but_holds_back_normal():
    # n1's free GPU is reserved for the starving 2-GPU low job L; the critical job c takes it at once
    nodes = [full_node("n1", 2, free=(0,))]
    running = [running_job("x", "normal", 1, node="n1")]
    plan = plan_of([make_job("L").gpus(2).priority("low").waited(145 * 3600), critical("c")], nodes, running)
    assert placed(plan).get("c") == ("n1", (0,)), f"placements {placed(plan)}, verdicts {plan.verdicts}"
    # a normal job without an estimate may not (it could delay L's start past its reservation)
    plan = plan_of([make_job("L").gpus(2).priority("low").waited(145 * 3600), make_job("n").gpus(1)], nodes, running)
    assert "n" not in placed(plan), f"the normal job took L's reserved GPU: {placed(plan)}"


@pytest.mark.parametrize("nodes, running, pending, want_code", [
    # n1's free GPU went to the critical job placed first; the high job preempts the low job on n2
    ([full_node("n1", 1, free=(0,)), full_node("n2", 1)],
     [running_job("v", "low", 0, node="n2")],
     [critical("first"), make_job("c").gpus(1).priority("high")],
     Code.LOWER_SCORE),
    # n1's free GPU is reserved for the 2-GPU critical job L, starving (145 h), which cannot preempt the
    # critical job x; c (critical too, no estimate, so no backfill) is RESERVED there and preempts on n2 instead
    ([full_node("n1", 2, free=(0,)), full_node("n2", 1)],
     [running_job("x", "critical", 1, node="n1"), running_job("v", "low", 0, node="n2")],
     [make_job("L").gpus(2).priority("critical").waited(145 * 3600), critical("c")],
     Code.RESERVED),
], ids=["lower-score-job-preempts", "reserved-job-preempts-on-another-node"])
def test_a_job_blocked_by_higher_ranked_jobs_or_a_reservation_may_preempt_too(nodes, running, pending, want_code):
    plan = plan_of(pending, nodes, running)
    v = verdict_of(plan, "c")
    assert v.code is want_code, f"c: {v.code} ({v.reason}), want {want_code}"
    victims = [(p.job_id, p.node, p.for_job) for p in plan.preemptions]
    assert victims == [("v", "n2", "c")], f"preemptions {victims}, want v on n2 for c"
    resv = [r for r in plan.reservations if r.job_id == "c"]
    assert resv == [Reservation("c", "n2", (0,), NOW_MS)], f"c's reservations {resv}"


@pytest.mark.parametrize("config, want_code", [
    (PolicyConfig(teams={"": TeamQuota(limit_gpus=0)}), Code.OVER_LIMIT),
    # team b holds 1 of its guaranteed 2 and has b1 waiting, so it is owed 1; team a would borrow
    # the only free GPU
    (PolicyConfig(teams={"b": TeamQuota(guarantee_gpus=2)}), Code.HELD_FOR_TEAM),
], ids=["over-its-team-limit", "held-for-another-team"])
def test_a_job_blocked_by_its_team_never_preempts(config, want_code):
    running = [running_job("l1", "low", 0, team="b")]
    pending = [critical("c")._set(team="" if want_code is Code.OVER_LIMIT else "a"),
               make_job("b1").gpus(1).priority("low")._set(team="b")]
    plan = plan_of(pending, [full_node("n1", 2, free=(1,))], running, config)
    v = verdict_of(plan, "c")
    assert v.code is want_code, f"c: {v.code} ({v.reason}), want {want_code}"
    assert not [p for p in plan.preemptions if p.for_job == "c"], f"preemptions {preempted(plan)}"


# --- 2. checkpointable victims first ----------------------------------------------------

@pytest.mark.parametrize("forced_candidate, graceful_candidate", [
    # the non-checkpointable job is a class up, and would lose less work (50 GPU-s against 500)
    (running_job("a", "normal", 0, started_s_ago=50, checkpointable=False),
     running_job("b", "low", 1, started_s_ago=500)),
    # same class: a graceful stop beats a kill even though the kill loses less work (50 against 500)
    (running_job("a", "low", 0, started_s_ago=50, checkpointable=False),
     running_job("b", "low", 1, started_s_ago=500)),
], ids=["non-checkpointable-normal-vs-checkpointable-low", "non-checkpointable-low-vs-checkpointable-low"])
def test_a_checkpointable_victim_is_chosen_over_one_that_would_be_killed(forced_candidate, graceful_candidate):
    # "a" sorts first by id, so only the rules can put "b" ahead
    plan = plan_of([critical("c")], [full_node()], [forced_candidate, graceful_candidate])
    want = [("b", "n1", "graceful", (1,), "c", (), 500.0)]  # 500 s x 1 GPU
    assert preempted(plan) == want, f"preemptions {preempted(plan)}, want {want}"


# --- 3. minimum run time and cooldown ---------------------------------------------------

PROTECTION = [
    # (started s ago, preempted s ago, may be preempted)
    (29.0, None, False),   # min_run_s 30: still protected
    (30.0, None, True),    # exactly 30 s: no longer
    (100.0, 599.0, False),  # preempt_cooldown_s 600: still cooling down
    (100.0, 600.0, True),   # exactly 600 s: no longer
    (100.0, 5000.0, True),  # preempted long ago
]
PROTECTION_IDS = ["ran-29s", "ran-30s", "preempted-599s-ago", "preempted-600s-ago", "preempted-long-ago"]


@pytest.mark.parametrize("started_s_ago, preempted_s_ago, allowed", PROTECTION, ids=PROTECTION_IDS)
def test_a_job_inside_its_minimum_run_time_or_cooldown_is_never_the_only_victim(started_s_ago, preempted_s_ago,
                                                                                allowed):
    victim = running_job("v", "low", 0, started_s_ago=started_s_ago, preempted_s_ago=preempted_s_ago)
    plan = plan_of([critical("c")], [full_node("n1", 1)], [victim])
    v = verdict_of(plan, "c")
    assert v.code is Code.NO_FIT_NOW, f"c: {v.code} ({v.reason})"
    if allowed:
        assert [p.job_id for p in plan.preemptions] == ["v"], f"preemptions {preempted(plan)}, want v"
        assert plan.reservations == (Reservation("c", "n1", (0,), NOW_MS),), f"reservations {plan.reservations}"
    else:
        assert plan.preemptions == (), f"preemptions {preempted(plan)}, want none"
        assert "preempting" not in v.reason, f"verdict reason {v.reason!r}"
        # only the ordinary reservation: when v ends (no estimate: unknown_remaining_s 86400 s from now)
        assert plan.reservations == (Reservation("c", "n1", (0,), NOW_MS + 86_400_000),), \
            f"reservations {plan.reservations}"
        end = "minimum run time" if preempted_s_ago is None else "cooldown after a preemption"  # each 1 s from now
        assert v.reason.endswith(f"; may preempt job v there in ~1 s, at the end of its {end}"), v.reason


@pytest.mark.parametrize("started_s_ago, preempted_s_ago, allowed", PROTECTION, ids=PROTECTION_IDS)
def test_a_protected_job_is_passed_over_for_a_costlier_one(started_s_ago, preempted_s_ago, allowed):
    # "a" loses at most 100 GPU-s and sorts first; "b" loses 1000 GPU-s
    a = running_job("a", "low", 0, started_s_ago=started_s_ago, preempted_s_ago=preempted_s_ago)
    b = running_job("b", "low", 1, started_s_ago=1000)
    plan = plan_of([critical("c")], [full_node()], [a, b])
    want = ["a"] if allowed else ["b"]
    got = [p.job_id for p in plan.preemptions]
    assert got == want, f"victims {got}, want {want}"


# --- 4. class order ---------------------------------------------------------------------

@pytest.mark.parametrize("preemptor, victim", [(p, v) for p in PRIORITIES for v in PRIORITIES],
                         ids=[f"{p}-{'preempts' if PRIORITIES.index(p) > PRIORITIES.index(v) else 'spares'}-{v}"
                              for p in PRIORITIES for v in PRIORITIES])
def test_only_a_job_of_a_strictly_lower_class_is_preempted(preemptor, victim):
    plan = plan_of([make_job("p").gpus(1).priority(preemptor)], [full_node("n1", 1)],
                   [running_job("v", victim, 0)])
    want = ["v"] if PRIORITIES.index(preemptor) > PRIORITIES.index(victim) else []
    got = [p.job_id for p in plan.preemptions]
    assert got == want, f"{preemptor} job against a running {victim} job: victims {got}, want {want}"


# --- 5. forced preemption -----------------------------------------------------------------

@pytest.mark.parametrize("preemptor, victim, preemptible, forced_min_gap, want_mode", [
    ("critical", "normal", False, 2, "forced"),   # gap 2
    ("critical", "low", False, 2, "forced"),      # gap 3
    ("high", "low", False, 2, "forced"),          # gap 2
    ("high", "normal", False, 2, None),           # gap 1
    ("normal", "low", False, 2, None),            # gap 1
    ("critical", "high", False, 2, None),         # gap 1
    ("high", "normal", True, 2, "forced"),        # gap 1, but it opted in
    ("normal", "low", True, 2, "forced"),
    ("critical", "high", True, 2, "forced"),
    ("critical", "normal", False, 3, None),       # gap 2 < 3
    ("critical", "low", False, 3, "forced"),      # gap 3
], ids=["critical-kills-normal", "critical-kills-low", "high-kills-low", "high-spares-normal",
        "normal-spares-low", "critical-spares-high", "high-kills-preemptible-normal",
        "normal-kills-preemptible-low", "critical-kills-preemptible-high", "gap-3-critical-spares-normal",
        "gap-3-critical-kills-low"])
def test_a_non_checkpointable_job_is_killed_only_by_a_far_higher_class_or_if_it_opted_in(
        preemptor, victim, preemptible, forced_min_gap, want_mode):
    v = running_job("v", victim, 0, checkpointable=False, preemptible=preemptible)
    plan = plan_of([make_job("p").gpus(1).priority(preemptor)], [full_node("n1", 1)], [v],
                   PolicyConfig(forced_min_gap=forced_min_gap))
    want = [] if want_mode is None else [("v", "n1", want_mode, (0,), "p", (), 100.0)]  # 100 s x 1 GPU
    assert preempted(plan) == want, f"preemptions {preempted(plan)}, want {want}"
    if want_mode:
        assert "killed and requeued" in plan.preemptions[0].reason, f"reason {plan.preemptions[0].reason!r}"


def test_a_preemptible_checkpointable_job_is_still_stopped_gracefully():
    v = running_job("v", "normal", 0, preemptible=True)
    plan = plan_of([make_job("p").gpus(1).priority("high")], [full_node("n1", 1)], [v])
    modes = [p.mode for p in plan.preemptions]
    assert modes == ["graceful"], f"modes {modes}, want ['graceful']"


# --- 6. least work lost -------------------------------------------------------------------

def test_the_victim_with_the_more_recent_checkpoint_is_chosen():
    # both started 1000 s ago; "a" checkpointed 400 s ago (400 GPU-s lost), "b" 50 s ago (50 GPU-s)
    running = [running_job("a", "low", 0, started_s_ago=1000, checkpoint_s_ago=400),
               running_job("b", "low", 1, started_s_ago=1000, checkpoint_s_ago=50)]
    plan = plan_of([critical("c")], [full_node()], running)
    want = [("b", "n1", "graceful", (1,), "c", (), 50.0)]
    assert preempted(plan) == want, f"preemptions {preempted(plan)}, want {want}"


@pytest.mark.parametrize("victim, need, want_lost", [
    (running_job("v", "low", 0, started_s_ago=100), 1, 100.0),  # never checkpointed: 100 s x 1 GPU
    (running_job("v", "low", 0, 1, started_s_ago=100, checkpoint_s_ago=40), 2, 80.0),  # 40 s x 2 GPUs
    (running_job("v", "low", 0, 1, started_s_ago=90.5), 2, 181.0),  # 90.5 s x 2 GPUs
    # cannot resume from its checkpoint: counted from its start, 100 s x 1 GPU
    (running_job("v", "low", 0, started_s_ago=100, checkpoint_s_ago=40, checkpointable=False, preemptible=True),
     1, 100.0),
    # a checkpoint older than the (re)start does not count: max(start, checkpoint) = 100 s ago
    (running_job("v", "low", 0, started_s_ago=100, checkpoint_s_ago=300), 1, 100.0),
], ids=["since-start", "since-checkpoint-times-gpus", "fractional-seconds", "non-checkpointable-from-start",
        "checkpoint-before-start"])
def test_lost_gpu_seconds_count_from_the_last_usable_checkpoint_times_the_gpus_held(victim, need, want_lost):
    plan = plan_of([critical("c", need)], [full_node("n1", len(victim.gpus))], [victim])
    lost = [p.lost_gpu_s for p in plan.preemptions]
    assert lost == [want_lost], f"lost_gpu_s {lost}, want [{want_lost}]"


def test_less_work_lost_outranks_fewer_gpus_freed():
    # "a" holds 2 GPUs but checkpointed 10 s ago (10 s x 2 = 20 GPU-s); "b" holds 1, never checkpointed
    # (100 s x 1 = 100 GPU-s): the cost compares work lost before GPUs beyond the need
    running = [running_job("a", "low", 0, 1, checkpoint_s_ago=10), running_job("b", "low", 2)]
    plan = plan_of([critical("c")], [full_node("n1", 3)], running)
    want = [("a", "n1", "graceful", (0, 1), "c", (), 20.0)]
    assert preempted(plan) == want, f"preemptions {preempted(plan)}, want {want}"


# --- 7./8. as few GPUs and victims as needed ------------------------------------------------

def test_a_one_gpu_preemptor_prefers_a_one_gpu_victim_to_a_two_gpu_one_losing_as_much_work():
    # "a": 2 GPUs x 100 s = 200 GPU-s; "b": 1 GPU x 200 s = 200 GPU-s. Same class, both graceful,
    # same work lost: "b" frees no GPU beyond the need ("a" sorts first by id, so that is not the reason)
    running = [running_job("a", "low", 0, 1, started_s_ago=100), running_job("b", "low", 2, started_s_ago=200)]
    plan = plan_of([critical("c")], [full_node("n1", 3)], running)
    want = [("b", "n1", "graceful", (2,), "c", (), 200.0)]
    assert preempted(plan) == want, f"preemptions {preempted(plan)}, want {want}"
    assert plan.reservations == (Reservation("c", "n1", (2,), NOW_MS),), f"reservations {plan.reservations}"


@pytest.mark.parametrize("node, running, want_victims, want_gpus", [
    # GPU 0 is free: one of the two 1-GPU jobs is enough (the id breaks the tie)
    (full_node("n1", 3, free=(0,)),
     [running_job("l1", "low", 1), running_job("l2", "low", 2)],
     ["l1"], (0, 1)),
    # the cheapest first, "a" (40 s x 1 = 40 GPU-s), then "b" (30 s x 2 = 60 GPU-s) for the second GPU;
    # then "b" alone turns out to be enough, so "a" is dropped
    (full_node("n1", 3),
     [running_job("a", "low", 0, started_s_ago=40), running_job("b", "low", 1, 2, started_s_ago=30)],
     ["b"], (1, 2)),
], ids=["one-free-gpu-plus-one-victim", "a-victim-made-unnecessary-is-dropped"])
def test_a_two_gpu_preemptor_stops_no_more_jobs_than_it_needs(node, running, want_victims, want_gpus):
    plan = plan_of([critical("c", 2)], [node], running)
    got = [p.job_id for p in plan.preemptions]
    assert got == want_victims, f"victims {got}, want {want_victims}"
    want = (Reservation("c", "n1", want_gpus, NOW_MS),)
    assert plan.reservations == want, f"reservations {plan.reservations}, want {want}"
