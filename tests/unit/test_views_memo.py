"""The scheduler's snapshot keeps its node views while the nodes and running jobs they come from are the
same (store/snapshot.ViewsMemo), and works them out again as soon as either changes."""

from dataclasses import replace

from dispatcher.core.model import GpuInfo
from dispatcher.core.plan import RunningJob
from dispatcher.core.spec import build_spec
from dispatcher.store.nodes import Drain, NodeRecord
from dispatcher.store.snapshot import ViewsMemo, node_views


def node(name: str, at: int = 1000, drain=None) -> NodeRecord:
    gpus = tuple(GpuInfo(i, "NVIDIA A100-SXM4-40GB", 40.0) for i in range(4))
    return NodeRecord(name, gpus, 16, 128.0, at, {}, drain)


def job(job_id: str, gpus=(0, 1)) -> RunningJob:
    return RunningJob(build_spec(command=["true"], user="ann", submit_ms=1, gpus=len(gpus)).filled(id=job_id),
                      "a", tuple(gpus), 5)


def test_the_same_nodes_and_running_jobs_give_the_same_views_and_any_change_gives_new_ones():
    memo, a, b, j = ViewsMemo(), node("a"), node("b"), job("1")
    running, views = memo.get([a, b], [j])
    assert views == node_views([a, b], running) and views[0].free_gpus == (2, 3)
    beat = [replace(a, seen_ms=2000), b]  # a heartbeat alone (a new record, its time only): the same views
    assert memo.get(beat, [j])[1] is views
    assert memo.get([a, b], [job("1")])[1] is not views  # a new entry (the job's record changed)
    ended = memo.get([a, b], [])[1]
    assert ended[0].free_gpus == (0, 1, 2, 3)
    drained = memo.get([node("a", drain=Drain("disk", "ops", 1)), b], [])[1]
    assert drained[0].drained == "disk" and drained is not ended
    assert [v.name for v in memo.get([b], [])[1]] == ["b"]  # a node gone (dead): its view too
