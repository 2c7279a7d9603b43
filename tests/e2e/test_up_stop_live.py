"""Stopping `dispatch up` and talking to it as an operator does when it runs in the background of a
script: Ctrl-C (kill -INT) stops it even where it started with SIGINT ignored, a hangup under nohup
stops nothing, an impatient second Ctrl-C costs no job an attempt, a second `up` names the first
whatever its flags, and a hung server is said to hang, not to restart."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from dispatcher.core import errors

from .test_up_live import DISPATCH, UP, UpHarness, _env, _one_line, pid_alive, ups  # noqa: F401 (ups: the fixture)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def _as_a_script_background_job():
    """What `dispatch up ... &` in a non-interactive shell under nohup gets: SIGINT and SIGQUIT ignored
    (the shell's background job), SIGHUP ignored (nohup)."""
    for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)


def _start_in_background(ups: UpHarness) -> subprocess.Popen:
    log = open(ups.home / "up.log", "wb")
    up = subprocess.Popen(DISPATCH + UP, env=_env(ups.home), stdout=log, stderr=subprocess.STDOUT,
                          start_new_session=True, preexec_fn=_as_a_script_background_job)
    ups.procs.append(up)
    return up


def _lock_free(ups: UpHarness) -> bool:
    with open(ups.home / "up.lock") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True


def test_an_up_started_in_the_background_of_a_script_is_named_said_to_hang_and_stopped_by_ctrl_c(ups):
    up = _start_in_background(ups)
    rec = ups.wait_running(up)

    # a second `up` without the first one's flags (this host has no NVML) names the running one
    second = subprocess.run(DISPATCH + ["up"], env=_env(ups.home), capture_output=True, text=True, timeout=60)
    line = _one_line(second.stderr)
    assert second.returncode != 0 and "already runs" in line and f"pid {up.pid}" in line, line
    assert "NVML" not in line, line

    # its server hung (stopped, not dead): nothing restarts it, and commands say what it is
    os.kill(rec["server_pid"], signal.SIGSTOP)
    try:
        p = ups.run("queue")
    finally:
        os.kill(rec["server_pid"], signal.SIGCONT)
    assert p.returncode == errors.EXIT_CONNECT, p.stderr
    line = _one_line(p.stderr)
    assert "does not answer" in line and "restarting" not in line, line
    assert f"pid {up.pid}" in line and f"kill -CONT {rec['server_pid']}" in line, line
    assert ups.run("queue").returncode == 0, ups.logs()

    os.kill(up.pid, signal.SIGHUP)  # under nohup a hangup stops nothing
    up.send_signal(signal.SIGINT)  # Ctrl-C, though it came ignored
    try:
        code = up.wait(60)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"kill -INT did not stop an `up` started with SIGINT ignored\n{ups.logs()}") from None
    text = (ups.home / "up.log").read_text()
    assert code == 0 and text.strip().endswith("dispatch: stopped") and "Traceback" not in text, text
    assert _lock_free(ups) and not (ups.home / "server.json").exists()


def test_a_double_ctrl_c_requeues_a_job_slow_to_stop_without_counting_it_lost(ups):
    up = ups.start("up1")
    ups.wait_running(up)
    # a job that ignores SIGTERM (a slow handler): only SIGKILL ends it; --retries 0: one lost attempt fails it
    script = f'trap "" TERM; echo "start $DISPATCH_JOB_ID $DISPATCH_ATTEMPT" >> {ups.runs_file}; sleep 300'
    p = ups.run("submit", "--retries", "0", "--", "sh", "-c", script)
    assert p.returncode == 0, p.stderr
    job = p.stdout.strip()
    ups.wait_for(lambda: ups.counts()[("start", job)], what=f"job {job} to start")

    up.send_signal(signal.SIGINT)
    time.sleep(1.0)
    up.send_signal(signal.SIGINT)  # impatient
    assert up.wait(30) == 0, ups.logs()
    text = (ups.home / "up1.log").read_text()
    assert "did not stop; killing it" not in text, text

    again = ups.start("up2")
    ups.wait_running(again)
    ups.wait_for(lambda: ups.counts()[("start", job)] >= 2, timeout=60, what=f"job {job} to run again")
    shown = json.loads(ups.run("show", job, "--json").stdout)
    assert shown["lost"] == 0 and shown["state"] == "running", shown
    assert [a["outcome"] for a in shown["attempts"]] == ["requeued"], shown["attempts"]
    assert shown["attempts"][0]["reason"] == "dispatch up stopped (its server with it); requeued", shown["attempts"]


def test_dispatch_down_stops_the_up_of_its_state_dir_its_job_back_in_the_queue_and_a_second_down_is_a_no_op(ups):
    up = ups.start("up1")
    ups.wait_running(up)
    script = f'echo "start $DISPATCH_JOB_ID $DISPATCH_ATTEMPT" >> {ups.runs_file}; sleep 300'
    job = ups.run("submit", "--", "sh", "-c", script).stdout.strip()
    ups.wait_for(lambda: ups.counts()[("start", job)], what=f"job {job} to start")

    down = ups.run("down", "--now")
    assert down.returncode == 0 and down.stdout == f"dispatch up (pid {up.pid}) stopped\n", (down, ups.logs())
    try:  # stopped when down says so: ended (a zombie this test has not reaped yet), not a moment later
        state = (Path("/proc") / str(up.pid) / "stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        state = "gone"
    assert state in ("Z", "gone"), state
    assert up.wait(10) == 0 and _lock_free(ups)
    again = ups.run("down")  # as `systemctl stop` of a stopped unit: nothing to do, no error
    assert again.returncode == 0 and "nothing to stop" in again.stderr and again.stdout == "", again

    up2 = ups.start("up2")
    ups.wait_running(up2)  # the job was put back, not lost: it runs again under the next `up`
    ups.wait_for(lambda: ups.counts()[("start", job)] >= 2, timeout=60, what=f"job {job} to run again")
    shown = json.loads(ups.run("show", job, "--json").stdout)
    assert shown["lost"] == 0 and [a["outcome"] for a in shown["attempts"]] == ["requeued"], shown


def test_commands_name_the_running_up_whose_server_record_was_removed(ups):
    # `rm server.json` under a running up: every command said "no server: start one with dispatch up",
    # which then refused because one runs
    up = ups.start("up1")
    ups.wait_running(up)
    (ups.home / "server.json").unlink()
    p = ups.run("queue")
    line = _one_line(p.stderr)
    assert p.returncode == errors.EXIT_CONNECT and f"`dispatch up` (pid {up.pid}) runs" in line, line
    assert "server.json there is gone" in line and "dispatch down" in line, line
    assert ups.run("down").returncode == 0 and up.wait(30) == 0


def test_dispatch_down_requeues_the_jobs_of_an_agent_beside_up_with_their_checkpoint_signal(ups):
    up = ups.start("up1")
    ups.wait_running(up)
    log = open(ups.home / "beside.log", "wb")  # as the README's "another agent beside a `dispatch up`"
    beside = subprocess.Popen(DISPATCH + ["worker", "--node", "gpu-08", "--fake-gpus", "2xA100-40GB", "--secret-file",
                                          str(ups.home / "secret"), "--allow-root-jobs"],
                              env=_env(ups.home), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    ups.procs.append(beside)
    ups.wait_for(lambda: "gpu-08" in ups.run("nodes").stdout, what="the agent beside up")
    script = (f'trap "echo term $DISPATCH_JOB_ID >> {ups.runs_file}; exit 1" TERM; '
              f'echo "start $DISPATCH_JOB_ID $DISPATCH_ATTEMPT $DISPATCH_NODE" >> {ups.runs_file}; sleep 300 & wait')
    job = ups.run("submit", "--gpus", "2", "--retries", "0", "--", "sh", "-c", script).stdout.strip()
    other = ups.run("submit", "--gpus", "2", "--retries", "0", "--", "sh", "-c", script).stdout.strip()
    ups.wait_for(lambda: ups.counts()[("start", job)] and ups.counts()[("start", other)], what="both jobs to start")
    assert {line.split()[3] for line in ups.runs_file.read_text().splitlines()} == {"box", "gpu-08"}

    assert ups.run("down").returncode == 0 and up.wait(10) == 0
    ends = ups.runs_file.read_text()
    assert f"term {job}" in ends and f"term {other}" in ends, ends  # each got its checkpoint signal, before down
    # returned; not killed by its agent's keeper when the server went (the old way: SIGKILL, a lost attempt)
    up2 = ups.start("up2")
    ups.wait_running(up2)
    for j in (job, other):
        shown = json.loads(ups.run("show", j, "--json").stdout)
        assert shown["lost"] == 0 and [a["outcome"] for a in shown["attempts"]] == ["requeued"], shown
        assert shown["attempts"][0]["reason"] == "dispatch up stopped (its server with it); requeued", shown


def test_dispatch_down_now_kills_the_jobs_of_an_agent_beside_up_at_once_still_requeued(ups):
    up = ups.start("up1")
    ups.wait_running(up)
    log = open(ups.home / "beside.log", "wb")
    beside = subprocess.Popen(DISPATCH + ["worker", "--node", "gpu-08", "--fake-gpus", "2xA100-40GB", "--secret-file",
                                          str(ups.home / "secret"), "--allow-root-jobs"],
                              env=_env(ups.home), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    ups.procs.append(beside)
    ups.wait_for(lambda: "gpu-08" in ups.run("nodes").stdout, what="the agent beside up")
    stubborn = f'trap "" TERM; echo "start $DISPATCH_JOB_ID $$" >> {ups.runs_file}; while true; do sleep 0.2; done'
    job = ups.run("submit", "--gpus", "2", "--grace", "60s", "--", "sh", "-c", stubborn).stdout.strip()
    other = ups.run("submit", "--gpus", "2", "--grace", "60s", "--", "sh", "-c", stubborn).stdout.strip()
    ups.wait_for(lambda: ups.counts()[("start", job)] and ups.counts()[("start", other)], what="both jobs to start")
    pids = [int(line.split()[2]) for line in ups.runs_file.read_text().splitlines()]

    t0 = time.monotonic()
    assert ups.run("down", "--now").returncode == 0 and up.wait(10) == 0
    took = time.monotonic() - t0
    assert took < 8, took  # (not the 10 s a stop gives a job that ignores its TERM)
    text = (ups.home / "up1.log").read_text()
    assert "still running as the server stopped" not in text, text  # (it named jobs already requeued)
    assert not [p for p in pids if pid_alive(p)], "a job of the agent beside up outlived `down --now`"
    up2 = ups.start("up2")
    ups.wait_running(up2)
    for j in (job, other):
        shown = json.loads(ups.run("show", j, "--json").stdout)
        assert shown["lost"] == 0 and [a["outcome"] for a in shown["attempts"]] == ["requeued"], shown
