"""Failure handling against a real server, in one process: the scheduler lease and its fencing
token, dead nodes' jobs requeued as lost attempts within their retry budget, and how long the
scheduler watches a node before it calls it dead (docs/guarantees.md)."""

import time

import pytest

from dispatcher.config import Timing
from dispatcher.scheduler.liveness import HeartbeatWatch
from dispatcher.core.plan import Plan
from dispatcher.core.model import GpuInfo
from dispatcher.clock import now_ms
from dispatcher.scheduler.loop import Scheduler
from dispatcher.core.spec import build_spec
from dispatcher.store import control, keys
from dispatcher.store.jobs import read_job, write_jobs
from dispatcher.store.leader import current_leader
from dispatcher.store.nodes import write_heartbeat
from dispatcher.store.scripts import Outcome, Scripts
from tests.redis.test_store import beat, submit

TIMEOUT_S = 0.5  # node_timeout_s of the schedulers below: short, so a node dies within a test
FAST = Timing(node_timeout_s=TIMEOUT_S, lease_s=5.0)
#: A lease that lapses within a test, yet outlasts a stall of the (loaded) test machine between two calls.
SHORT_LEASE_S = 1.0


def place_and_start(client, ns, sched, job_id, node="a"):
    """One cycle places the job on `node`; its agent (played here) starts it. Returns the epoch."""
    plan = sched.cycle()
    assert [(p.job_id, p.node) for p in plan.placements] == [(job_id, node)]
    epoch = read_job(client, ns, job_id)["epoch"]
    assert Scripts(client, ns).mark_running(job_id, epoch, now_ms(), 4242) == 1
    return epoch


def silence(seconds=TIMEOUT_S + 0.2):
    """Let a node that no longer heartbeats go silent past the timeout (other nodes beat again after)."""
    time.sleep(seconds)


# -- one scheduler leads ------------------------------------------------------------------------

def test_of_two_schedulers_exactly_one_leads_and_places(client, ns):
    beat(client, ns, "a", gpus=2)
    job = submit(client, ns, gpus=1)
    s1, s2 = Scheduler(client, ns, holder="s1"), Scheduler(client, ns, holder="s2")
    plans = {s.lease.holder: s.cycle() for s in (s1, s2)}
    assert [(p.job_id, p.node) for p in plans["s1"].placements] == [(job, "a")]
    assert plans["s2"] == Plan()  # the standby planned nothing
    assert (s1.leading, s2.leading) == (True, False)
    assert current_leader(client, ns) == (s1.lease.token, "s1")
    assert read_job(client, ns, job)["state"] == "assigned"

    # both keep cycling: the standby still does nothing with a new job
    second = submit(client, ns, gpus=1)
    assert s2.cycle().placements == ()
    assert [p.job_id for p in s1.cycle().placements] == [second]


def test_a_released_lease_passes_to_the_standby_with_a_larger_token(client, ns):
    beat(client, ns, "a", gpus=2)
    s1, s2 = Scheduler(client, ns, holder="s1"), Scheduler(client, ns, holder="s2")
    s1.cycle()
    first_token = s1.lease.token
    assert s2.cycle().placements == () and not s2.leading

    s1.lease.release()  # what a scheduler does when it stops
    assert current_leader(client, ns) is None
    job = submit(client, ns, gpus=1)
    assert [(p.job_id, p.node) for p in s2.cycle().placements] == [(job, "a")]
    assert s2.leading and s2.lease.token > first_token
    assert current_leader(client, ns) == (s2.lease.token, "s2")
    assert s1.cycle() == Plan() and not s1.leading  # the old leader now stands by


def test_a_lease_that_is_not_renewed_expires_and_the_standby_takes_over(client, ns):
    beat(client, ns, "a", gpus=2)
    short = Timing(lease_s=SHORT_LEASE_S)
    s1, s2 = Scheduler(client, ns, timing=short, holder="s1"), Scheduler(client, ns, timing=short, holder="s2")
    s1.cycle()
    assert s2.cycle().placements == () and not s2.leading
    time.sleep(SHORT_LEASE_S + 0.3)  # s1 is "paused": it does not renew
    job = submit(client, ns, gpus=1)
    assert [p.job_id for p in s2.cycle().placements] == [job]
    assert current_leader(client, ns)[1] == "s2"
    assert s1.cycle().placements == () and not s1.leading


def test_a_commit_with_a_stale_fence_is_refused_and_leaves_the_job_pending(client, ns):
    beat(client, ns, "a", gpus=2)
    s = Scripts(client, ns)
    sched = Scheduler(client, ns, holder="leader")
    sched.cycle()  # leads (nothing to place yet)
    job = submit(client, ns, gpus=1)

    assert s.commit_placement(job, "a", (0,), 0, now_ms(), fence="1 somebody-else") == Outcome.NOT_LEADER
    assert s.commit_placement(job, "a", (0,), 0, now_ms(), fence=f"{sched.lease.token + 1} leader") == Outcome.NOT_LEADER
    shown = read_job(client, ns, job)
    assert (shown["state"], shown["epoch"], shown["node"]) == ("pending", 0, None)
    assert client.zscore(keys.jobs_pending(ns), job) is not None
    assert client.zscore(keys.jobs_active(ns), job) is None
    assert client.hlen(keys.node_alloc(ns, "a")) == 0

    # the leader's own fence is taken
    assert s.commit_placement(job, "a", (0,), 0, now_ms(), fence=sched.lease.fence) == 1
    assert read_job(client, ns, job)["state"] == "assigned"


def test_a_leader_that_lost_its_lease_can_neither_place_nor_preempt(client, ns):
    beat(client, ns, "a", gpus=2)
    s = Scripts(client, ns)
    short = Timing(lease_s=SHORT_LEASE_S)
    old = Scheduler(client, ns, timing=short, holder="old")
    old.cycle()
    stale_fence = old.lease.fence
    running = submit(client, ns, gpus=1)
    epoch = s.commit_placement(running, "a", (0,), 0, now_ms(), fence=stale_fence)
    assert s.mark_running(running, epoch, now_ms(), 4242) == 1

    time.sleep(SHORT_LEASE_S + 0.3)
    Scheduler(client, ns, timing=short, holder="new").cycle()  # takes over
    waiting = submit(client, ns, gpus=1)
    assert s.commit_placement(waiting, "a", (1,), 0, now_ms(), fence=stale_fence) == Outcome.NOT_LEADER
    assert control.preempt(s, "a", running, epoch, now_ms(), by="job x", mode="forced", reason="stale plan",
                           fence=stale_fence) == Outcome.NOT_LEADER
    assert client.xlen(keys.node_control(ns, "a")) == 0  # nor its command
    assert read_job(client, ns, waiting)["state"] == "pending"
    assert read_job(client, ns, running)["state"] == "running"


# -- dead nodes -----------------------------------------------------------------------------

def test_a_running_job_on_a_silent_node_is_requeued_as_a_lost_attempt_and_reruns_elsewhere(client, ns):
    beat(client, ns, "a", gpus=1)
    sched = Scheduler(client, ns, timing=FAST)
    job = submit(client, ns, gpus=1)
    epoch = place_and_start(client, ns, sched, job, "a")

    beat(client, ns, "b", gpus=1)  # b comes up; a beats no more
    sched.cycle()
    silence()
    beat(client, ns, "b", gpus=1)
    assert sched.cycle() == Plan()  # the cycle that finds a dead only requeues its jobs
    shown = read_job(client, ns, job)
    assert (shown["state"], shown["attempt"], shown["epoch"], shown["lost"], shown["retries"]) == (
        "pending", 1, epoch + 1, 1, 3), shown
    assert "node a lost" in shown["reason"]
    (lost,) = shown["attempts"]
    assert (lost["attempt"], lost["node"], lost["gpus"], lost["outcome"]) == (0, "a", [0], "lost"), lost
    assert lost["started_at"] and lost["ended_at"] >= lost["started_at"]
    assert client.hlen(keys.node_alloc(ns, "a")) == 0
    assert sched.stats.requeued_lost == 1

    # the copy on a (if it ever comes back) is fenced: its outcome is refused
    assert Scripts(client, ns).finish(job, "a", epoch, "succeeded", 0, now_ms()) == 0
    beat(client, ns, "b", gpus=1)
    assert [(p.job_id, p.node) for p in sched.cycle().placements] == [(job, "b")]


def test_a_job_out_of_retries_fails_when_its_node_dies_and_its_epoch_moves(client, ns):
    beat(client, ns, "a", gpus=1)
    sched = Scheduler(client, ns, timing=FAST)
    spec = build_spec(command=["sleep", "100"], user="alice", submit_ms=now_ms(), gpus=1, retries=0)
    (job,) = write_jobs(client, ns, [spec])
    epoch = place_and_start(client, ns, sched, job, "a")

    silence()
    sched.cycle()
    shown = read_job(client, ns, job)
    assert shown["state"] == "failed" and "gave up after 1 lost attempts" in shown["reason"], shown
    assert (shown["epoch"], shown["lost"], shown["retries"]) == (epoch + 1, 1, 0)
    assert [a["outcome"] for a in shown["attempts"]] == ["lost"]
    assert client.zscore(keys.jobs_pending(ns), job) is None
    assert client.zscore(keys.jobs_active(ns), job) is None
    assert client.hlen(keys.node_alloc(ns, "a")) == 0
    assert Scripts(client, ns).finish(job, "a", epoch, "succeeded", 0, now_ms()) == 0  # the cut-off copy


def test_the_retry_budget_counts_every_lost_attempt(client, ns):
    sched = Scheduler(client, ns, timing=FAST)
    job = submit(client, ns, gpus=1, retries=1)
    for n, node in enumerate(("a", "b")):
        beat(client, ns, node, gpus=1)
        epoch = place_and_start(client, ns, sched, job, node)
        assert epoch == 2 * n + 1
        silence()
        sched.cycle()
    shown = read_job(client, ns, job)
    assert (shown["state"], shown["lost"]) == ("failed", 2), shown
    assert "gave up after 2 lost attempts (retries 1)" in shown["reason"]
    assert [(a["attempt"], a["node"], a["outcome"]) for a in shown["attempts"]] == [(0, "a", "lost"),
                                                                                      (1, "b", "lost")]


def test_a_job_whose_node_dies_during_its_preemptions_grace_is_requeued_as_preempted_not_lost(client, ns):
    # `dispatch preempt`, then the agent killed within the grace: the attempt counted as lost, and a job
    # with --retries 0 failed ("gave up after 1 lost attempts")
    from dispatcher.store.jobs import preempt_job

    beat(client, ns, "a", gpus=1)
    sched = Scheduler(client, ns, timing=FAST)
    job = submit(client, ns, gpus=1, retries=0, checkpointable=True, grace="20s")
    place_and_start(client, ns, sched, job, "a")
    assert preempt_job(Scripts(client, ns), client, ns, job, now_ms(), force=False, by="alice") == "graceful"
    beat(client, ns, "b", gpus=1)
    sched.cycle()
    silence()
    beat(client, ns, "b", gpus=1)
    sched.cycle()  # a is dead: its job goes back
    shown = read_job(client, ns, job)
    assert (shown["state"], shown["lost"], shown["preemptions"]) == ("pending", 0, 1), shown
    assert shown["attempts"][-1]["outcome"] == "preempted" and "dispatch preempt" in shown["reason"], shown


def test_a_job_only_assigned_on_a_dead_node_goes_back_without_counting_as_lost(client, ns):
    beat(client, ns, "a", gpus=1)
    sched = Scheduler(client, ns, timing=FAST)
    job = submit(client, ns, gpus=1, retries=0)  # a lost attempt would fail it at once
    sched.cycle()
    assigned = read_job(client, ns, job)
    assert (assigned["state"], assigned["node"]) == ("assigned", "a")  # its agent never started it

    silence()
    sched.cycle()
    shown = read_job(client, ns, job)
    assert (shown["state"], shown["attempt"], shown["epoch"], shown["lost"]) == (
        "pending", 1, assigned["epoch"] + 1, 0), shown
    assert shown["gpu_s_lost"] == 0
    assert [(a["node"], a["outcome"]) for a in shown["attempts"]] == [("a", "lost")]


def test_a_node_that_keeps_beating_is_never_declared_dead(client, ns):
    beat(client, ns, "a", gpus=1)
    sched = Scheduler(client, ns, timing=FAST)
    job = submit(client, ns, gpus=1)
    epoch = place_and_start(client, ns, sched, job, "a")
    deadline = time.monotonic() + 3 * TIMEOUT_S
    while time.monotonic() < deadline:
        time.sleep(0.1)
        beat(client, ns, "a", gpus=1)
        sched.cycle()
    shown = read_job(client, ns, job)
    assert (shown["state"], shown["epoch"], shown["lost"], shown["attempts"]) == ("running", epoch, 0, [])


def test_a_scheduler_that_just_started_watches_a_full_timeout_before_declaring_a_node_dead(client, ns):
    # a node last heard of a minute ago (say Redis restarted, or the scheduler was down)
    write_heartbeat(client, ns, "old", [GpuInfo(0, "NVIDIA A100-40GB", 40.0)], 8, 64.0, now_ms() - 60_000)
    s = Scripts(client, ns)
    job = submit(client, ns, gpus=1)
    epoch = s.commit_placement(job, "old", (0,), 0, now_ms())
    assert s.mark_running(job, epoch, now_ms(), 4242) == 1

    timeout_s = 2.0  # room for a stall of the test machine before the second look
    sched = Scheduler(client, ns, timing=Timing(node_timeout_s=timeout_s))
    assert sched.cycle().placements == ()  # "old" is offered no work: its heartbeat is stale
    assert read_job(client, ns, job)["state"] == "running"  # but its job is not given up at once
    time.sleep(0.5)
    sched.cycle()
    assert read_job(client, ns, job)["state"] == "running"  # not yet: it has not watched long enough

    time.sleep(timeout_s - 0.5 + 0.3)
    sched.cycle()
    shown = read_job(client, ns, job)
    assert (shown["state"], shown["lost"]) == ("pending", 1), shown


def test_a_standby_that_takes_over_watches_a_full_timeout_too(client, ns):
    beat(client, ns, "a", gpus=1)
    short = Timing(node_timeout_s=TIMEOUT_S, lease_s=SHORT_LEASE_S)
    s1 = Scheduler(client, ns, timing=short, holder="s1")
    job = submit(client, ns, gpus=1)
    place_and_start(client, ns, s1, job, "a")
    s2 = Scheduler(client, ns, timing=short, holder="s2")
    assert s2.cycle() == Plan() and not s2.leading  # stands by

    time.sleep(SHORT_LEASE_S + 0.3)  # s1 stopped renewing; a has been silent past the timeout, but s2 never watched it
    s2.cycle()
    assert s2.leading and read_job(client, ns, job)["state"] == "running"
    silence()
    s2.cycle()
    assert read_job(client, ns, job)["state"] == "pending"


# -- the watch itself, on a clock the test moves --------------------------------------------

class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def test_the_watch_counts_silence_from_the_last_change_of_the_heartbeat_value():
    clock = Clock()
    watch = HeartbeatWatch(10.0, clock=clock)
    watch.observe({"a": 111, "b": 222})
    clock.t += 6
    watch.observe({"a": 112, "b": 222})  # a beat, b repeats its old value
    clock.t += 6
    watch.observe({"a": 112, "b": 222})
    assert (watch.dead("a"), watch.dead("b")) == (False, True)
    assert watch.silent_s("a") == pytest.approx(6) and watch.silent_s("b") == pytest.approx(12)


def test_the_watch_starts_on_a_node_it_has_never_seen_when_first_asked():
    clock = Clock()
    watch = HeartbeatWatch(10.0, clock=clock)
    clock.t += 100
    assert not watch.dead("gone")  # no heartbeat record at all: the watch starts now
    clock.t += 10.5
    assert watch.dead("gone")


def test_a_node_whose_agent_waits_longer_is_taken_for_dead_only_after_the_agents_timeout():
    clock = Clock()  # the scheduler says 3 s, the agent 10 s (its keeper fences its jobs at 7.5 s): a job
    watch = HeartbeatWatch(3.0, clock=clock)  # rerun at 3 s would run beside its first copy for seconds
    watch.observe({"a": 1, "b": 1}, {"a": 10.0, "b": 2.0})
    clock.t += 5
    assert (watch.dead("a"), watch.dead("b")) == (False, True)
    clock.t += 5.5
    assert watch.dead("a")


def test_a_heartbeat_carries_its_agents_node_timeout_to_the_schedulers_mirror(client, ns):
    from dispatcher.scheduler.mirror import Mirror

    write_heartbeat(client, ns, "a", [GpuInfo(0, "NVIDIA A100-40GB", 40.0)], 8, 64.0, now_ms(), timeout_s=10.0)
    write_heartbeat(client, ns, "b", [GpuInfo(0, "NVIDIA A100-40GB", 40.0)], 8, 64.0, now_ms())  # (an old agent)
    nodes = {n.name: n.timeout_s for n in Mirror(client, ns)._read_nodes(full=True)}
    assert nodes == {"a": 10.0, "b": 0.0}


@pytest.mark.slow
def test_a_leader_whose_first_read_outlasts_its_lease_keeps_leading(client, ns):
    """The lease is renewed from a side path: a new leader reading a long queue (here 40,000 jobs,
    several lease TTLs on this machine) is not overtaken by a standby, and its first commit takes."""
    import threading

    beat(client, ns, "a", gpus=2)
    spec = build_spec(command=["true"], user="alice", submit_ms=now_ms(), gpus=4)  # never fits: waits
    for _ in range(8):
        write_jobs(client, ns, [spec] * 5_000)
    job = submit(client, ns, gpus=1, priority="high")
    lease_s = SHORT_LEASE_S / 2  # a quiet machine reads the queue in under 2 s: the TTL must be shorter still
    short = Timing(lease_s=lease_s, node_timeout_s=3600.0)
    leader = Scheduler(client, ns, timing=short, holder="reader")
    stop = threading.Event()
    loop = threading.Thread(target=leader.run, args=(stop,), daemon=True)
    t0 = time.monotonic()
    loop.start()
    standby = Scheduler(client, ns, timing=short, holder="standby")
    try:
        while current_leader(client, ns) is None:  # the loop takes the lease, then reads
            time.sleep(0.01)
        while read_job(client, ns, job)["state"] == "pending":
            assert time.monotonic() - t0 < 120, "the leader never placed the job"
            assert standby.cycle() == Plan() and not standby.leading
            time.sleep(0.1)
        took_s = time.monotonic() - t0
        assert took_s > 2 * lease_s, f"the first cycle took {took_s:.1f}s: too short to show anything"
        assert read_job(client, ns, job)["node"] == "a"
        assert current_leader(client, ns)[1] == "reader"
    finally:
        stop.set()
        loop.join(30)
