"""Table-driven tests of the score terms (policy/score.py), the fit helpers (policy/fit.py) and
how the terms combine (policy/score.py `weighted`: the weighted mean over all weights).

Pure: no Redis, no clock. Every expected number has its arithmetic next to it.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatcher.core.plan import NodeView
from dispatcher.core.model import GpuInfo
from dispatcher.policy.config import WEIGHT_TERMS, PolicyConfig
from dispatcher.core.gpuspec import gpu_family_matches
from dispatcher.policy.fit import GpuMemo, choose_gpus, fit_score, fits_ever, gpu_usable
from dispatcher.policy.score import weighted
from dispatcher.policy.score import dominant_share, fairness_term, priority_term, remaining_term, wait_term
from tests.builders import make_job, make_node


def close(got: float, want: float) -> bool:
    return got == pytest.approx(want, abs=1e-3)


# --- priority_term ---------------------------------------------------------------------

@pytest.mark.parametrize("rank, want", [
    (0, 0.0),        # low:      100 * 0/3
    (1, 33.333),     # normal:   100 * 1/3
    (2, 66.667),     # high:     100 * 2/3
    (3, 100.0),      # critical: 100 * 3/3
], ids=["low_is_0", "normal_is_a_third", "high_is_two_thirds", "critical_is_100"])
def test_priority_term_rises_linearly_with_the_class_rank(rank, want):
    got = priority_term(rank)
    assert close(got, want), f"priority_term({rank}) = {got}, want {want}"


def test_priority_term_uses_the_rank_of_the_job_spec():
    ranks = {p: make_job("j").priority(p).obj().rank for p in ("low", "normal", "high", "critical")}
    assert ranks == {"low": 0, "normal": 1, "high": 2, "critical": 3}, f"ranks are {ranks}"


# --- wait_term -------------------------------------------------------------------------

@pytest.mark.parametrize("wait_s, horizon_s, want", [
    (0, 7200, 0.0),            # 100 * min(1, 0/7200)
    (30, 7200, 0.417),         # 100 * 30/7200 = 0.4167
    (3600, 7200, 50.0),        # 100 * 3600/7200
    (7200, 7200, 100.0),       # 100 * min(1, 1)
    (14400, 7200, 100.0),      # 100 * min(1, 2) -> capped at 100
    (10**9, 7200, 100.0),      # capped, however long
    (-60, 7200, 0.0),          # a negative wait (clock skew) counts as 0
    (60, 0, 100.0),            # no horizon: every job is fully aged
    (60, -5, 100.0),           # a negative horizon acts like none
], ids=["no_wait_is_0", "half_a_minute_is_small", "half_the_horizon_is_50", "the_horizon_is_100",
        "twice_the_horizon_is_capped_at_100", "a_huge_wait_is_capped_at_100", "a_negative_wait_counts_as_0",
        "a_zero_horizon_gives_100", "a_negative_horizon_gives_100"])
def test_wait_term_ages_linearly_and_caps_at_the_horizon(wait_s, horizon_s, want):
    got = wait_term(wait_s, horizon_s)
    assert close(got, want), f"wait_term({wait_s}, {horizon_s}) = {got}, want {want}"


# --- remaining_term --------------------------------------------------------------------

@pytest.mark.parametrize("est_s, ref_s, want", [
    (None, 3600, 50.0),        # unknown estimate: as if est == ref -> 100 * 3600/7200
    (0, 3600, 100.0),          # 100 * 3600/(3600 + 0)
    (15, 3600, 99.585),        # 100 * 3600/3615
    (3600, 3600, 50.0),        # 100 * 3600/7200
    (10800, 3600, 25.0),       # 100 * 3600/14400
    (-30, 3600, 100.0),        # a negative estimate is clamped to 0 -> 100 * 3600/3600
], ids=["unknown_estimate_is_50", "zero_estimate_is_100", "a_short_job_is_near_100",
        "the_reference_time_is_50", "three_times_the_reference_is_25", "a_negative_estimate_counts_as_0"])
def test_remaining_term_favours_short_jobs(est_s, ref_s, want):
    got = remaining_term(est_s, ref_s)
    assert close(got, want), f"remaining_term({est_s}, {ref_s}) = {got}, want {want}"


def test_remaining_term_falls_as_the_estimate_grows():
    ests = [0, 1, 60, 600, 3600, 36000, 360000]
    got = [remaining_term(e, 3600) for e in ests]
    assert got == sorted(got, reverse=True), f"remaining_term over {ests} = {got}, not falling"


# --- fairness_term and dominant_share --------------------------------------------------

@pytest.mark.parametrize("share, want", [
    (0.0, 100.0),      # 100 * (1 - 0)
    (0.25, 75.0),      # 100 * (1 - 0.25)
    (1.0, 0.0),        # 100 * (1 - 1)
    (1.5, 0.0),        # share clamped to 1 -> 100 * (1 - 1)
    (-0.2, 100.0),     # share clamped to 0 -> 100 * (1 - 0)
], ids=["no_share_is_100", "a_quarter_share_is_75", "the_whole_cluster_is_0",
        "an_overfull_share_is_clamped_to_0", "a_negative_share_is_clamped_to_100"])
def test_fairness_term_falls_with_the_dominant_share(share, want):
    got = fairness_term(share)
    assert close(got, want), f"fairness_term({share}) = {got}, want {want}"


@pytest.mark.parametrize("used, total, want", [
    ((2, 2, 0), (8, 32, 256), 0.25),       # max(2/8, 2/32, 0/256): GPUs dominate
    ((1, 8, 0), (8, 32, 256), 0.25),       # max(1/8, 8/32, 0/256): CPUs dominate
    ((0, 0, 128), (8, 32, 256), 0.5),      # max(0, 0, 128/256): memory dominates
    ((0, 0, 0), (8, 32, 256), 0.0),        # nothing used
    ((3, 1, 100), (8, 32, 0), 0.375),      # the cluster has no memory: ignored -> max(3/8, 1/32)
    ((0, 4, 0), (0, 32, 256), 0.125),      # a GPU-less cluster: GPUs ignored -> 4/32
    ((1, 1, 1), (0, 0, 0), 0.0),           # an empty cluster: default 0
], ids=["gpu_heavy_user", "cpu_heavy_user", "memory_heavy_user", "idle_user",
        "resources_the_cluster_lacks_are_ignored", "a_gpu_less_cluster_ignores_gpus", "an_empty_cluster_gives_0"])
def test_dominant_share_is_the_largest_used_fraction(used, total, want):
    got = dominant_share(used, total)
    assert close(got, want), f"dominant_share({used}, {total}) = {got}, want {want}"


# --- gpu_family_matches ----------------------------------------------------------------

@pytest.mark.parametrize("wanted, gpu_name, want", [
    ("A100", "NVIDIA A100-SXM4-40GB", True),
    ("a100", "NVIDIA A100-SXM4-40GB", True),
    ("A100", "nvidia a100-sxm4-40gb", True),
    ("A100-80GB", "NVIDIA A100-SXM4-40GB", False),
    ("A100-80GB", "NVIDIA A100-SXM4-80GB", True),
    ("A100 80GB", "NVIDIA A100 80GB PCIe", True),
    ("rtx 4090", "NVIDIA GeForce RTX 4090", True),
    ("RTX-4090", "NVIDIA GeForce RTX 4090", True),
    ("rtx 4080", "NVIDIA GeForce RTX 4090", False),
    ("V100", "NVIDIA A100-SXM4-40GB", False),
    ("V100", "Tesla V100-SXM2-16GB", True),
    ("A10", "NVIDIA A100-SXM4-40GB", False),
    ("H100", "NVIDIA H100 80GB HBM3", True),
    ("", "NVIDIA A100-SXM4-40GB", False),
    ("NVIDIA", "NVIDIA A100-SXM4-40GB", False),
], ids=["a100_matches_a100_sxm4_40gb", "matching_is_case_insensitive_in_the_wanted_name",
        "matching_is_case_insensitive_in_the_gpu_name", "a100_80gb_does_not_match_a_40gb_a100",
        "a100_80gb_matches_an_80gb_a100", "tokens_may_be_separated_by_spaces", "rtx_4090_matches_the_geforce_name",
        "a_dash_separates_tokens_too", "rtx_4080_does_not_match_rtx_4090",
        "v100_does_not_match_a100", "v100_matches_a_tesla_v100", "a10_is_a_token_not_a_prefix_of_a100",
        "h100_matches_h100_hbm3", "an_empty_name_matches_nothing", "the_vendor_name_alone_matches_nothing"])
def test_gpu_family_matches_when_every_wanted_token_is_in_the_gpu_name(wanted, gpu_name, want):
    got = gpu_family_matches(wanted, gpu_name)
    assert got is want, f"gpu_family_matches({wanted!r}, {gpu_name!r}) = {got}, want {want}"


# --- gpu_usable, fits_ever and choose_gpus ----------------------------------------------

MIXED = make_node("n1").gpus(2, "A100", 40).gpus(2, "V100", 16).cpus(8).mem(64).obj()  # 0,1 A100 40; 2,3 V100 16


@pytest.mark.parametrize("job, want", [
    (make_job("j").gpus(1, "A100"), [0, 1]),
    (make_job("j").gpus(1, "V100"), [2, 3]),
    (make_job("j").gpus(1, "A100", "V100"), [0, 1, 2, 3]),
    (make_job("j").gpus(1), [0, 1, 2, 3]),
    (make_job("j").gpus(1, mem_gb=30), [0, 1]),
    (make_job("j").gpus(1, mem_gb=16), [0, 1, 2, 3]),
    (make_job("j").gpus(1, "V100", mem_gb=30), []),
    (make_job("j").gpus(1, "H100"), []),
], ids=["a100_job_uses_the_a100s", "v100_job_uses_the_v100s", "either_family_uses_both", "no_preference_uses_all",
        "30gb_job_skips_the_16gb_gpus", "a_16gb_need_fits_a_16gb_gpu_exactly", "v100_with_30gb_uses_none",
        "h100_job_uses_none"])
def test_gpu_usable_applies_type_and_memory_as_hard_constraints(job, want):
    got = [g.index for g in MIXED.gpus if gpu_usable(job.obj(), MIXED, g.index)]
    assert got == want, f"usable GPUs for {job.obj().gpu_types} >= {job.obj().gpu_mem_gb} GB: {got}, want {want}"


@pytest.mark.parametrize("job, want", [
    (make_job("j").gpus(2, "A100"), True),
    (make_job("j").gpus(3, "A100"), False),
    (make_job("j").gpus(4), True),
    (make_job("j").gpus(0).cpus(8), True),
    (make_job("j").gpus(0).cpus(9), False),
    (make_job("j").gpus(1).mem(64), True),
    (make_job("j").gpus(1).mem(65), False),
], ids=["two_a100s_fit", "three_a100s_never_fit", "all_four_gpus_fit", "all_cpus_fit", "one_cpu_too_many",
        "all_memory_fits", "one_gb_of_memory_too_many"])
def test_fits_ever_compares_the_job_with_an_empty_node(job, want):
    got = fits_ever(job.obj(), MIXED)
    assert got is want, f"fits_ever({job.obj()}) = {got}, want {want}"


def test_one_cycle_memo_answers_as_the_plain_helpers_and_shares_a_kind_between_alike_nodes():
    twin = make_node("n2").gpus(2, "A100", 40).gpus(2, "V100", 16).cpus(8).mem(64).obj()  # MIXED's GPUs
    other = make_node("n3").gpus(4, "A100", 80).obj()
    memo = GpuMemo()
    for job in (make_job("j").gpus(1, "V100"), make_job("j").gpus(2, mem_gb=30), make_job("j").gpus(1)):
        spec = job.obj()
        for node in (MIXED, twin, other):
            want = [g.index for g in node.gpus if gpu_usable(spec, node, g.index)]
            got = memo.usable(spec, node, [g.index for g in node.gpus])
            assert got == want, f"memo.usable({spec.gpu_types}, {node.name}) = {got}, want {want}"
            assert memo.fits_ever(spec, node) is fits_ever(spec, node), f"fits_ever differs on {node.name}"
    kinds = [memo.facts(n).kind for n in (MIXED, twin, other)]
    assert kinds[0] == kinds[1] != kinds[2], f"kinds {kinds}: alike GPU lists share one, others not"
    assert not memo.facts(MIXED).alike and memo.facts(other).alike, "MIXED mixes two models, n3 does not"
    assert memo.facts(MIXED).min_mem_gb == 16, f"smallest GPU of MIXED: {memo.facts(MIXED).min_mem_gb}"


@pytest.mark.parametrize("job, candidates, want", [
    (make_job("j").gpus(1), [0, 1, 2, 3], (2,)),        # smallest memory first: V100 16 GB, lowest index
    (make_job("j").gpus(2), [0, 1, 2, 3], (2, 3)),      # both V100s
    (make_job("j").gpus(3), [0, 1, 2, 3], (0, 2, 3)),   # both V100s, then the lowest A100
    (make_job("j").gpus(1), [1, 3], (3,)),              # V100 3 (16 GB) before A100 1 (40 GB)
    (make_job("j").gpus(1), [1, 0], (0,)),              # equal memory: the lowest index
    (make_job("j").gpus(2), [0, 1, 3], (0, 1)),         # two A100s, not V100 3 and an A100
    (make_job("j").gpus(2), [1, 3], (1, 3)),            # no two of a kind: one of each
    (make_job("j").gpus(3), [0, 1, 2, 3], (0, 2, 3)),   # no three of a kind: the smallest three
], ids=["one_gpu_takes_the_smallest", "two_gpus_take_the_two_smallest", "three_gpus_spill_to_the_lowest_big_one",
        "only_the_given_candidates_are_used", "equal_memory_breaks_on_the_lowest_index",
        "two_of_a_kind_before_the_smallest_pair", "mixed_only_when_no_family_has_enough",
        "mixed_three_when_no_family_has_three"])
def test_choose_gpus_takes_the_smallest_memory_then_the_lowest_index(job, candidates, want):
    """Of one GPU family when one family among the candidates has enough (that of the smallest)."""
    got = choose_gpus(job.obj(), MIXED, candidates)
    assert got == want, f"choose_gpus(.., {candidates}) = {got}, want {want}"


# --- choose_gpus for sharing jobs ------------------------------------------------------

TWO_A100 = make_node("s2").gpus(2, "A100", 40).obj()


@pytest.mark.parametrize("mem_gb, candidates, shared_used, want", [
    (15, [0, 1], {1: 20.0}, (1,)),            # GPU 1 is already shared: (False, 40-20-15=5, 1) < (True, 25, 0)
    (15, [0, 1], {0: 10.0, 1: 20.0}, (1,)),   # both shared: the one left fullest, GPU 1 (5 GB) before GPU 0 (15 GB)
    (15, [0, 1], {0: 20.0, 1: 10.0}, (0,)),   # same, mirrored, so the index cannot be what decides
    (15, [0, 1], {}, (0,)),                   # nothing shared yet: equal, the lowest index
    (15, [0], {1: 20.0}, (0,)),               # only the given candidates are used
], ids=["an_already_shared_gpu_goes_first", "the_gpu_left_fullest_goes_first", "the_fullest_wins_whatever_its_index",
        "with_nothing_shared_the_lowest_index_wins", "only_the_given_candidates_are_used"])
def test_choose_gpus_packs_a_sharing_job_onto_the_fullest_shared_gpu(mem_gb, candidates, shared_used, want):
    job = make_job("j").gpus(1, mem_gb=mem_gb)._set(share=True).obj()
    got = choose_gpus(job, TWO_A100, candidates, shared_used)
    assert got == want, f"choose_gpus(share {mem_gb} GB, {candidates}, shared {shared_used}) = {got}, want {want}"


# --- fit_score -------------------------------------------------------------------------

FOUR_A100 = make_node("n4").gpus(4, "A100", 40).cpus(32).obj()
FOUR_V100 = make_node("v4").gpus(4, "V100", 16).cpus(32).obj()
NO_GPUS = make_node("c8").cpus(8).obj()
ONE_A100 = make_node("s1").gpus(1, "A100", 40).obj()


def _share(job):
    return job._set(share=True)


@pytest.mark.parametrize("job, node, chosen, gpus_after, cpus_after, kw, want", [
    # 100 * (0.7 * (1 - 0/4) + 0.3 * 1): fills the node, no memory need and no reference size
    (make_job("j").gpus(1), FOUR_A100, (0,), 0, 31, {}, 100.0),
    # 100 * (0.7 * (1 - 3/4) + 0.3 * 20/40) = 17.5 + 15
    (make_job("j").gpus(1, mem_gb=20), FOUR_A100, (0,), 3, 31, {}, 32.5),
    # 100 * (0.7 * (1 - 3/4) + 0.3 * 15/40) = 17.5 + 11.25
    (make_job("j").gpus(1, mem_gb=15), FOUR_A100, (0,), 3, 31, {}, 28.75),
    # 100 * (0.7 * (1 - 2/4) + 0.3 * 10/16) = 35 + 18.75
    (make_job("j").gpus(2, mem_gb=10), FOUR_V100, (0, 1), 2, 30, {}, 53.75),
    # 100 * (0.7 * (1 - 4/4) + 0.3 * 1): nothing packed (cannot happen in a plan, but bounded)
    (make_job("j").gpus(1), FOUR_A100, (0,), 4, 31, {}, 30.0),
    # a GPU bigger than asked for never lowers memory below need/size: 100 * (0.7 * 1 + 0.3 * 16/16)
    (make_job("j").gpus(1, mem_gb=16), FOUR_V100, (0,), 0, 31, {}, 100.0),
    # no stated need, smallest GPU in the cluster 16 GB: need = max(0, 16) -> 100 * (0.7 * (1 - 3/4) + 0.3 * 16/40)
    # = 17.5 + 12
    (make_job("j").gpus(1), FOUR_A100, (0,), 3, 31, {"ref_mem_gb": 16}, 29.5),
    # the same job on a 16 GB GPU that fills its node: 100 * (0.7 * 1 + 0.3 * 16/16)
    (make_job("j").gpus(1), FOUR_V100, (0,), 0, 31, {"ref_mem_gb": 16}, 100.0),
    # a need below the reference counts as the reference: max(10, 16) -> 100 * (0.7 * 1/4 + 0.3 * 16/40) = 17.5 + 12
    (make_job("j").gpus(1, mem_gb=10), FOUR_A100, (0,), 3, 31, {"ref_mem_gb": 16}, 29.5),
    # a need above the reference is the need: max(20, 16) -> 100 * (0.7 * 1/4 + 0.3 * 20/40) = 17.5 + 15
    (make_job("j").gpus(1, mem_gb=20), FOUR_A100, (0,), 3, 31, {"ref_mem_gb": 16}, 32.5),
    # CPU-only, every GPU idle: 100 * (0.7 * (1 - 24/32) + 0.3 * (1 - 4/4)) = 17.5 + 0
    (make_job("j").gpus(0).cpus(8), FOUR_A100, (), 4, 24, {}, 17.5),
    # CPU-only filling the CPUs of a node whose GPUs all idle: 100 * (0.7 * (1 - 0/32) + 0.3 * 0) -- strands 4 GPUs
    (make_job("j").gpus(0).cpus(32), FOUR_A100, (), 4, 0, {}, 70.0),
    # CPU-only, 3 of 4 GPUs busy: 100 * (0.7 * (1 - 24/32) + 0.3 * (1 - 1/4)) = 17.5 + 22.5
    (make_job("j").gpus(0).cpus(8), FOUR_A100, (), 1, 24, {}, 40.0),
    # CPU-only, every GPU busy: 100 * (0.7 * (1 - 24/32) + 0.3 * (1 - 0/4)) = 17.5 + 30
    (make_job("j").gpus(0).cpus(8), FOUR_A100, (), 0, 24, {}, 47.5),
    # CPU-only on a node without GPUs: memory part 1 -> 100 * (0.7 * (1 - 4/8) + 0.3) = 35 + 30
    (make_job("j").gpus(0).cpus(4), NO_GPUS, (), 0, 4, {}, 65.0),
    # sharing, onto a 40 GB GPU already holding 15 GB: packing (15 + 15)/40 = 0.75, memory 15/40
    # -> 100 * (0.7 * 0.75 + 0.3 * 0.375) = 52.5 + 11.25
    (_share(make_job("j").gpus(1, mem_gb=15)), ONE_A100, (0,), 0, 31, {"shared_used": {0: 15.0}}, 63.75),
    # sharing, onto a GPU nobody shares yet: packing 15/40 = 0.375 -> 100 * (0.7 * 0.375 + 0.3 * 0.375) = 26.25 + 11.25
    (_share(make_job("j").gpus(1, mem_gb=15)), ONE_A100, (0,), 0, 31, {"shared_used": {}}, 37.5),
    # sharing past the GPU's memory is clamped (cannot happen in a plan): min(1, 45/40) -> 100 * (0.7 + 0.3 * 15/40)
    (_share(make_job("j").gpus(1, mem_gb=15)), ONE_A100, (0,), 0, 31, {"shared_used": {0: 30.0}}, 81.25),
], ids=["a_gpu_job_filling_the_node_scores_100", "a_20gb_job_on_a_fresh_40gb_node", "a_15gb_job_on_a_fresh_40gb_node",
        "a_two_gpu_job_on_half_a_v100_node", "nothing_packed_leaves_only_the_memory_part",
        "an_exact_memory_fit_scores_full_memory", "no_stated_need_uses_the_smallest_gpu_of_the_cluster",
        "no_stated_need_on_the_smallest_gpu_scores_full_memory", "a_need_below_the_reference_counts_as_the_reference",
        "a_need_above_the_reference_is_the_need", "a_cpu_only_job_on_idle_gpus_gets_no_memory_part",
        "a_cpu_only_job_filling_the_cpus_beside_idle_gpus_scores_70", "a_cpu_only_job_beside_busy_gpus_scores_more",
        "a_cpu_only_job_beside_all_busy_gpus_gets_the_full_memory_part",
        "a_cpu_only_job_on_a_gpu_less_node_gets_the_full_memory_part", "a_sharing_job_packs_over_gpu_memory",
        "a_sharing_job_on_an_unshared_gpu_packs_less", "an_overfull_shared_gpu_is_clamped"])
def test_fit_score_is_70_percent_packing_and_30_percent_memory(job, node, chosen, gpus_after, cpus_after, kw, want):
    got = fit_score(job.obj(), node, chosen, gpus_after, cpus_after, **kw)
    assert close(got, want), f"fit_score(.., {kw}) = {got}, want {want}"


def test_a_cpu_only_job_fits_a_node_with_busy_gpus_better_than_one_with_idle_gpus():
    job = make_job("j").gpus(0).cpus(8).obj()
    busy = fit_score(job, FOUR_A100, (), 0, 24)   # 17.5 + 30
    idle = fit_score(job, FOUR_A100, (), 4, 24)   # 17.5 + 0
    assert busy > idle, f"beside busy GPUs {busy}, beside idle GPUs {idle}: should prefer the busy node"


@st.composite
def _fit_case(draw):
    total = draw(st.integers(0, 8))
    mem = draw(st.sampled_from([16.0, 24.0, 40.0, 80.0]))
    cpus = draw(st.integers(1, 64))
    node = NodeView("n", tuple(GpuInfo(i, f"NVIDIA A100-{mem:g}GB", mem) for i in range(total)), cpus, 256.0,
                    tuple(range(total)), cpus, 256.0)
    n = draw(st.integers(0, total))
    need = draw(st.sampled_from([0.0, 1.0, mem / 2, mem]))
    job_cpus = draw(st.integers(1, cpus))
    share = bool(n) and draw(st.booleans())
    job = make_job("j").gpus(n, mem_gb=need if n else 0.0).cpus(job_cpus)._set(share=share).obj()
    free_before = draw(st.integers(n, total))
    kw = {"ref_mem_gb": draw(st.sampled_from([0.0, 16.0, 24.0, mem]))}
    if share:
        kw["shared_used"] = {i: draw(st.sampled_from([0.0, need, mem - need])) for i in range(n)}
    return job, node, tuple(range(n)), free_before - n, cpus - job_cpus, kw


@settings(max_examples=200, deadline=None)
@given(_fit_case())
def test_fit_score_is_always_within_0_and_100(case):
    job, node, chosen, gpus_after, cpus_after, kw = case
    got = fit_score(job, node, chosen, gpus_after, cpus_after, **kw)
    assert 0.0 <= got <= 100.0, (f"fit_score({job.gpus} GPUs, share {job.share}, {gpus_after} GPUs/{cpus_after} "
                                 f"CPUs left, {kw}) = {got}")


# --- weights ---------------------------------------------------------------------------

def test_default_weights_make_one_class_step_worth_class_step_tiers_in_the_score_too():
    # the order (score) and preemption (standing = rank * class_step - tier) agree: one class step of the
    # priority term weighs as much as class_step LAS tiers of the attained term, and both outweigh the rest
    c = PolicyConfig()
    w = c.weights
    class_points = (priority_term(1) - priority_term(0)) * w["priority"]
    tier_points = 100.0 / len(c.las_thresholds_gpu_s) * w["attained"]
    assert abs(class_points - c.class_step * tier_points) < 1e-9, (class_points, tier_points, c.class_step)
    rest = 100.0 * sum(v for k, v in w.items() if k not in ("priority", "attained"))
    assert rest < class_points + tier_points, f"the other terms ({rest:.2f} points) outweigh a class and a tier"


def test_a_class_step_of_100_keeps_classes_from_crossing_whatever_the_other_terms():
    w = {"priority": 1.0, "attained": 0.2, "remaining": 0.09, "fit": 0.01, "fairness": 0.005, "wait": 0.0}
    step = priority_term(1) - priority_term(0)
    assert step * w["priority"] > 100.0 * sum(v for k, v in w.items() if k != "priority")


def test_default_weights_cover_every_score_term():
    assert set(PolicyConfig().weights) == set(WEIGHT_TERMS), f"weights {PolicyConfig().weights}, terms {WEIGHT_TERMS}"


@pytest.mark.parametrize("terms, want", [
    # every term at 100: (1.0 + 0.02 + 0.02 + 0.25 + 0.01) * 100 / 1.30 (attained has weight 0)
    ({"priority": 100, "wait": 100, "fairness": 100, "remaining": 100, "fit": 100}, 100.0),
    # every term at 0
    ({"priority": 0, "wait": 0, "fairness": 0, "remaining": 0, "fit": 0}, 0.0),
    # a term that is absent counts as 0 but its weight still divides: 100 * (1.30 - 0.01) / 1.30 = 129 / 1.30
    ({"priority": 100, "wait": 100, "fairness": 100, "remaining": 100}, 99.231),
    # priority alone: 1.0 * 33.333 / 1.30
    ({"priority": 33.333}, 25.641),
    # a term with no weight is ignored: 0.02 * 50 / 1.30 = 1 / 1.30
    ({"wait": 50, "unknown": 100}, 0.769),
], ids=["all_terms_at_100_score_100", "all_terms_at_0_score_0", "a_missing_fit_term_lowers_the_score",
        "the_class_alone", "unweighted_terms_are_ignored"])
def test_the_score_is_the_weighted_mean_over_all_weights(terms, want):
    weights = {"priority": 1.0, "wait": 0.02, "fairness": 0.02, "remaining": 0.25, "fit": 0.01, "attained": 0.0}
    got = weighted(terms, weights)
    assert close(got, want), f"weighted({terms}) = {got}, want {want}"


@pytest.mark.parametrize("priority, bound_s", [
    ("critical", 1800.0), ("high", 7200.0), ("normal", 90 * 3600.0), ("low", 6 * 86400.0),
], ids=["critical_starves_after_30_minutes", "high_after_2_hours", "normal_after_90_hours", "low_after_6_days"])
def test_default_starvation_bounds_per_class(priority, bound_s):
    got = PolicyConfig().starvation_s.get(priority)
    assert got == bound_s, f"starvation bound of {priority} is {got}, want {bound_s}"
