"""A job's process as a shell would start and end it: real agent and scheduler processes.

It starts with every signal at its default, whatever the agent came with (nohup, a shell's background
job); a command that is there but cannot be run fails as a shell reports it (126), one that is not
there as 127; a SIGKILL dispatch did not send fails the job once (137), as in Slurm, and is not rerun.
"""

import pytest

pytestmark = pytest.mark.slow


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
