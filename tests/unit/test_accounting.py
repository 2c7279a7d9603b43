"""`dispatch report`'s sums (dispatcher/core/accounting.py): GPU-hours per attempt, outcomes, waits, lost and
idle GPU-hours, groups and the total."""

import pytest

from dispatcher.core.accounting import p95, report, work_s
from dispatcher.core.errors import InvalidRequestError

H = 3600.0
DAY = 86400.0


def job(id, user="ana", *, team="vision", priority="normal", state="succeeded", submitted=0.0, attempts=(),
        gpus=1, gpu_types=(), preemptions=0, gpu_s_lost=0.0, node="n1"):
    """A job view as store/ended.py reads it: each attempt (start, end, gpu indices)."""
    runs = [{"started_at": s, "ended_at": e, "node": node, "gpus": list(g), "ranks": []} for s, e, g in attempts]
    return {"id": id, "user": user, "team": team, "priority": priority, "state": state, "submitted_at": submitted,
            "started_at": runs[-1]["started_at"] if runs else None,
            "finished_at": runs[-1]["ended_at"] if runs else None,
            "gpus_requested": gpus, "gpu_types": list(gpu_types), "preemptions": preemptions, "gpu_s_lost": gpu_s_lost,
            "attempts": runs, "node": None, "gpus": [], "ranks": []}


def by_key(rep):
    return {g.key: g.row() for g in rep.groups}


def test_gpu_hours_are_every_attempts_gpus_times_its_run_and_a_preempted_job_counts_its_lost_work():
    jobs = [job("1", attempts=[(10 * H, 12 * H, (0, 1))]),  # 2 GPUs for 2 h
            job("2", attempts=[(10 * H, 11 * H, (0,)), (11.5 * H, 13 * H, (1,))], preemptions=1,
                gpu_s_lost=H, submitted=10 * H - 60)]
    rep = report(jobs, "user", 0, DAY)
    (ana,) = rep.groups
    row = ana.row()
    assert row["gpu_hours"] == 4 + 1 + 1.5 and row["jobs"] == 2 and row["succeeded"] == 2
    assert row["preempted"] == 1 and row["lost_gpu_hours"] == 1.0
    assert row["wait_avg_s"] == pytest.approx((10 * H + 60) / 2)  # from submit to the first attempt's start


def test_groups_by_user_team_and_class_with_a_total_and_the_biggest_user_first():
    jobs = [job("1", "ana", team="vision", priority="high", attempts=[(0, H, (0,))]),
            job("2", "bo", team="nlp", priority="low", attempts=[(0, 3 * H, (0, 1))], state="failed"),
            job("3", "bo", team="vision", priority="high", state="cancelled")]
    rep = report(jobs, "user", 0, DAY)
    assert [g.key for g in rep.groups] == ["bo", "ana"]
    assert by_key(rep)["bo"]["gpu_hours"] == 6
    assert (by_key(rep)["bo"]["failed"], by_key(rep)["bo"]["cancelled"], by_key(rep)["bo"]["jobs"]) == (1, 1, 2)
    total = rep.total.row()
    assert total["group"] == "TOTAL" and total["gpu_hours"] == 7 and total["jobs"] == 3
    assert (total["succeeded"], total["failed"], total["cancelled"]) == (1, 1, 1)
    assert by_key(report(jobs, "team", 0, DAY))["vision"]["jobs"] == 2
    classes = by_key(report(jobs, "class", 0, DAY))
    assert classes["high"]["gpu_hours"] == 1 and classes["low"]["failed"] == 1


def test_a_job_cancelled_before_it_started_counts_as_a_job_but_has_no_wait_and_no_gpu_hours():
    rep = report([job("1", state="cancelled", submitted=5.0)], "user", 0, DAY)
    row = rep.total.row()
    assert (row["jobs"], row["cancelled"], row["gpu_hours"]) == (1, 1, 0)
    assert row["wait_avg_s"] is None and row["wait_p95_s"] is None


def test_usage_is_clipped_to_the_window():
    rep = report([job("1", attempts=[(DAY - H, DAY + H, (0, 1))])], "user", DAY, 2 * DAY)
    assert rep.total.row()["gpu_hours"] == 2  # the hour inside, on 2 GPUs


def test_p95_is_the_nearest_rank():
    assert p95(range(1, 101)) == 95 and p95([7]) == 7 and p95([1, 2]) == 2
    waits = [job(str(i), submitted=0.0, attempts=[(float(i), float(i) + 1, (0,))]) for i in range(1, 21)]
    row = report(waits, "user", 0, DAY).total.row()
    assert row["wait_p95_s"] == 19 and row["wait_avg_s"] == 10.5


def test_gpu_type_is_what_the_job_ran_on_else_what_it_asked_for():
    types = {("n1", 0): "NVIDIA A100-40GB", ("n1", 1): "NVIDIA A100-40GB"}
    jobs = [job("1", attempts=[(0, H, (0,))]), job("2", state="cancelled", gpu_types=("V100",)),
            job("3", state="cancelled"), job("4", state="cancelled", gpus=0)]
    assert set(by_key(report(jobs, "gpu-type", 0, DAY, types=types))) == {"A100-40GB", "V100", "any", "none"}


def test_idle_gpu_hours_come_from_the_samples_that_saw_a_held_gpu_idle():
    samples = [{"t_ms": int(t * 1000), "idle": ["n1:0"] if t < 60 else []} for t in range(0, 120, 15)]
    jobs = [job("1", "ana", attempts=[(0, 120, (0,))]), job("2", "bo", attempts=[(0, 120, (1,))])]
    rep = report(jobs, "user", 0, DAY, samples=samples, sample_s=15)
    assert by_key(rep)["ana"]["idle_gpu_hours"] == round(60 / H, 6) and by_key(rep)["bo"]["idle_gpu_hours"] == 0
    assert rep.idle_from == 0
    unsampled = report(jobs, "user", 0, DAY)
    assert unsampled.idle_from is None and unsampled.total.row()["idle_gpu_hours"] is None


def test_a_gang_counts_every_ranks_gpus():
    gang = job("1", attempts=[(0, H, (0,))])
    gang["attempts"][0]["ranks"] = [["n1", [0, 1]], ["n2", [0, 1]]]
    assert report([gang], "user", 0, DAY).total.row()["gpu_hours"] == 4


def test_an_unknown_grouping_is_refused():
    with pytest.raises(InvalidRequestError, match="colour"):
        report([], "colour", 0, DAY)


def test_a_jobs_work_is_every_attempt_when_it_resumes_from_checkpoints_else_its_last_attempt():
    # preempted after 1 h, resumed for 2 h more (what `dispatch history --csv` writes as its run time)
    resumed = job("1", attempts=[(0, H, (0,)), (2 * H, 4 * H, (1,))]) | {"checkpointable": True}
    assert work_s(resumed) == 3 * H
    started_over = job("2", attempts=[(0, H, (0,)), (2 * H, 4 * H, (1,))])
    assert work_s(started_over) == 2 * H
    assert work_s(job("3")) == 0.0
