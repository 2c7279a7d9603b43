"""Properties of preemption over random snapshots (hypothesis): mostly full nodes of running jobs of
random class, checkpointing, elasticity and age, and a few pending jobs that may preempt them."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from dispatcher.core.plan import Code, PendingJob, RunningJob, Snapshot
from dispatcher.core.model import PRIORITIES, JobSpec
from dispatcher.policy import PolicyConfig
from dispatcher.policy.schedule import schedule
from dispatcher.policy.fit import gpu_usable
from tests.builders import NOW_MS, make_node, placed
from tests.preemption_builders import preempted


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
