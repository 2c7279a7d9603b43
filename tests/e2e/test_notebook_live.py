"""`dispatch notebook` end to end: a real agent (--fake-gpus, advertising 127.0.0.2) and scheduler, the client
as a real process, and a real JupyterLab (the test environment's, through --python) reached at the printed URL."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from dispatcher.store.jobs import read_job

from .test_gangs_live import FAST
from .test_shell_live import holders

pytestmark = pytest.mark.slow

ADDRESS = "127.0.0.2"
URL = re.compile(rf"http://{re.escape(ADDRESS)}:(\d+)/lab\?token=([0-9a-f]{{48}})")
LAB = ("notebook", "--gpus", "1", "--python", sys.executable, "--port-range", "18800-18899")


def start_node(cli, tmp_path, **env):
    cli.start("worker", "--node", "n1", "--fake-gpus", "1xA100-40GB", "--address", ADDRESS, HOME=str(tmp_path), **FAST,
              **env)
    cli.start("scheduler", **FAST)


def status(url: str) -> int:
    """The HTTP status of JupyterLab's /api/status at the server of `url`, with the query `url` has."""
    api = url.replace("/lab?", "/api/status?") if "?" in url else url.replace("/lab", "/api/status")
    try:
        with urllib.request.urlopen(api, timeout=10) as r:
            assert "started" in json.loads(r.read())
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def ended(cli, client, job_id: str) -> dict:
    cli.wait_for(lambda: read_job(client, cli.ns, job_id)["state"] in ("succeeded", "failed", "cancelled"),
                 timeout=30, what=f"job {job_id} to end")
    return read_job(client, cli.ns, job_id)


def test_a_notebook_on_a_gpu_answers_at_its_url_with_the_token_only_and_cancel_frees_the_gpu(cli, client, tmp_path):
    start_node(cli, tmp_path)
    got = cli.run(*LAB, timeout=120)
    url = got.stdout.strip()
    m = URL.fullmatch(url)
    assert m, got.stdout
    job_id = re.search(r"dispatch cancel (\d+)", got.stderr)[1]
    job = read_job(client, cli.ns, job_id)
    assert (job["state"], job["priority"], job["name"]) == ("running", "high", "notebook")
    assert holders(cli)["n1"][0] == job_id
    assert m[2] not in " ".join(job["command"])  # not on a command line that `ps` shows on the node
    assert m[2] not in cli.run("logs", job_id).stdout  # nor in its log
    assert "--ServerApp.root_dir=" + os.getcwd() in job["command"]  # the submit's working directory

    assert status(url) == 200
    assert status(url.split("?")[0]) == 403  # no token, no way in
    assert cli.run("notebook", "--url", job_id).stdout.strip() == url  # later, from the log

    waiting = subprocess.Popen([sys.executable, "-m", "dispatcher", *LAB], env=cli.env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    cli.procs.append(waiting)
    line = waiting.stderr.readline()
    second = re.fullmatch(r"waiting for a GPU: job (\d+) \(dispatch why \1\)\n", line)
    assert second, line

    cli.run("cancel", job_id)
    assert ended(cli, client, job_id)["state"] == "cancelled"
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=5)
    out, err = waiting.communicate(timeout=120)
    assert waiting.returncode == 0 and URL.fullmatch(out.strip()), err  # the GPU went to the one waiting
    assert out.strip() != url and status(out.strip()) == 200

    cli.run("cancel", second[1])
    ended(cli, client, second[1])
    cli.wait_for(lambda: holders(cli) == {"n1": {0: None}}, what="the GPU to be free")


def test_no_wait_prints_the_job_id_and_url_prints_nothing_before_it_runs(cli, client, tmp_path):
    job_id = cli.run(*LAB, "--no-wait").stdout.strip()  # (no node yet: it stays pending)
    assert read_job(client, cli.ns, job_id)["state"] == "pending"
    later = cli.run("notebook", "--url", job_id, check=False)
    assert later.returncode != 0 and later.stdout == ""
    assert later.stderr.strip() == f"dispatch: error: job {job_id} is pending; cannot open it"
    cli.run("cancel", job_id)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_ctrl_c_a_kill_or_a_closed_terminal_while_it_waits_for_a_gpu_cancels_the_job(cli, client, sig):
    # (no node: it waits) Its own session, as a terminal's foreground job, with Ctrl-C's default action: a
    # suite run in the background of a shell inherits SIGINT ignored, and Python then never raises
    # KeyboardInterrupt (the CI's first run of this test hung so)
    waiting = subprocess.Popen([sys.executable, "-m", "dispatcher", *LAB], env=cli.env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    cli.procs.append(waiting)
    job_id = re.fullmatch(r"waiting for a GPU: job (\d+) \(dispatch why \d+\)\n", waiting.stderr.readline())[1]
    waiting.send_signal(sig)
    out, _ = waiting.communicate(timeout=30)
    assert waiting.returncode == 130 and out == f"{job_id}: cancelled\n"
    assert read_job(client, cli.ns, job_id)["state"] == "cancelled"


@pytest.mark.parametrize("how, why", [
    (("--python", "/nonexistent/python"), "cannot start '/nonexistent/python'"),
    (("--python", "/usr/bin/python3"), "No module named jupyterlab"),
    ((), "jupyter: not found on the PATH of the job"),  # the node's PATH (here /usr/bin:/bin) has none
])
def test_no_jupyterlab_or_no_such_python_is_one_line_saying_what_to_do(cli, client, tmp_path, how, why):
    if "/usr/bin/python3" in how or not how:
        if not Path("/usr/bin/python3").exists():
            pytest.skip("no /usr/bin/python3 here")
    start_node(cli, tmp_path, PATH="/usr/bin:/bin")
    got = cli.run("notebook", "--gpus", "1", *how, check=False, timeout=60)
    assert got.returncode == 1 and got.stdout == "", got
    last = got.stderr.strip().splitlines()[-1]
    if "/nonexistent/python" in how:  # the interpreter itself is missing: that is what it says, once
        assert re.fullmatch(r"dispatch: error: job \d+ failed: cannot start '/nonexistent/python': .* on its node; "
                            r"give --python the path of a Python that has jupyterlab there", got.stderr.strip()), \
            got.stderr
    else:
        assert re.fullmatch(r"dispatch: error: JupyterLab did not start in job \d+: install jupyterlab in the job's "
                            r"environment \(.*\)", last), got.stderr
    assert why in got.stderr  # the job's reason or its log's last lines
    cli.wait_for(lambda: holders(cli) == {"n1": {0: None}}, what="the GPU to be free")


def test_a_port_range_with_no_free_port_is_said_so_not_taken_for_a_missing_jupyterlab(cli, client, tmp_path):
    import socket

    start_node(cli, tmp_path)
    taken = socket.socket()
    taken.bind((ADDRESS, 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        got = cli.run("notebook", "--gpus", "1", "--port-range", f"{port}-{port}", check=False, timeout=60)
    finally:
        taken.close()
    last = got.stderr.strip().splitlines()[-1]
    assert got.returncode == 1 and re.fullmatch(
        rf"dispatch: error: JupyterLab did not start in job \d+: no free port in {port}-{port} on {ADDRESS}; "
        r"give --port-range a range with a free port on that node", last), got.stderr


@pytest.mark.parametrize("command", [("notebook", "--no-wait"), ("shell",)])
def test_a_session_no_node_could_ever_hold_is_warned_of_as_submit_warns(cli, client, command):
    cli.start("worker", "--node", "n1", "--fake-gpus", "2xA100-40GB")
    cli.wait_for(lambda: cli.run("nodes").stdout.count("n1") == 1, what="the node to register")
    asks = subprocess.Popen([sys.executable, "-m", "dispatcher", *command, "--gpus", "9"], env=cli.env(),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    cli.procs.append(asks)
    said = asks.stderr.readline()
    assert "no registered node could ever hold it" in said and said.startswith("dispatch: warning: job "), said


def test_under_identity_the_token_is_in_no_record_and_only_its_owner_opens_it(cli, client, tmp_path):
    """Every user may read every job's environment (docs/security.md): the spec holds a nonce, and only
    the owner's client and the node agent derive the token from it."""
    secret = tmp_path / "secret"
    secret.write_bytes(os.urandom(32).hex().encode())
    secret.chmod(0o600)
    cli.start("scheduler", "--secret-file", str(secret), **FAST)
    cli.start("worker", "--node", "n1", "--fake-gpus", "1xA100-40GB", "--address", ADDRESS, "--secret-file",
              str(secret), HOME=str(tmp_path), **FAST)
    token = {u: cli.run("auth", "token", u, "--secret-file", str(secret)).stdout.strip() for u in ("alice", "bob")}
    alice, bob = ({"DISPATCH_USER": u, "DISPATCH_TOKEN": token[u]} for u in ("alice", "bob"))
    cli.wait_for(lambda: cli.run("submit", "--", "true", check=False, **alice).returncode == 0,
                 what="identity to be on")
    got = cli.run(*LAB, timeout=120, **alice)
    url = got.stdout.strip()
    m = URL.fullmatch(url)
    assert m, got.stdout + got.stderr
    job_id = re.search(r"dispatch cancel (\d+)", got.stderr)[1]
    assert status(url) == 200, "the token alice's client derived is the one the agent gave JupyterLab"
    shown = cli.run("show", job_id, "--json", **bob).stdout
    assert m[2] not in shown and "JUPYTER_TOKEN" not in shown
    assert cli.run("notebook", "--url", job_id, **alice).stdout.strip() == url
    refused = cli.run("notebook", "--url", job_id, check=False, **bob)
    assert refused.returncode != 0 and refused.stderr.strip() == \
        f"dispatch: error: job {job_id} is alice's notebook: only its owner can open it"
    cli.run("cancel", job_id, **alice)
