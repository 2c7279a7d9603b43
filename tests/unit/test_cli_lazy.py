"""The `dispatch` group imports a command's module only when that command runs, and still lists every command."""

import subprocess
import sys

from click.testing import CliRunner

from dispatcher.cli import COMMANDS, cli

EVERY_COMMAND = ["attach", "auth", "cancel", "checkpointed", "dashboard", "decisions", "down", "drain", "eta", "history", "hold", "login", "logs", "nodes", "notebook",
                 "policy", "preempt", "progress", "quarantine", "queue", "release", "report", "requeue", "resume", "scheduler", "shell", "show", "simulate", "submit", "top", "tune", "up", "update", "wait",
                 "why", "worker"]


def test_the_group_lists_every_command_sorted_and_each_resolves_to_itself():
    assert cli.list_commands(None) == EVERY_COMMAND
    assert sorted(COMMANDS) == EVERY_COMMAND
    for name in EVERY_COMMAND:
        assert cli.get_command(None, name).name == name


def test_an_unknown_command_is_still_no_command():
    assert cli.get_command(None, "nosuch") is None


def test_getting_submit_imports_no_other_command_module():
    code = ("import sys; from dispatcher.cli import cli; cli.get_command(None, 'submit'); "
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('dispatcher.cli'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["dispatcher.cli", "dispatcher.cli.flags", "dispatcher.cli.submit"]  # (flags: shared with shell)


def test_dispatch_help_lists_every_command_with_its_short_help():
    out = CliRunner().invoke(cli, ["--help"], prog_name="dispatch").output
    listed = out.split("Commands:\n", 1)[1].splitlines()
    assert [line.split()[0] for line in listed if line.strip()] == EVERY_COMMAND
    assert "  submit        Submit a job: dispatch submit --gpus 2" in out
    assert "  policy        Check, diff, apply or roll back a policy." in out


def test_every_command_and_subcommand_takes_debug_as_the_internal_error_line_asks():
    def leaves(cmd, path):
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in subs.items():
                yield from leaves(sub, f"{path} {name}")
        else:
            yield path, cmd
    without = [path for name in EVERY_COMMAND for path, cmd in leaves(cli.get_command(None, name), name)
               if not any("--debug" in p.opts for p in cmd.params)]
    assert without == []
    # policy check has no `common` options: the flag is accepted, and the error is still one line without it
    got = subprocess.run([sys.executable, "-m", "dispatcher", "policy", "check", "/nonexistent.toml", "--debug"],
                         capture_output=True, text=True)
    assert "No such option" not in got.stderr and got.returncode != 0, got.stderr
    # --debug adds the traceback and keeps the exit status (it was 1, a crash's, for a refused file: 2)
    assert "Traceback" in got.stderr and got.stderr.splitlines()[-1].startswith("dispatch: error: "), got.stderr
    plain = subprocess.run([sys.executable, "-m", "dispatcher", "policy", "check", "/nonexistent.toml"],
                           capture_output=True, text=True)
    assert got.returncode == plain.returncode, (got.returncode, plain.returncode)


def test_top_and_the_board_import_no_scheduling_code():
    # reading a policy file (policy.config) loaded the whole policy package, the cycle with it: ~50 ms of
    # `dispatch top --once`, whose target is 100 ms, and of most commands
    code = "import sys, dispatcher.views.top, dispatcher.views.board; print(sorted(m for m in sys.modules " \
           "if m.startswith('dispatcher.policy')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "cycle" not in out and "schedule" not in out and "backlog" not in out, out
