"""Properties of schedule() over random snapshots (hypothesis).

A snapshot is a few nodes with random GPU families, counts and memory, some GPUs
(and CPUs and memory) held by running jobs with random estimates -- some of them
sharing jobs, which leave their GPU shared rather than taken -- and a random queue of
pending jobs with random constraints, priorities, estimates, waits (some past their
class's starvation bound) and GPU sharing.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatcher.core.plan import Code, NodeView, PendingJob, Plan, RunningJob, Snapshot, Verdict
from dispatcher.core.model import PRIORITIES, GpuInfo, JobSpec
from dispatcher.policy import PolicyConfig, schedule
from dispatcher.policy.backlog import bucket_key
from dispatcher.policy.fit import describe_need, fits_ever, gpu_family, gpu_family_matches, gpu_usable
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
    """One node (maybe GPU-less) plus the running jobs that hold its held GPUs, CPUs and memory.

    Some held GPUs are held only by a sharing job: they are in `shared` (with the memory it
    declared), not in `free_gpus`."""
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
    shared: list[tuple[int, float]] = []
    for i in sorted(draw(st.sets(st.sampled_from(held))) if held else []):
        declared = float(draw(st.integers(1, int(gpus[i].mem_total_gb))))
        spec = JobSpec(id=f"s-{name}-{i}", command=("true",), user=draw(st.sampled_from(USERS)), gpus=1,
                       gpu_mem_gb=declared, share=True, cpus=0,
                       est_s=draw(st.one_of(st.none(), st.integers(1, 3000).map(float))))
        running.append(RunningJob(spec, name, (i,), NOW_MS - draw(st.integers(0, 2000)) * 1000))
        shared.append((i, declared))
    held_whole = [i for i in held if i not in dict(shared)]
    if held_whole or held_cpus or held_mem:
        # split the other held GPUs between one or two running jobs; the first also holds the CPUs and memory
        cut = draw(st.integers(0, len(held_whole)))
        for k, part in enumerate([held_whole[:cut], held_whole[cut:]]):
            if k and not part:
                continue
            spec = JobSpec(id=f"r-{name}-{k}", command=("true",), user=draw(st.sampled_from(USERS)),
                           gpus=len(part), cpus=held_cpus if k == 0 else 0, mem_gb=held_mem if k == 0 else 0.0,
                           est_s=draw(st.one_of(st.none(), st.integers(1, 3000).map(float))))
            running.append(RunningJob(spec, name, tuple(part), NOW_MS - draw(st.integers(0, 2000)) * 1000))
    taken = set(held_whole) | set(dict(shared))
    view = NodeView(name, tuple(gpus), cpus, mem_gb, tuple(g.index for g in gpus if g.index not in taken),
                    cpus - held_cpus, mem_gb - held_mem, tuple(shared))
    return view, running


@st.composite
def pending_job(draw, index: int):
    gpus = draw(st.integers(0, 4))
    types = tuple(draw(st.lists(st.sampled_from(WANTED_TYPES), max_size=2, unique=True))) if gpus else ()
    gpu_mem_gb = float(draw(st.sampled_from([0, 0, 10, 16, 24, 40, 80]))) if gpus else 0.0
    # one job in five a gang asked with --nodes N --gpus-per-node G (spec.py: never a sharing one)
    nodes, per_node = (draw(st.integers(2, 3)), draw(st.integers(1, 2))) if draw(st.integers(0, 4)) == 0 else (0, 0)
    gang = dict(nodes=nodes, gpus_per_node=per_node, gpus=nodes * per_node, share=False,
                same_type=draw(st.booleans())) if nodes else {}
    spec = PendingJob(JobSpec(
        id=f"j{index:02d}", command=("true",), user=draw(st.sampled_from(USERS)),
        gpus=gpus, gpu_types=types, gpu_mem_gb=gpu_mem_gb,
        # spec.py allows sharing only with a per-GPU memory need
        share=bool(gpu_mem_gb) and draw(st.booleans()),
        cpus=draw(st.integers(1, 16)), mem_gb=float(draw(st.sampled_from([0, 0, 8, 32, 128]))),
        priority=draw(st.sampled_from(["low", "normal", "high", "critical"])),
        # spec.py rejects estimates under 1 ms, so 0 is not a valid input
        est_s=draw(st.one_of(st.none(), st.integers(1, 20000).map(float))),
        # up to ~4.6 days: past every class's default starvation bound (30 min .. 4 days)
        submit_ms=NOW_MS - draw(st.one_of(st.integers(-10, 20000), st.integers(20000, 400000))) * 1000))
    return replace(spec, spec=replace(spec.spec, **gang)) if gang else spec


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


def pieces(p) -> list[tuple[str, tuple[int, ...]]]:
    """A placement's (node, GPUs): rank 0, then a gang's other nodes (a job larger than any node runs
    on whole nodes: PolicyConfig.gang_across_nodes, on by default)."""
    return [(p.node, p.gpus), *p.extra]


def gang_nodes(spec: JobSpec, nodes, gpus_of) -> int:
    """For a gang asked with --nodes: how many of `nodes` offer it `gpus_per_node` GPUs (`gpus_of(node)`:
    those it could take there), of one family with same_type (the most of any family)."""
    count = Counter()
    for v in nodes:
        families = Counter(gpu_family(v.gpu(g).name) if spec.same_type else "" for g in gpus_of(v))
        for family, n in families.items():
            count[family] += n >= spec.gpus_per_node
    return max(count.values(), default=0)


def piece_of(spec: JobSpec) -> JobSpec:
    return replace(spec, gpus=spec.gpus_per_node)


def could_ever_run(spec: JobSpec, nodes) -> bool:
    if spec.nodes >= 2:
        piece = piece_of(spec)
        return gang_nodes(spec, nodes, lambda v: [g.index for g in v.gpus if gpu_usable(piece, v, g.index)]
                          if fits_ever(piece, v) else []) >= spec.nodes
    return any(fits_ever(spec, v) for v in nodes) or whole_nodes_could_hold(spec, nodes)


def whole_nodes_could_hold(spec: JobSpec, nodes) -> bool:
    """Could an auto gang of `spec` ever run: whole nodes of one GPU family, all of whose GPUs it may
    use, each with its CPUs and memory, with its GPUs in all?"""
    if spec.share or not spec.gpus:
        return False
    by_family = Counter()
    for v in nodes:
        families = {gpu_family(g.name) for g in v.gpus}
        if len(families) == 1 and all(gpu_usable(spec, v, g.index) for g in v.gpus) and spec.cpus <= v.cpus \
                and spec.mem_gb <= v.mem_gb + 1e-9:
            by_family[families.pop()] += len(v.gpus)
    return max(by_family.values(), default=0) >= spec.gpus


def no_gpu_is_placed_twice_and_no_placement_uses_a_held_gpu(snap, plan):
    """Sharing jobs excepted: several may land on one GPU, free or already shared (but never
    one that an exclusive job takes or holds)."""
    specs = specs_of(snap)
    views = {v.name: v for v in snap.nodes}
    on: dict[tuple[str, int], list[str]] = defaultdict(list)
    for p in plan.placements:
        for node, gpus in pieces(p):
            for g in gpus:
                on[(node, g)].append(p.job_id)
    sharers = {k: all(specs[j].share for j in ids) for k, ids in on.items()}
    twice = [(k, ids) for k, ids in on.items() if len(ids) > 1 and not sharers[k]]
    assert not twice, f"GPUs placed more than once: {twice}; placements {plan.placements}"
    not_free = [(node, g) for node, g in on if g not in views[node].free_gpus
                and not (sharers[(node, g)] and g in dict(views[node].shared))]
    free = [(v.name, v.free_gpus, v.shared) for v in snap.nodes]
    assert not not_free, f"placements on held or unknown GPUs: {not_free}; free (and shared) {free}"


def a_shared_gpu_never_holds_more_memory_than_it_has(snap, plan):
    """What sharing jobs declare on one GPU (those running plus those placed) fits its memory;
    a placement is marked shared exactly when its job shares."""
    specs = specs_of(snap)
    views = {v.name: v for v in snap.nodes}
    load = {(v.name, i): gb for v in snap.nodes for i, gb in v.shared}
    placed_on = set()
    for p in plan.placements:
        assert p.share is specs[p.job_id].share, f"{p.job_id} placed with share={p.share}, spec {specs[p.job_id].share}"
        if p.share:
            for g in p.gpus:
                load[(p.node, g)] = load.get((p.node, g), 0.0) + specs[p.job_id].gpu_mem_gb
                placed_on.add((p.node, g))
    over = [(n, g, load[(n, g)], views[n].gpu(g).mem_total_gb) for n, g in sorted(placed_on)
            if load[(n, g)] > views[n].gpu(g).mem_total_gb + 1e-9]
    assert not over, f"shared GPUs past their memory (node, GPU, GB declared, GB it has): {over}"


def placed_cpus_and_memory_never_exceed_what_each_node_has_free(snap, plan):
    specs = specs_of(snap)
    cpus, mem = defaultdict(int), defaultdict(float)
    for p in plan.placements:
        for node, _ in pieces(p):  # a gang's CPUs and memory are on each of its nodes
            cpus[node] += specs[p.job_id].cpus
            mem[node] += specs[p.job_id].mem_gb
    for v in snap.nodes:
        assert cpus[v.name] <= v.free_cpus, f"{v.name}: {cpus[v.name]} CPUs placed, {v.free_cpus} free"
        assert mem[v.name] <= v.free_mem_gb + 1e-6, f"{v.name}: {mem[v.name]} GB placed, {v.free_mem_gb} GB free"


def every_placement_has_the_gpu_count_type_and_memory_the_job_asked_for(snap, plan):
    specs = specs_of(snap)
    views = {v.name: v for v in snap.nodes}
    for p in plan.placements:
        spec = specs[p.job_id]
        got = [(views[n], g) for n, gpus in pieces(p) for g in gpus]
        if p.extra and not spec.nodes:  # an auto gang: whole nodes, as many as its GPUs fill
            assert all(len(gpus) == len(views[n].gpus) for n, gpus in pieces(p)), f"{p.job_id}: {pieces(p)}"
            assert len(got) - len(p.extra[-1][1]) < spec.gpus <= len(got), f"{p.job_id}: {pieces(p)}"
        else:
            assert len(got) == spec.gpus, f"{p.job_id} asked for {spec.gpus} GPUs, got {pieces(p)}"
            assert len({n for n, _ in pieces(p)}) == len(pieces(p)) == max(1, spec.nodes), f"{p.job_id}: {pieces(p)}"
        assert not (p.extra and spec.same_type) or len({gpu_family(node.gpu(g).name) for node, g in got}) == 1, \
            f"{p.job_id} keeps to one GPU family: {pieces(p)}"
        for node, g in got:
            gpu = node.gpu(g)
            assert gpu.mem_total_gb + 1e-9 >= spec.gpu_mem_gb, \
                f"{p.job_id} needs {spec.gpu_mem_gb} GB per GPU, got {gpu.name} ({gpu.mem_total_gb} GB)"
            assert not spec.gpu_types or any(gpu_family_matches(t, gpu.name) for t in spec.gpu_types), \
                f"{p.job_id} wants {spec.gpu_types}, got {gpu.name}"


def every_pending_job_is_either_placed_or_has_exactly_one_verdict(snap, plan):
    """...or is one of the `rest` jobs, which must each need more GPUs than any node has left free."""
    placed = Counter(p.job_id for p in plan.placements)
    judged = Counter(v.job_id for v in plan.verdicts)
    ids = set(specs_of(snap))
    unjudged = []
    for job_id in ids:
        outcomes = (placed[job_id], judged[job_id])
        assert outcomes in ((1, 0), (0, 1), (0, 0)), f"{job_id}: placed {outcomes[0]}x, {outcomes[1]} verdicts"
        if outcomes == (0, 0):
            unjudged.append(job_id)
    assert len(unjudged) == plan.rest, f"{len(unjudged)} jobs without an outcome, plan.rest says {plan.rest}"
    if plan.rest:  # each is like a job that got a verdict, or needs more GPUs than any node has left free
        free = Counter(node for node, _ in left_free_gpus(snap, plan))
        most = max(free.values(), default=0)
        pending = {p.spec.id: p for p in snap.pending}
        for j in unjudged:
            spec = specs_of(snap)[j]
            if bucket_key(pending[j], PolicyConfig()) in plan.rest_like:
                continue
            assert plan.rest_reason, plan.rest_reason
            assert not spec.share and spec.gpus > most, f"{j} needs {spec.gpus} GPUs, left without a verdict " \
                                                         f"while a node has {most} free"
    strangers = (set(placed) | set(judged)) - ids
    assert not strangers, f"plan names jobs that were not pending: {strangers}"


def left_free_gpus(snap, plan) -> list[tuple[str, int]]:
    taken = {(node, g) for p in plan.placements for node, gpus in pieces(p) for g in gpus}
    return [(v.name, g) for v in snap.nodes for g in v.free_gpus if (v.name, g) not in taken]


def no_fit_ever_is_given_exactly_to_jobs_no_node_could_ever_hold(snap, plan):
    never = {v.job_id for v in plan.verdicts if v.code is Code.NO_FIT_EVER}
    want = {s.id for s in specs_of(snap).values() if not could_ever_run(s, snap.nodes)}
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
    """... unless it is high or critical work and the reservation a lower class's (it jumps the queue)."""
    config = PolicyConfig()
    specs = specs_of(snap)
    for r in plan.reservations:
        for p in plan.placements:
            if not any(node == r.node and set(gpus) & set(r.gpus) for node, gpus in pieces(p)):
                continue
            if specs[p.job_id].rank >= PRIORITIES.index("high") and specs[p.job_id].rank > specs[r.job_id].rank:
                continue
            est = specs[p.job_id].est_s
            end = NOW_MS + (est if est is not None else config.unknown_remaining_s) * 1000
            assert end <= r.start_ms, (f"{p.job_id} (est {est}) on {p.node} GPUs {p.gpus} ends at +{end - NOW_MS} ms, "
                                       f"after the reservation of {r.gpus} for {r.job_id} at +{r.start_ms - NOW_MS} ms")


def reservations_hold_free_or_releasing_gpus_that_fit_their_job(snap, plan):
    specs = specs_of(snap)
    views = {v.name: v for v in snap.nodes}
    config = PolicyConfig()
    starving = sum(1 for p in snap.pending
                   if NOW_MS - p.spec.submit_ms > config.starvation_s.get(p.spec.priority, float("inf")) * 1000)
    # a job that preempts holds one reservation on the GPUs its victims free, at most preemptors_per_cycle of them
    preemptors = {p.for_job for p in plan.preemptions}
    assert len(preemptors) <= config.preemptors_per_cycle, f"{len(preemptors)} preemptors: {sorted(preemptors)}"
    held = Counter(r.job_id for r in plan.reservations if r.job_id in preemptors)
    assert all(n == 1 for n in held.values()), f"preemptors with several reservations: {held}"
    # the rest: EASY's one reservation, plus one for each of the oldest starving jobs served ahead of every
    # class (starvation_reservations of them); other starving jobs keep their place and get no extra one
    others = {r.job_id for r in plan.reservations if r.job_id not in preemptors}  # a gang holds one per node
    assert len(others) <= config.reservations + min(starving, config.starvation_reservations), \
        f"reservations {plan.reservations} ({starving} starving, preemptors {sorted(preemptors)})"
    for r in plan.reservations:
        spec, node = specs[r.job_id], views[r.node]
        on = Counter(x.job_id for x in plan.reservations)[r.job_id]
        want = spec.gpus_per_node if spec.nodes >= 2 else spec.gpus if on == 1 else len(node.gpus)  # auto: whole
        assert len(r.gpus) == want and len(set(r.gpus)) == want, f"{r} for a {spec.gpus}-GPU job"
        assert r.start_ms >= NOW_MS, f"{r} starts in the past"
        for g in r.gpus:
            gpu = node.gpu(g)
            assert gpu.mem_total_gb + 1e-9 >= spec.gpu_mem_gb and (
                not spec.gpu_types or any(gpu_family_matches(t, gpu.name) for t in spec.gpu_types)), \
                f"{r.job_id} wants {spec.gpu_types} >= {spec.gpu_mem_gb} GB, reserved {gpu.name}"


@dataclass
class _Room:
    """What one node has left: free GPUs, GB declared on shared GPUs, CPUs, memory."""

    free: set[int]
    shared: dict[int, float]
    cpus: int
    mem_gb: float

    def gpus_for(self, spec: JobSpec, node: NodeView) -> list[int]:
        """The GPUs `spec` could take: free ones, and for a sharing job shared ones with its memory left."""
        pool = set(self.free)
        if spec.share:
            pool |= {g for g, gb in self.shared.items() if node.gpu(g).mem_total_gb - gb + 1e-9 >= spec.gpu_mem_gb}
        return [g for g in sorted(pool) if gpu_usable(spec, node, g)]

    def fits(self, spec: JobSpec, node: NodeView) -> bool:
        return (len(self.gpus_for(spec, node)) >= spec.gpus and spec.cpus <= self.cpus
                and spec.mem_gb <= self.mem_gb + 1e-9)


def _at_the_start(node: NodeView) -> _Room:
    return _Room(set(node.free_gpus), dict(node.shared), node.free_cpus, node.free_mem_gb)


def _left_after(snap: Snapshot, plan: Plan) -> dict[str, _Room]:
    specs = specs_of(snap)
    rooms = {v.name: _at_the_start(v) for v in snap.nodes}
    for p in plan.placements:
        for node, gpus in pieces(p):
            room, spec = rooms[node], specs[p.job_id]
            room.free -= set(gpus)
            if spec.share:
                for g in gpus:
                    room.shared[g] = room.shared.get(g, 0.0) + spec.gpu_mem_gb
            room.cpus -= spec.cpus
            room.mem_gb -= spec.mem_gb
    return rooms


def a_job_left_waiting_with_no_fit_now_does_not_fit_what_the_plan_leaves_free(snap, plan):
    """Work conservation: later placements only shrink what is free, so a NO_FIT_NOW (or LOWER_SCORE)
    job that fits the leftovers would also have fitted when it was picked (or been RESERVED)."""
    specs = specs_of(snap)
    left = _left_after(snap, plan)
    for v in plan.verdicts:
        if v.code not in (Code.NO_FIT_NOW, Code.LOWER_SCORE):
            continue
        spec = specs[v.job_id]
        if spec.nodes >= 2:
            piece = piece_of(spec)
            assert gang_nodes(spec, snap.nodes, lambda n: left[n.name].gpus_for(piece, n)
                              if left[n.name].fits(replace(piece, gpus=0), n) else []) < spec.nodes, \
                f"{v.job_id} ({spec.nodes} x {spec.gpus_per_node}) got {v.code.name}, but enough nodes are left"
            continue
        for node in snap.nodes:
            room = left[node.name]
            assert not room.fits(spec, node), (
                f"{v.job_id} ({describe_need(spec)}) got {v.code.name}, but {node.name} has GPUs "
                f"{room.gpus_for(spec, node)}, {room.cpus} CPUs and {room.mem_gb:g} GB left: {v.reason}")


def _fits_at_the_start(spec: JobSpec, node: NodeView) -> bool:
    return _at_the_start(node).fits(spec, node)


def lower_score_goes_to_jobs_that_fitted_at_the_start_and_no_fit_now_to_those_that_did_not(snap, plan):
    """LOWER_SCORE: the room was there when the cycle began and higher-ranked jobs took it;
    NO_FIT_NOW: no node had the room, whatever this cycle placed."""
    specs = specs_of(snap)
    for v in plan.verdicts:
        if v.code not in (Code.NO_FIT_NOW, Code.LOWER_SCORE):
            continue
        spec = specs[v.job_id]
        if spec.nodes >= 2:  # a gang's verdict is NO_FIT_NOW whether or not this cycle took its room
            assert v.code is Code.NO_FIT_NOW, v
            continue
        fitted = [n.name for n in snap.nodes if _fits_at_the_start(spec, n)]
        if v.code is Code.LOWER_SCORE:
            assert fitted, f"{v.job_id} ({describe_need(spec)}) got LOWER_SCORE but fitted no node at the start"
        else:
            assert not fitted, (f"{v.job_id} ({describe_need(spec)}) got NO_FIT_NOW but fitted {fitted} at the "
                                f"start of the cycle: {v.reason}")


def _starving(spec: JobSpec) -> bool:
    bound = PolicyConfig().starvation_s.get(spec.priority)
    return bound is not None and (NOW_MS - spec.submit_ms) / 1000.0 > bound


def starving_jobs_are_ranked_before_every_other_job_and_told_so(snap, plan):
    """The oldest `starvation_reservations` jobs waiting past their class's bound are picked before
    every other job, whatever the classes, and their placement or verdict says they are starving
    (jobs set aside as NO_FIT_EVER excepted); other starving jobs keep their place by score."""
    specs = specs_of(snap)
    k = PolicyConfig().starvation_reservations
    ranked = [(x.rank, x.job_id, x.reason) for x in plan.placements]
    ranked += [(v.rank, v.job_id, v.reason) for v in plan.verdicts if v.code is not Code.NO_FIT_EVER]
    never = {v.job_id for v in plan.verdicts if v.code is Code.NO_FIT_EVER}
    oldest = sorted((s.submit_ms, (len(s.id), s.id)) for s in specs.values() if _starving(s) and s.id not in never)
    first = {j for _, (_, j) in oldest[:k]}
    served = [(r, j) for r, j, _ in ranked if j in first]
    others = [(r, j) for r, j, _ in ranked if j not in first]
    if served and others:
        assert max(served) < min(others), f"oldest starving jobs at ranks {sorted(served)}, others at {sorted(others)}"
    untold = [(j, why) for r, j, why in ranked if j in first and "starving" not in why]
    assert not untold, f"starving jobs whose reason does not say so: {untold}"


#: One class step outweighs every other term, and no LAS tier crosses it: the earlier default.
CLASSES_NEVER_CROSS = PolicyConfig(class_step=100.0, weights={"priority": 1.0, "attained": 0.2, "remaining": 0.09,
                                                              "fit": 0.01, "fairness": 0.005, "wait": 0.0})


def a_higher_class_is_never_considered_after_a_lower_one_that_started(snap, plan):
    """When classes never cross (CLASSES_NEVER_CROSS; the default lets them cross by LAS tier and
    estimate): a job left waiting was considered before every job of a lower class that started,
    unless that one was served first as starving."""
    plan = schedule(snap, now_ms=NOW_MS, config=CLASSES_NEVER_CROSS)
    specs = specs_of(snap)
    for p in plan.placements:
        if "starving" in p.reason:
            continue
        for v in plan.verdicts:
            if v.code is not Code.NO_FIT_EVER and specs[v.job_id].rank > specs[p.job_id].rank:
                assert v.rank < p.rank, (f"{v.job_id} ({specs[v.job_id].priority}, rank {v.rank}) waits behind "
                                         f"{p.job_id} ({specs[p.job_id].priority}, rank {p.rank}): {v.reason}")


PROPERTIES = [
    a_higher_class_is_never_considered_after_a_lower_one_that_started,
    no_gpu_is_placed_twice_and_no_placement_uses_a_held_gpu,
    a_shared_gpu_never_holds_more_memory_than_it_has,
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
    lower_score_goes_to_jobs_that_fitted_at_the_start_and_no_fit_now_to_those_that_did_not,
    starving_jobs_are_ranked_before_every_other_job_and_told_so,
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
