"""What a Slurm or task-spooler user types at `dispatch submit`: Slurm's short flags and sizes with units
work; a command the node would not run as they mean (a script without ./, a shell line as one word, a
script's #SBATCH lines) is submitted with a one-line warning saying what to write instead."""

from __future__ import annotations

import os


def test_slurms_short_flags_and_sizes_with_units_are_taken(cli):
    job = cli.submit("-J", "train", "-c", "2", "-t", "30:00", "--mem", "4G", "--gpu-mem", "512M", "--gpus", "1",
                     "-o", "out-%j.txt", "--", "true")
    shown = cli.show(job)
    assert (shown["name"], shown["cpus"], shown["time_limit_s"], shown["mem_gb"], shown["gpu_mem_gb"]) == \
        ("train", 2, 1800, 4.0, 0.5), shown
    assert cli.show(cli.submit("-D", "/tmp", "--", "true"))["cwd"] == "/tmp"  # sbatch's --chdir
    assert cli.show(cli.submit("--chdir", "/var", "--", "true"))["cwd"] == "/var"
    for bad in ("4X", "G", "-1G"):
        p = cli.run("submit", "--mem", bad, "--", "true", check=False)
        assert p.returncode == 2 and p.stderr.startswith("dispatch: error: --mem: ") and \
            len(p.stderr.splitlines()) == 1, (bad, p.stderr)


def test_a_command_the_node_would_not_run_as_meant_is_submitted_with_a_warning(cli, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH --gpus=2\n#SBATCH --job-name=x\necho hi\n")
    os.chmod(script, 0o755)

    p = cli.run("submit", "job.sh", cwd=tmp_path)  # not on PATH: the node looks it up there
    assert p.stdout.strip().isdigit(), p
    assert p.stderr.splitlines() == [
        "dispatch: warning: 'job.sh' is not on PATH: the node runs it only if its PATH has it; for the file in "
        "this folder: dispatch submit ... -- ./job.sh",
        "dispatch: warning: job.sh has #SBATCH lines, which dispatch does not read: give them as submit's flags "
        "(--gpus, --time, --name, --output, --array)"], p.stderr

    p = cli.run("submit", "--", "./job.sh", cwd=tmp_path)
    assert p.stderr.splitlines() == [
        "dispatch: warning: ./job.sh has #SBATCH lines, which dispatch does not read: give them as submit's flags "
        "(--gpus, --time, --name, --output, --array)"], p.stderr

    p = cli.run("submit", "sleep 1; echo hi", cwd=tmp_path)  # task-spooler's way: ts runs it through a shell
    assert p.stderr == ("dispatch: warning: 'sleep 1; echo hi' is run as one program's name, not by a shell; for a "
                        "shell line: dispatch submit ... -- sh -c 'sleep 1; echo hi'\n"), p.stderr

    p = cli.run("submit", "--", "sh", "-c", "echo hi", cwd=tmp_path)  # as meant: nothing to say
    assert (p.returncode, p.stderr) == (0, ""), p


def test_slurms_dependency_form_and_dates_get_a_line_that_says_what_to_write(cli):
    p = cli.run("submit", "--after", "afterok:1", "--", "true", check=False)
    assert (p.returncode, p.stderr) == (2, "dispatch: error: --after: 'afterok:1' is not a job id (Slurm's "
                                           "afterok:ID is --after ID, afterany:ID --after-any ID)\n"), p
    assert cli.run("report", "--since", "2026-01-01", "--csv").stdout.startswith("user,gpu_hours,")  # sreport's dates
    p = cli.run("history", "--since", "2026-13-01", check=False)
    assert p.returncode == 2 and p.stderr.startswith("dispatch: error: --since: '2026-13-01' is not a date"), p


def test_sbatchs_dependency_wrap_and_short_array_and_nodes_flags_are_taken(cli):
    a, b, c = (cli.submit("--", "true") for _ in range(3))
    job = cli.submit("-d", f"afterok:{a}:{b},afterany:{c}", "--wrap", "echo $((6 * 7))")
    shown = cli.show(job)
    assert (shown["after"], shown["after_any"], shown["command"]) == ([a, b], [c], ["sh", "-c", "echo $((6 * 7))"])
    array = cli.submit("-a", "0-2", "-N", "1", "--", "true")
    assert cli.show(f"{array}_2")["array_count"] == 3
    for args, says in ((["-d", f"afterok:{a}?afterok:{b}"], "not for any one ('?')"),
                       (["-d", f"afternotok:{a}"], "'afternotok:" + a + "' is not afterok:ID"),
                       (["--wrap", "true", "--", "true"], "either --wrap CMD or a command after --"),
                       (["--wrap", " "], "--wrap: empty"),
                       (["--gres", "gpu:a100:2"], "No such option: --gres: GPUs are --gpus N with --gpu-type T")):
        p = cli.run("submit", *args, check=False)
        assert p.returncode == 2 and says in p.stderr and len(p.stderr.splitlines()) == 1, (args, p.stderr)


def test_a_script_in_a_relative_cwd_is_looked_at_there_and_one_not_executable_is_warned_of(cli, tmp_path):
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "job.sh").write_text("#!/bin/sh\n#SBATCH --gpus=2\necho hi\n")
    os.chmod(sub / "job.sh", 0o644)
    p = cli.run("submit", "--cwd", "sub", "--", "./job.sh", cwd=tmp_path)
    assert p.stderr.splitlines() == [
        "dispatch: warning: ./job.sh is not executable: the node cannot run it (Permission denied); chmod +x "
        "./job.sh, or give its interpreter: dispatch submit ... -- sh ./job.sh",
        "dispatch: warning: ./job.sh has #SBATCH lines, which dispatch does not read: give them as submit's flags "
        "(--gpus, --time, --name, --output, --array)"], p.stderr
