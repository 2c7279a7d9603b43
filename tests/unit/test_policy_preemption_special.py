"""Preemption in schedule(), continued (test_policy_preemption.py has the basic rules, the order of
victims and forced preemption): shrinking elastic jobs, jobs already stopping, GPUs shared by
several jobs, GPU type and memory, the switches, team reclaim and determinism."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dispatcher.core.plan import Reservation, RunningJob
from dispatcher.policy import PolicyConfig
from dispatcher.policy.schedule import schedule
from dispatcher.policy.config import TeamQuota
from tests.builders import NOW_MS, make_job, make_node, placed, snapshot, verdict_of
from tests.preemption_builders import critical, full_node, plan_of, preempted, running_job, scenario_config


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


def test_a_critical_job_preempts_every_sharer_of_a_gpu_together_when_it_may_preempt_each():
    # it waited for ever: a sharer was never a victim, whatever its class (--preemptible low jobs too)
    running = [sharer("s1", "low"), sharer("s2", "low", checkpointable=False, preemptible=True)]
    plan = plan_of([critical("c", 2)], [shared_gpu0_node(2.0)], running)
    assert sorted((p.job_id, p.mode, p.gpus) for p in plan.preemptions) == [
        ("s1", "graceful", (0,)), ("s2", "forced", (0,))], preempted(plan)
    assert plan.reservations == (Reservation("c", "n1", (0, 1), NOW_MS),), f"reservations {plan.reservations}"
    assert verdict_of(plan, "c").reason.count("preempting job s1 (graceful), job s2 (forced)") == 1


def test_a_gpu_whose_sharers_are_all_stopping_counts_as_coming_back():
    running = [sharer("s1", "low", stopping=True), sharer("s2", "low", stopping=True)]
    plan = plan_of([critical("c", 2)], [shared_gpu0_node(2.0)], running)
    assert plan.preemptions == () and plan.reservations == (Reservation("c", "n1", (0, 1), NOW_MS),), plan


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


def test_a_team_reclaims_up_to_its_guarantee_and_counts_the_gpus_on_their_way_across_cycles():
    # vision (guarantee 3) waits with 5 one-GPU jobs on a cluster nlp fills: it reclaimed one GPU more than its
    # guarantee, as victims still stopping from an earlier cycle (and this cycle's) did not count as its own
    teams = {"vision": TeamQuota(guarantee_gpus=3), "nlp": TeamQuota()}
    nodes = [full_node(f"n{k}", 2) for k in range(1, 5)]  # (a cycle preempts on a node once: its reservation)
    running = [running_job(f"b{i}", "normal", i % 2, node=f"n{1 + i // 2}", team="nlp") for i in range(8)]
    waiting = [make_job(f"v{i}").gpus(1).priority("normal")._set(team="vision").waited(10 - i) for i in range(5)]
    config = PolicyConfig(teams=teams, preemptors_per_cycle=10)
    first = plan_of(waiting, nodes, running, config)
    assert len(first.preemptions) == 3, preempted(first)  # not one for each of the 5 waiting
    # the next cycle: those victims stop for their preemptors, which still wait; one GPU of vision's runs
    stopping = {p.job_id: p.for_job for p in first.preemptions}
    later = [replace(r, stopping=True, preempted_for=stopping[r.spec.id]) if r.spec.id in stopping else r
             for r in running]
    again = plan_of(waiting, nodes, later, config)
    assert again.preemptions == (), preempted(again)


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
    first = schedule(snap, now_ms=NOW_MS, config=scenario_config())
    assert first.preemptions, "the scenario should preempt something"
    for _ in range(3):
        again = schedule(snap, now_ms=NOW_MS, config=scenario_config())
        assert again == first, f"plan changed: {again} != {first}"
        assert [p.reason for p in again.preemptions] == [p.reason for p in first.preemptions], \
            "preemption reasons changed"
