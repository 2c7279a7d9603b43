"""The scheduler's counters and histograms (store/counters.py) against a real server and the real
scheduler: counted once where each event is decided, and exported alike by every dashboard."""

from dispatcher.clock import now_ms
from dispatcher.scheduler.loop import Scheduler
from dispatcher.store import counters, keys
from dispatcher.store.jobs import read_job
from dispatcher.store.scripts import Scripts
from dispatcher.views.board import Board
from dispatcher.views.metrics import ClusterCollector, exposition
from tests.redis.test_store import beat, submit


def test_starts_ends_and_cycles_are_counted_once_and_every_exporter_shows_the_same(client, ns):
    beat(client, ns, "a", gpus=2)
    quick, slow = submit(client, ns, gpus=1, priority="high"), submit(client, ns, gpus=1)
    sched = Scheduler(client, ns)
    sched.cycle()
    scripts = Scripts(client, ns)
    for job_id, state in ((quick, "succeeded"), (slow, "failed")):
        epoch = read_job(client, ns, job_id)["epoch"]
        assert scripts.mark_running(job_id, epoch, now_ms(), 4242) == 1
        assert scripts.finish(job_id, "a", epoch, state, 0 if state == "succeeded" else 3, now_ms()) == 1
    sched.cycle()  # sees both ends
    got = counters.read(client, ns)
    started = got["counters"]["jobs_started"]
    assert started == {(("class", "high"),): 1, (("class", "normal"),): 1}
    assert got["counters"]["jobs_ended"] == {(("class", "high"), ("state", "succeeded")): 1,
                                             (("class", "normal"), ("state", "failed")): 1}
    waits = got["histograms"]["queue_wait"]
    assert {lbl: h["count"] for lbl, h in waits.items()} == {(("class", "high"),): 1, (("class", "normal"),): 1}
    assert all(h["buckets"][-1] == h["count"] for h in waits.values())  # cumulative, +Inf last
    assert sum(h["count"] for h in got["histograms"]["job_run"].values()) == 2
    assert got["histograms"]["cycle"][(("kind", "full"),)]["count"] == 2

    first, second = (exposition(ClusterCollector(Board(client, ns))).decode() for _ in range(2))
    line = 'dispatch_queue_wait_seconds_count{class="high"} 1.0'
    assert line in first and line in second  # a second exporter counts nothing again
    assert 'dispatch_jobs_ended_total{class="normal",state="failed"} 1.0' in first
    assert 'dispatch_build_info{version=' in first and 'dispatch_gpu_info{' in first


def test_a_garbled_counter_is_left_out(client, ns):
    client.hset(keys.metrics(ns), mapping={"queue_wait|class=high|bX": "1", "jobs_started|class=low": "two",
                                           "queue_wait|class=low|b0": "3", "queue_wait|class=low|count": "3",
                                           "nonsense": "1", "jobs_started|class=high": "4"})
    got = counters.read(client, ns)
    assert got["counters"]["jobs_started"] == {(("class", "high"),): 4}
    assert got["histograms"]["queue_wait"][(("class", "low"),)]["buckets"][-1] == 3
