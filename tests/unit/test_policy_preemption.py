"""Preemption in schedule(): a blocked job stops (or shrinks) cheaper running jobs and holds their GPUs.

Snapshot in, Plan out. Unless a test says otherwise the config is the default one:
forced_min_gap 2, preempt_cooldown_s 600, min_run_s 30, preemptors_per_cycle 4, no teams.
Victim cost, compared in order (preemption.py): the victim's class, killed without a checkpoint
(forced), GPU-seconds lost (since the last checkpoint, else the start, times the GPUs held),
GPUs freed beyond the need, then the job id. Nodes are A100 40 GB unless a test says otherwise.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatcher.core.plan import Code, PendingJob, Plan, Reservation, RunningJob, Snapshot
from dispatcher.core.model import PRIORITIES, JobSpec
from dispatcher.policy import PolicyConfig, schedule
from dispatcher.policy.config import TeamQuota
from dispatcher.policy.fit import gpu_usable
from tests.builders import NOW_MS, make_job, make_node, snapshot


# --- helpers ---------------------------------------------------------------------------

def plan_of(pending=(), nodes=(), running=(), config: PolicyConfig | None = None) -> Plan:
    return schedule(snapshot(pending=pending, running=running, nodes=nodes), now_ms=NOW_MS,
                    config=config or PolicyConfig())


def full_node(name: str = "n1", count: int = 2, kind: str = "A100", mem_gb: float = 40.0, free=()):
    """A node whose GPUs are all held (one CPU per held GPU) except the `free` ones."""
    held = [i for i in range(count) if i not in free]
    return make_node(name).gpus(count, kind, mem_gb).held(*held, cpus=len(held))


def running_job(job_id: str, priority: str, *gpus: int, node: str = "n1", started_s_ago: float = 100.0,
                checkpointable: bool = True, checkpoint_s_ago: float | None = None,
                preempted_s_ago: float | None = None, stopping: bool = False, **fields) -> RunningJob:
    r = make_job(job_id).gpus(len(gpus)).priority(priority)._set(checkpointable=checkpointable, **fields) \
        .running_on(node, *gpus, started_s_ago=started_s_ago)
    return replace(r,
                   checkpoint_ms=0 if checkpoint_s_ago is None else NOW_MS - int(checkpoint_s_ago * 1000),
                   preempted_ms=0 if preempted_s_ago is None else NOW_MS - int(preempted_s_ago * 1000),
                   stopping=stopping)


def preempted(plan: Plan) -> list[tuple]:
    """Each preemption as (victim, node, mode, GPUs given up, for job, GPUs kept, GPU-s lost)."""
    return [(p.job_id, p.node, p.mode, p.gpus, p.for_job, p.keep_gpus, p.lost_gpu_s) for p in plan.preemptions]


def placed(plan: Plan) -> dict[str, tuple[str, tuple[int, ...]]]:
    return {p.job_id: (p.node, p.gpus) for p in plan.placements}


def verdict_of(plan: Plan, job_id: str):
    found = [v for v in plan.verdicts if v.job_id == job_id]
    assert len(found) == 1, f"{job_id} has {len(found)} verdicts: {plan.verdicts}; placements {placed(plan)}"
    return found[0]


def critical(job_id: str = "c", gpus: int = 1, *types: str, mem_gb: float = 0.0):
    return make_job(job_id).gpus(gpus, *types, mem_gb=mem_gb).priority("critical")


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


# --- 9. shrinking elastic jobs ---------------------------------------------------------------

@pytest.mark.parametrize("victim, want", [
    # 2 GPUs, may go down to 1: gives up its last GPU and keeps the first; the work lost is the
    # whole job's since it restarts from its checkpoint: 100 s x 2 GPUs = 200 GPU-s
    (running_job("e", "low", 0, 1, min_gpus=1),
     ("e", "n1", "shrink", (1,), "c", (0,), 200.0)),
    # 4 GPUs, down to 2: only the one GPU needed goes (100 s x 4 = 400 GPU-s)
    (running_job("e", "low", 0, 1, 2, 3, min_gpus=2),
     ("e", "n1", "shrink", (2,), "c", (0, 1, 3), 400.0)),
    # elastic but not checkpointable: it cannot be shrunk, so it is killed outright (critical vs low)
    (running_job("e", "low", 0, 1, min_gpus=1, checkpointable=False),
     ("e", "n1", "forced", (0, 1), "c", (), 200.0)),
], ids=["2-to-1", "4-to-3", "non-checkpointable-is-killed-whole"])
def test_an_elastic_checkpointable_victim_is_shrunk_by_only_the_gpus_needed(victim, want):
    plan = plan_of([critical("c")], [full_node("n1", len(victim.gpus))], [victim])
    assert preempted(plan) == [want], f"preemptions {preempted(plan)}, want {[want]}"
    if want[2] == "shrink":
        assert f"shrink from {len(victim.gpus)} to {len(want[5])} GPUs" in plan.preemptions[0].reason, \
            f"reason {plan.preemptions[0].reason!r}"


def test_the_preemptor_of_a_shrunk_job_reserves_the_gpu_it_gives_up_not_one_it_keeps():
    plan = plan_of([critical("c")], [full_node()], [running_job("e", "low", 0, 1, min_gpus=1)])
    assert preempted(plan) == [("e", "n1", "shrink", (1,), "c", (0,), 200.0)], f"preemptions {preempted(plan)}"
    want = (Reservation("c", "n1", (1,), NOW_MS),)  # e keeps GPU 0; actual: GPU 0 is reserved
    assert plan.reservations == want, f"reservations {plan.reservations}, want {want}"


def test_an_elastic_job_is_stopped_whole_when_shrinking_it_cannot_free_enough():
    # e may go down to 1 GPU, but the critical job needs both: stopping e whole is the only way
    plan = plan_of([critical("c", 2)], [full_node()], [running_job("e", "low", 0, 1, min_gpus=1)])
    want = [("e", "n1", "graceful", (0, 1), "c", (), 200.0)]  # 100 s x 2 GPUs; actual: no preemption
    assert preempted(plan) == want, f"preemptions {preempted(plan)}, want {want}"


# --- 10. jobs already stopping ----------------------------------------------------------------

@pytest.mark.parametrize("need, want_victims, want_gpus", [
    (1, [], (0,)),      # s's GPU is enough: nothing new to stop
    (2, ["l"], (0, 1)),  # s's GPU plus one more
], ids=["stopping-job-frees-enough", "stopping-job-frees-part"])
def test_gpus_of_jobs_already_stopping_count_as_coming_back(need, want_victims, want_gpus):
    running = [running_job("s", "low", 0, stopping=True), running_job("l", "low", 1)]
    plan = plan_of([critical("c", need)], [full_node()], running)
    got = [p.job_id for p in plan.preemptions]
    assert got == want_victims, f"victims {got}, want {want_victims}"
    want = (Reservation("c", "n1", want_gpus, NOW_MS),)
    assert plan.reservations == want, f"reservations {plan.reservations}, want {want}"
    v = verdict_of(plan, "c")
    if not want_victims:
        assert "preempting jobs already stopping on n1" in v.reason, f"verdict reason {v.reason!r}"


def test_a_job_already_stopping_is_never_preempted_again():
    plan = plan_of([critical("c", 2)], [full_node()],
                   [running_job("s", "low", 0, 1, stopping=True, checkpoint_s_ago=1)])
    assert plan.preemptions == (), f"preemptions {preempted(plan)}, want none"
    assert plan.reservations == (Reservation("c", "n1", (0, 1), NOW_MS),), f"reservations {plan.reservations}"


# --- sharing jobs: stopping one sharer does not free a GPU others still hold ----------------------

def shared_gpu0_node(declared_gb: float):
    """n1: two A100s; GPU 0 held only by sharing jobs declaring `declared_gb` in all, GPU 1 free."""
    return replace(make_node("n1").gpus(2).obj(), free_gpus=(1,), shared=((0, declared_gb),))


def sharer(job_id: str, priority: str, **fields) -> RunningJob:
    return running_job(job_id, priority, 0, share=True, gpu_mem_gb=1.0, cpus=0, **fields)


def test_a_sharing_victim_is_not_preempted_while_another_sharer_keeps_its_gpu():
    # s1 (low, checkpointable) may be preempted by the critical job; s2 (high, not checkpointable) may not,
    # and it keeps sharing GPU 0: stopping s1 cannot give c two GPUs
    running = [sharer("s1", "low"), sharer("s2", "high", checkpointable=False)]
    plan = plan_of([critical("c", 2)], [shared_gpu0_node(2.0)], running)
    # actual: s1 is stopped and c holds GPUs (0, 1) from now, though s2 stays on GPU 0
    assert plan.preemptions == (), f"preemptions {preempted(plan)}, want none; reservations {plan.reservations}"


def test_a_sharing_victim_is_not_preempted_when_a_sharing_job_placed_this_cycle_holds_its_gpu_too():
    # h (high, starving, so picked first) shares GPU 0 with s this cycle; then c needs both GPUs
    pending = [make_job("h").gpus(1, mem_gb=1)._set(share=True).priority("high").waited(7300), critical("c", 2)]
    plan = plan_of(pending, [shared_gpu0_node(1.0)], [sharer("s", "normal", checkpointable=False)])
    assert placed(plan).get("h") == ("n1", (0,)), f"placements {placed(plan)}"
    # actual: s is killed (forced) and c holds GPUs (0, 1) from now, though h now shares GPU 0
    assert plan.preemptions == (), f"preemptions {preempted(plan)}, want none; reservations {plan.reservations}"


# --- 11. GPU type and memory ------------------------------------------------------------------

def a100_v100_node():
    return make_node("n1").gpus(1, "A100", 40).gpus(1, "V100", 16).held(0, 1, cpus=2)  # 0: A100, 1: V100


@pytest.mark.parametrize("preemptor, running, want", [
    # the low job would be cheaper, but it holds a V100
    (critical("c", 1, "A100"),
     [running_job("a", "normal", 0), running_job("v", "low", 1)],
     [("a", "n1", "graceful", (0,), "c", (), 100.0)]),
    # the only A100 is held by a job no one outranks: nothing to do
    (critical("c", 1, "A100"),
     [running_job("a", "critical", 0), running_job("v", "low", 1)],
     []),
    # no type asked, but at least 20 GB per GPU: the 16 GB V100 is no use
    (critical("c", 1, mem_gb=20),
     [running_job("a", "normal", 0), running_job("v", "low", 1)],
     [("a", "n1", "graceful", (0,), "c", (), 100.0)]),
    # any GPU will do: the low job on the V100
    (critical("c", 1),
     [running_job("a", "normal", 0), running_job("v", "low", 1)],
     [("v", "n1", "graceful", (1,), "c", (), 100.0)]),
], ids=["a100-job-passes-over-v100-victim", "v100-victim-alone-is-no-use", "too-small-gpu-is-no-use",
        "any-gpu-takes-the-cheapest"])
def test_a_victim_whose_gpus_the_preemptor_cannot_use_is_not_chosen(preemptor, running, want):
    plan = plan_of([preemptor], [a100_v100_node()], running)
    assert preempted(plan) == want, f"preemptions {preempted(plan)}, want {want}"


# --- 12. the switches -------------------------------------------------------------------------

def test_preemption_off_leaves_the_blocked_job_with_an_ordinary_reservation():
    plan = plan_of([critical("c")], [full_node()], [running_job("l1", "low", 0), running_job("l2", "low", 1)],
                   PolicyConfig(preemption=False))
    assert plan.preemptions == (), f"preemptions {preempted(plan)}, want none"
    v = verdict_of(plan, "c")
    assert "preempting" not in v.reason, f"verdict reason {v.reason!r}"
    # neither job has an estimate: both end unknown_remaining_s (86400 s) from now
    want = (Reservation("c", "n1", (0,), NOW_MS + 86_400_000),)
    assert plan.reservations == want, f"reservations {plan.reservations}, want {want}"


@pytest.mark.parametrize("per_cycle, want", [
    (1, [("l1", "c1")]),
    (2, [("l1", "c1"), ("l2", "c2")]),
    (4, [("l1", "c1"), ("l2", "c2")]),
], ids=["one-per-cycle", "two-per-cycle", "default-four"])
def test_at_most_preemptors_per_cycle_blocked_jobs_preempt_in_one_cycle(per_cycle, want):
    # two 1-GPU nodes, each full with a low job; c1 waited longer so it goes first, and takes n1
    # (equal cost: the node name breaks the tie), so c2 can only preempt on n2
    nodes = [full_node("n1", 1), full_node("n2", 1)]
    running = [running_job("l1", "low", 0, node="n1"), running_job("l2", "low", 0, node="n2")]
    pending = [critical("c1").waited(20), critical("c2").waited(10)]
    plan = plan_of(pending, nodes, running, PolicyConfig(preemptors_per_cycle=per_cycle))
    got = [(p.job_id, p.for_job) for p in plan.preemptions]
    assert got == want, f"(victim, preemptor) {got}, want {want}"
    now_resv = sorted(r.job_id for r in plan.reservations if r.start_ms == NOW_MS)
    assert now_resv == [f for _, f in want], f"reservations from now {now_resv}, want {[f for _, f in want]}"


# --- 13. team reclaim -------------------------------------------------------------------------

@pytest.mark.parametrize("teams, victim_class, want", [
    # a holds 0 of its guaranteed 2; b borrows 2 above its guarantee of 0
    ({"a": TeamQuota(guarantee_gpus=2), "b": TeamQuota()}, "normal", ["b1"]),
    ({}, "normal", []),  # no teams: same class, no preemption
    ({"a": TeamQuota(), "b": TeamQuota()}, "normal", []),  # a has no guarantee to reclaim
    ({"a": TeamQuota(guarantee_gpus=2), "b": TeamQuota(guarantee_gpus=2)}, "normal", []),  # b is not borrowing
    ({"a": TeamQuota(guarantee_gpus=2), "b": TeamQuota()}, "high", []),  # reclaim never outranks a class
], ids=["reclaim-below-guarantee", "no-teams", "no-guarantee", "victim-team-within-its-guarantee",
        "higher-class-borrower-kept"])
def test_a_team_below_its_guarantee_reclaims_gpus_from_a_borrowing_team_of_the_same_class(teams, victim_class,
                                                                                        want):
    running = [running_job("b1", victim_class, 0, team="b"), running_job("b2", victim_class, 1, team="b")]
    plan = plan_of([make_job("a1").gpus(1).priority("normal")._set(team="a")], [full_node()], running,
                   PolicyConfig(teams=teams))
    got = [p.job_id for p in plan.preemptions]
    assert got == want, f"victims {got}, want {want}"
    if want:
        p = plan.preemptions[0]
        assert (p.for_job, p.mode, p.gpus) == ("a1", "graceful", (0,)), f"preemption {p}"
        assert "reclaim for team below its guarantee" in p.reason, f"reason {p.reason!r}"
        assert plan.reservations == (Reservation("a1", "n1", (0,), NOW_MS),), f"reservations {plan.reservations}"


# --- 14. determinism --------------------------------------------------------------------------

def test_the_same_snapshot_always_gives_the_same_plan_preemptions_included():
    nodes = [full_node("n1", 2), full_node("n2", 4, free=(3,)),
             make_node("n3").gpus(1, "A100", 40).gpus(1, "V100", 16).held(0, 1, cpus=2)]
    running = [running_job("a", "low", 0), running_job("b", "normal", 1, checkpointable=False),
               running_job("c", "low", 0, 1, node="n2", min_gpus=1), running_job("d", "high", 2, node="n2"),
               running_job("e", "low", 0, node="n3", stopping=True), running_job("f", "low", 1, node="n3")]
    pending = [critical("p1"), critical("p2", 2), make_job("p3").gpus(1).priority("high"),
               critical("p4", 1, "V100"), make_job("p5").gpus(1).priority("low")]
    snap = snapshot(pending=pending, running=running, nodes=nodes)
    first = schedule(snap, now_ms=NOW_MS, config=PolicyConfig())
    assert first.preemptions, "the scenario should preempt something"
    for _ in range(3):
        again = schedule(snap, now_ms=NOW_MS, config=PolicyConfig())
        assert again == first, f"plan changed: {again} != {first}"
        assert [p.reason for p in again.preemptions] == [p.reason for p in first.preemptions], \
            "preemption reasons changed"


# --- properties ---------------------------------------------------------------------------

@st.composite
def preemption_snapshots(draw):
    """1-3 nodes of 1-4 A100s or V100s, mostly filled by running jobs of random class, checkpointing,
    opt-in, elasticity, run time, checkpoint time, last preemption (boundary values included)
    and stopping; plus up to 4 pending GPU jobs of random class, size, type and wait."""
    nodes, running = [], []
    for n in range(draw(st.integers(1, 3))):
        name, kind = f"n{n}", draw(st.sampled_from(["A100", "V100"]))
        count = draw(st.sampled_from([1, 2, 4, 4]))
        mem = 40.0 if kind == "A100" else 16.0
        i, held = 0, []
        while i < count:
            if draw(st.integers(0, 4)) == 0:  # now and then a free GPU; mostly full nodes
                i += 1
                continue
            size = draw(st.integers(1, min(3, count - i)))
            gpus = tuple(range(i, i + size))
            i += size
            held += gpus
            job_id = f"r{n}{gpus[0]}"
            started = draw(st.one_of(st.sampled_from([0, 29, 30, 31, 100]), st.integers(0, 3000)))
            elastic = size > 1 and draw(st.booleans())
            spec = JobSpec(id=job_id, command=("true",), user=draw(st.sampled_from(["alice", "bob"])),
                           gpus=size, priority=draw(st.sampled_from(PRIORITIES)),
                           checkpointable=draw(st.booleans()), preemptible=draw(st.booleans()),
                           min_gpus=draw(st.integers(1, size - 1)) if elastic else None,
                           est_s=draw(st.one_of(st.none(), st.integers(1, 5000).map(float))))
            ckpt = draw(st.one_of(st.none(), st.integers(0, started + 100)))
            preempted_ago = None
            if draw(st.integers(0, 3)) == 0:  # a quarter were preempted before, some within the cooldown
                preempted_ago = draw(st.one_of(st.sampled_from([599, 600, 601]), st.integers(0, 1500)))
            running.append(RunningJob(spec, name, gpus, NOW_MS - started * 1000,
                                      0 if ckpt is None else NOW_MS - ckpt * 1000,
                                      0 if preempted_ago is None else NOW_MS - preempted_ago * 1000,
                                      draw(st.integers(0, 9)) == 0))
        node = make_node(name).gpus(count, kind, mem).cpus(16)
        nodes.append(node.held(*held, cpus=sum(1 for r in running if r.node == name)).obj())
    pending = []
    for k in range(draw(st.integers(1, 4))):
        spec = JobSpec(id=f"p{k}", command=("true",), user=draw(st.sampled_from(["alice", "bob"])),
                       gpus=draw(st.sampled_from([1, 1, 2, 3])),
                       gpu_types=draw(st.sampled_from([(), (), ("A100",), ("V100",)])),
                       priority=draw(st.sampled_from(PRIORITIES[1:] + ("high", "critical"))),  # mostly high
                       est_s=draw(st.one_of(st.none(), st.integers(1, 5000).map(float))),
                       submit_ms=NOW_MS - draw(st.integers(0, 4000)) * 1000)
        pending.append(PendingJob(spec))
    config = PolicyConfig(preemptors_per_cycle=draw(st.integers(1, 4)), forced_min_gap=draw(st.integers(1, 3)))
    return Snapshot(tuple(pending), tuple(running), tuple(nodes)), config


@settings(max_examples=150, deadline=None)
@given(preemption_snapshots())
def test_every_preemption_follows_the_rules(case):
    snap, config = case
    plan = schedule(snap, now_ms=NOW_MS, config=config)
    victims = {r.spec.id: r for r in snap.running}
    specs = {p.spec.id: p.spec for p in snap.pending}
    views = {v.name: v for v in snap.nodes}
    resv = {r.job_id: r for r in plan.reservations}

    twice = [j for j, n in Counter(p.job_id for p in plan.preemptions).items() if n > 1]
    assert not twice, f"preempted twice in one plan: {twice}; preemptions {preempted(plan)}"
    preemptors = {p.for_job for p in plan.preemptions}
    assert len(preemptors) <= config.preemptors_per_cycle, \
        f"{len(preemptors)} preemptors {sorted(preemptors)}, limit {config.preemptors_per_cycle}"
    both = preemptors & set(placed(plan))
    assert not both, f"preemptors also placed: {sorted(both)}"

    for p in plan.preemptions:
        v, job = victims[p.job_id], specs[p.for_job]
        gap = job.rank - v.spec.rank
        assert gap >= 1, f"{job.priority} job {job.id} preempted {v.spec.priority} job {v.spec.id}"
        assert not v.stopping, f"{v.spec.id} was already stopping"
        ran_s = (NOW_MS - v.started_ms) / 1000
        assert ran_s >= config.min_run_s, f"{v.spec.id} ran {ran_s}s < min_run_s {config.min_run_s}"
        since_s = (NOW_MS - v.preempted_ms) / 1000
        assert not v.preempted_ms or since_s >= config.preempt_cooldown_s, \
            f"{v.spec.id} was preempted {since_s}s ago < cooldown {config.preempt_cooldown_s}"
        assert p.node == v.node, f"{v.spec.id} runs on {v.node}, preemption says {p.node}"
        if p.mode == "forced":
            assert not v.spec.checkpointable, f"checkpointable {v.spec.id} was killed"
            assert v.spec.preemptible or gap >= config.forced_min_gap, \
                f"{v.spec.id} killed at gap {gap} < {config.forced_min_gap}, not preemptible"
        else:
            assert p.mode in ("graceful", "shrink") and v.spec.checkpointable, \
                f"{v.spec.id}: mode {p.mode}, checkpointable {v.spec.checkpointable}"
        if p.mode == "shrink":
            assert v.spec.min_gpus is not None and len(p.keep_gpus) >= v.spec.min_gpus and p.gpus, \
                f"{v.spec.id} shrunk to {p.keep_gpus} (gave {p.gpus}), min_gpus {v.spec.min_gpus}"
            assert sorted(p.gpus + p.keep_gpus) == sorted(v.gpus), \
                f"{v.spec.id} holds {v.gpus}; gave {p.gpus}, keeps {p.keep_gpus}"
        else:
            assert (p.gpus, p.keep_gpus) == (v.gpus, ()), \
                f"{v.spec.id} holds {v.gpus}; gave {p.gpus}, kept {p.keep_gpus}"
        # GPU-seconds since the last usable checkpoint (else the start), times the GPUs held
        since = max(v.started_ms, v.checkpoint_ms) if v.spec.checkpointable else v.started_ms
        want_lost = round((NOW_MS - since) / 1000 * len(v.gpus), 1)
        assert p.lost_gpu_s == want_lost, f"{v.spec.id} lost_gpu_s {p.lost_gpu_s}, want {want_lost}"
        r = resv.get(p.for_job)
        assert r is not None and r.node == p.node and r.start_ms == NOW_MS, \
            f"preemptor {p.for_job} has reservation {r}, want one on {p.node} from now"

    # every preemptor (including those waiting only on jobs already stopping) holds GPUs it can use
    # that are free or coming back on that node (a shrunk job gives back only the GPUs it gave up)
    said = [v for v in plan.verdicts if "; preempting " in v.reason]
    assert len(said) <= config.preemptors_per_cycle, f"{len(said)} verdicts say preempting"
    for verdict in said:
        assert verdict.code in (Code.NO_FIT_NOW, Code.LOWER_SCORE, Code.RESERVED), \
            f"{verdict.job_id} preempts with verdict {verdict.code}"
        r, job = resv.get(verdict.job_id), specs[verdict.job_id]
        assert r is not None and r.start_ms == NOW_MS and len(r.gpus) == job.gpus, \
            f"{job.id} (needs {job.gpus} GPUs) has reservation {r}"
        view = views[r.node]
        assert all(gpu_usable(job, view, g) for g in r.gpus), f"{job.id} reserved unusable GPUs {r.gpus}"
        # coming back: stopped by this plan's preemptions there (its own, or those of an earlier
        # preemptor whose reservation a higher class passed: they are already stopping for it)
        stopped_here = [p for p in plan.preemptions if p.node == r.node]
        coming = set(view.free_gpus) | {g for p in stopped_here for g in p.gpus} \
            | {g for x in snap.running if x.node == r.node and x.stopping for g in x.gpus}
        assert set(r.gpus) <= coming, f"{job.id} reserved {r.gpus} on {r.node}; free or coming back: {sorted(coming)}"
