"""The CLI as a user meets it: one-line errors, `dispatch up` with no Redis installed, logs, shutdown."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from dispatcher.core import errors

BAD_SUBMITS = [
    (["--gpus", "-1", "--", "true"], "--gpus", errors.EXIT_USAGE),
    (["--gpus", "two", "--", "true"], "--gpus", errors.EXIT_USAGE),
    (["--priority", "urgent", "--", "true"], "--priority", errors.EXIT_USAGE),
    (["--est", "soon", "--", "true"], "--est", errors.EXIT_USAGE),
    (["--gpu-mem", "-3", "--", "true"], "--gpu-mem", errors.EXIT_USAGE),
    (["--env", "NOEQUALS", "--", "true"], "--env", errors.EXIT_USAGE),
    (["--user", "a:b", "--", "true"], "--user", errors.EXIT_USAGE),
    (["--gpus", "1"], "no command given", errors.EXIT_USAGE),
    (["--", ""], "the program to run is ''", errors.EXIT_USAGE),
    (["--cwd", "", "--", "true"], "--cwd: empty", errors.EXIT_USAGE),
    (["--est", "", "--", "true"], "--est: empty", errors.EXIT_USAGE),
    (["--time", "", "--", "true"], "--time: empty", errors.EXIT_USAGE),
    (["--array", "", "--", "true"], "--array: '' names no index; give the indices", errors.EXIT_USAGE),
    (["--user", "", "--", "true"], "--user: empty; give a user name", errors.EXIT_USAGE),
    # an unset shell variable ("$N") is no value: not a single-node job, nor any GPU type
    (["--nodes", "", "--gpus", "8", "--", "true"], "--nodes: empty", errors.EXIT_USAGE),
    (["--gpus-per-node", "", "--nodes", "2", "--", "true"], "--gpus-per-node: empty", errors.EXIT_USAGE),
    (["--mem", "", "--", "true"], "--mem: empty", errors.EXIT_USAGE),
    (["--gpu-mem", "", "--gpus", "1", "--", "true"], "--gpu-mem: empty", errors.EXIT_USAGE),
    (["--min-gpus", "", "--gpus", "2", "--checkpointable", "--", "true"], "--min-gpus: empty", errors.EXIT_USAGE),
    (["--gpu-type", "", "--gpus", "1", "--", "true"], "--gpu-type: '' names no GPU type", errors.EXIT_USAGE),
    (["--gpu-type", "|", "--gpus", "1", "--", "true"], "--gpu-type: '|' names no GPU type", errors.EXIT_USAGE),
    (["--gpus", "99999999999999999999", "--", "true"], "--gpus: 99999999999999999999 is out of range; allowed 0 "
     "to 1024", errors.EXIT_USAGE),
    (["--gpus", "\u0663", "--", "true"], "--gpus: '\u0663' is not a whole number", errors.EXIT_USAGE),
    (["--time", "99999999999999999999", "--", "true"], "--time: '99999999999999999999' is out of range; allowed 1s "
     "to 11574d (about 31 years)", errors.EXIT_USAGE),
    (["--time", "1d1d", "--", "true"], "--time: '1d1d' is not a duration", errors.EXIT_USAGE),
    (["--time", "1:99", "--", "true"], "--time: '1:99': a minute or second after a colon is 0 to 59",
     errors.EXIT_USAGE),
    (["--grace", "2d", "--", "true"], "--grace: '2d' is out of range; allowed 0s to 1d", errors.EXIT_USAGE),
    (["--array", "1,,3", "--", "true"], "--array 1,,3: an empty item", errors.EXIT_USAGE),
]


@pytest.mark.parametrize("args,names,code", BAD_SUBMITS, ids=[" ".join(a[:2]) for a, _, _ in BAD_SUBMITS])
def test_bad_submit_gets_one_line_naming_the_flag_and_changes_nothing(cli, client, args, names, code):
    before = cli.submit("--", "true")
    p = cli.run("submit", *args, check=False)
    assert p.returncode == code, (p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and names in lines[0] and "Traceback" not in p.stderr, p.stderr
    assert p.stdout == ""
    assert cli.show(before)["state"] == "pending"
    assert client.zcard(f"{cli.ns}:jobs:all") == 1  # nothing written by the bad request


@pytest.mark.parametrize("command", [["show", "424242"], ["cancel", "424242"], ["logs", "424242"],
                                     ["wait", "424242"], ["show", "../etc:passwd"]])
def test_unknown_job_id_is_a_one_line_not_found(cli, command):
    p = cli.run(*command, check=False)
    assert p.returncode == errors.EXIT_NOT_FOUND, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "no job with id" in p.stderr


@pytest.mark.parametrize("command", [["submit", "--", "true"], ["queue"], ["nodes"], ["show", "1"]])
def test_a_redis_that_is_down_is_a_one_line_connect_error(cli, command):
    p = cli.run(*command, check=False, DISPATCH_REDIS_URL="redis://127.0.0.1:1/0")
    assert p.returncode == errors.EXIT_CONNECT, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "cannot reach Redis" in p.stderr
    assert "Traceback" not in p.stderr


def test_worker_without_nvml_says_so_in_one_line(cli):
    p = cli.run("worker", "--node", "n1", check=False, timeout=30)
    assert p.returncode == errors.EXIT_NO_GPU, p.stderr
    assert "cannot read GPUs through NVML" in p.stderr and "--fake-gpus" in p.stderr
    assert "Traceback" not in p.stderr


def test_worker_with_an_empty_node_name_is_refused_not_given_the_host_name(cli):
    p = cli.run("worker", "--node", "", "--fake-gpus", "1xA100-40GB", check=False, timeout=30)
    assert (p.returncode, p.stderr) == (2, "dispatch: error: --node: '' may hold only letters, digits and _.- "
                                           "(at most 64)\n"), p


@pytest.mark.parametrize("spec,says", [
    ("2xA100", "'2xA100' gives no memory; write e.g. 2xA100-40GB"),
    ("2xA100-0GB", "'2xA100-0GB': 0 GB is out of range"),
    ("1xA100-99999999999999999999GB", "99999999999999999999 GB is out of range"),
    ("2x:40", "'2x:40' is not COUNTxTYPE-MEMGB"),
    ("1xA 100-40GB", "'1xA 100-40GB' is not COUNTxTYPE-MEMGB"),
    ("2xA100-abcGB", "'2xA100-abcGB': 'abc' is not a memory size in GB; e.g. 2xA100-40GB"),
    ("", "'' is not COUNTxTYPE-MEMGB")])  # (it was read as no flag: NVML, on a host with no GPU)
def test_bad_fake_gpu_spec_is_refused(cli, spec, says):
    p = cli.run("worker", "--node", "n1", "--fake-gpus", spec, check=False, timeout=30)
    assert p.returncode == errors.EXIT_USAGE and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert p.stderr.startswith("dispatch: error: --fake-gpus: ") and says in p.stderr, p.stderr


def test_queue_show_and_nodes_print_json(cli):
    cli.start("worker", "--node", "n1", "--fake-gpus", "2xA100-40GB")
    cli.wait_for(lambda: json.loads(cli.run("nodes", "--json").stdout), what="the node")
    job = cli.submit("--name", "train", "--gpus", "1", "--priority", "high", "--", "true")
    queued = json.loads(cli.run("queue", "--json").stdout)
    assert [(j["id"], j["name"], j["state"], j["priority"]) for j in queued] == [(job, "train", "pending", "high")]
    shown = cli.show(job)
    for key in ("id", "name", "state", "user", "priority", "node", "gpus", "attempt", "submitted_at",
                "started_at", "finished_at", "exit_code", "reason"):
        assert key in shown, key
    assert isinstance(shown["submitted_at"], float) and shown["gpus"] == [] and shown["node"] is None
    (node,) = json.loads(cli.run("nodes", "--json").stdout)
    assert node["name"] == "n1" and node["alive"] and [g["name"] for g in node["gpus"]] == ["NVIDIA A100-40GB"] * 2


def test_logs_of_a_job_that_has_not_started_says_so_on_stderr(cli):
    job = cli.submit("--", "true")  # no node: it waits
    p = cli.run("logs", job)
    assert (p.returncode, p.stdout) == (0, "")
    assert p.stderr == f"[dispatch: job {job} has not started yet: no output; -f waits for it]\n", p.stderr


def test_logs_follow_streams_until_the_job_ends(cli):
    cli.start("worker", "--node", "n1", "--fake-gpus", "1xA100-40GB")
    cli.start("scheduler")
    job = cli.submit("--", "sh", "-c", "for i in 1 2 3; do echo line$i; sleep 0.3; done")
    p = cli.run("logs", job, "--follow", timeout=30)
    assert p.stdout.split() == ["line1", "line2", "line3"], p.stdout
    failing = cli.submit("--", "sh", "-c", "echo bye; exit 3")
    p = cli.run("logs", failing, "-f", timeout=30, check=False)
    assert (p.returncode, p.stdout.split()) == (1, ["bye"])  # -f ends as the job did, as `wait` does

    slow = cli.submit("--", "sh", "-c", "seq 1 500; sleep 4; echo done")
    cli.wait_for(lambda: b"500" in cli.run("logs", slow).stdout.encode(), what="the first 500 lines")
    assert cli.run("logs", slow, "-n", "3").stdout == "498\n499\n500\n"  # as tail -n: the last lines so far
    p = cli.run("logs", slow, "-n", "1", "-f", timeout=30)
    assert (p.returncode, p.stdout) == (0, "500\ndone\n")  # then what comes, until the job ends


def test_wait_takes_a_duration_and_names_what_is_not_done(cli):
    job = cli.submit("--gpus", "1", "--", "true")  # no node: it waits
    p = cli.run("wait", job, "--timeout", "1s", check=False)
    assert p.returncode == 5 and p.stderr.strip() == f"dispatch: not done after 1s: job {job} (pending)", p.stderr
    p = cli.run("wait", job, "--timeout", "soon", check=False)
    assert p.returncode != 0 and len(p.stderr.strip().splitlines()) == 1 and "--timeout" in p.stderr, p.stderr


def test_wait_exits_with_the_jobs_own_code_and_128_plus_the_signal_that_killed_it(cli):
    cli.start("worker", "--node", "n1", "--fake-gpus", "1xA100-40GB")
    cli.start("scheduler")
    three = cli.submit("--", "sh", "-c", "exit 3")
    p = cli.run("wait", three, "--timeout", "30", check=False)
    assert p.returncode == 3 and p.stderr.strip() == f"{three}: failed (exit 3): exit code 3", p.stderr
    killed = cli.submit("--", "sh", "-c", "kill -ABRT $$")
    p = cli.run("wait", killed, "--timeout", "30", check=False)
    assert p.returncode == 128 + 6, (p.returncode, p.stderr)  # as a shell reports it
    assert p.stderr.strip() == f"{killed}: failed: killed by signal SIGABRT", p.stderr


def _status(url: str, host: str, key: str) -> int:
    import urllib.error
    import urllib.request

    ask = urllib.request.Request(url, headers={"Host": host, "Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(ask, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_up_needs_no_redis_and_other_commands_find_it(tmp_path):
    """The README's first command: `dispatch up` with the embedded server, then submit from another shell."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISPATCH_")}
    env.update(DISPATCH_HOME=str(tmp_path), PYTHONUNBUFFERED="1")
    dispatch = [sys.executable, "-m", "dispatcher"]
    log = open(tmp_path / "up.log", "wb")
    up = subprocess.Popen(dispatch + ["up", "--fake-gpus", "2xA100-40GB", "--node", "box", "--dashboard-port", "0",
                                      "--allowed-host", "gpus.example"], env=env, stdout=log,
                          stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "server.json").exists():
            assert time.monotonic() < deadline and up.poll() is None, (tmp_path / "up.log").read_text()
            time.sleep(0.1)

        def run(*args):
            return subprocess.run(dispatch + list(args), env=env, capture_output=True, text=True, timeout=60)

        job = run("submit", "--gpus", "1", "--", "sh", "-c", "echo $CUDA_VISIBLE_DEVICES").stdout.strip()
        assert job, (tmp_path / "up.log").read_text()
        waited = run("wait", job, "--timeout", "30")
        assert waited.returncode == 0, waited.stdout + waited.stderr + (tmp_path / "up.log").read_text()
        assert run("logs", job).stdout.strip() in ("0", "1")
        url = json.loads((tmp_path / "server.json").read_text())["url"]
        page = (tmp_path / "dashboard.url").read_text().strip()  # http://127.0.0.1:PORT/?key=KEY
        base, key = page.split("?key=")
        kept = tmp_path / "dashboard.key"  # the key alone, for a scraper's credentials_file; the next up's too
        assert kept.read_text().strip() == key and kept.stat().st_mode & 0o077 == 0
        port = base.split(":")[2].strip("/")
        for host, status in ((f"gpus.example:{port}", 200), (f"other.example:{port}", 403)):  # behind a proxy
            assert _status(base + "api/config", host, key) == status, host
    finally:
        os.killpg(up.pid, signal.SIGTERM)
        try:
            up.wait(30)  # ~1 s; an agent whose RQ listener missed the stop took 60 s (workers/rq_worker.py)
        except subprocess.TimeoutExpired:
            up.kill()
            pytest.fail("`up` did not stop within 30 s of SIGTERM:\n" + (tmp_path / "up.log").read_text())
    assert up.returncode == 0, (tmp_path / "up.log").read_text()
    assert not (tmp_path / "server.json").exists()
    assert (tmp_path / "data" / "appendonlydir").is_dir()  # the append-only file was on
    from dispatcher.store.connect import connect
    from dispatcher.core.errors import ConnectionError as DispatchConnectionError

    with pytest.raises(DispatchConnectionError):
        connect(url)  # the embedded server stopped with it


def test_ups_dashboard_key_is_made_once_and_kept_for_every_later_up(tmp_path, monkeypatch):
    from dispatcher.cli.ops import _kept_key

    monkeypatch.setenv("DISPATCH_HOME", str(tmp_path))
    first = _kept_key()
    assert _kept_key() == first and len(first) >= 16  # a restart's: the same (a scrape survives it)
    (tmp_path / "dashboard.key").write_text("\n")  # emptied, or not one of ours: a new one
    assert _kept_key() not in ("", first)


def test_history_exports_finished_jobs_that_the_simulator_replays(cli, tmp_path):
    from dispatcher.sim.workload import parse_trace

    cli.start("worker", "--node", "n1", "--fake-gpus", "2xA100-40GB")
    cli.start("scheduler")
    done = [cli.submit("--gpus", "1", "--gpu-type", "A100", "--priority", "high", "--", "sleep", "0.3"),
            cli.submit("--user", "bob", "--", "true")]
    assert cli.run("wait", *done, "--timeout", "30").returncode == 0
    cli.submit("--gpus", "4", "--", "true")  # never runs: not history
    text = cli.run("history", "--csv").stdout
    jobs = parse_trace(text)
    assert [j.job_id for j in jobs] == done and jobs[0].gpus == 1 and jobs[0].gpu_types == ("A100",)
    assert jobs[0].priority == "high" and jobs[1].user == "bob" and 0.2 < jobs[0].duration_s < 5
    (tmp_path / "mine.csv").write_text(text)
    out = cli.run("simulate", str(tmp_path / "mine.csv"), "--nodes", "1x2xA100-40GB", "--json")
    assert json.loads(out.stdout)["policies"]["dispatch"]["finished"] == 2


def test_history_lists_jobs_that_ended_without_starting_and_its_trace_leaves_them_out(cli):
    cli.start("worker", "--node", "n1", "--fake-gpus", "1xA100-40GB")
    cli.start("scheduler")
    ran = cli.submit("--name", "ran", "--", "true")
    typo = cli.submit("--name", "typo", "--", "/no/such/binary")  # fails as it starts: sacct -s FAILED lists it
    assert cli.run("wait", ran, typo, "--timeout", "30", check=False).returncode == 1
    never = cli.submit("--name", "never", "--gpus", "4", "--", "true")  # no node holds it: cancelled pending
    cli.run("cancel", never)
    rows = {line.split()[1]: line.split() for line in cli.run("history").stdout.splitlines()[1:]}
    assert sorted(rows) == ["never", "ran", "typo"], rows
    assert [rows[n][7:9] for n in ("typo", "never")] == [["-", "failed"], ["-", "cancelled"]], rows
    assert [r["name"] for r in json.loads(cli.run("history", "-t", "failed", "--json").stdout)] == ["typo"]
    assert [line.split(",")[0] for line in cli.run("history", "--csv").stdout.splitlines()[1:]] == [ran]


def test_submit_from_a_jsonl_file_is_all_or_nothing(cli, tmp_path):
    good = tmp_path / "jobs.jsonl"
    good.write_text('{"command": ["true"], "gpus": 1}\n\n{"command": ["echo", "hi"], "name": "two"}\n')
    ids = cli.run("submit", "--from", str(good), "--priority", "high").stdout.split()
    assert len(ids) == 2
    assert [cli.show(i)["priority"] for i in ids] == ["high", "high"]  # the flags are defaults
    assert cli.show(ids[1])["name"] == "two" and cli.show(ids[0])["gpus_requested"] == 1
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"command": ["true"]}\n{"command": ["true"], "gpus": "many"}\n')
    p = cli.run("submit", "--from", str(bad), check=False)
    assert p.returncode != 0 and "bad.jsonl line 2: --gpus" in p.stderr and "Traceback" not in p.stderr
    bad.write_text('{"command": ["true"]}\n\n{"command": ["true"], "after": [424242]}\n')  # found as it is written
    p = cli.run("submit", "--from", str(bad), check=False)
    assert p.returncode != 0 and p.stderr == f"dispatch: error: {bad} line 3: --after: there is no job 424242\n", p.stderr
    assert len(cli.run("queue", "--all", "--json").stdout.split('"id"')) - 1 == 2  # nothing of bad.jsonl


def test_submit_from_a_file_with_no_job_or_not_utf8_is_one_line_and_submits_nothing(cli, tmp_path):
    empty, blank, latin1 = tmp_path / "empty.jsonl", tmp_path / "blank.jsonl", tmp_path / "latin1.jsonl"
    empty.write_text("")
    blank.write_text("\n  \n")
    latin1.write_bytes('{"command": ["echo", "café"]}\n'.encode("latin-1"))
    said = {}
    for name, args, stdin in (("empty", [str(empty)], ""), ("blank", [str(blank)], ""), ("stdin", ["-"], ""),
                              ("latin1", [str(latin1)], "")):
        p = subprocess.run([sys.executable, "-m", "dispatcher", "submit", "--from", *args], input=stdin,
                           env=cli.env(), capture_output=True, text=True, timeout=60)
        assert p.returncode == errors.EXIT_USAGE and p.stdout == "" and len(p.stderr.splitlines()) == 1, p
        said[name] = p.stderr
    assert "empty.jsonl: no jobs in it" in said["empty"] and "no jobs in it" in said["blank"]
    assert said["stdin"].startswith("dispatch: error: --from <stdin>: no jobs in it")
    assert "latin1.jsonl: not UTF-8 text (line 1)" in said["latin1"]
    assert cli.run("queue", "--all", "--json").stdout.strip() in ("", "[]")


def test_an_elastic_job_that_runs_on_its_least_gets_no_warning_that_it_stays_queued(cli):
    cli.start("worker", "--node", "n1", "--fake-gpus", "4xA100-40GB")
    cli.wait_for(lambda: cli.run("nodes", "--json").stdout.strip() not in ("", "[]"), what="the node to register")
    fits = cli.run("submit", "--gpus", "2-8", "--", "true")  # runs at once on 2 to 4 GPUs
    assert fits.stderr == "" and fits.stdout.strip().isdigit()
    never = cli.run("submit", "--gpus", "8-16", "--", "true")  # even its least is more than any node has
    assert "needs 8xGPU" in never.stderr and "no registered node could ever hold it" in never.stderr, never.stderr


def test_a_user_named_in_any_script_submits_and_is_listed(cli):
    job = cli.submit("--user", "José", "--", "true")
    assert cli.show(job)["user"] == "José"
    assert any(line.split()[:3] == [job, "-", "José"] for line in cli.run("queue").stdout.splitlines())


@pytest.mark.parametrize("args,names", [
    (["queue", "--bogus"], "--bogus"), (["nosuch"], "nosuch"), (["logs"], "JOB_ID"),
    (["queue", "--namespace", "bad ns"], "--namespace"), (["submit", "--from", "/no/such.jsonl"], "--from"),
    (["submit", "--gpu-type", "TPU", "--", "true"], "--gpu-type")])
def test_a_usage_mistake_is_one_line_not_clicks_usage_block(cli, args, names):
    p = cli.run(*args, check=False)
    assert p.returncode == errors.EXIT_USAGE and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert p.stderr.startswith("dispatch: error: ") and names in p.stderr and "Usage:" not in p.stderr, p.stderr


def test_a_relative_cwd_is_the_submitters_not_the_node_agents(cli, tmp_path, monkeypatch):
    here = tmp_path / "x" / "sub"
    here.mkdir(parents=True)
    monkeypatch.chdir(here)
    assert cli.show(cli.submit("--cwd", "..", "--", "pwd"))["cwd"] == str(tmp_path / "x")
    assert cli.show(cli.submit("--cwd", "deeper", "--", "pwd"))["cwd"] == str(here / "deeper")
    assert cli.show(cli.submit("--", "pwd"))["cwd"] == str(here)
    lines = here / "jobs.jsonl"
    lines.write_text('{"command": ["pwd"], "cwd": "../other"}\n{"command": ["pwd"]}\n{"command": ["pwd"], "cwd": "/abs"}\n')
    ids = cli.run("submit", "--from", "jobs.jsonl", "--cwd", ".").stdout.split()
    assert [cli.show(i)["cwd"] for i in ids] == [str(tmp_path / "x" / "other"), str(here), "/abs"]
    lines.write_text('{"command": ["true"], "gpus": true}\n')
    p = cli.run("submit", "--from", "jobs.jsonl", check=False)
    assert p.returncode == errors.EXIT_USAGE and "jobs.jsonl line 1: --gpus: True is not a whole number" in p.stderr


def test_a_running_job_ends_where_it_was_told_relative_to_the_submitter(cli, tmp_path, monkeypatch):
    (tmp_path / "x" / "sub").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "x" / "sub")
    cli.start("worker", "--node", "n1", "--fake-gpus", "1xA100-40GB")  # its own directory: the test's, not ours
    cli.start("scheduler")
    job = cli.submit("--cwd", "..", "--", "pwd")
    assert cli.run("wait", job, "--timeout", "30").returncode == 0
    assert cli.run("logs", job).stdout.strip() == str(tmp_path / "x")


def test_show_json_has_every_field_of_the_request(cli):
    job = cli.submit("--grace", "5s", "--preemptible", "--checkpoint-signal", "USR1", "--env", "A=1", "--env",
                     "B=two words", "--gpus", "1", "--gpu-mem", "10", "--share", "--", "true")
    shown = cli.show(job)
    assert shown["cwd"] == os.getcwd() and shown["env"] == {"A": "1", "B": "two words"}
    assert (shown["grace_s"], shown["preemptible"], shown["share"], shown["checkpoint_signal"]) == (5.0, True, True, "USR1")
    text = cli.run("show", job).stdout
    assert "env: A=1 'B=two words'" in text and "grace_s: 5.0" in text


def test_update_takes_slurms_time_forms(cli):
    job = cli.submit("--grace", "1s", "--", "true")  # pending: no node
    assert cli.run("update", job, "--time", "10s").stdout.strip() == f"{job}: updated: time none -> 10s"
    assert cli.run("update", job, "--time", "1:00:00").stdout.strip() == f"{job}: updated: time 10s -> 1h"
    assert cli.run("update", job, "--time", "90").stdout.strip() == f"{job}: updated: time 1h -> 1h30m"
    assert cli.show(job)["time_limit_s"] == 5400.0
    other = cli.submit("--", "true")  # the default grace, 30s, comes after the limit: a shorter limit is fine
    assert cli.run("update", other, "--time", "10s").stdout.strip() == f"{other}: updated: time none -> 10s"
    p = cli.run("update", other, "--time", "soon", check=False)
    assert p.returncode == errors.EXIT_USAGE and "--time: 'soon' is not a duration" in p.stderr
    assert cli.show(cli.submit("--time", "2-12", "--", "true"))["time_limit_s"] == 2.5 * 86400


def test_a_drain_again_without_a_reason_keeps_it(cli, client):
    from tests.redis.test_fuzz_records import beat

    beat(client, cli.ns, "n1")
    cli.run("drain", "n1", "--reason", "disk swap")
    said = cli.run("drain", "n1").stdout.strip()
    assert said.startswith("n1: already drained (was: ") and said.endswith("; reason now: disk swap"), said
    assert "disk swap" in json.dumps(json.loads(cli.run("nodes", "--json").stdout))
    assert cli.run("drain", "n1", "--reason", "new").stdout.strip().endswith("reason now: new")


def test_queue_shows_what_a_shrunk_elastic_job_holds(cli, client):
    from dispatcher.clock import now_ms
    from dispatcher.core.spec import build_spec
    from dispatcher.store.codec import encode_spec
    from tests.redis.test_fuzz_records import next_id, raw_job

    job_id = next_id(client, cli.ns)
    spec = build_spec(command=["sleep", "60"], user="ada", submit_ms=now_ms(), gpus=4, min_gpus=1,
                      checkpointable=True, job_id=job_id)
    assert raw_job(client, cli.ns, {"spec": encode_spec(spec), "state": "running", "node": "n1", "gpus": "0,3",
                                    "epoch": 2, "started_ms": now_ms()}, index=("active",)) == job_id
    rows = [line.split() for line in cli.run("queue").stdout.splitlines()]
    assert rows[0][5:7] == ["GPUS", "NODE"] and rows[1][:1] + rows[1][5:7] == [job_id, "2/4", "n1:0,3"], rows
