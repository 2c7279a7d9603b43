"""--output and --notify through real processes (a worker with --fake-gpus and a scheduler): the output
file is written on the node as the job runs and `show` names it; an array writes one file per element;
a --notify command runs once per job end (success, failure, cancel) and a URL is POSTed the end as JSON,
also for a job cancelled while it was pending (told by the leading scheduler: no agent ran it)."""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from dispatcher.auth.identity import current_user

from dispatcher.store import keys
from dispatcher.store.jobs import append_log, read_job
from dispatcher.store.scripts import log_append


def state_of(client, ns, job_id):
    return read_job(client, ns, job_id)["state"]


def start_cluster(cli, gpus="2xA100-40GB"):
    cli.start("worker", "--node", "n1", "--fake-gpus", gpus, "--cpus", "8")
    cli.start("scheduler")


def test_output_goes_to_its_file_as_the_job_runs_and_show_names_the_file(cli, client, tmp_path):
    start_cluster(cli)
    job = cli.submit("--name", "train", "--output", "logs/%x-%j.out", "--cwd", str(tmp_path), "--",
                     "sh", "-c", "echo step 1; echo oops >&2; sleep 60")
    out = tmp_path / "logs" / f"train-{job}.out"
    cli.wait_for(lambda: out.exists() and out.read_text() == "step 1\noops\n", what="the output file to fill")
    assert state_of(client, cli.ns, job) == "running", "read while the job still runs"
    shown = cli.show(job)
    assert shown["output"] == str(out)
    assert shown["log_file"].endswith(f"logs/{job}.log") and shown["node"] == "n1"
    assert f"output: {out}" in cli.run("show", job).stdout
    cli.run("cancel", job)
    cli.wait_for(lambda: state_of(client, cli.ns, job) == "cancelled", what="the cancel")

    for n in range(3000):  # a line at a time, an entry each: all of it kept (the cap is in bytes)
        append_log(client, cli.ns, job, b"line %d\n" % n)
    shown_logs = cli.run("logs", job)
    assert shown_logs.stdout == "step 1\noops\n" + "".join(f"line {n}\n" for n in range(3000))
    assert shown_logs.stderr == ""
    # past the cap (a small one here, the script's argument) the oldest output goes, and logs says so
    log_append(client, cli.ns, job, 0, 100, 0, [b"x" * 60 + b"\n", b"y" * 60 + b"\n"])
    shown_logs = cli.run("logs", job)
    assert shown_logs.stdout == "y" * 60 + "\n"
    assert shown_logs.stderr.strip() == f"[dispatch: earlier output trimmed; the whole of it is in {out} on n1]"


def test_an_array_writes_one_output_file_per_element(cli, tmp_path):
    start_cluster(cli)
    array = cli.submit("--array", "0-2", "--output", "o/%A_%a.txt", "--cwd", str(tmp_path), "--",
                       "sh", "-c", "echo element $DISPATCH_ARRAY_INDEX")
    assert cli.run("wait", array, "--timeout", "60").returncode == 0
    files = {p.name: p.read_text() for p in (tmp_path / "o").iterdir()}
    assert files == {f"{array}_{i}.txt": f"element {i}\n" for i in range(3)}


def test_a_notify_command_runs_once_for_a_success_a_failure_and_a_cancel(cli, client, tmp_path):
    start_cluster(cli)
    told = tmp_path / "told.txt"
    notify = (f'sh -c "echo $DISPATCH_JOB_ID $DISPATCH_JOB_STATE $DISPATCH_EXIT_CODE $DISPATCH_EXIT_STATUS '
              f'$DISPATCH_SIGNAL >> {told}"')
    ok = cli.submit("--notify", notify, "--", "true")
    bad = cli.submit("--notify", notify, "--", "sh", "-c", "kill -9 $$")
    long = cli.submit("--notify", notify, "--", "sleep", "60")
    cli.wait_for(lambda: state_of(client, cli.ns, long) == "running", what="the long job to start")
    cli.run("cancel", long)
    cli.wait_for(lambda: told.exists() and len(told.read_text().splitlines()) >= 3, what="three notifications")
    time.sleep(1.5)  # nothing more comes
    lines = sorted(told.read_text().splitlines())
    assert len(lines) == 3, lines
    by_job = {line.split()[0]: line.split()[1:] for line in lines}
    assert by_job[ok] == ["succeeded", "0", "0"] and by_job[bad] == ["failed", "-9", "137", "SIGKILL"]
    assert by_job[long][0] == "cancelled"
    assert "[dispatch: --notify ran on n1: exit code 0]" in cli.run("logs", ok).stdout
    told = cli.show(ok)
    assert told["notified"] == "n1" and told["notified_at"] > told["submitted_at"], told


class Hook(BaseHTTPRequestHandler):
    got: list = []

    def do_POST(self):
        self.got.append((self.headers["Content-Type"], json.loads(self.rfile.read(int(self.headers["Content-Length"])))))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def hook():
    """A real HTTP server taking --notify POSTs (Hook.got): its URL."""
    Hook.got = []
    server = HTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/hook"
    server.shutdown()


def test_a_notify_url_is_posted_the_end_as_json_also_for_a_job_cancelled_while_pending(cli, client, hook):
    url = hook
    start_cluster(cli, gpus="1xA100-40GB")
    done = cli.submit("--name", "fine", "--notify", url, "--", "sh", "-c", "exit 0")
    waiting = cli.submit("--name", "never", "--gpus", "2", "--notify", url, "--",  # more than n1 has: it waits
                         "true")
    cli.wait_for(lambda: state_of(client, cli.ns, done) == "succeeded", what="the first job")
    assert state_of(client, cli.ns, waiting) == "pending"
    cli.run("cancel", waiting)
    cli.wait_for(lambda: len(Hook.got) >= 2, what="two POSTs")
    time.sleep(1.5)
    bodies = {body["job_id"]: body for _, body in Hook.got}
    assert len(Hook.got) == 2 and {kind for kind, _ in Hook.got} == {"application/json"}
    assert bodies[done] == {"job_id": done, "state": "succeeded", "exit_code": 0, "exit_status": 0, "signal": None,
                            "reason": "", "name": "fine"}
    assert bodies[waiting] == {"job_id": waiting, "state": "cancelled", "exit_code": None, "exit_status": None,
                               "signal": None, "reason": f"cancelled by {current_user()}", "name": "never"}
    assert cli.show(waiting)["notified"] == "scheduler" and cli.show(waiting)["notified_at"]


def test_the_end_of_a_job_whose_node_died_is_posted_to_its_url_by_the_scheduler(cli, client, hook):
    # out of --retries with its node dead, the job fails with no agent left to tell its end: the scheduler
    # that failed it queues it for its Notifier, as cancel.lua does for a job cancelled while pending
    import os
    import signal

    url, fast = hook, {"DISPATCH_NODE_TIMEOUT_S": "3", "DISPATCH_HEARTBEAT_S": "0.5"}
    agent = cli.start("worker", "--node", "n1", "--fake-gpus", "1xA100-40GB", "--work-dir", str(cli.home / "n1"),
                      **fast)
    cli.start("scheduler", **fast)
    job = cli.submit("--name", "orphan", "--retries", "0", "--notify", url, "--", "sleep", "300")
    cli.wait_for(lambda: state_of(client, cli.ns, job) == "running", what="the job to run")
    os.kill(agent.pid, signal.SIGKILL)  # the agent only: its keeper kills the job as the agent dies
    cli.wait_for(lambda: Hook.got, timeout=40, what="the scheduler to POST the end")
    time.sleep(1.0)
    [(_, body)] = Hook.got
    assert (body["job_id"], body["state"], body["name"]) == (job, "failed", "orphan"), body
    assert "n1" in body["reason"], body
    assert cli.show(job)["notified"] == "scheduler"


def test_a_node_log_file_the_disk_refuses_stops_neither_the_job_nor_its_output(cli, client, tmp_path):
    # a full disk under the agent's work dir: the log file's write raised in the thread that reads the
    # job's output (a traceback in up's output), nothing read the pipe any more, and the job blocked on
    # its next write for good. Here the agent may write no file past 256 KiB (EFBIG, as ENOSPC)
    import resource
    import subprocess
    import sys

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 10, 256 << 10))

    log = open(tmp_path / "worker-limited.log", "wb")
    cli.procs.append(subprocess.Popen(
        [sys.executable, "-m", "dispatcher", "worker", "--node", "n1", "--fake-gpus", "1xA100-40GB",
         "--work-dir", str(tmp_path / "n1")], env=cli.env(), stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True, preexec_fn=small_files))
    cli.start("scheduler")
    job = cli.submit("--", sys.executable, "-c", "import sys; sys.stdout.write('x' * (2 << 20)); print('end')")
    assert cli.run("wait", job, "--timeout", "30", check=False).returncode == 0, (tmp_path / "worker-limited.log"
                                                                                .read_text()[-3000:])
    out = cli.run("logs", job).stdout
    assert out.count("x") == 2 << 20 and out.endswith("end\n"), len(out)
    assert f"[dispatch: its log file {tmp_path / 'n1' / 'logs' / job}.log stopped on n1: File too large]" in out
    assert "Traceback" not in (tmp_path / "worker-limited.log").read_text()


def test_a_job_ends_recorded_though_the_work_dir_cannot_keep_its_end(cli, client, tmp_path):
    # a full disk as a job ends: the agent keeps every end on disk before it records it, that write
    # raised in the job's watcher, and the job stayed `running` (its GPU held) for good. Here the
    # exits folder cannot be made, as on a full disk
    (tmp_path / "n1").mkdir()
    (tmp_path / "n1" / "exits").write_text("")
    cli.start("worker", "--node", "n1", "--fake-gpus", "1xA100-40GB", "--work-dir", str(tmp_path / "n1"))
    cli.start("scheduler")
    job = cli.submit("--", "true")
    assert cli.run("wait", job, "--timeout", "30", check=False).returncode == 0, state_of(client, cli.ns, job)
    assert "Traceback" not in (tmp_path / "worker-0.log").read_text()


def test_a_job_that_prints_a_line_at_a_time_keeps_all_its_lines_in_logs(cli, client):
    start_cluster(cli)
    script = "import time\nfor i in range(3000):\n    print('step', i, flush=True); time.sleep(0.001)"
    job = cli.submit("--", sys.executable, "-c", script)
    assert cli.run("wait", job, "--timeout", "60").returncode == 0
    shown = cli.run("logs", job)
    assert shown.stdout == "".join(f"step {i}\n" for i in range(3000)) and shown.stderr == ""
    assert client.xlen(keys.job_log(cli.ns, job)) < 1000  # lines that came together went as one entry


def test_a_notify_url_that_cannot_be_told_says_so_in_show_and_logs(cli):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/hook"
    start_cluster(cli)
    job = cli.submit("--notify", url, "--", "true")
    cli.wait_for(lambda: cli.show(job)["notify_error"], what="the failed notification to be recorded")
    shown = cli.show(job)
    assert shown["notified"] == "n1" and "refused" in shown["notify_error"].lower(), shown
    assert "notify_error: " in cli.run("show", job).stdout
    assert "[dispatch: --notify failed: " in cli.run("logs", job).stdout


def test_a_notify_of_an_end_written_from_the_agents_outbox_is_told_once_the_server_is_back(cli, tmp_path, own_server):
    import signal as sig

    env = {"DISPATCH_REDIS_URL": own_server.url}
    told = tmp_path / "told.txt"
    cli.start("worker", "--node", "n1", "--fake-gpus", "1xA100-40GB", "--work-dir", str(tmp_path / "n1"), **env)
    cli.start("scheduler", **env)
    job = cli.run("submit", "--notify", f'sh -c "echo $DISPATCH_JOB_ID $DISPATCH_JOB_STATE >> {told}"', "--",
                  "sh", "-c", "sleep 1.5; exit 3", **env).stdout.strip()
    cli.wait_for(lambda: cli.run("show", job, "--json", **env).stdout.count('"running"'), what="the job to run")
    own_server.proc.send_signal(sig.SIGKILL)  # the job ends while the server is down: its end waits in the outbox
    own_server.proc.wait()
    time.sleep(3)
    own_server.start()
    cli.wait_for(lambda: told.exists(), timeout=60, what="the end to be told once the server is back")
    time.sleep(1)
    assert told.read_text() == f"{job} failed\n"
