"""A job's checkpoint signal reaches its main process before its children: a shell script that waits
for a child runs its trap (the checkpoint), rather than seeing the child die first and ending without
it. A real shell and real signals, through proctrack.signal_attempt as the agent sends them."""

import os
import signal
import subprocess

from workers import proctrack


def test_a_shell_waiting_on_its_child_runs_its_term_trap_every_time(tmp_path):
    out = tmp_path / "trapped"
    marks = {"DISPATCH_JOB_ID": "77", "DISPATCH_EPOCH": "3", "DISPATCH_NODE": "sig-test"}
    missed = 0
    for i in range(20):
        out.write_text("")
        p = subprocess.Popen(["sh", "-c", f'trap "echo stopped >> {out}; exit 0" TERM; echo up; sleep 60 & wait'],
                             env={**os.environ, **marks}, stdout=subprocess.PIPE, start_new_session=True, text=True)
        assert p.stdout.readline() == "up\n"
        attempt = proctrack.Attempt("77", 3, pgid=p.pid, node="sig-test")
        while len(proctrack.pids(attempt)) < 2:  # the shell and its sleep
            pass
        proctrack.signal_attempt(attempt, signal.SIGTERM)
        p.wait(timeout=10)
        missed += "stopped" not in out.read_text()
        proctrack.signal_attempt(attempt, signal.SIGKILL)
    assert missed == 0, f"the trap did not run {missed} times of 20"


def test_the_main_process_is_signalled_before_the_others(monkeypatch):
    sent = []
    monkeypatch.setattr(proctrack, "pids", lambda attempt: {1, 9, 17, 33})
    monkeypatch.setattr(proctrack.os, "kill", lambda pid, sig: sent.append(pid))
    proctrack.signal_attempt(proctrack.Attempt("77", 3, pgid=17, cgroup=tmp_cgroup()), signal.SIGTERM)
    assert sent[0] == 17 and sorted(sent) == [1, 9, 17, 33]


def tmp_cgroup():
    """A cgroup path that is never written to for SIGTERM (signal_attempt writes cgroup.kill for SIGKILL
    only), so no process group is signalled: only the members, one by one."""
    from pathlib import Path

    return Path("/nonexistent/cgroup")
