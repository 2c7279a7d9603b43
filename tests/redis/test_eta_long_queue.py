"""`dispatch eta` on a long queue (views/forecast.py past EXACT_UP_TO pending jobs): the jobs the
leader ranked ahead go first, in its order, by their estimates; the answer says it approximates."""

from dispatcher.clock import now_ms
from dispatcher.core.model import GpuInfo
from dispatcher.core.spec import build_spec
from dispatcher.scheduler.loop import Scheduler
from dispatcher.store import stats
from dispatcher.store.jobs import write_jobs
from dispatcher.store.nodes import write_heartbeat
from dispatcher.views import forecast


def test_a_long_queues_eta_counts_the_jobs_ranked_ahead_and_says_it_approximates(client, ns, monkeypatch):
    monkeypatch.setattr(forecast, "EXACT_UP_TO", 2)  # four pending jobs make a "long" queue here
    write_heartbeat(client, ns, "n1", [GpuInfo(0, "NVIDIA A100-40GB", 40.0)], 8, 64.0, now_ms())
    t = now_ms()
    ids = write_jobs(client, ns, [build_spec(command=["true"], user="u", gpus=1, est=600, submit_ms=t - 1000 * (9 - i))
                                  for i in range(5)])
    sched = Scheduler(client, ns)
    sched.cycle()  # the oldest starts; the next gets the GPU reserved for when it ends; the rest not reached
    sched.lease.release()
    assert stats.read(client, ns)["ranked"] == [ids[1]]
    eta = forecast.read_eta(client, ns, ids[1])
    assert eta["approximate"] == {"pending": 4, "ahead": 0, "ranked": True}, eta
    assert abs(eta["start"]["in_s"] - 600) < 10 and eta["start"]["after_jobs"] == [ids[0]], eta
    assert "approximate: of 4 pending jobs, the 0 the scheduler ranked ahead of it" in forecast.describe(eta)

    eta = forecast.read_eta(client, ns, ids[3])  # not reached: behind every ranked job, which is its earliest
    assert eta["approximate"] == {"pending": 4, "ahead": 1, "ranked": False}, eta
    assert abs(eta["start"]["in_s"] - 2 * 600) < 10, eta
    assert "so this is the earliest" in forecast.describe(eta)


def test_eta_says_held_and_never_rather_than_forecasting_a_start(client, ns, monkeypatch):
    """A held job gets its hold, not 'unknown; not waiting'; a job no node could ever hold, or one
    asking more GPUs than its team's limit, gets 'never', not a start (past EXACT_UP_TO the list
    forecast knows no team limit) nor '7 days'."""
    from dispatcher.store.pending import hold_job
    from dispatcher.store.policies import write_applied
    from dispatcher.store.scripts import Scripts

    monkeypatch.setattr(forecast, "EXACT_UP_TO", 2)
    write_applied(client, ns, "[teams.vision]\nlimit_gpus = 2\n", "test", now_ms())
    write_heartbeat(client, ns, "n1", [GpuInfo(i, "NVIDIA A100-40GB", 40.0) for i in range(4)], 8, 64.0, now_ms())
    t = now_ms()
    held, big, vision, *_ = write_jobs(client, ns, [
        build_spec(command=["true"], user="u", gpus=1, submit_ms=t),
        build_spec(command=["true"], user="u", gpus=8, submit_ms=t),
        build_spec(command=["true"], user="u", gpus=4, team="vision", submit_ms=t),
        *[build_spec(command=["true"], user="u", gpus=4, est=600, submit_ms=t - 1000) for _ in range(2)]])
    hold_job(Scripts(client, ns), client, ns, held, "hold", "alice", now_ms())
    sched = Scheduler(client, ns)
    sched.cycle()
    sched.lease.release()
    assert forecast.describe(forecast.read_eta(client, ns, held)) == \
        f"job {held}: not forecast: held by alice (dispatch release {held})"
    said = forecast.describe(forecast.read_eta(client, ns, big))
    assert said.startswith(f"job {big}: never, as the cluster and the policy stand: ") and "8" in said, said
    assert forecast.describe(forecast.read_eta(client, ns, vision)) == (
        f"job {vision}: never, as the cluster and the policy stand: team vision's limit is 2 GPUs at once "
        "(the policy's [teams]) and this job needs 4")


def test_eta_says_when_it_guesses_the_end_of_a_job_past_its_estimate(client, ns):
    # eta said "~60 s" on every call for a job waiting on runners past their 5 s estimates, while why said a day:
    # each plans with its own guess of such a runner's end, and eta now says which it made
    from dispatcher.store.scripts import Scripts

    write_heartbeat(client, ns, "n1", [GpuInfo(0, "NVIDIA A100-40GB", 40.0)], 8, 64.0, now_ms())
    t = now_ms()
    runner, waiter = write_jobs(client, ns, [build_spec(command=["sleep", "300"], user="u", gpus=1, est=5,
                                                        submit_ms=t - 120_000),
                                             build_spec(command=["true"], user="u", gpus=1, submit_ms=t - 60_000)])
    sched = Scheduler(client, ns)
    sched.cycle()
    epoch = int(client.hget(f"{ns}:job:{runner}", "epoch"))
    assert Scripts(client, ns).mark_running(runner, epoch, t - 90_000, 4242) == 1  # 85 s past its 5 s estimate
    sched.cycle()
    sched.lease.release()
    eta = forecast.read_eta(client, ns, waiter)
    assert eta["start"]["after_jobs"] == [runner] and eta["past_estimate"] == [runner], eta
    said = forecast.describe(eta)
    assert f"when job {runner} ends (a guess: job {runner} runs past its estimate, taken to run as much again " \
           "as it overran, at least a minute)" in said, said
