"""A drained node (`dispatch drain`, NodeView.drained) takes no new job: no placement, no reservation,
no preemption for a job to start there, no gang rank; its running jobs still count. A job that waits
names the drained nodes that could hold it, with the reason given. Snapshot in, Plan out."""

from __future__ import annotations

from dataclasses import replace

from dispatcher.core.plan import Code, Snapshot
from dispatcher.policy import Backlog, PolicyConfig, place_arrivals, plan_cycle
from tests.builders import NOW_MS, make_job, make_node, plan_of


def drained(builder, reason: str = "disk swap"):
    return replace(builder.obj(), drained=reason)


def verdict(plan, job_id: str):
    return next(v for v in plan.verdicts if v.job_id == job_id)


def test_a_job_goes_to_the_node_that_is_not_drained_even_where_the_drained_one_fits_tighter():
    nodes = [drained(make_node("a").gpus(1)), make_node("b").gpus(4)]  # a would be the tighter fit
    plan = plan_of([make_job("j1").gpus(1)], nodes)
    assert [(p.job_id, p.node) for p in plan.placements] == [("j1", "b")]


def test_a_job_only_a_drained_node_could_hold_waits_and_says_so():
    plan = plan_of([make_job("j1").gpus(1)], [drained(make_node("a").gpus(1))])
    assert not plan.placements and not plan.reservations
    v = verdict(plan, "j1")
    assert v.code == Code.NO_FIT_NOW  # not "never": it starts once the node is resumed
    assert v.reason == "a is drained: disk swap; needs 1xGPU, 1 CPU; no node that takes jobs could hold it"


def test_a_drained_node_without_a_reason_is_named_alone():
    plan = plan_of([make_job("j1").gpus(1)], [drained(make_node("a").gpus(1), reason="")])
    assert verdict(plan, "j1").reason.startswith("a is drained; needs")


def test_a_job_that_waits_for_a_busy_node_names_the_drained_one_and_reserves_only_the_busy_one():
    a = drained(make_node("a").gpus(1))
    b = make_node("b").gpus(1).held(0)
    running = [make_job("r1").est(600).running_on("b", 0, started_s_ago=60)]
    plan = plan_of([make_job("j1").gpus(1)], [a, b], running)
    v = verdict(plan, "j1")
    assert v.code == Code.NO_FIT_NOW and v.reason.startswith("a is drained: disk swap; needs 1xGPU")
    assert "best node b has 0 of 1 matching GPUs free" in v.reason
    assert [(r.job_id, r.node) for r in plan.reservations] == [("j1", "b")]


def test_no_reservation_lands_on_a_drained_node_whose_jobs_end_first():
    a = drained(make_node("a").gpus(1).held(0))
    b = make_node("b").gpus(1).held(0)
    running = [make_job("ra").est(60).running_on("a", 0, started_s_ago=30),
               make_job("rb").est(6000).running_on("b", 0, started_s_ago=30)]
    plan = plan_of([make_job("j1").gpus(1)], [a, b], running)
    assert [(r.job_id, r.node) for r in plan.reservations] == [("j1", "b")]


def test_no_preemption_makes_room_on_a_drained_node():
    a = drained(make_node("a").gpus(1).held(0))
    b = make_node("b").gpus(1).held(0)
    running = [make_job("low").priority("low").running_on("a", 0, started_s_ago=3600),
               make_job("top").priority("critical").running_on("b", 0, started_s_ago=3600)]
    plan = plan_of([make_job("urgent").gpus(1).priority("critical")], [a, b], running)
    assert not plan.preemptions and not plan.placements
    assert verdict(plan, "urgent").reason.startswith("a is draining: disk swap; ")
    undrained = plan_of([make_job("urgent").gpus(1).priority("critical")], [replace(a, drained=None), b], running)
    assert [p.job_id for p in undrained.preemptions] == ["low"]  # the same cluster, not drained


def test_no_gang_rank_on_a_drained_node():
    gang = make_job("g").gpus(4)._set(nodes=2, gpus_per_node=2)
    nodes = [drained(make_node("a").gpus(2)), make_node("b").gpus(2), make_node("c").gpus(2)]
    plan = plan_of([gang], nodes)
    p = plan.placements[0]
    assert [p.node, *(n for n, _ in p.extra)] == ["b", "c"]
    plan = plan_of([gang], nodes[:2])
    assert not plan.placements
    assert "a is drained: disk swap" in verdict(plan, "g").reason


def test_running_jobs_on_a_drained_node_still_count_for_their_users_share():
    a = drained(make_node("a").gpus(2).held(0, 1))
    running = [make_job("r").user("alice").running_on("a", 0, 1, started_s_ago=60)]
    pending = [make_job("j_alice").user("alice").gpus(1), make_job("j_bob").user("bob").gpus(1)]
    plan = plan_of(pending, [a, make_node("b").gpus(1)], running)
    assert [p.job_id for p in plan.placements] == ["j_bob"]  # alice holds two GPUs already


def test_arrivals_between_full_cycles_keep_off_a_drained_node():
    backlog = Backlog(PolicyConfig())
    nodes = (drained(make_node("a").gpus(1)), make_node("b").gpus(1).obj())
    _, c = plan_cycle(Snapshot(backlog, (), nodes), NOW_MS, PolicyConfig())
    arrivals = [make_job("j1").gpus(1).pending(), make_job("j2").gpus(1).pending()]
    for p in arrivals:  # as the scheduler's mirror takes them
        backlog.add(p)
    plan = place_arrivals(c, arrivals, NOW_MS)
    assert [(p.job_id, p.node) for p in plan.placements] == [("j1", "b")]
    assert verdict(plan, "j2").reason.startswith("a is drained: disk swap; ")


def test_a_gang_that_waits_for_a_drained_node_is_described_as_a_gang():
    """QA: `--nodes 2 --gpus-per-node 1` with one of two nodes drained said "needs 2xGPU, 1 CPU; no node that
    takes jobs could hold it", as if it asked for 2 GPUs on one node."""
    gang = make_job("g").gpus(2)._set(nodes=2, gpus_per_node=1)
    plan = plan_of([gang], [drained(make_node("a").gpus(2)), make_node("b").gpus(2)])
    v = verdict(plan, "g")
    assert v.code == Code.NO_FIT_NOW
    assert v.reason == ("a is drained: disk swap; needs 2 nodes with 1 free GPUs each (one GPU type); only 1 node "
                        "that takes jobs could hold its share"), v.reason
