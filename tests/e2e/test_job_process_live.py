"""A job's process as a shell would start and end it: real agent and scheduler processes.

It starts with every signal at its default, whatever the agent came with (nohup, a shell's background
job); a command that is there but cannot be run fails as a shell reports it (126), one that is not
there as 127; a SIGKILL dispatch did not send fails the job once (137), as in Slurm, and is not rerun.
"""

import signal
import time
from contextlib import contextmanager

import pytest

pytestmark = pytest.mark.slow


@contextmanager
def ignoring(*signals):
    """What `nohup dispatch worker &` from a script hands its agent: these signals ignored."""
    before = {s: signal.signal(s, signal.SIG_IGN) for s in signals}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def test_an_agent_started_with_hangup_and_quit_ignored_starts_its_jobs_with_every_signal_at_its_default(cli):
    with ignoring(signal.SIGHUP, signal.SIGQUIT):
        cli.start("worker", "--node", "n1", "--fake-gpus", "1xA100-40GB")
    cli.start("scheduler")
    status = cli.submit("--", "grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status")
    assert cli.run("wait", status, "--timeout", "30", check=False).returncode == 0
    assert cli.run("logs", status).stdout.split() == ["SigBlk:", "0" * 16, "SigIgn:", "0" * 16]

    # a job that checkpoints on SIGHUP: its shell's trap runs (a shell cannot trap a signal ignored at its start)
    saves = "trap 'echo checkpointed; exit 0' HUP; echo running; while :; do sleep 0.1; done"
    job = cli.submit("--gpus", "1", "--checkpointable", "--checkpoint-signal", "HUP", "--grace", "60s",
                     "--", "sh", "-c", saves)
    cli.wait_for(lambda: "running" in cli.run("logs", job).stdout, what="the job to run")
    time.sleep(1.1)
    cli.run("preempt", job)
    cli.wait_for(lambda: "checkpointed" in cli.run("logs", job).stdout, what="the job's trap on SIGHUP")
    cli.run("cancel", job)


def test_a_command_that_is_there_but_cannot_be_run_fails_with_126_as_a_shell_says_it(cli, tmp_path):
    cli.start("worker", "--node", "n1", "--fake-gpus", "1xA100-40GB")
    cli.start("scheduler")
    script = tmp_path / "noexec.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    expected = {cli.submit("--", str(script)): (126, f"cannot start '{script}': Permission denied"),
                cli.submit("--", "/etc"): (126, "cannot start '/etc': Is a directory"),
                cli.submit("--", "/no/such/program"): (127, "cannot start '/no/such/program': No such file or "
                                                            "directory")}
    for job, (code, reason) in expected.items():
        p = cli.run("wait", job, "--timeout", "30", check=False)
        assert (p.returncode, p.stderr.strip()) == (code, f"{job}: failed (exit {code}): {reason}")
        assert cli.run("logs", job).stdout == reason + "\n"  # not setpriv's words


def test_a_job_that_sigkills_itself_fails_once_with_137_and_is_not_rerun(cli, tmp_path):
    cli.start("worker", "--node", "n1", "--fake-gpus", "1xA100-40GB")
    cli.start("scheduler")
    ran = tmp_path / "ran"
    job = cli.submit("--retries", "3", "--", "sh", "-c", f"echo ran >> {ran}; kill -9 $$")  # as the OOM killer
    p = cli.run("wait", job, "--timeout", "30", check=False)
    reason = "killed by signal SIGKILL (not sent by dispatch: out of memory, or someone's kill -9)"
    assert (p.returncode, p.stderr.strip()) == (128 + 9, f"{job}: failed: {reason}")  # as `wait --help` says
    shown = cli.show(job)
    assert (shown["state"], shown["exit_code"], shown["reason"], shown["attempt"]) == ("failed", -9, reason, 0)
    assert (shown["exit_status"], shown["signal"]) == (137, "SIGKILL")  # as wait exits, and its name
    time.sleep(1)
    assert ran.read_text() == "ran\n"


def test_a_job_that_fails_for_its_lost_attempts_has_no_exit_code_of_its_own_and_wait_says_1(cli):
    cli.start("worker", "--node", "n1", "--fake-gpus", "1xA100-40GB")
    cli.start("scheduler")
    job = cli.submit("--retries", "0", "--hang-timeout", "2s", "--grace", "1", "--", "sleep", "60")  # it hangs
    p = cli.run("wait", job, "--timeout", "40", check=False)
    assert p.returncode == 1 and "gave up after 1 lost attempts" in p.stderr, p  # (was 137: dispatch's own kill)
    shown = cli.show(job)
    assert (shown["state"], shown["exit_code"]) == ("failed", None), shown
    assert [a["outcome"] for a in shown["attempts"]] == ["lost"], shown["attempts"]  # the attempt keeps its signal


def test_a_job_that_fails_runs_again_within_its_retry_failed_and_wait_waits_for_its_last_attempt(cli):
    cli.start("worker", "--node", "n1", "--fake-gpus", "1xA100-40GB")
    cli.start("scheduler")
    flaky = cli.submit("--retry-failed", "2", "--", "sh", "-c", "echo try $DISPATCH_ATTEMPT; [ $DISPATCH_ATTEMPT -ge 2 ]")
    broken = cli.submit("--retry-failed", "1", "--", "sh", "-c", "exit 3")
    assert cli.run("wait", flaky, "--timeout", "60").returncode == 0  # not the first failure's 1
    assert cli.run("wait", broken, "--timeout", "60", check=False).returncode == 3
    shown = cli.show(flaky)
    assert (shown["state"], shown["failures"], shown["retry_failed"]) == ("succeeded", 2, 2), shown
    assert [a["outcome"] for a in shown["attempts"]] == ["failed", "failed", "succeeded"], shown["attempts"]
    assert cli.run("logs", flaky).stdout.count("try ") == 3
    shown = cli.show(broken)
    assert (shown["state"], shown["exit_code"], shown["failures"], shown["reason"]) == ("failed", 3, 2, "exit code 3")
    assert shown["attempts"][0]["reason"] == "exit code 3; run again (failure 1 of 1 --retry-failed allows)"


def test_a_job_killed_by_a_realtime_signal_fails_once_with_the_signals_name_and_is_not_rerun(cli, tmp_path):
    cli.start("worker", "--node", "n1", "--fake-gpus", "1xA100-40GB")
    cli.start("scheduler")
    ran = tmp_path / "ran"
    job = cli.submit("--retries", "3", "--", "sh", "-c", f"echo ran >> {ran}; kill -40 $$")  # SIGRTMIN+6
    p = cli.run("wait", job, "--timeout", "30", check=False)
    assert (p.returncode, p.stderr.strip()) == (128 + 40, f"{job}: failed: killed by signal SIGRTMIN+6")
    shown = cli.show(job)
    assert (shown["state"], shown["exit_code"], shown["attempt"], shown["signal"]) == ("failed", -40, 0, "SIGRTMIN+6")
    time.sleep(1)
    assert ran.read_text() == "ran\n"
