"""The node agent's idle watch (workers/idle.py) against a real server: the warning written once and
cleared, the requeue marked and sent once per spell at the attempt's epoch, and the board's alert."""

import threading
from types import SimpleNamespace

import msgpack

from dispatcher.views.board import Board
from dispatcher.core.model import GpuInfo
from dispatcher.clock import now_ms
from dispatcher.core.spec import build_spec
from dispatcher.store import keys
from dispatcher.store.policies import write_policy
from dispatcher.store.jobs import read_job, write_jobs
from dispatcher.store.nodes import write_heartbeat
from dispatcher.store.scripts import Scripts
from workers.idle import IdleWatch

POLICY = '[defaults]\nidle_warn = "20s"\nidle_requeue = "60s"\n'


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def running_job(client, ns, scripts, gpus=(0, 1)):
    """A job placed on node n1 and started there (its agent played here); returns (id, epoch)."""
    (job_id,) = write_jobs(client, ns, [build_spec(command=["sleep", "1"], user="u", submit_ms=now_ms(),
                                                   gpus=len(gpus))])
    epoch = scripts.commit_placement(job_id, "n1", gpus, 0, now_ms())
    assert scripts.mark_running(job_id, epoch, now_ms(), 4242) == 1
    return job_id, epoch


def watch_of(client, ns, scripts, runs, clock):
    supervisor = SimpleNamespace(lock=threading.Lock(), running={r.job_id: r for r in runs})
    return IdleWatch(client, ns, "n1", supervisor, scripts, heartbeat_s=1.0, monotonic=clock, wall=lambda: 1e9)


def sample(util):
    return [GpuInfo(i, "NVIDIA A100-40GB", 40.0, util_pct=u) for i, u in enumerate(util)]


def beats(watch, clock, util, seconds):
    """One sample a second for `seconds`, then one more; returns what that last one did."""
    for _ in range(seconds):
        watch.sample(sample(util))
        clock.t += 1
    return watch.sample(sample(util))


def control_commands(client, ns):
    return [msgpack.unpackb(f[b"c"], raw=False) for _, f in client.xrange(keys.node_control(ns, "n1"))]


def test_an_idle_job_is_warned_once_cleared_when_busy_and_requeued_once_past_the_policy(client, ns):
    scripts = Scripts(client, ns)
    write_policy(client, ns, POLICY, "test", "default", now_ms())
    job_id, epoch = running_job(client, ns, scripts)
    run = SimpleNamespace(job_id=job_id, epoch=epoch, gpus=(0, 1), stopping="")
    clock = Clock()
    watch = watch_of(client, ns, scripts, [run], clock)

    assert beats(watch, clock, [0, 0], 19) == {}  # 19 s into the spell
    clock.t += 1
    assert watch.sample(sample([0, 0])) == {job_id: "warn"}
    shown = read_job(client, ns, job_id)
    assert shown["warning"] == "GPUs idle: all below 5% utilization for 20s; the policy requeues the job after 1m idle"
    assert shown["idle_since_at"] == 1e9 - 20
    clock.t += 1
    assert watch.sample(sample([0, 0])) == {}  # written on change only
    clock.t += 1
    assert watch.sample(sample([0, 50])) == {job_id: "clear"}  # one busy GPU ends the spell
    assert read_job(client, ns, job_id)["warning"] is None

    assert beats(watch, clock, [1, 2], 59) == {}
    clock.t += 1
    assert watch.sample(sample([1, 2])) == {job_id: "requeue"}
    job = read_job(client, ns, job_id)
    assert (job["state"], job["preempted_by"], job["preempt_reason"]) == ("preempting", "node n1",
                                                                          "idle: GPUs below 5% for 1m")
    (cmd,) = control_commands(client, ns)
    assert (cmd["type"], cmd["job"], cmd["epoch"], cmd["mode"]) == ("preempt", job_id, epoch, "graceful")
    clock.t += 1
    assert watch.sample(sample([0, 0])) == {}  # the same spell never requeues twice
    watch.requeued.clear()  # even a watch that forgot it (a restarted agent) is refused by the epoch
    assert watch.sample(sample([0, 0])) == {}
    assert read_job(client, ns, job_id)["state"] == "preempting"


def test_the_warning_is_refused_for_an_attempt_no_longer_running_and_goes_with_the_attempt(client, ns):
    scripts = Scripts(client, ns)
    job_id, epoch = running_job(client, ns, scripts)
    assert scripts.idle_warning(job_id, epoch + 1, 5, "stale") == 0
    assert scripts.idle_warning(job_id, epoch, 5, "idle") == 1
    assert scripts.finish(job_id, "n1", epoch, "pending", None, now_ms(), "requeued") == 1
    job = read_job(client, ns, job_id)
    assert job["warning"] is None and job["idle_since_at"] is None
    assert scripts.idle_warning(job_id, epoch + 1, 5, "idle") == 0  # pending: nothing to warn about


def test_without_a_published_policy_the_defaults_warn_after_30_minutes_and_never_requeue(client, ns):
    scripts = Scripts(client, ns)
    job_id, epoch = running_job(client, ns, scripts, gpus=(0,))
    clock = Clock()
    watch = watch_of(client, ns, scripts, [SimpleNamespace(job_id=job_id, epoch=epoch, gpus=(0,), stopping="")],
                     clock)
    assert beats(watch, clock, [0], 1799) == {}
    clock.t += 1
    assert watch.sample(sample([0])) == {job_id: "warn"}
    clock.t += 1e6
    assert watch.sample(sample([0])) == {job_id: "clear"}  # a gap in the samples: nothing known, a new spell
    assert read_job(client, ns, job_id)["state"] == "running" and control_commands(client, ns) == []


def test_the_board_raises_the_idle_alert_from_the_jobs_warning(client, ns):
    scripts = Scripts(client, ns)
    write_heartbeat(client, ns, "n1", list(sample([0, 0])), 8, 64.0, now_ms())
    job_id, epoch = running_job(client, ns, scripts, gpus=(1,))
    assert Board(client, ns).overview()["alerts"] == []
    assert scripts.idle_warning(job_id, epoch, now_ms() - 600_000, "GPUs idle: all below 5% utilization for 5m") == 1
    (alert,) = Board(client, ns).overview()["alerts"]
    assert (alert["kind"], alert["subject"]) == ("idle_gpu", "n1:1")
    assert alert["message"] == f"n1 GPU 1 held by job {job_id}: GPUs idle: all below 5% utilization for 5m " \
                               "(idle for 10m)"
