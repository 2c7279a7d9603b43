"""Odd input the QA pass found, through the real CLI: each gets one line that names what is wrong (or, for a
window before 1970, just works), never an internal error, a blamed restart, or a false 'no server'."""

import json
import os

import pytest

from dispatcher.core import errors
from dispatcher.store import keys


def one_line(p, code: int, *names: str) -> str:
    lines = p.stderr.strip().splitlines()
    assert p.returncode == code, (p.returncode, p.stderr)
    assert len(lines) == 1 and lines[0].startswith("dispatch: error: ") and "internal error" not in lines[0], p.stderr
    assert all(n in lines[0] for n in names), p.stderr
    return lines[0]


@pytest.mark.parametrize("since", ["30000d", "99999999999999999999"])
def test_a_window_that_opens_before_1970_is_everything_for_report_as_for_history(cli, since):
    report = cli.run("report", "--since", since, "--json", check=False)
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["since"] == 0
    assert cli.run("history", "--since", since, "--json", check=False).returncode == 0


def test_a_command_redis_refuses_is_said_as_such_not_blamed_on_a_restarting_server(cli, client):
    # the URL comes from a running `dispatch up`'s record (this process stands in for it), and Redis is fine
    (cli.home / "server.json").write_text(json.dumps({"pid": os.getpid(), "status": "running", "url": cli.url}))
    client.hset(keys.job_seq(cli.ns), "not", "a counter")  # submit's INCR gets WRONGTYPE
    line = one_line(cli.run("submit", "--", "true", check=False, DISPATCH_REDIS_URL=""), errors.EXIT_FAILED,
                    "WRONGTYPE")
    assert "restarting" not in line and "try again" not in line


@pytest.mark.parametrize("group", [[], ["policy"], ["auth"]], ids=["dispatch", "policy", "auth"])
def test_a_group_with_no_subcommand_prints_its_help_as_help_does(cli, group):
    p = cli.run(*group, check=False)
    assert p.returncode == errors.EXIT_USAGE and p.stderr == ""
    assert p.stdout == cli.run(*group, "--help").stdout
