"""Why an attempt is being stopped (workers/running.py): the one table of allowed changes, and an end
recorded for every reason (workers/outcomes.py)."""

from workers.outcomes import ENDINGS
from workers.running import NEXT, Running, Stopping


def running() -> Running:
    return Running("j1", 3, proc=None, spec=None, ckpt_dir=None)


def test_only_a_running_attempt_that_nobody_stops_is_falsy():
    assert not Stopping.NO and all(s for s in Stopping if s is not Stopping.NO)
    assert not running().stopping


def test_a_running_attempt_may_be_stopped_for_any_reason_and_takes_the_command_with_it():
    for why in set(Stopping) - {Stopping.NO}:
        run = running()
        assert run.stop_as(why, {"type": "x"}) and run.stopping is why and run.command == {"type": "x"}


def test_nothing_leaves_stale_and_nothing_goes_back_to_not_stopping():
    for why in Stopping:
        run = running()
        run.stop_as(Stopping.STALE)
        assert not run.stop_as(why, {"type": "cancel"}) and run.stopping is Stopping.STALE and run.command == {}
    assert all(Stopping.NO not in NEXT[s] for s in Stopping)


def test_a_cancel_wins_over_every_reason_but_stale_and_a_requeue_over_none():
    for first in set(Stopping) - {Stopping.NO, Stopping.STALE}:
        run = running()
        run.stop_as(first)
        assert not run.stop_as(Stopping.REQUEUE)
        assert run.stop_as(Stopping.CANCEL, {"reason": "r"}) and run.stopping is Stopping.CANCEL


def test_a_fenced_copy_becomes_stale_once_its_epoch_moved_but_is_never_fenced_twice():
    run = running()
    assert run.stop_as(Stopping.FENCED) and not run.stop_as(Stopping.FENCED) and not run.stop_as(Stopping.PREEMPT)
    assert run.stop_as(Stopping.STALE)


def test_an_attempt_whose_process_ended_on_its_own_keeps_that_end_but_may_still_be_void():
    # a job exited 0 just before its agent stopped; stop_all then marked it requeued while its end was being
    # recorded, and it ran again. Its own end stands; only stale or fenced (the copy is void) still apply.
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    for why in set(Stopping) - {Stopping.NO}:
        run = Running("j1", 3, proc=proc, spec=None, ckpt_dir=None)
        assert run.stop_as(why) is (why in (Stopping.STALE, Stopping.FENCED)), why


def test_every_reason_has_an_ending_and_the_values_are_the_old_strings():
    assert set(ENDINGS) == set(Stopping) == set(NEXT)
    assert [s.value for s in Stopping] == ["", "cancel", "stale", "requeue", "preempt", "shrink", "fenced", "gang",
                                           "hung", "timeout", "idle-session"]


def test_a_stop_that_finds_nothing_in_the_cgroup_yet_still_kills_the_jobs_first_process(tmp_path):
    # a cancel met a launch: mark_running said CANCEL_REQUESTED before the job's shell had moved itself into
    # its cgroup, so the kill found no process there, the job ran on, and a second cancel did nothing
    import os
    import subprocess
    import types

    from dispatcher.core.spec import build_spec
    from workers import proctrack
    from workers.jobs import Supervisor

    cgroup = tmp_path / "1.3"  # an attempt's cgroup its process has not joined yet: cgroup.procs is empty
    cgroup.mkdir()
    (cgroup / "cgroup.procs").write_text("")
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    run = Running("1", 3, proc, build_spec(command=["sleep", "60"], user="ada", submit_ms=1), tmp_path,
                  attempt=proctrack.Attempt("1", 3, proc.pid, cgroup, "n1", "tag"))
    try:
        run.stop_as(Stopping.CANCEL)
        Supervisor.stop_run(types.SimpleNamespace(node="n1", agent="tag"), run, 0)
        assert proc.wait(timeout=10) < 0  # killed by a signal, though its cgroup held nothing
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()


def test_a_cancel_sent_again_past_the_grace_of_the_first_kills_the_job_now():
    import signal
    import threading
    import time
    import types

    from dispatcher.core.spec import build_spec
    from workers import commands

    run = Running("1", 3, proc=None, spec=build_spec(command=["x"], user="ada", submit_ms=1, grace=2), ckpt_dir=None)
    kills = []
    sup = types.SimpleNamespace(lock=threading.Lock(), running={"1": run},
                                stop_run=lambda r, grace, sig=signal.SIGTERM: kills.append((grace, sig)))
    cancel = {"type": "cancel", "job": "1", "epoch": 3}
    commands.handle(sup, "1-0", cancel)
    assert kills == [(2.0, signal.SIGTERM)] and run.stopping is Stopping.CANCEL
    commands.handle(sup, "1-1", cancel)  # within its grace: the first one's kill is on its way
    assert kills == [(2.0, signal.SIGTERM)]
    run.stopping_since = time.monotonic() - 3  # its grace is over and it is still here
    commands.handle(sup, "1-2", cancel)
    assert kills[-1] == (0, signal.SIGKILL)


class _Recorder:
    """The one part of a Supervisor that record_end writes through: finish (here, a list)."""

    def __init__(self, fails=None):
        self.node, self.work_dir, self.fails, self.finished = "n1", "/nonexistent", fails, []

    def finish(self, job_id, epoch, state, code, reason, **kw):
        self.finished.append((job_id, epoch, state, code, reason))
        if self.fails:
            raise self.fails


def test_an_end_that_cannot_be_described_is_still_recorded_as_failed_never_dropped_to_run_again(monkeypatch):
    import redis
    import pytest

    from workers import outcomes

    def broken(sup, run, code):
        raise ValueError("no name for it")

    monkeypatch.setitem(outcomes.ENDINGS, Stopping.NO, broken)
    sup = _Recorder()
    outcomes.record_end(sup, running(), 3)
    [(job, epoch, state, code, reason)] = sup.finished
    assert (job, epoch, state, code) == ("j1", 3, "failed", 3)
    assert reason == "ended with exit code 3; dispatch could not record why (ValueError: no name for it): a bug to report"

    def redis_away(sup, run, code):  # Redis itself: the attempt stays the agent's, reconcile's later
        raise redis.exceptions.ConnectionError("gone")

    monkeypatch.setitem(outcomes.ENDINGS, Stopping.NO, redis_away)
    sup = _Recorder()
    with pytest.raises(redis.exceptions.ConnectionError):
        outcomes.record_end(sup, running(), 3)
    assert sup.finished == []

    sup = _Recorder(fails=ValueError("bad keyword"))  # finish was reached: its outbox has it, not written twice
    cancelled = running()
    cancelled.stop_as(Stopping.CANCEL, {"reason": "cancelled by ann"})
    with pytest.raises(ValueError):
        outcomes.record_end(sup, cancelled, -15)
    assert sup.finished == [("j1", 3, "cancelled", -15, "cancelled by ann")]


def test_output_redis_does_not_take_is_kept_to_a_cap_and_what_is_cut_is_said_where_it_was(monkeypatch):
    # a heavy writer through a server's restart lost a block from the middle of `dispatch logs`, silently:
    # 1 MiB was kept, the rest dropped without a word
    from workers import running as running_module

    monkeypatch.setattr(running_module, "UNSENT_MAX", 10)
    run = running()
    run.keep_unsent(b"0123456")
    assert run.unsent_bytes() == b"0123456" and run.unsent_cut == 0
    run.keep_unsent(b"789abcdef")  # 16 bytes: the oldest 6 are cut
    said = run.unsent_bytes()
    assert said.endswith(b"\n6789abcdef") and b"[dispatch: 6 bytes of output were cut here" in said, said
    run.sent()
    assert run.unsent_bytes() == b"" and run.unsent_cut == 0
