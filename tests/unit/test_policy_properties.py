"""Properties of schedule() over random snapshots (hypothesis).

A snapshot is a few nodes with random GPU families, counts and memory, some GPUs
(and CPUs and memory) held by running jobs with random estimates -- some of them
sharing jobs, which leave their GPU shared rather than taken -- and a random queue of
pending jobs with random constraints, priorities, estimates, waits (some past their
class's starvation bound) and GPU sharing.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given

from dispatcher.core.plan import Code, Plan, Snapshot, Verdict
from tests.builders import NOW_MS
from tests.policy_snapshots import PROPERTY_SETTINGS, SEED, plan_for, snapshots, specs_of
from tests.policy_properties import (
    PROPERTIES,
    a_job_left_waiting_with_no_fit_now_does_not_fit_what_the_plan_leaves_free,
    a_placement_on_reserved_gpus_is_estimated_to_end_before_the_reservation_starts,
    a_shared_gpu_never_holds_more_memory_than_it_has,
    every_pending_job_is_either_placed_or_has_exactly_one_verdict,
    every_placement_has_the_gpu_count_type_and_memory_the_job_asked_for,
    every_score_is_within_0_and_100,
    lower_score_goes_to_jobs_that_fitted_at_the_start_and_no_fit_now_to_those_that_did_not,
    no_fit_ever_is_given_exactly_to_jobs_no_node_could_ever_hold,
    no_gpu_is_placed_twice_and_no_placement_uses_a_held_gpu,
    placed_cpus_and_memory_never_exceed_what_each_node_has_free,
    reservations_hold_free_or_releasing_gpus_that_fit_their_job,
    schedule_does_not_depend_on_the_order_of_pending_jobs_and_nodes,
    schedule_is_deterministic,
    starving_jobs_are_ranked_before_every_other_job_and_told_so,
)


@PROPERTY_SETTINGS
@given(snapshots())
def test_every_plan_keeps_every_policy_property(snap):
    plan = plan_for(snap)
    for prop in PROPERTIES:
        try:
            prop(snap, plan)
        except AssertionError as e:
            raise AssertionError(f"{prop.__name__}: {e}") from None


@pytest.mark.parametrize("prop", PROPERTIES, ids=[p.__name__ for p in PROPERTIES])
def test_each_property_holds_on_the_seed_snapshot(prop):
    """Each property on its own, on a fixed snapshot, so a broken check shows up by name."""
    prop(SEED, plan_for(SEED))


# --- the checks themselves catch what they claim to ------------------------------------
# The seed plan: JOB-004 on n2 GPU 0 (the 80 GB A100), JOB-001 on n1 GPU 0, JOB-005
# (CPU-only, 4 CPUs) on n2 (whose GPUs are then all busy), JOB-003 on n1 GPU 2 (V100);
# JOB-006 NO_FIT_EVER; JOB-002 LOWER_SCORE (both n1 A100s were free at the start) with
# a reservation of n1 GPUs (0, 1) from +15 s. The breakages below find the jobs by id in
# the plan, so they break their property wherever the policy puts them.

def _moved(plan: Plan, job_id: str, **kw) -> Plan:
    return replace(plan, placements=tuple(replace(p, **kw) if p.job_id == job_id else p for p in plan.placements))


def _one_cpu_fewer_free_than_placed(snap: Snapshot, plan: Plan) -> Snapshot:
    """The snapshot with the node of JOB-005 (the 4-CPU job) given one CPU fewer than its placements use."""
    specs = specs_of(snap)
    node = next(p.node for p in plan.placements if p.job_id == "JOB-005")
    used = sum(specs[p.job_id].cpus for p in plan.placements if p.node == node)
    return replace(snap, nodes=tuple(replace(v, free_cpus=used - 1) if v.name == node else v for v in snap.nodes))


def _one_gb_less_free_than_placed(snap: Snapshot, plan: Plan) -> tuple[Snapshot, Plan]:
    """JOB-005 given 8 GB of RAM, and its node 1 GB less free than that."""
    snap = replace(snap, pending=tuple(replace(p, spec=replace(p.spec, mem_gb=8.0)) if p.spec.id == "JOB-005" else p
                                       for p in snap.pending))
    node = next(p.node for p in plan.placements if p.job_id == "JOB-005")
    return replace(snap, nodes=tuple(replace(v, free_mem_gb=7.0) if v.name == node else v for v in snap.nodes)), plan


def _sharing(snap: Snapshot, job_id: str) -> Snapshot:
    """The snapshot with `job_id` a sharing job."""
    return replace(snap, pending=tuple(replace(p, spec=replace(p.spec, share=True)) if p.spec.id == job_id else p
                                       for p in snap.pending))


def _job_001_shares_a_gpu_past_its_memory(snap: Snapshot, plan: Plan) -> tuple[Snapshot, Plan]:
    """JOB-001 (20 GB) made a sharing job on n1 GPU 0 (40 GB), which sharing jobs already fill with 25 GB."""
    snap = _sharing(snap, "JOB-001")
    snap = replace(snap, nodes=tuple(replace(v, free_gpus=tuple(g for g in v.free_gpus if g != 0), shared=((0, 25.0),))
                                     if v.name == "n1" else v for v in snap.nodes))
    return snap, _moved(plan, "JOB-001", node="n1", gpus=(0,), share=True)


def _job_002_starving(snap: Snapshot, plan: Plan) -> tuple[Snapshot, Plan]:
    """JOB-002 (low) waiting 145 h, past the low bound of 6 days, with the plan made for that snapshot."""
    snap = replace(snap, pending=tuple(replace(p, spec=replace(p.spec, submit_ms=NOW_MS - 145 * 3600 * 1000))
                                       if p.spec.id == "JOB-002" else p for p in snap.pending))
    return snap, plan_for(snap)


def _starving_job_002_ranked_last(snap: Snapshot, plan: Plan) -> tuple[Snapshot, Plan]:
    snap, plan = _job_002_starving(snap, plan)   # it starts on n1 GPUs (0, 1), at rank 1
    return snap, _moved(plan, "JOB-002", rank=99)


def _starving_job_002_not_told(snap: Snapshot, plan: Plan) -> tuple[Snapshot, Plan]:
    snap, plan = _job_002_starving(snap, plan)
    return snap, _moved(plan, "JOB-002", reason="rank 1: made up")


def _lower_score_for_job_006(snap: Snapshot, plan: Plan) -> Plan:
    """JOB-006 (an H100 job no node has) judged LOWER_SCORE instead of NO_FIT_EVER."""
    return replace(plan, verdicts=tuple(replace(v, code=Code.LOWER_SCORE) if v.job_id == "JOB-006" else v
                                        for v in plan.verdicts))


BROKEN = [
    (no_gpu_is_placed_twice_and_no_placement_uses_a_held_gpu,
     lambda s, p: (s, _moved(p, "JOB-003", gpus=(0,)))),                      # n1 GPU 0 twice
    (no_gpu_is_placed_twice_and_no_placement_uses_a_held_gpu,
     lambda s, p: (s, _moved(p, "JOB-004", gpus=(1,)))),                      # n2 GPU 1 is held by R
    (no_gpu_is_placed_twice_and_no_placement_uses_a_held_gpu,                 # a sharing job beside an exclusive one
     lambda s, p: (_sharing(s, "JOB-003"), _moved(p, "JOB-003", node="n1", gpus=(0,), share=True))),
    (a_shared_gpu_never_holds_more_memory_than_it_has,
     _job_001_shares_a_gpu_past_its_memory),                                  # 25 + 20 GB on a 40 GB GPU
    (a_shared_gpu_never_holds_more_memory_than_it_has,
     lambda s, p: (s, _moved(p, "JOB-003", share=True))),                     # shared, but JOB-003 does not share
    (placed_cpus_and_memory_never_exceed_what_each_node_has_free,
     lambda s, p: (_one_cpu_fewer_free_than_placed(s, p), p)),                # JOB-005's node: 1 CPU short
    (placed_cpus_and_memory_never_exceed_what_each_node_has_free,
     _one_gb_less_free_than_placed),                                          # JOB-005's node: 1 GB short
    (every_placement_has_the_gpu_count_type_and_memory_the_job_asked_for,
     lambda s, p: (s, _moved(p, "JOB-003", gpus=(1,)))),                      # a V100 job on an A100
    (every_placement_has_the_gpu_count_type_and_memory_the_job_asked_for,
     lambda s, p: (s, _moved(p, "JOB-001", gpus=(0, 1)))),                    # two GPUs for a one-GPU job
    (every_pending_job_is_either_placed_or_has_exactly_one_verdict,
     lambda s, p: (s, replace(p, verdicts=p.verdicts[1:]))),                  # JOB-006 forgotten
    (every_pending_job_is_either_placed_or_has_exactly_one_verdict,
     lambda s, p: (s, replace(p, verdicts=p.verdicts + p.verdicts[:1]))),     # JOB-006 judged twice
    (no_fit_ever_is_given_exactly_to_jobs_no_node_could_ever_hold,
     lambda s, p: (s, replace(p, verdicts=tuple(replace(v, code=Code.NO_FIT_EVER) for v in p.verdicts)))),
    (schedule_is_deterministic,
     lambda s, p: (s, replace(p, placements=p.placements[::-1]))),
    (schedule_does_not_depend_on_the_order_of_pending_jobs_and_nodes,
     lambda s, p: (s, replace(p, reservations=()))),
    (every_score_is_within_0_and_100,
     lambda s, p: (s, _moved(p, "JOB-004", score=100.5))),
    (a_placement_on_reserved_gpus_is_estimated_to_end_before_the_reservation_starts,
     lambda s, p: (s, _moved(p, "JOB-003", gpus=(1,)))),                      # 30 s on GPU 1, reserved from +15 s
    (reservations_hold_free_or_releasing_gpus_that_fit_their_job,
     lambda s, p: (s, replace(p, reservations=tuple(replace(r, gpus=(2, 3)) for r in p.reservations)))),
    (a_job_left_waiting_with_no_fit_now_does_not_fit_what_the_plan_leaves_free,
     lambda s, p: (s, replace(p, placements=tuple(x for x in p.placements if x.job_id != "JOB-005"),
                              verdicts=p.verdicts + (Verdict("JOB-005", Code.NO_FIT_NOW, "made up"),)))),
    (a_job_left_waiting_with_no_fit_now_does_not_fit_what_the_plan_leaves_free,
     lambda s, p: (s, replace(p, placements=tuple(x for x in p.placements if x.job_id != "JOB-005"),
                              verdicts=p.verdicts + (Verdict("JOB-005", Code.LOWER_SCORE, "made up"),)))),
    (lower_score_goes_to_jobs_that_fitted_at_the_start_and_no_fit_now_to_those_that_did_not,
     lambda s, p: (s, _lower_score_for_job_006(s, p))),                       # JOB-006 never fitted
    (lower_score_goes_to_jobs_that_fitted_at_the_start_and_no_fit_now_to_those_that_did_not,
     lambda s, p: (s, replace(p, verdicts=tuple(replace(v, code=Code.NO_FIT_NOW) if v.job_id == "JOB-002" else v
                                                for v in p.verdicts)))),      # JOB-002 fitted n1's A100s
    (starving_jobs_are_ranked_before_every_other_job_and_told_so, _starving_job_002_ranked_last),
    (starving_jobs_are_ranked_before_every_other_job_and_told_so, _starving_job_002_not_told),
]


@pytest.mark.parametrize("prop, breakage", BROKEN, ids=[f"{prop.__name__}_{i}" for i, (prop, _) in enumerate(BROKEN)])
def test_each_property_rejects_a_plan_that_breaks_it(prop, breakage):
    snap, plan = breakage(SEED, plan_for(SEED))
    with pytest.raises(AssertionError):
        prop(snap, plan)
