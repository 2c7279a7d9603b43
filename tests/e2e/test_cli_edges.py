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


@pytest.mark.parametrize("since", ["30000d", "99999999999999999999", "1e308"])
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


def test_a_policy_file_that_is_not_utf8_is_named_in_one_line(cli, tmp_path):
    bad = tmp_path / "p.toml"
    bad.write_bytes(b"\xff\xfe")
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_time_s,user,num_gpus,duration_s,gpu_type,priority\nj1,0,u,1,20,,\n")
    for args in (["policy", "check", bad], ["policy", "apply", bad], ["policy", "diff", "default", bad],
                 ["simulate", trace, "--gpus", "8", "--compare", bad]):
        one_line(cli.run(*map(str, args), check=False), errors.EXIT_USAGE, str(bad), "not UTF-8 text")


def test_up_with_a_dispatch_home_that_cannot_be_a_directory_names_dispatch_home(cli, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("")
    for home in [afile, afile / "sub"] + ([f"/proc/dispatch-{os.getpid()}"] if os.path.isdir("/proc") else []):
        p = cli.run("up", "--fake-gpus", "1xA100-40GB", "--no-dashboard", check=False, timeout=30,
                    DISPATCH_HOME=str(home))
        one_line(p, errors.EXIT_USAGE, f"DISPATCH_HOME={home}", "cannot make it a directory")


@pytest.mark.parametrize("where", ["missing", "directory"])
def test_progress_into_a_file_it_cannot_append_to_names_the_variable(cli, tmp_path, where):
    path = tmp_path / "no" / "x" if where == "missing" else tmp_path
    one_line(cli.run("progress", "5", check=False, DISPATCH_PROGRESS_FILE=str(path)), errors.EXIT_USAGE,
             f"DISPATCH_PROGRESS_FILE={path}")


@pytest.mark.parametrize("text", ["garbage", "[]", "null"])
def test_an_unreadable_server_json_is_said_with_where_and_what_to_do_not_no_server(cli, text):
    record = cli.home / "server.json"
    record.write_text(text)
    line = one_line(cli.run("queue", check=False, DISPATCH_REDIS_URL=""), errors.EXIT_USAGE, str(record),
                    "unreadable", "restart `dispatch up`")
    assert "no server" not in line


def test_auth_token_refuses_an_empty_user_name_as_it_refuses_a_bad_one(cli, tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("s" * 32)
    secret.chmod(0o600)
    assert cli.run("auth", "token", "alice", "--secret-file", str(secret)).stdout.strip()
    one_line(cli.run("auth", "token", "a b", "--secret-file", str(secret), check=False), errors.EXIT_USAGE, "USER")
    p = cli.run("auth", "token", "", "--secret-file", str(secret), check=False)
    one_line(p, errors.EXIT_USAGE, "USER", "empty")
    assert p.stdout == ""


@pytest.mark.parametrize("var", ["DISPATCH_NODE_TIMEOUT_S", "DISPATCH_HEARTBEAT_S", "DISPATCH_TICK_S",
                                 "DISPATCH_LEASE_S"])
@pytest.mark.parametrize("value", ["inf", "nan"])
def test_every_timing_must_be_a_finite_number_of_seconds(cli, var, value):
    one_line(cli.run("nodes", check=False, **{var: value}), errors.EXIT_USAGE, f"{var}={value!r}", "finite")


def test_a_submit_from_a_deleted_directory_asks_for_an_absolute_cwd_and_takes_one(cli, tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()

    def submit_from_gone(*args):  # the shell sits in `gone` when it is deleted under it, as a user's would
        import subprocess
        import sys
        return subprocess.run(["sh", "-c", 'cd "$0" && rmdir "$0" && exec "$@"', str(gone), sys.executable, "-m",
                               "dispatcher", "submit", *args], env=cli.env(), capture_output=True, text=True,
                              timeout=60)

    for args in ([], ["--cwd", "sub"]):
        one_line(submit_from_gone(*args, "--", "pwd"), errors.EXIT_USAGE, "--cwd", "no longer exists")
        gone.mkdir()
    job_id = submit_from_gone("--cwd", str(tmp_path), "--", "pwd").stdout.strip()
    assert cli.show(job_id)["cwd"] == str(tmp_path)


def test_flags_after_the_command_are_the_commands_own_as_sbatch_and_tsp_pass_them(cli):
    # was: `submit --gpus 1 python train.py --name run1` ran `python train.py` and named the job run1, and
    # `submit sh -c 'echo x'` said "No such option '-c'"
    job = cli.submit("--cpus", "2", "python3", "train.py", "--name", "run1", "--gpus", "1", "--", "x")
    assert cli.show(job)["command"] == ["python3", "train.py", "--name", "run1", "--gpus", "1", "--", "x"]
    assert (cli.show(job)["name"], cli.show(job)["gpus_requested"], cli.show(job)["cpus"]) == ("", 0, 2)
    assert cli.show(cli.submit("sh", "-c", "echo x"))["command"] == ["sh", "-c", "echo x"]
    assert cli.show(cli.submit("--name", "n", "--", "echo", "--name"))["command"] == ["echo", "--name"]


def test_decisions_job_takes_an_array_element_as_why_does_and_names_a_job_that_does_not_exist(cli, client):
    from dispatcher.clock import now_ms
    from dispatcher.core.plan import Placement
    from dispatcher.store.decisions import write_decisions

    array = cli.submit("--array", "0-2", "--", "true")
    element = cli.show(f"{array}_1")["id"]
    pipe = client.pipeline()
    write_decisions(pipe, cli.ns, [Placement(element, "n1", (0,), 50.0, {"fit": 1.0}, 1, "rank 1")], now_ms(), "default")
    pipe.execute()
    got = json.loads(cli.run("decisions", "--job", f"{array}_1", "--json").stdout)  # was: [] (no job '0_1' decided)
    assert [d["job"] for d in got] == [element]
    (row,) = cli.run("decisions").stdout.splitlines()[1:]  # the table names it as queue does (it said its record id)
    assert row.split()[2] == f"{array}_1", row
    for bad in ("999999", f"{array}_7", ""):  # was: an empty table and exit 0
        one_line(cli.run("decisions", "--job", bad, check=False), errors.EXIT_NOT_FOUND, "no job with id")


def test_cancel_hold_and_queue_take_an_arrays_elements_in_brackets_as_queue_prints_them(cli):
    array = cli.submit("--array", "0-4", "--gpus", "1", "--", "true")  # no node: all pending
    listed = json.loads(cli.run("queue", f"{array}_[1-2,4]", "--json").stdout)
    assert [(j["array_of"], j["array_index"]) for j in listed] == [(array, 1), (array, 2), (array, 4)]
    cli.run("hold", f"{array}_[3]")
    cli.run("cancel", f"{array}_[0-2%8]")
    states = [j["state"] for j in json.loads(cli.run("queue", array, "--json").stdout)]
    assert states == ["cancelled"] * 3 + ["pending"] * 2 and cli.show(f"{array}_3")["hold"]
    one_line(cli.run("cancel", f"{array}_[9]", check=False), errors.EXIT_NOT_FOUND, f"{array}_9")


def test_an_arrays_elements_are_named_12_5_in_what_cancel_hold_and_wait_print(cli):
    # was: `hold 12_1` printed '13: held' and `wait 12` '13: cancelled', ids the queue never shows
    array = cli.submit("--array", "0-1", "--gpus", "1", "--", "true")  # no node: all pending
    assert cli.run("hold", f"{array}_1").stdout == f"{array}_1: held\n"
    assert cli.run("cancel", array).stdout.splitlines() == [f"{array}_0: cancelled", f"{array}_1: cancelled"]
    waited = cli.run("wait", array, check=False)
    assert [line.split(":")[0] for line in waited.stderr.splitlines()] == [f"{array}_0", f"{array}_1"]


@pytest.mark.parametrize("command", ["requeue", "cancel", "hold", "queue", "history", "show", "logs", "why", "wait"])
def test_a_blank_job_id_is_refused_never_taken_for_every_job(cli, command):
    # `dispatch requeue "$JOB"` with JOB unset requeued every ended job of the cluster
    done = cli.submit("--", "true")
    cli.run("cancel", done)
    for blank in ("", " ", ","):
        one_line(cli.run(command, blank, check=False), errors.InvalidRequestError.exit_code, "an empty job id")
    assert cli.show(done)["state"] == "cancelled"


def test_a_job_id_with_leading_zeros_is_that_job_as_in_a_range(cli):
    job = cli.submit("--", "true")
    assert cli.show(f"00{job}")["id"] == job


def test_wait_with_timeout_0_looks_once_as_a_poll(cli):
    pending = cli.submit("--", "true")  # no node: it never starts
    done = cli.submit("--", "true")
    cli.run("cancel", done)
    p = cli.run("wait", pending, "--timeout", "0", check=False)
    assert (p.returncode, p.stderr.strip()) == (errors.EXIT_TIMEOUT, f"dispatch: not done after 0s: job {pending} (pending)")
    assert cli.run("wait", done, "--timeout", "0", check=False).returncode == errors.EXIT_FAILED  # (cancelled: 1)


def test_an_empty_since_is_refused_not_taken_for_no_window(cli):
    one_line(cli.run("history", "--since", "", check=False), errors.InvalidRequestError.exit_code, "--since: ''")


def test_a_chdir_that_is_a_file_and_env_that_dispatch_sets_are_refused_at_submit(cli, tmp_path):
    # -D runs.log was accepted, then every attempt failed with "does not exist" (it did, as a file);
    # --env CUDA_VISIBLE_DEVICES=5 was accepted and silently overridden
    (tmp_path / "runs.log").write_text("")
    line = one_line(cli.run("submit", "-D", str(tmp_path / "runs.log"), "--", "pwd", check=False), 2, "--chdir")
    assert "is a file, not a directory" in line, line
    line = one_line(cli.run("submit", "--env", "CUDA_VISIBLE_DEVICES=5", "--", "true", check=False), 2, "--env")
    assert "dispatch sets CUDA_VISIBLE_DEVICES" in line and "--gpus" in line, line
    assert cli.run("queue", "-t", "all", "--noheader").stdout == ""  # nothing was submitted


def test_a_job_the_cycle_did_not_reach_has_its_reason_in_json_and_show_as_in_the_table(cli, client):
    # `queue` showed the cycle's reason for the jobs it did not reach; `queue --json` and `show` had ''
    from dispatcher.clock import now_ms

    job = cli.submit("--", "true")
    client.hset(keys.scheduler_stats(cli.ns), mapping={"at_ms": now_ms(), "rest_reason": "no GPU free anywhere"})
    (listed,) = json.loads(cli.run("queue", "--json").stdout)
    assert listed["reason"] == cli.show(job)["reason"] == "no GPU free anywhere"
    assert "no GPU free anywhere" in cli.run("queue").stdout and "no GPU free anywhere" in cli.run("show", job).stdout


def test_queue_says_when_its_reasons_come_from_a_scheduler_that_stopped_cycling(cli, client):
    # why, top and the page said STALE; queue showed the last cycle's reasons as if current
    from dispatcher.clock import now_ms

    cli.submit("--", "true")
    client.hset(keys.scheduler_stats(cli.ns), mapping={"at_ms": now_ms() - 120_000, "rest_reason": "no GPU free"})
    p = cli.run("queue")
    assert "no GPU free" in p.stdout and "s ago: is it running? (dispatch top)" in p.stderr, p
    client.hset(keys.scheduler_stats(cli.ns), "at_ms", now_ms())
    assert cli.run("queue").stderr == ""


def test_queue_cuts_a_long_argument_and_show_keeps_it_whole(cli):
    # a notebook's 600-character `python3 -c` script swamped queue's table
    script = "import os; " * 30
    job = cli.submit("--", "python3", "-c", script)
    (row,) = [line for line in cli.run("queue").stdout.splitlines() if line.startswith(f"{job} ")]
    assert row.endswith("python3 -c '" + script[:59] + "…'"), row
    assert cli.show(job)["command"] == ["python3", "-c", script]
