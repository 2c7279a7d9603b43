"""Dominant Resource Fairness converges: a hypothesis property over two users' job shapes."""

from hypothesis import given, settings
from hypothesis import strategies as st

from dispatcher.policy.schedule import schedule
from tests.builders import NOW_MS, make_job, make_node, snapshot


@settings(max_examples=150, deadline=None)
@given(ga=st.integers(0, 3), ca=st.integers(1, 8), gb=st.integers(0, 3), cb=st.integers(1, 8),
       gpus=st.integers(2, 8), cpus=st.integers(8, 32))
def test_a_user_left_behind_in_dominant_share_could_not_have_started_another_job(ga, ca, gb, cb, gpus, cpus):
    """Progressive filling: when the cycle ends, a user whose dominant share trails the other's by more
    than one of the other's jobs has no job left that fits what is free."""
    node = make_node("n1").gpus(gpus, "A100", 40).cpus(cpus).mem(1000)
    jobs = [make_job(f"a{i}").user("a").gpus(ga).cpus(ca) for i in range(12)]
    jobs += [make_job(f"b{i}").user("b").gpus(gb).cpus(cb) for i in range(12)]
    plan = schedule(snapshot(pending=jobs, nodes=[node]), now_ms=NOW_MS)
    placed = {"a": 0, "b": 0}
    for p in plan.placements:
        placed[p.job_id[0]] += 1
    share = {"a": max(ga / gpus, ca / cpus), "b": max(gb / gpus, cb / cpus)}  # one job's dominant share
    free_gpus = gpus - placed["a"] * ga - placed["b"] * gb
    free_cpus = cpus - placed["a"] * ca - placed["b"] * cb
    shape = {"a": (ga, ca), "b": (gb, cb)}
    for me, other in (("a", "b"), ("b", "a")):
        behind = placed[other] * share[other] - placed[me] * share[me]
        if behind > share[other] + 1e-9:
            g, c = shape[me]
            assert placed[me] == 12 or g > free_gpus or c > free_cpus, (
                f"user {me} ({placed[me]} jobs, share {placed[me] * share[me]:.3f}) trails {other} "
                f"({placed[other]} jobs, share {placed[other] * share[other]:.3f}) while {free_gpus} GPUs and "
                f"{free_cpus} CPUs are free for its {g}-GPU, {c}-CPU job")
