"""The properties every plan of schedule() keeps, each a function of (snapshot, plan) that raises
AssertionError with what broke; PROPERTIES lists them. tests/unit/test_policy_properties.py runs
them on random snapshots (tests/policy_snapshots.py) and checks that each rejects a broken plan."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, replace

from dispatcher.core.plan import Code, NodeView, Plan, Snapshot
from dispatcher.core.model import PRIORITIES, JobSpec
from dispatcher.policy import PolicyConfig
from dispatcher.policy.schedule import schedule
from dispatcher.policy.backlog import bucket_key
from dispatcher.core.gpuspec import gpu_family_matches
from dispatcher.policy.fit import describe_need, gpu_family, gpu_usable
from tests.builders import NOW_MS
from tests.policy_snapshots import could_ever_run, gang_nodes, piece_of, pieces, plan_for, specs_of


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
