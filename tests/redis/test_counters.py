"""The scheduler's counters and histograms (store/counters.py) against a real server and the real
scheduler: counted once where each event is decided, and exported alike by every dashboard."""

import time

from dispatcher.clock import now_ms
from dispatcher.scheduler.counting import REQUEUE_KINDS, requeue_kind
from dispatcher.scheduler.loop import Scheduler
from dispatcher.store import control, counters, keys
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


def test_ends_are_counted_where_they_are_written_while_no_scheduler_leads(client, ns):
    # a crash-looping scheduler for 70 s: 12 jobs that ended meanwhile were never counted, even after a
    # restart (a new leader's whole read never sees an end); a pending job's cancel and a quarantine count too
    beat(client, ns, "a", gpus=2)
    ran, waiting = submit(client, ns, gpus=1, priority="low"), submit(client, ns, gpus=8)
    Scheduler(client, ns).cycle()
    scripts = Scripts(client, ns)
    epoch = read_job(client, ns, ran)["epoch"]
    assert scripts.mark_running(ran, epoch, now_ms() - 90_000, 4242) == 1
    assert scripts.finish(ran, "a", epoch, "succeeded", 0, now_ms()) == 1  # no scheduler runs now
    assert scripts.cancel(waiting, now_ms(), "cancelled by user") == 1
    got = counters.read(client, ns)
    assert got["counters"]["jobs_ended"] == {(("class", "low"), ("state", "succeeded")): 1,
                                             (("class", "normal"), ("state", "cancelled")): 1}
    [run] = got["histograms"]["job_run"].values()
    assert run["count"] == 1 and 89 < run["sum"] < 120
    Scheduler(client, ns).cycle()  # a new leader's first cycle counts none of them again
    assert counters.read(client, ns)["counters"]["jobs_ended"] == got["counters"]["jobs_ended"]


def test_a_garbled_counter_is_left_out(client, ns):
    client.hset(keys.metrics(ns), mapping={"queue_wait|class=high|bX": "1", "jobs_started|class=low": "two",
                                           "queue_wait|class=low|b0": "3", "queue_wait|class=low|count": "3",
                                           "nonsense": "1", "jobs_started|class=high": "4"})
    got = counters.read(client, ns)
    assert got["counters"]["jobs_started"] == {(("class", "high"),): 4}
    assert got["histograms"]["queue_wait"][(("class", "low"),)]["buckets"][-1] == 3


def test_start_latency_and_requeues_are_counted_by_class_and_kind(client, ns):
    """Each placed job's start is counted as its agent records it (its latency from placement, by
    class), and the mirror sees it go back to the queue (by class, and why: from its attempt's end)."""
    beat(client, ns, "a", gpus=3)
    high, normal, low = (submit(client, ns, gpus=1, priority=p) for p in ("high", "normal", "low"))
    sched = Scheduler(client, ns)
    sched.cycle()  # places all three
    sched.cycle()  # sees them assigned
    scripts = Scripts(client, ns)
    epoch = {j: read_job(client, ns, j)["epoch"] for j in (high, normal, low)}
    for job_id, after_ms in ((high, 1500), (normal, 40)):
        assigned = int(client.hget(keys.job(ns, job_id), "assigned_ms"))
        assert scripts.mark_running(job_id, epoch[job_id], assigned + after_ms, 4242) == 1
    sched.cycle()
    got = counters.read(client, ns)["histograms"]["start_latency"]
    assert {lbl: (h["count"], h["sum"]) for lbl, h in got.items()} == {(("class", "high"),): (1, 1.5),
                                                                       (("class", "normal"),): (1, 0.04)}
    assert got[(("class", "high"),)]["buckets"][:5] == [0, 0, 0, 0, 0]  # 1.5 s: over the 1 s bucket
    now = now_ms()
    scripts.finish(high, "a", epoch[high], "pending", None, now, "node a lost: no heartbeat for 12s",
                   lost_retries=3)
    scripts.finish(normal, "a", epoch[normal], "pending", None, now,
                   "preempted (graceful) by node a: idle: GPUs below 5% for 2h", preempted=True)
    scripts.finish(low, "a", epoch[low], "pending", None, now, "preempted (forced) by job 9: for a critical job",
                   preempted=True)  # never seen running: a requeue all the same, and no start
    sched.cycle()  # sees three requeues (and places them again)
    sched.cycle()
    got = counters.read(client, ns)
    assert got["counters"]["requeues"] == {(("class", "high"), ("kind", "node_lost")): 1,
                                           (("class", "normal"), ("kind", "idle")): 1,
                                           (("class", "low"), ("kind", "preempted")): 1}
    assert sum(h["count"] for h in got["histograms"]["start_latency"].values()) == 2
    time.sleep(1.1)  # the leader publishes the running jobs for the board at most once a second
    sched.cycle()
    text = exposition(ClusterCollector(Board(client, ns))).decode()
    assert 'dispatch_job_requeues_total{class="normal",kind="idle"} 1.0' in text
    assert 'dispatch_job_start_latency_seconds_count{class="high"} 1.0' in text
    for cls in ("high", "normal", "low"):  # placed again: each holds its GPU
        assert f'dispatch_class_gpus{{class="{cls}"}} 1.0' in text


def test_requeue_kinds():
    assert requeue_kind("preempted", "preempted (graceful) by job 7: a critical job waits") == "preempted"
    assert requeue_kind("preempted", "preempted (graceful) by node n: idle: GPUs below 5% for 2h") == "idle"
    assert requeue_kind("preempted", "idle: GPUs below 5% for 2h") == "idle"  # a gang's, stopped whole
    assert requeue_kind("lost", "rank 1's node n2 lost: no heartbeat for 11s") == "node_lost"
    assert requeue_kind("lost", "node n could not heartbeat in time (cut off from Redis, ...)") == "node_lost"
    assert requeue_kind("lost", "no progress reported for 600s (--hang-timeout); attempt lost") == "lost"
    assert requeue_kind("requeued", "node n agent stopped; requeued") == "other"
    assert set(REQUEUE_KINDS) >= {requeue_kind(o, "") for o in ("preempted", "lost", "requeued", "")}


def test_a_start_between_two_cycles_is_counted_from_the_record(client, ns):
    """A short job that starts and ends (or goes back) before the leader reads it running still counts
    its start: mark_running.lua counted it."""
    beat(client, ns, "a", gpus=2)
    done, back = submit(client, ns, gpus=1, priority="high"), submit(client, ns, gpus=1)
    sched = Scheduler(client, ns)
    sched.cycle()  # places both; the next cycle is the first to read them again
    scripts = Scripts(client, ns)
    for job_id, state in ((done, "succeeded"), (back, "pending")):
        epoch = read_job(client, ns, job_id)["epoch"]
        assigned = int(client.hget(keys.job(ns, job_id), "assigned_ms"))
        assert scripts.mark_running(job_id, epoch, assigned + 2000, 4242) == 1
        assert scripts.finish(job_id, "a", epoch, state, 0 if state == "succeeded" else None, assigned + 3000,
                              "preempted (graceful) by job 9: x", preempted=state == "pending") == 1
    sched.cycle()
    got = counters.read(client, ns)
    assert {lbl: (h["count"], h["sum"]) for lbl, h in got["histograms"]["start_latency"].items()} == {
        (("class", "high"),): (1, 2.0), (("class", "normal"),): (1, 2.0)}
    assert got["counters"]["requeues"] == {(("class", "normal"), ("kind", "preempted")): 1}
    assert got["counters"]["jobs_started"] == {(("class", "high"),): 1, (("class", "normal"),): 2}  # placed again


def test_a_start_is_counted_once_whoever_leads_and_whatever_a_mirror_saw(client, ns):
    """A job placed just before its leader's lease lapsed and was taken again (a new token: the
    mirror forgets what it expected of its commits) starts and ends unseen: its start counts once all
    the same. A stale copy's start (an epoch moved on), or a second report, counts nothing."""
    beat(client, ns, "a", gpus=1)
    job = submit(client, ns, gpus=1, priority="low")
    sched = Scheduler(client, ns)
    sched.cycle()  # places it
    client.delete(keys.scheduler_leader(ns))  # the lease lapsed
    sched.lease.recheck()
    scripts = Scripts(client, ns)
    epoch = read_job(client, ns, job)["epoch"]
    assigned = int(client.hget(keys.job(ns, job), "assigned_ms"))
    assert scripts.mark_running(job, epoch + 1, assigned + 300, 4242) == 0  # stale
    assert scripts.mark_running(job, epoch, assigned + 300, 4242) == 1
    assert scripts.mark_running(job, epoch, assigned + 900, 4242) == 0  # running already: no second start
    assert scripts.finish(job, "a", epoch, "succeeded", 0, assigned + 1000) == 1
    sched.cycle()  # leads again, under a new token; sees it ended
    got = counters.read(client, ns)
    assert got["counters"]["jobs_ended"] == {(("class", "low"), ("state", "succeeded")): 1}
    latency = got["histograms"]["start_latency"]
    assert {lbl: (h["count"], h["sum"]) for lbl, h in latency.items()} == {(("class", "low"),): (1, 0.3)}
    assert latency[(("class", "low"),)]["buckets"][:4] == [0, 0, 0, 1]  # 0.3 s: in the 0.5 s bucket


def test_a_placement_in_the_millisecond_of_its_preemption_is_a_start_and_a_shrunk_restart_is_none(client, ns):
    """A job forced off and placed again within the same millisecond (its last preemption and its new
    placement share a time) starts again: counted. A shrunk job restarted by its own agent on fewer
    GPUs (shrink.lua) is no new start: not counted."""
    beat(client, ns, "a", gpus=4)
    again, shrunk = submit(client, ns, gpus=1), submit(client, ns, gpus=2, priority="high")
    sched = Scheduler(client, ns)
    sched.cycle()  # places both
    scripts = Scripts(client, ns)
    epoch = {j: read_job(client, ns, j)["epoch"] for j in (again, shrunk)}
    t = now_ms()
    first = (t - int(client.hget(keys.job(ns, again), "assigned_ms"))) / 1000
    for job_id in (again, shrunk):
        assert scripts.mark_running(job_id, epoch[job_id], t, 4242) == 1
    assert scripts.finish(again, "a", epoch[again], "pending", None, t + 10, "preempted (forced) by operator x",
                          preempted=True) == 1
    assert scripts.commit_placement(again, "a", [3], epoch[again] + 1, t + 10, fence=sched.lease.fence) > 0
    assert scripts.mark_running(again, epoch[again] + 2, t + 30, 4242) == 1  # 20 ms after its placement
    pipe = client.pipeline(transaction=True)
    control.preempt(scripts, "a", shrunk, epoch[shrunk], t + 40, by="job 9", mode="shrink", reason="r", keep=(1,),
                    keep_wait=False, client=pipe)
    pipe.execute()
    restarted = scripts.shrink(shrunk, "a", epoch[shrunk], [1], t + 50)
    assert restarted > 0 and scripts.mark_running(shrunk, restarted, t + 60, 4243) == 1
    got = counters.read(client, ns)["histograms"]["start_latency"]
    assert {lbl: h["count"] for lbl, h in got.items()} == {(("class", "normal"),): 2, (("class", "high"),): 1}
    assert abs(got[(("class", "normal"),)]["sum"] - (first + 0.02)) < 1e-6


def test_an_operators_preemption_is_counted_as_the_schedulers_are(client, ns):
    from dispatcher.store.jobs import preempt_job

    beat(client, ns, "a", gpus=1)
    job = submit(client, ns, gpus=1, checkpointable=True)
    Scheduler(client, ns).cycle()
    scripts = Scripts(client, ns)
    assert scripts.mark_running(job, read_job(client, ns, job)["epoch"], now_ms(), 4242) == 1
    assert preempt_job(scripts, client, ns, job, now_ms(), force=False, by="user root") == "graceful"
    got = counters.read(client, ns)["counters"]["preemptions"]
    assert got == {(("class", "normal"), ("mode", "graceful")): 1}, got
