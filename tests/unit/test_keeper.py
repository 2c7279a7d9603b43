"""The node's keeper kills the node's jobs at its deadline even while a report to Redis hangs: a node cut
off by dropped packets has every Redis call wait for its socket timeout, and the chaos suite saw such
reports hold the kill back past the moment the scheduler reran the job elsewhere (an overlap)."""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from workers.keeper import PID_DIR

ROOT = Path(__file__).resolve().parents[2]
FENCE_S = 2.0


@pytest.fixture
def blackhole():
    """A TCP port that takes connections and never answers, as a server behind dropped packets."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    yield f"redis://127.0.0.1:{s.getsockname()[1]}/0"
    s.close()


def test_the_keeper_kills_at_its_deadline_though_its_report_to_redis_hangs(tmp_path, blackhole):
    (tmp_path / PID_DIR).mkdir()
    def job(job_id: str, argv: list[str]):  # a job's process, with the marks the agent gives it
        return subprocess.Popen(argv, start_new_session=True,
                                env={**os.environ, "DISPATCH_JOB_ID": job_id, "DISPATCH_EPOCH": "1"})

    ended = job("1", ["true"])  # left unreaped: the keeper reports it
    running = job("2", ["sleep", "60"])
    time.sleep(0.3)
    (tmp_path / PID_DIR / "1").write_text(f"{ended.pid} 1")
    (tmp_path / PID_DIR / "2").write_text(f"{running.pid} 1")
    env = {**os.environ, "DISPATCH_KEEPER_URL": blackhole, "PYTHONPATH": str(ROOT)}
    start = time.monotonic()
    keeper = subprocess.Popen([sys.executable, "-m", "workers.keeper", str(tmp_path), repr(FENCE_S), repr(start), "t"],
                              stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        while running.poll() is None and time.monotonic() - start < 10:
            time.sleep(0.02)
        killed_after = time.monotonic() - start
        time.sleep(1.5)  # the hung report times out (1 s) and says so
    finally:
        running.kill()
        running.wait()
        ended.wait()
        keeper.kill()
        log = keeper.communicate()[1].decode(errors="replace")
    assert "recording the end of job 1 failed" in log, log  # the report was tried, and hung on the dead link
    margin = max(0.5, FENCE_S / 0.9 * 0.1)  # config.Timing.margin_s for this fence: the scheduler's slack
    assert killed_after < FENCE_S + margin, f"killed {killed_after:.2f}s after the last heartbeat\n{log}"


def test_a_kept_end_answers_for_its_own_job_only(tmp_path):
    """The ends an agent keeps (keeper.keep_exit) stand for the attempt that ended, for a later look
    at an earlier epoch of the same job (the server lost the requeue too), and never for a job that
    was given the same id again after the server lost its submit."""
    from workers.keeper import kept_end, keep_exit, prune_exits

    keep_exit(tmp_path, "7", 3, 0, 1_000, stamp=555)
    assert kept_end(tmp_path, "7", 3, 555) == (3, 0, 1_000)
    assert kept_end(tmp_path, "7", 1, 555) == (1, 0, 1_000)  # the same job, Redis back at an earlier epoch
    assert kept_end(tmp_path, "7", 4, 555) is None  # a later attempt has not ended
    assert kept_end(tmp_path, "7", 3, 556) is None  # another job under a reissued id
    assert kept_end(tmp_path, "7", 3, 0) == (3, 0, 1_000)  # a reader that does not know the submit time
    assert kept_end(tmp_path, "7", 1, 0) is None  # ... trusts the same epoch only
    assert kept_end(tmp_path, "8", 3, 555) is None
    keep_exit(tmp_path, "9", 2, 1, 2_000)  # kept by the keeper: no submit time
    assert kept_end(tmp_path, "9", 2, 777) == (2, 1, 2_000) and kept_end(tmp_path, "9", 1, 777) is None
    old = time.time() - 3600
    os.utime(tmp_path / "exits" / "7", (old, old))
    prune_exits(tmp_path)
    assert kept_end(tmp_path, "7", 3, 555) is None and kept_end(tmp_path, "9", 2, 0) is not None


def test_the_fence_kills_though_the_work_dir_takes_no_mark(tmp_path):
    # a full disk under the work dir made the fence's mark raise before its kill: the keeper died
    # (a traceback in up's output) and the copy ran on past the moment the scheduler reran the job
    from workers.keeper import FENCED_DIR, fence

    (tmp_path / PID_DIR).mkdir()
    (tmp_path / FENCED_DIR).write_text("")  # no directory can be made there, as on a full disk
    running = subprocess.Popen(["sleep", "60"], start_new_session=True,
                               env={**os.environ, "DISPATCH_JOB_ID": "3", "DISPATCH_EPOCH": "1"})
    try:
        time.sleep(0.3)
        (tmp_path / PID_DIR / "3").write_text(f"{running.pid} 1")
        assert fence(tmp_path, "a test") == ["3"]
        assert running.wait(timeout=5) == -9
    finally:
        running.kill()
        running.wait()


def test_a_job_that_crashed_while_its_agent_was_stopped_is_reported_failed_and_a_fenced_one_lost(tmp_path):
    # a job killed by a signal dispatch did not send (its own abort, the OOM killer) while its agent was
    # stopped past the fence: the keeper reported its -6 as every kill is (a lost attempt), and it ran again
    import signal

    from dispatcher.store.exits import reported_outcome
    from workers.keeper import ExitReports, fence

    (tmp_path / PID_DIR).mkdir()
    crashed, fenced, before = (subprocess.Popen(["sleep", "60"], start_new_session=True,
                                                env={**os.environ, "DISPATCH_JOB_ID": j, "DISPATCH_EPOCH": "1"})
                               for j in ("3", "4", "5"))
    try:
        time.sleep(0.3)
        os.kill(before.pid, signal.SIGKILL)  # dead before this keeper looked (its agent's death killed it)
        time.sleep(0.2)
        for job, p in (("3", crashed), ("4", fenced), ("5", before)):
            (tmp_path / PID_DIR / job).write_text(f"{p.pid} 1")
        keeper = ExitReports("", "", agent=os.getppid())  # (this test stands for the agent: it lives)
        assert [job for job, *_ in keeper.ended(tmp_path)] == ["5"]  # it sees 3 and 4 alive
        os.kill(crashed.pid, signal.SIGABRT)  # nobody reaps either: their agent is stopped
        time.sleep(0.3)
        assert fence(tmp_path, "a test") == ["4"]  # (3 is dead already)
        time.sleep(0.3)
        assert "3" not in [job for job, *_ in keeper.ended(tmp_path)]  # not yet: its agent may be dying
        time.sleep(ExitReports.SETTLE_S)
        reports = {job: (epoch, code, ms) for job, epoch, code, ms in keeper.ended(tmp_path)}
        assert reported_outcome(reports["4"], 1) is None  # the fence's own kill is no end: that attempt was lost
        assert reported_outcome(reports["5"], 1) is None  # nor a death it did not see happen
        state, code, _, reason = reported_outcome(reports["3"], 1)
        assert (state, code) == ("failed", -6) and reason.startswith("killed by signal SIGABRT (not sent by dispatch")
        assert reported_outcome(reports["3"], 1, stopping=True) is None  # a cancel's or a preemption's, maybe
        assert reported_outcome((1, -9, 0), 1) is None  # an agent's own kept kill: lost, as before
        keeper.agent += 10**6  # its agent dead: its jobs died with it (lost), no crash
        assert reported_outcome({j: (e, c, ms) for j, e, c, ms in keeper.ended(tmp_path)}["3"], 1) is None
        for job in ("3", "4", "5"):  # (its agent reaped them and let their pid files go)
            (tmp_path / PID_DIR / job).unlink()
        keeper.note_alive(tmp_path)
        assert keeper.alive == set() and keeper.dead == {}, "what it noted goes with the attempts"
    finally:
        for p in (crashed, fenced, before):
            p.kill()
            p.wait()


def test_an_attempt_whose_cgroup_is_gone_is_never_taken_for_another_agents_job_of_the_same_id(tmp_path):
    # two deployments on one host both have a job 1 at epoch 1: a keeper that listed its leftover cgroup
    # 1.1 just before its agent removed it once looked for "job 1, epoch 1" across the host, and killed -9
    # the other deployment's job 1 as it started (a CI run beside another)
    from workers import proctrack
    from workers.keeper import read_attempts

    marks = {"DISPATCH_JOB_ID": "1", "DISPATCH_EPOCH": "1"}
    ours = subprocess.Popen(["sleep", "60"], start_new_session=True,
                            env={**os.environ, **marks, "DISPATCH_AGENT": proctrack.agent_tag(tmp_path)})
    theirs = subprocess.Popen(["sleep", "60"], start_new_session=True,
                              env={**os.environ, **marks, "DISPATCH_AGENT": proctrack.agent_tag(tmp_path / "b")})
    try:
        gone = tmp_path / "cgroup-removed"
        deadline = time.monotonic() + 5
        while len(proctrack.pids(proctrack.Attempt("1", 1, ours.pid, gone))) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proctrack.pids(proctrack.Attempt("1", 1, 0, gone)) == set()  # of no known agent, no group
        assert proctrack.pids(proctrack.Attempt("1", 1, ours.pid, gone)) == {ours.pid}  # its own group only
        assert proctrack.pids(proctrack.Attempt("1", 1, 0, gone, agent=proctrack.agent_tag(tmp_path))) == {ours.pid}
        root = proctrack.node_cgroup(tmp_path)
        if root is not None:  # a leftover cgroup under this agent's node cgroup is this agent's attempt
            proctrack.make_cgroup(proctrack.attempt_cgroup(root, "1", 1))
            try:
                [left] = read_attempts(tmp_path)
                assert left.agent == proctrack.agent_tag(tmp_path)
            finally:
                proctrack.remove_cgroup(proctrack.attempt_cgroup(root, "1", 1))
                root.rmdir()
        assert theirs.poll() is None
    finally:
        for p in (ours, theirs):
            p.kill()
            p.wait()
