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
