"""Properties of schedule() over random snapshots (hypothesis).

A snapshot is a few nodes with random GPU families, counts and memory, some GPUs
(and CPUs and memory) held by running jobs with random estimates, and a random
queue of pending jobs with random constraints, priorities, estimates and waits.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatcher.model import Code, GpuInfo, JobSpec, NodeView, PendingJob, Plan, RunningJob, Snapshot, Verdict
from dispatcher.policy import PolicyConfig, schedule
from dispatcher.policy.fit import describe_need, fits_ever, gpu_family_matches, gpu_usable
from tests.builders import NOW_MS, make_job, make_node
from tests.builders import snapshot as build_snapshot

GPU_KINDS = [("A100", 40.0), ("A100", 80.0), ("V100", 16.0), ("RTX 4090", 24.0), ("H100", 80.0)]
WANTED_TYPES = ["A100", "V100", "RTX 4090", "H100", "A100-80GB", "L4"]
USERS = ["alice", "bob", "carol"]
#: Generating a snapshot costs ~10 ms, so every example is checked against all the
#: properties at once (a test per property would take ~25 s for the same coverage).
PROPERTY_SETTINGS = settings(max_examples=200, deadline=None)


@st.composite
def nodes_and_running(draw, index: int):
    """One node (maybe GPU-less) plus the running jobs that hold its held GPUs, CPUs and memory."""
    name = f"n{index}"
    gpus: list[GpuInfo] = []
    for kind, mem in draw(st.lists(st.sampled_from(GPU_KINDS), min_size=0, max_size=2)):
        for _ in range(draw(st.integers(1, 4))):
            gpus.append(GpuInfo(len(gpus), f"NVIDIA {kind}-{mem:g}GB", mem, uuid=f"GPU-{name}-{len(gpus)}"))
    cpus = draw(st.integers(1, 64))
    mem_gb = float(draw(st.integers(8, 512)))
    held = sorted(draw(st.sets(st.sampled_from([g.index for g in gpus]))) if gpus else [])
    held_cpus = draw(st.integers(0, cpus))
    held_mem = float(draw(st.integers(0, int(mem_gb))))
    running: list[RunningJob] = []
    if held or held_cpus or held_mem:
        # split the held GPUs between one or two running jobs; the first also holds the CPUs and memory
        cut = draw(st.integers(0, len(held)))
        for k, part in enumerate([held[:cut], held[cut:]]):
            if k and not part:
                continue
            spec = JobSpec(id=f"r-{name}-{k}", command=("true",), user=draw(st.sampled_from(USERS)),
                           gpus=len(part), cpus=held_cpus if k == 0 else 0, mem_gb=held_mem if k == 0 else 0.0,
                           est_s=draw(st.one_of(st.none(), st.integers(1, 3000).map(float))))
            running.append(RunningJob(spec, name, tuple(part), NOW_MS - draw(st.integers(0, 2000)) * 1000))
    view = NodeView(name, tuple(gpus), cpus, mem_gb, tuple(g.index for g in gpus if g.index not in held),
                    cpus - held_cpus, mem_gb - held_mem)
    return view, running


@st.composite
def pending_job(draw, index: int):
    gpus = draw(st.integers(0, 4))
    types = tuple(draw(st.lists(st.sampled_from(WANTED_TYPES), max_size=2, unique=True))) if gpus else ()
    return PendingJob(JobSpec(
        id=f"j{index:02d}", command=("true",), user=draw(st.sampled_from(USERS)),
        gpus=gpus, gpu_types=types,
        gpu_mem_gb=float(draw(st.sampled_from([0, 0, 10, 16, 24, 40, 80]))) if gpus else 0.0,
        cpus=draw(st.integers(1, 16)), mem_gb=float(draw(st.sampled_from([0, 0, 8, 32, 128]))),
        priority=draw(st.sampled_from(["low", "normal", "high", "critical"])),
        # spec.py rejects estimates under 1 ms, so 0 is not a valid input
        est_s=draw(st.one_of(st.none(), st.integers(1, 20000).map(float))),
        submit_ms=NOW_MS - draw(st.integers(-10, 20000)) * 1000))


@st.composite
def snapshots(draw) -> Snapshot:
    n_nodes = draw(st.integers(1, 4))
    nodes, running = [], []
    for i in range(n_nodes):
        view, run = draw(nodes_and_running(i))
        nodes.append(view)
        running.extend(run)
    pending = [draw(pending_job(i)) for i in range(draw(st.integers(0, 12)))]
    return Snapshot(tuple(pending), tuple(running), tuple(nodes))


def _seed_snapshot() -> Snapshot:
    """The seed scenario plus a running job, a CPU-only job and a never-fitting job."""
    nodes = [make_node("n1").gpus(2, "A100", 40).gpus(2, "V100", 16), make_node("n2").gpus(2, "A100", 80).held(1)]
    jobs = [make_job("JOB-001").gpus(1, "A100", mem_gb=20).priority("high").est(15).waited(30),
            make_job("JOB-002").gpus(2, "A100", mem_gb=30).priority("low").est(60).waited(20),
            make_job("JOB-003").gpus(1, "V100", mem_gb=10).priority("normal").est(30).waited(10),
            make_job("JOB-004").gpus(1, "A100", mem_gb=15).priority("critical").est(10).waited(0),
            make_job("JOB-005").gpus(0).cpus(4).user("bob"),
            make_job("JOB-006").gpus(1, "H100").user("bob")]
    return build_snapshot(pending=jobs, nodes=nodes,
                          running=[make_job("R").gpus(1).est(100).user("rita").running_on("n2", 1)])


SEED = _seed_snapshot()


def plan_for(snap: Snapshot):
    return schedule(snap, now_ms=NOW_MS)


def specs_of(snap: Snapshot) -> dict[str, JobSpec]:
    return {p.spec.id: p.spec for p in snap.pending}


def no_gpu_is_placed_twice_and_no_placement_uses_a_held_gpu(snap, plan):
    views = {v.name: v for v in snap.nodes}
    taken = Counter((p.node, g) for p in plan.placements for g in p.gpus)
    twice = [k for k, n in taken.items() if n > 1]
    assert not twice, f"GPUs placed more than once: {twice}; placements {plan.placements}"
    not_free = [(node, g) for node, g in taken if g not in views[node].free_gpus]
    free = [(v.name, v.free_gpus) for v in snap.nodes]
    assert not not_free, f"placements on held or unknown GPUs: {not_free}; free {free}"


def placed_cpus_and_memory_never_exceed_what_each_node_has_free(snap, plan):
    specs = specs_of(snap)
    cpus, mem = defaultdict(int), defaultdict(float)
    for p in plan.placements:
        cpus[p.node] += specs[p.job_id].cpus
        mem[p.node] += specs[p.job_id].mem_gb
    for v in snap.nodes:
        assert cpus[v.name] <= v.free_cpus, f"{v.name}: {cpus[v.name]} CPUs placed, {v.free_cpus} free"
        assert mem[v.name] <= v.free_mem_gb + 1e-6, f"{v.name}: {mem[v.name]} GB placed, {v.free_mem_gb} GB free"


def every_placement_has_the_gpu_count_type_and_memory_the_job_asked_for(snap, plan):
    specs = specs_of(snap)
    views = {v.name: v for v in snap.nodes}
    for p in plan.placements:
        spec, node = specs[p.job_id], views[p.node]
        assert len(p.gpus) == spec.gpus, f"{p.job_id} asked for {spec.gpus} GPUs, got {p.gpus}"
        for g in p.gpus:
            gpu = node.gpu(g)
            assert gpu.mem_total_gb + 1e-9 >= spec.gpu_mem_gb, \
                f"{p.job_id} needs {spec.gpu_mem_gb} GB per GPU, got {gpu.name} ({gpu.mem_total_gb} GB)"
            assert not spec.gpu_types or any(gpu_family_matches(t, gpu.name) for t in spec.gpu_types), \
                f"{p.job_id} wants {spec.gpu_types}, got {gpu.name}"


def every_pending_job_is_either_placed_or_has_exactly_one_verdict(snap, plan):
    placed = Counter(p.job_id for p in plan.placements)
    judged = Counter(v.job_id for v in plan.verdicts)
    ids = set(specs_of(snap))
    for job_id in ids:
        outcomes = (placed[job_id], judged[job_id])
        assert outcomes in ((1, 0), (0, 1)), f"{job_id}: placed {outcomes[0]}x, {outcomes[1]} verdicts"
    strangers = (set(placed) | set(judged)) - ids
    assert not strangers, f"plan names jobs that were not pending: {strangers}"


def no_fit_ever_is_given_exactly_to_jobs_no_node_could_ever_hold(snap, plan):
    never = {v.job_id for v in plan.verdicts if v.code is Code.NO_FIT_EVER}
    want = {s.id for s in specs_of(snap).values() if not any(fits_ever(s, v) for v in snap.nodes)}
    assert never == want, f"NO_FIT_EVER for {sorted(never)}, want {sorted(want)}"


def schedule_is_deterministic(snap, plan):
    first, second = plan, plan_for(snap)
    assert first == second, f"first {first}\nsecond {second}"
    assert [p.terms for p in first.placements] == [p.terms for p in second.placements], "terms differ"


def schedule_does_not_depend_on_the_order_of_pending_jobs_and_nodes(snap, plan):
    shuffled = Snapshot(tuple(reversed(snap.pending)), snap.running, tuple(reversed(snap.nodes)))
    first, second = plan, plan_for(shuffled)
    assert first == second, f"in order {first}\nreversed {second}"


def every_score_is_within_0_and_100(snap, plan):
    bad = [(p.job_id, p.score) for p in plan.placements if not 0.0 <= p.score <= 100.0]
    bad += [(v.job_id, v.score) for v in plan.verdicts if not 0.0 <= v.score <= 100.0]
    assert not bad, f"scores outside [0, 100]: {bad}"
    terms = [(p.job_id, k, t) for p in plan.placements for k, t in p.terms.items() if not 0.0 <= t <= 100.0]
    assert not terms, f"terms outside [0, 100]: {terms}"


def a_placement_on_reserved_gpus_is_estimated_to_end_before_the_reservation_starts(snap, plan):
    config = PolicyConfig()
    specs = specs_of(snap)
    for r in plan.reservations:
        for p in plan.placements:
            if p.node != r.node or not set(p.gpus) & set(r.gpus):
                continue
            est = specs[p.job_id].est_s
            end = NOW_MS + (est if est is not None else config.unknown_remaining_s) * 1000
            assert end <= r.start_ms, (f"{p.job_id} (est {est}) on {p.node} GPUs {p.gpus} ends at +{end - NOW_MS} ms, "
                                       f"after the reservation of {r.gpus} for {r.job_id} at +{r.start_ms - NOW_MS} ms")


def reservations_hold_free_or_releasing_gpus_that_fit_their_job(snap, plan):
    specs = specs_of(snap)
    views = {v.name: v for v in snap.nodes}
    assert len(plan.reservations) <= PolicyConfig().reservations, f"reservations {plan.reservations}"
    for r in plan.reservations:
        spec, node = specs[r.job_id], views[r.node]
        assert len(r.gpus) == spec.gpus and len(set(r.gpus)) == spec.gpus, f"{r} for a {spec.gpus}-GPU job"
        assert r.start_ms >= NOW_MS, f"{r} starts in the past"
        for g in r.gpus:
            gpu = node.gpu(g)
            assert gpu.mem_total_gb + 1e-9 >= spec.gpu_mem_gb and (
                not spec.gpu_types or any(gpu_family_matches(t, gpu.name) for t in spec.gpu_types)), \
                f"{r.job_id} wants {spec.gpu_types} >= {spec.gpu_mem_gb} GB, reserved {gpu.name}"


def a_job_left_waiting_with_no_fit_now_does_not_fit_what_the_plan_leaves_free(snap, plan):
    """Work conservation: later placements only shrink what is free, so a NO_FIT_NOW job that fits
    the leftovers would also have fitted when it was picked."""
    specs = specs_of(snap)
    free = {v.name: set(v.free_gpus) for v in snap.nodes}
    cpus = {v.name: v.free_cpus for v in snap.nodes}
    mem = {v.name: v.free_mem_gb for v in snap.nodes}
    for p in plan.placements:
        free[p.node] -= set(p.gpus)
        cpus[p.node] -= specs[p.job_id].cpus
        mem[p.node] -= specs[p.job_id].mem_gb
    for v in plan.verdicts:
        if v.code is not Code.NO_FIT_NOW:
            continue
        spec = specs[v.job_id]
        for node in snap.nodes:
            n = node.name
            matching = [g for g in sorted(free[n]) if gpu_usable(spec, node, g)]
            fits = len(matching) >= spec.gpus and spec.cpus <= cpus[n] and spec.mem_gb <= mem[n] + 1e-9
            assert not fits, (f"{v.job_id} ({describe_need(spec)}) got NO_FIT_NOW, but {n} has GPUs {matching}, "
                              f"{cpus[n]} CPUs and {mem[n]:g} GB left")


PROPERTIES = [
    no_gpu_is_placed_twice_and_no_placement_uses_a_held_gpu,
    placed_cpus_and_memory_never_exceed_what_each_node_has_free,
    every_placement_has_the_gpu_count_type_and_memory_the_job_asked_for,
    every_pending_job_is_either_placed_or_has_exactly_one_verdict,
    no_fit_ever_is_given_exactly_to_jobs_no_node_could_ever_hold,
    schedule_is_deterministic,
    schedule_does_not_depend_on_the_order_of_pending_jobs_and_nodes,
    every_score_is_within_0_and_100,
    a_placement_on_reserved_gpus_is_estimated_to_end_before_the_reservation_starts,
    reservations_hold_free_or_releasing_gpus_that_fit_their_job,
    a_job_left_waiting_with_no_fit_now_does_not_fit_what_the_plan_leaves_free,
]


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
# The seed plan: JOB-004 on n2 GPU 0, JOB-001 on n1 GPU 0, JOB-005 (CPU-only) on n1,
# JOB-003 on n1 GPU 2 (V100); JOB-006 NO_FIT_EVER; JOB-002 NO_FIT_NOW with a
# reservation of n1 GPUs (0, 1) from +15 s.

def _moved(plan: Plan, job_id: str, **kw) -> Plan:
    return replace(plan, placements=tuple(replace(p, **kw) if p.job_id == job_id else p for p in plan.placements))


def _n1_with_4_free_cpus(snap: Snapshot) -> Snapshot:
    return replace(snap, nodes=tuple(replace(v, free_cpus=4) if v.name == "n1" else v for v in snap.nodes))


BROKEN = [
    (no_gpu_is_placed_twice_and_no_placement_uses_a_held_gpu,
     lambda s, p: (s, _moved(p, "JOB-003", gpus=(0,)))),                      # n1 GPU 0 twice
    (no_gpu_is_placed_twice_and_no_placement_uses_a_held_gpu,
     lambda s, p: (s, _moved(p, "JOB-004", gpus=(1,)))),                      # n2 GPU 1 is held by R
    (placed_cpus_and_memory_never_exceed_what_each_node_has_free,
     lambda s, p: (_n1_with_4_free_cpus(s), p)),                              # 1 + 4 + 1 CPUs on n1 > 4
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
]


@pytest.mark.parametrize("prop, breakage", BROKEN, ids=[f"{prop.__name__}_{i}" for i, (prop, _) in enumerate(BROKEN)])
def test_each_property_rejects_a_plan_that_breaks_it(prop, breakage):
    snap, plan = breakage(SEED, plan_for(SEED))
    with pytest.raises(AssertionError):
        prop(snap, plan)
