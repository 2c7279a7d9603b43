"""Gangs in the policy: a job asked with --nodes N --gpus-per-node G on N distinct nodes (best fit, one GPU
family), its reservation while blocked and the jobs backfilled around it, when it can never fit, and the
auto gang of whole nodes the simulator's traces ask for (a job larger than any node)."""

from __future__ import annotations

from dataclasses import replace

from dispatcher.core.plan import Code
from dispatcher.policy import PolicyConfig
from tests.builders import NOW_MS, make_job, make_node, plan_of


def gang(job_id: str, nodes: int, per_node: int, *types: str, same_type: bool = True):
    job = make_job(job_id).gpus(nodes * per_node, *types)
    return job._set(nodes=nodes, gpus_per_node=per_node, same_type=same_type)


def pieces(plan, job_id: str) -> list[tuple[str, tuple[int, ...]]]:
    """Rank 0 (Placement.node, .gpus), then ranks 1.. (Placement.extra), in rank order."""
    p = next(p for p in plan.placements if p.job_id == job_id)
    return [(p.node, p.gpus), *p.extra]


def verdict(plan, job_id: str):
    return next(v for v in plan.verdicts if v.job_id == job_id)


def mixed_cluster():
    """2 A100 nodes and 2 V100 nodes: a1 4 of 8 free, a2 8 free, v1 4 of 4 free, v2 2 of 4 free."""
    return [make_node("a1").gpus(8, "A100", 40).held(0, 1, 2, 3), make_node("a2").gpus(8, "A100", 40),
            make_node("v1").gpus(4, "V100", 16), make_node("v2").gpus(4, "V100", 16).held(0, 1)]


def test_a_gang_of_one_type_takes_nodes_of_one_family_best_fit_ranks_in_name_order():
    plan = plan_of([gang("g", 2, 4)], mixed_cluster())
    assert pieces(plan, "g") == [("a1", (4, 5, 6, 7)), ("a2", (0, 1, 2, 3))]  # only the A100s have two such nodes
    assert "a gang on 2 nodes (a1+a2), 4 GPUs each, best fit (4 GPUs left free on them)" in plan.placements[0].reason


def test_a_gang_that_may_mix_types_takes_the_tightest_nodes_of_any_family():
    plan = plan_of([gang("g", 2, 4, same_type=False)], mixed_cluster())
    assert pieces(plan, "g") == [("a1", (4, 5, 6, 7)), ("v1", (0, 1, 2, 3))]  # each is left with nothing free


def test_type_and_memory_constraints_hold_on_every_node():
    plan = plan_of([gang("g", 2, 2, "V100", same_type=False)], mixed_cluster())
    assert pieces(plan, "g") == [("v1", (0, 1)), ("v2", (2, 3))]
    plan = plan_of([gang("g", 2, 2, same_type=False)._set(gpu_mem_gb=30)], mixed_cluster())
    assert [n for n, _ in pieces(plan, "g")] == ["a1", "a2"]


def test_best_fit_prefers_the_nodes_left_with_the_fewest_free_gpus():
    nodes = [make_node("n1").gpus(8), make_node("n2").gpus(8).held(0, 1, 2, 3), make_node("n3").gpus(8).held(0, 1)]
    plan = plan_of([gang("g", 2, 4)], nodes)
    assert pieces(plan, "g") == [("n2", (4, 5, 6, 7)), ("n3", (2, 3, 4, 5))]
    assert plan.placements[0].terms["fit"] == round(100 * (1 - 2 / 16), 3)


def test_cpus_and_memory_are_asked_of_each_node_and_counted_on_each():
    nodes = [make_node("n1").gpus(4).cpus(8), make_node("n2").gpus(4).cpus(4), make_node("n3").gpus(4).cpus(8)]
    plan = plan_of([gang("g", 2, 4).cpus(6), make_job("cpu").cpus(3)], nodes)
    assert [n for n, _ in pieces(plan, "g")] == ["n1", "n3"]  # n2 has 4 CPUs, not 6
    assert [p.node for p in plan.placements if p.job_id == "cpu"] == ["n2"]  # n1 and n3 are left 2 each


def test_a_blocked_gang_holds_its_nodes_and_a_short_job_backfills_around_it():
    busy = make_job("busy").gpus(8).est(3600)
    nodes = [make_node("n1").gpus(8).held(*range(8)), make_node("n2").gpus(8)]
    pending = [gang("g", 2, 8).priority("high"), make_job("short").gpus(2).est(600), make_job("long").gpus(2)]
    plan = plan_of(pending, nodes, [busy.running_on("n1", *range(8))])
    assert {(r.node, r.gpus, r.start_ms) for r in plan.reservations if r.job_id == "g"} == {
        ("n1", tuple(range(8)), NOW_MS + 3_600_000), ("n2", tuple(range(8)), NOW_MS + 3_600_000)}
    v = verdict(plan, "g")
    assert v.code == Code.NO_FIT_NOW
    assert v.reason == ("needs 2 nodes with 8 free GPUs each (one GPU type); 1 has them now; n1 frees them "
                        "in ~60 min; holds n1, n2 for it, to start in ~60 min; a gang preempts no job: it waits for "
                        "GPUs to come free")  # (the high gang above a normal job: as a one-node job would not)
    short = next(p for p in plan.placements if p.job_id == "short")
    assert short.node == "n2" and "backfilled" in short.reason
    assert verdict(plan, "long").code == Code.RESERVED  # no estimate: it may not use what the gang holds


def test_the_gangs_reservation_counts_against_the_reservations_a_cycle_gives():
    nodes = [make_node("n1").gpus(8).held(*range(8)), make_node("n2").gpus(8)]
    running = [make_job("busy").gpus(8).est(3600).running_on("n1", *range(8))]
    plan = plan_of([gang("g", 2, 8)], nodes, running, replace(PolicyConfig(), reservations=0))
    assert not plan.reservations
    assert verdict(plan, "g").reason == "needs 2 nodes with 8 free GPUs each (one GPU type); 1 has them now"


def test_a_gang_placed_whole_or_not_at_all_leaves_every_node_free_when_it_waits():
    nodes = [make_node("n1").gpus(4), make_node("n2").gpus(4).held(0)]
    plan = plan_of([gang("g", 2, 4), make_job("one").gpus(1).est(60)], nodes)
    assert verdict(plan, "g").code == Code.NO_FIT_NOW and "1 has them now" in verdict(plan, "g").reason
    assert [p.job_id for p in plan.placements] == ["one"]


def test_a_gang_that_could_never_fit_says_why():
    nodes = [make_node("a1").gpus(8, "A100"), make_node("v1").gpus(8, "V100")]
    v = verdict(plan_of([gang("g", 2, 8)], nodes), "g")
    assert (v.code, v.reason) == (Code.NO_FIT_EVER, "needs 2 nodes with 8 free GPUs each (one GPU type); only 1 "
                                                    "live node could ever hold that")
    assert pieces(plan_of([gang("g", 2, 8, same_type=False)], nodes), "g") == [("a1", tuple(range(8))),
                                                                               ("v1", tuple(range(8)))]
    v = verdict(plan_of([gang("g", 2, 4).cpus(64)], nodes), "g")  # 32 CPUs on each node
    assert v.code == Code.NO_FIT_EVER and "only 0 live nodes" in v.reason


def test_with_gangs_off_a_gang_never_fits_and_an_auto_gang_neither():
    nodes = [make_node("n1").gpus(8), make_node("n2").gpus(8)]
    off = replace(PolicyConfig(), gang_across_nodes=False)
    plan = plan_of([gang("g", 2, 4), make_job("big").gpus(16)], nodes, config=off)
    assert verdict(plan, "g").code == Code.NO_FIT_EVER
    assert verdict(plan, "g").reason.endswith("this policy runs no gangs across nodes (gang_across_nodes is off)")
    assert verdict(plan, "big").code == Code.NO_FIT_EVER
    plan = plan_of([gang("g", 2, 4), make_job("big").gpus(16)], nodes)
    assert {p.job_id for p in plan.placements} == {"g"} and verdict(plan, "big").code == Code.NO_FIT_NOW


def test_one_node_asked_with_nodes_1_never_becomes_an_auto_gang():
    nodes = [make_node("n1").gpus(8), make_node("n2").gpus(8)]
    v = verdict(plan_of([make_job("one").gpus(16)._set(nodes=1, gpus_per_node=16)], nodes), "one")
    assert v.code == Code.NO_FIT_EVER


def test_an_auto_gang_takes_whole_nodes_in_name_order_as_the_simulator_always_did():
    nodes = [make_node(f"n{i}").gpus(8) for i in range(1, 5)]
    nodes[1] = nodes[1].held(0)
    plan = plan_of([make_job("big").gpus(16)], nodes)
    assert pieces(plan, "big") == [("n1", tuple(range(8))), ("n3", tuple(range(8)))]
    assert plan.placements[0].reason.endswith("a gang on 2 whole nodes (n1+n3)")  # (rank 0's node first)


def test_an_auto_gang_keeps_to_one_family_unless_it_may_mix():
    nodes = [make_node("a1").gpus(8, "A100"), make_node("a2").gpus(8, "A100").held(0),
             make_node("v1").gpus(8, "V100"), make_node("v2").gpus(8, "V100")]
    assert [n for n, _ in pieces(plan_of([make_job("big").gpus(16)], nodes), "big")] == ["v1", "v2"]
    mixed = make_job("big").gpus(16)._set(same_type=False)
    assert [n for n, _ in pieces(plan_of([mixed], nodes), "big")] == ["a1", "v1"]


def test_a_running_gang_is_never_shrunk_to_make_room():
    spec = make_job("g").gpus(8).priority("low")._set(nodes=2, gpus_per_node=4, min_gpus=2, checkpointable=True)
    running = [spec.running_on("n1", 0, 1, 2, 3, started_s_ago=600), spec.running_on("n2", 0, 1, 2, 3,
                                                                                     started_s_ago=600)]
    nodes = [make_node("n1").gpus(4).held(0, 1, 2, 3), make_node("n2").gpus(4).held(0, 1, 2, 3)]
    plan = plan_of([make_job("urgent").gpus(2).priority("critical")], nodes, running)
    assert [(p.job_id, p.mode) for p in plan.preemptions] == [("g", "graceful")]
    alone = make_job("e").gpus(4).priority("low")._set(min_gpus=2, checkpointable=True)
    plan = plan_of([make_job("urgent").gpus(2).priority("critical")], nodes[:1],
                   [alone.running_on("n1", 0, 1, 2, 3, started_s_ago=600)])
    assert [(p.job_id, p.mode) for p in plan.preemptions] == [("e", "shrink")]  # one node: shrunk, as before


def test_a_session_or_a_mixed_node_is_never_told_whole_nodes_could_hold_it():
    from tests.builders import make_job, make_node, plan_of, verdict_of

    nodes = [make_node(f"n{i}").gpus(2) for i in range(3)]  # 6 GPUs on whole nodes: a batch job of 4 runs as a gang
    session = make_job("s").gpus(4)._set(interactive="shell", nodes=1, gpus_per_node=4)
    reason = verdict_of(plan_of([session], nodes), "s").reason  # (it said "nor whole nodes together: 6 GPUs")
    assert reason.endswith("matching GPUs, 32 CPUs, 256 GB RAM); a session runs on one node"), reason
    mixed = [make_node("vm").gpus(4, "A100").gpus(2, "V100", 16.0)]
    reason = verdict_of(plan_of([make_job("v").gpus(3, "V100")], mixed), "v").reason  # (it said "0 GPUs on all")
    assert reason.endswith("vm with 2 matching GPUs, 32 CPUs, 256 GB RAM), nor whole nodes together: no node has "
                           "only GPUs it may use"), reason
