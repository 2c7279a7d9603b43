"""Random snapshots for the policy's property tests (hypothesis): a few nodes with random GPU
families, counts and memory, running jobs (some sharing), and a random queue; the fixed seed
snapshot; and the facts about a snapshot the properties compare a plan against."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from hypothesis import settings
from hypothesis import strategies as st

from dispatcher.core.plan import NodeView, PendingJob, RunningJob, Snapshot
from dispatcher.core.model import GpuInfo, JobSpec
from dispatcher.policy.schedule import schedule
from dispatcher.policy.fit import fits_ever, gpu_family, gpu_usable
from tests.builders import NOW_MS, make_job, make_node, seed_jobs, seed_node
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
    nodes = [seed_node(), make_node("n2").gpus(2, "A100", 80).held(1)]
    jobs = seed_jobs() + [make_job("JOB-005").gpus(0).cpus(4).user("bob"), make_job("JOB-006").gpus(1, "H100").user("bob")]
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
