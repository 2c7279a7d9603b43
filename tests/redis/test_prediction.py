"""Runtime prediction against a real server: finished jobs feed the history (finish.lua), a new
submit reads it (one round trip with the id), and the scheduler's policy sees the prediction."""

import msgpack

from dispatcher.core import predict
from dispatcher.views.explain import explain
from dispatcher.clock import now_ms
from dispatcher.core.spec import build_spec
from dispatcher.store import keys
from dispatcher.store.codec import decode_spec
from dispatcher.store.jobs import read_job, write_jobs
from dispatcher.scheduler.mirror import Mirror
from dispatcher.store.scripts import Scripts


def submit(client, ns, command=("python", "train.py", "--lr", "0.1"), user="alice", **kw):
    spec = build_spec(command=list(command), user=user, submit_ms=now_ms(), gpus=1, **kw)
    (job_id,) = write_jobs(client, ns, [spec])
    return job_id, spec


def run(client, ns, s, job_id, spec, *, seconds, state="succeeded", peak_gb=None):
    """The job placed, started `seconds` ago, and ended as `state` by its agent (which passes the spec)."""
    epoch = s.commit_placement(job_id, "n1", (0,), int(client.hget(keys.job(ns, job_id), "epoch")), now_ms())
    t = now_ms()
    assert s.mark_running(job_id, epoch, t - int(seconds * 1000), 1) == 1
    if peak_gb is not None:
        client.hset(keys.job(ns, job_id), "peak_gpu_mem_gb", peak_gb)
    assert s.finish(job_id, "n1", epoch, state, 0 if state == "succeeded" else 1, t, spec=spec) == 1
    return epoch


def history(client, ns, spec):
    return [msgpack.unpackb(r) for r in client.lrange(keys.history(ns, predict.fingerprint(spec)), 0, -1)]


def test_two_successful_runs_make_the_third_submit_predicted_and_the_policy_sees_it(client, ns):
    s = Scripts(client, ns)
    for seconds, peak in ((100, 3.5), (120, 4.0)):
        job_id, spec = submit(client, ns)
        run(client, ns, s, job_id, spec, seconds=seconds, peak_gb=peak)
    assert [round(r["d"]) for r in history(client, ns, spec)] == [120, 100]  # newest first
    third, _ = submit(client, ns, command=("python", "train.py", "--lr", "0.01"))  # same sweep: same history
    job = read_job(client, ns, third)
    assert job["prediction"]["duration_s"] == 110.0  # median of 100 and 120
    assert (job["prediction"]["runs"], job["prediction"]["source"]) == (2, "command")
    assert job["prediction"]["peak_gpu_mem_gb"] == 4.0  # the largest peak of the runs
    assert 0 < job["prediction"]["confidence"] <= 0.5, job["prediction"]  # 2 / (2 + 2) x spread
    assert job["plan_est_s"] == 110.0  # no --est: the policy is told the prediction
    mirror = Mirror(client, ns)
    mirror.refresh()
    assert mirror.backlog.jobs[third].spec.est_s == 110.0
    stored = decode_spec(client.hget(keys.job(ns, third), "spec"))
    assert stored.est_s is None  # the stored spec (what agents check signatures on) is never changed
    assert explain(client, ns, third)["job"]["plan_est_s"] == 110.0


def test_a_failed_or_cancelled_job_and_a_requeue_record_no_run(client, ns):
    s = Scripts(client, ns)
    job_id, spec = submit(client, ns)
    run(client, ns, s, job_id, spec, seconds=50, state="failed")
    job_id, spec = submit(client, ns)
    epoch = s.commit_placement(job_id, "n1", (0,), 0, now_ms())
    s.mark_running(job_id, epoch, now_ms() - 30_000, 1)
    assert s.finish(job_id, "n1", epoch, "pending", None, now_ms(), "preempted", preempted=True, spec=spec) == 1
    assert history(client, ns, spec) == []
    # the requeued job runs again: its run time is both attempts (30 s + 20 s), recorded once
    epoch = run(client, ns, s, job_id, spec, seconds=20)
    assert [round(r["d"]) for r in history(client, ns, spec)] == [50]
    assert s.finish(job_id, "n1", epoch, "succeeded", 0, now_ms(), spec=spec) == 0  # a replayed outcome is refused
    assert len(history(client, ns, spec)) == 1


def test_users_estimates_are_corrected_by_their_history(client, ns):
    s = Scripts(client, ns)
    for i in range(3):  # bob's jobs run twice as long as he says, whatever the command
        job_id, spec = submit(client, ns, command=("sh", "-c", f"job{i}"), user="bob", est="10m")
        run(client, ns, s, job_id, spec, seconds=1200)
    job_id, _ = submit(client, ns, command=("python", "other.py"), user="bob", est="30m")
    job = read_job(client, ns, job_id)
    assert job["est_s"] == 1800 and job["plan_est_s"] == 3600  # 30 min x 2
    assert job["prediction"]["source"] == "user"  # no run of this command yet: the user's runs
    job_id, _ = submit(client, ns, command=("python", "other.py"), user="carol", est="30m")
    assert read_job(client, ns, job_id)["plan_est_s"] == 1800  # carol has no history: as given


def test_malformed_history_entries_and_a_history_key_of_the_wrong_type_never_break_submit(client, ns):
    spec = build_spec(command=["python", "x.py"], user="dave", submit_ms=now_ms(), gpus=1)
    fp_key = keys.history(ns, predict.fingerprint(spec))
    client.rpush(fp_key, b"\xffjunk", msgpack.packb([1]), msgpack.packb({"d": "x"}), msgpack.packb({"d": -1}),
                 msgpack.packb({"d": 60.0, "e": "bad", "m": float("nan")}), msgpack.packb({"d": 90}))
    client.set(keys.user_history(ns, "dave"), "not a list")
    (job_id,) = write_jobs(client, ns, [spec])
    job = read_job(client, ns, job_id)
    assert job["prediction"]["duration_s"] == 75.0 and job["prediction"]["runs"] == 2, job["prediction"]
    client.hset(keys.job(ns, job_id), "plan_est_s", "garbage")
    mirror = Mirror(client, ns)
    mirror.refresh()
    assert mirror.backlog.jobs[job_id].spec.est_s is None and not mirror.bad  # ignored, not quarantined


def test_show_gives_the_error_of_the_prediction_after_the_run(client, ns):
    s = Scripts(client, ns)
    for seconds in (100, 100):
        job_id, spec = submit(client, ns)
        run(client, ns, s, job_id, spec, seconds=seconds)
    job_id, spec = submit(client, ns)
    run(client, ns, s, job_id, spec, seconds=80)
    err = read_job(client, ns, job_id)["prediction_error"]
    assert (err["predicted_s"], round(err["actual_s"]), round(err["error_s"])) == (100.0, 80, 20), err
    assert err["rel_error"] == 0.25


def test_a_sweeps_jobs_submitted_before_any_run_finished_plan_with_the_prediction_a_later_one_got(client, ns):
    s = Scripts(client, ns)
    mirror = Mirror(client, ns)
    early = [submit(client, ns)[0] for _ in range(2)]  # no history yet: no prediction, 'unknown'
    mirror.refresh()
    assert [mirror.backlog.jobs[j].spec.est_s for j in early] == [None, None]
    for seconds in (100, 120):  # two runs of the sweep finish meanwhile (on other GPUs)
        job_id, spec = submit(client, ns)
        run(client, ns, s, job_id, spec, seconds=seconds)
    late, spec = submit(client, ns, command=("python", "train.py", "--lr", "0.01"))  # another point of the sweep
    assert read_job(client, ns, late)["plan_est_s"] == 110.0
    assert client.hget(keys.job(ns, late), "fp") == predict.fingerprint(spec).encode()  # (the mirror's twins')
    assert mirror.refresh() is None  # more than arrivals: the early copies' order changed
    assert [mirror.backlog.jobs[j].spec.est_s for j in early + [late]] == [110.0, 110.0, 110.0]
